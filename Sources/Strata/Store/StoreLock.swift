import Glibc
import StrataLMDB
import Logging
import Synchronization

/// The shared (and, for a switch, exclusive) fcntl lock on `strata.lock`.
///
/// fcntl locks belong to the process, so `F_GETLK` and `/proc/locks` show other processes only.
/// It is `Sendable` because its state is two constants, an atomic flag and a mutex; the lock
/// calls are system calls, made under the mutex, which ``release()`` takes to close the
/// descriptor: no call uses it once it is closed (its number may be another file's by then).
final class StoreLock: Sendable {
    let fd: Int32
    let path: String
    /// Whether ``release()`` closed the descriptor; held while the descriptor is used.
    private let released = Mutex<Bool>(false)
    /// Whether this process holds the lock exclusive (set by ``tryExclusive()``, cleared by
    /// ``shared()``): what a generation switch asserts.
    private let exclusive = Atomic<Bool>(false)
    /// ``ForkWatch/generation`` when the lock was made: in a child of fork() the descriptor is
    /// the parent's, and closing it would drop every fcntl lock the child holds on the file (its
    /// own store's lock included), so ``release()`` leaves it alone there.
    private let forkGeneration = ForkWatch.generation

    /// Opens and read-locks `path`, waiting while a compaction holds it exclusively. Returns nil
    /// for a read-only directory without a lock file (an immutable store nobody writes to).
    /// A read-write open creates a missing lock file with the store's file mode
    /// (`permissions`). The file is never opened through a symbolic link (`O_NOFOLLOW`) and
    /// must be a regular file (`O_NONBLOCK`, so a FIFO planted there cannot block the open).
    /// `store` is the store directory, for messages.
    init?(path: String, readOnly: Bool, permissions: StorePermissions, store: String) throws {
        let flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
        func refused(_ code: Int32) -> StrataError {
            switch code {
            case ELOOP:
                StrataError.insecure(path: store,
                                     reason: "\(path) is a symbolic link; Strata never opens a store's files " +
                                             "through a link (remove it: an open makes it again)")
            case EISDIR:
                // As a read-only open finds it (fstat below): a directory is not the lock file.
                StrataError.insecure(path: store, reason: "\(path) is not a regular file")
            default:
                StrataError.lmdb(LMDBError(code: code, operation: "open \(path) (the store's lock file)"))
            }
        }
        var fd: Int32
        if readOnly {
            fd = open(path, O_RDONLY | flags)
            if fd < 0 {
                let code = errno
                if code == ELOOP { throw refused(code) }
                return nil
            }
        } else {
            try permissions.createFile(path)
            fd = open(path, O_RDWR | flags)
            if fd < 0 && (errno == EACCES || errno == EROFS) {
                // A writer goes nowhere without the lock: compaction and migration of other
                // processes would not see it (only read-only opens may do without one).
                fd = open(path, O_RDONLY | flags)
            }
            if fd < 0 { throw refused(errno) }
        }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw StrataError.insecure(path: store, reason: "\(path) is not a regular file")
        }
        self.fd = fd
        self.path = path
        var lock = flock(l_type: Int16(F_RDLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
        // Taken at once unless another process holds it exclusively (a bulk import for its whole
        // length, a compaction or migration for its switch): then the open says whom it waits
        // for, once, before it waits (it waited without a word, minutes for a large bulk import).
        if fcntl(fd, F_SETLK, &lock) != 0 && (errno == EAGAIN || errno == EACCES) {
            var probe = flock(l_type: Int16(F_RDLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
            let holder = fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type != Int16(F_UNLCK) && probe.l_pid > 0
                ? "process \(probe.l_pid)" : "another process"
            var logger = Logger(label: "strata.store")
            logger[metadataKey: "store"] = "\(store)"
            logger.notice("""
                waiting for \(holder), which holds the store exclusively (a bulk import, or a compaction or \
                migration switching generations), to let go of it
                """)
        }
        while fcntl(fd, F_SETLKW, &lock) != 0 {
            if errno == EINTR { continue }
            let e = errno
            // Through release(): the lock is fully made, so its deinit closes the descriptor too,
            // and a second close would close whatever file took the number meanwhile.
            release()
            throw StrataError.lmdb(LMDBError(code: e, operation: "fcntl(F_SETLKW) \(path)"))
        }
    }

    deinit { release() }

    /// Closes the descriptor, which drops the lock (idempotent).
    func release() {
        released.withLock { done in
            if !done {
                if ForkWatch.generation == forkGeneration { close(fd) }
                done = true
            }
        }
    }

    /// Whether another process holds the lock (has the store open), also one whose process id
    /// this process cannot see (another pid namespace: `F_GETLK` reports it with pid 0). True
    /// when that cannot be found out.
    func isShared() -> Bool {
        if !otherHolders().isEmpty { return true }
        guard let lock = conflictingLock() else { return true }
        return lock.l_type != Int16(F_UNLCK)
    }

    /// What `F_GETLK` reports for an exclusive lock of the whole file: another process's lock in
    /// its way, or `F_UNLCK`; nil when the call fails.
    private func conflictingLock() -> flock? {
        released.withLock { done -> flock? in
            guard !done else { return nil }
            var probe = flock(l_type: Int16(F_WRLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
            return fcntl(fd, F_GETLK, &probe) == 0 ? probe : nil
        }
    }

    /// Whether the descriptor was closed (the store closed).
    var isReleased: Bool { released.withLock { $0 } }

    /// Process ids of the other processes that have the store open: every holder listed in
    /// `/proc/locks` for this file, plus the one `F_GETLK` reports (in case /proc is unavailable).
    func otherHolders() -> [Int32] {
        var st = stat()
        guard released.withLock({ done in !done && fstat(fd, &st) == 0 }) else { return [] }
        var pids = Set(Self.holdersListed(st))
        if let lock = conflictingLock(), lock.l_type != Int16(F_UNLCK), lock.l_pid > 0 { pids.insert(lock.l_pid) }
        return pids.sorted()
    }

    /// Process ids of the other processes that hold a lock on the file `path` (a store's lock
    /// file), from `/proc/locks` alone: the file is not opened, since closing any descriptor of
    /// it would drop this process's own lock on it. Empty when there is no such file, or no
    /// `/proc`.
    static func holders(ofLockFile path: String) -> [Int32] {
        var st = stat()
        guard stat(path, &st) == 0 else { return [] }
        return holdersListed(st).sorted()
    }

    /// The processes other than this one that `/proc/locks` lists with a POSIX lock on the file
    /// `st` describes.
    private static func holdersListed(_ st: stat) -> Set<Int32> {
        let me = getpid()
        var pids = Set<Int32>()
        // /proc/locks names the file as MAJOR:MINOR:INODE, major and minor in hex.
        let major = (st.st_dev >> 8) & 0xfff, minor = (st.st_dev & 0xff) | ((st.st_dev >> 12) & 0xfff00)
        let inode = "\(st.st_ino)"
        for line in readProcLocks().split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            guard f.count >= 6, f[1] == "POSIX", let pid = Int32(f[4]), pid != me else { continue }
            let dev = f[5].split(separator: ":")
            guard dev.count == 3, dev[2] == inode, UInt64(dev[0], radix: 16) == UInt64(major),
                  UInt64(dev[1], radix: 16) == UInt64(minor) else { continue }
            pids.insert(pid)
        }
        return pids
    }

    /// /proc/locks read to the end (its size reads as 0, so it is read until EOF, not by size).
    private static func readProcLocks() -> String {
        let fd = open("/proc/locks", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Converts this process's shared lock to exclusive without waiting; false when another
    /// process holds it.
    func tryExclusive() -> Bool {
        released.withLock { done in
            guard !done else { return false }
            var lock = flock(l_type: Int16(F_WRLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
            guard fcntl(fd, F_SETLK, &lock) == 0 else { return false }
            exclusive.store(true, ordering: .releasing)
            return true
        }
    }

    /// ``tryExclusive()``, or ``StrataError/storeBusy(path:processIDs:)`` naming the other
    /// processes that have the store at `store` open. Pair with ``shared()``.
    func takeExclusive(store: String) throws {
        let others = otherHolders()
        guard others.isEmpty, tryExclusive() else {
            // The store was closed meanwhile (its lock released): not another process.
            if isReleased { throw StrataError.closed(path: store) }
            throw StrataError.storeBusy(path: store, processIDs: others)
        }
    }

    /// Whether this process holds the lock exclusive.
    var isExclusive: Bool { exclusive.load(ordering: .acquiring) }

    /// The lock file's permission bits (nil once released or when `fstat` fails), read through
    /// the lock's own descriptor.
    func fileMode() -> mode_t? {
        released.withLock { done -> mode_t? in
            var st = stat()
            return !done && fstat(fd, &st) == 0 ? st.st_mode & 0o777 : nil
        }
    }

    /// Sets the lock file's permission bits through the lock's own descriptor: opening the file
    /// again and closing that descriptor would drop every fcntl lock this process holds on it
    /// (the exclusive one of a generation switch included).
    func setFileMode(_ mode: mode_t) throws {
        try released.withLock { done in
            guard !done else { throw StrataError.lmdb(LMDBError(code: EBADF, operation: "chmod \(path)")) }
            if Self.failSetModeForTesting.withLock({ $0.contains(path) }) {
                throw StrataError.lmdb(LMDBError(code: EPERM, operation: "chmod \(path)"))
            }
            try StorePermissions.setMode(fd, mode, path: path)
        }
    }

    /// Lock files (by path) whose ``setFileMode(_:)`` fails with `EPERM` (tests).
    static let failSetModeForTesting = Locked<Set<String>>([])

    /// Back to shared (nothing once the descriptor is closed: it may be another file's by now).
    func shared() {
        released.withLock { done in
            guard !done else { return }
            var lock = flock(l_type: Int16(F_RDLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
            // A downgrade conflicts with nothing; one that fails all the same (ENOLCK from a
            // network file system's lock manager) leaves the lock exclusive, and says so: other
            // processes' opens wait, and their exclusive attempts are refused as busy, until this
            // one closes the store; none is let in while it holds the store alone.
            if fcntl(fd, F_SETLK, &lock) == 0 { exclusive.store(false, ordering: .releasing) }
        }
    }
}

extension Store {
    /// Process ids of the other processes that have the store open: the holders of its lock
    /// file, and of the live generation's `lock.mdb`, which liblmdb read-locks in every process
    /// with the environment open. The second finds a process whose `strata.lock` was deleted
    /// (a "stale lock file" removed by hand) and made again by a later open: that process still
    /// writes to the live generation, and holds its lock on a file no one else can see.
    func otherProcesses(_ lock: StoreLock) -> [Int32] {
        Set(lock.otherHolders()).union(StoreLock.holders(ofLockFile: env.path + "/lock.mdb")).sorted()
    }

    /// ``StrataError/storeBusy(path:processIDs:)`` naming ``otherProcesses(_:)`` when another
    /// process has the store open, also one that `/proc/locks` does not show: the live
    /// generation's `lock.mdb` is probed with `F_GETLK` too
    /// (``LMDBEnvironment/otherProcessHoldsLockFile()``).
    func refuseWhileShared(_ lock: StoreLock) throws {
        let others = otherProcesses(lock)
        guard others.isEmpty, env.otherProcessHoldsLockFile() != true else {
            throw StrataError.storeBusy(path: path, processIDs: others)
        }
    }

    /// `lock` taken exclusive (``StoreLock/takeExclusive(store:)``) once no other process has the
    /// live generation open either (its `lock.mdb` in `/proc/locks` or by the `F_GETLK` probe);
    /// otherwise ``StrataError/storeBusy(path:processIDs:)``. A process that opens the store
    /// after the check needs `lock`, which is then exclusive.
    func takeExclusive(_ lock: StoreLock) throws {
        try StoreLock.refuseOtherHolders(ofGeneration: env.path, probed: env.otherProcessHoldsLockFile(), store: path)
        try lock.takeExclusive(store: path)
    }
}

extension StoreLock {
    /// ``StrataError/storeBusy(path:processIDs:)`` when another process has the generation at
    /// `generation` open: its `lock.mdb` listed in `/proc/locks` with another process's lock, or
    /// `probed` (the `F_GETLK` probe of it) true.
    static func refuseOtherHolders(ofGeneration generation: String, probed: Bool?, store: String) throws {
        let users = holders(ofLockFile: generation + "/lock.mdb")
        guard users.isEmpty, probed != true else { throw StrataError.storeBusy(path: store, processIDs: users) }
    }
}
