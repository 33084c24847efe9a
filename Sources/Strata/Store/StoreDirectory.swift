import Foundation
import Glibc
import Synchronization

/// The layout of a store directory and the lock every process holds on it.
///
/// ```
/// STORE/
///   strata.lock           every process with the store open holds a shared fcntl lock on it
///   current -> gen-…0001  symbolic link to the live generation (switched atomically)
///   gen-…0001/            one LMDB environment: data.mdb, lock.mdb
/// ```
///
/// Compaction and migration build a new generation beside the live one and switch `current`
/// with one `rename(2)`: a crash leaves the old generation or the new one, never a mix. They
/// refuse to switch while another process has the store open (it would go on using the old
/// generation); the shared lock is how they know, and taking it exclusively for the switch keeps
/// new openers out until `current` points at the new generation.
struct StoreDirectory {
    let path: String
    /// The modes of the directories made here and the checks of those found
    /// (``StorePermissions``).
    var permissions = StorePermissions.private

    static let currentLink = "current"
    static let lockFile = "strata.lock"
    static let generationPrefix = "gen-"

    var currentPath: String { path + "/" + Self.currentLink }
    var lockPath: String { path + "/" + Self.lockFile }

    static func generationName(_ n: UInt64) -> String {
        let hex = String(n, radix: 16)
        return generationPrefix + String(repeating: "0", count: max(0, 16 - hex.count)) + hex
    }

    /// The live generation's directory name, or nil when `current` does not exist.
    /// - Throws: ``StrataError/notAStore(path:reason:)`` when `current` exists but is not a
    ///   symbolic link or cannot be read: never taken for a missing one (a new store would then
    ///   be created over this one).
    func currentGeneration() throws -> String? {
        var st = stat()
        if lstat(currentPath, &st) != 0 {
            let code = errno
            if code == ENOENT { return nil }
            throw StrataError.notAStore(path: path, reason: "cannot read `current`: \(String(cString: strerror(code)))")
        }
        guard (st.st_mode & S_IFMT) == S_IFLNK else {
            throw StrataError.notAStore(path: path, reason: "`current` is not a symbolic link to a generation; nothing was changed")
        }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(currentPath, &buffer, buffer.count - 1)
        guard n >= 0 else {
            let code = errno
            throw StrataError.notAStore(path: path, reason: "cannot read `current`: \(String(cString: strerror(code)))")
        }
        let target = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return (target as NSString).lastPathComponent
    }

    /// Throws ``StrataError/notAStore(path:reason:)`` unless `live` (the target of `current`) is
    /// a generation directory of this store: a dangling or foreign link is reported, never
    /// repaired, and nothing is removed.
    func checkLiveGeneration(_ live: String) throws {
        var isDirectory: ObjCBool = false
        let present = generationNames()
        guard Self.generationNumber(live) != nil,
              FileManager.default.fileExists(atPath: path + "/" + live, isDirectory: &isDirectory), isDirectory.boolValue else {
            let found = present.isEmpty ? "no generation directory is here" : "generation directories here: \(present.joined(separator: ", "))"
            throw StrataError.notAStore(path: path, reason: "`current` points at \(live), which is not a generation directory of this store (\(found)); nothing was changed")
        }
    }

    /// The generation directories present, in name order.
    func generationNames() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter { Self.generationNumber($0) != nil }.sorted()
    }

    /// The generation directories whose `data.mdb` is not empty, in name order.
    func generationsHoldingData() -> [String] {
        generationNames().filter { name in
            let size = (try? FileManager.default.attributesOfItem(atPath: path + "/" + name + "/data.mdb")[.size] as? Int) ?? nil
            return (size ?? 0) > 0
        }
    }

    /// The number of a generation directory name.
    static func generationNumber(_ name: String) -> UInt64? {
        guard name.hasPrefix(generationPrefix) else { return nil }
        return UInt64(name.dropFirst(generationPrefix.count), radix: 16)
    }

    /// Creates the first generation and points `current` at it. A first generation left empty by
    /// an interrupted first open (or being made by another process opening the new store at the
    /// same moment) is used as it is, once checked (``StorePermissions/checkDirectory(_:store:)``).
    func createFirstGeneration() throws -> String {
        let name = Self.generationName(1)
        do {
            try permissions.makeDirectory(path + "/" + name)
        } catch StrataError.lmdb(let e) where e.code == EEXIST {
            try permissions.checkDirectory(path + "/" + name, store: path)
        }
        // A new store holds no data yet: a failed sync is an error here.
        if let notSynced = try switchCurrent(to: name) { throw notSynced }
        return name
    }

    /// A new, empty generation directory numbered after the live one.
    func newGeneration() throws -> String {
        let live = try currentGeneration().flatMap(Self.generationNumber) ?? 0
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        let highest = names.compactMap(Self.generationNumber).max() ?? 0
        let name = Self.generationName(max(live, highest) + 1)
        try permissions.makeDirectory(path + "/" + name)
        return name
    }

    /// Points `current` at `name` atomically (a new link renamed over the old one), then syncs
    /// the directory so the switch is durable.
    ///
    /// Throws only when the switch did not happen (`current` unchanged). Once the rename is
    /// done, `current` names `name` whatever follows: a failed sync of the directory is returned,
    /// not thrown, so that no caller takes the switch for undone and removes the generation
    /// `current` now points at.
    @discardableResult
    func switchCurrent(to name: String) throws -> StrataError? {
        let temporary = path + "/.current-\(getpid())"
        unlink(temporary)
        guard symlink(name, temporary) == 0 else { throw posixError(code: errno, "symlink \(temporary)") }
        guard rename(temporary, currentPath) == 0 else {
            let e = posixError(code: errno, "rename \(temporary) → \(currentPath)")
            unlink(temporary)
            throw e
        }
        do {
            try syncDirectory()
            return nil
        } catch let e as StrataError {
            return e
        }
    }

    /// fsyncs this directory (its entries: a renamed link, a created file).
    func syncDirectory() throws { try Self.syncDirectory(path) }

    /// fsyncs the directory at `path`, retrying when interrupted.
    static func syncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw StrataError.lmdb(LMDBError(code: errno, operation: "open \(path)")) }
        defer { close(fd) }
        while fsync(fd) != 0 {
            let code = errno
            if code == EINTR { continue }
            throw StrataError.lmdb(LMDBError(code: code, operation: "fsync \(path)"))
        }
    }

    /// Removes generation directories other than the live one (left by an interrupted
    /// compaction or migration, or by a finished one whose old generation was still in use).
    func removeStaleGenerations(except keep: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        for n in names where (Self.generationNumber(n) != nil && n != keep) || n.hasPrefix(".current-") || n.hasPrefix(Self.retiredPrefix)
            || n.hasPrefix(Self.scratchPrefix) {
            try? FileManager.default.removeItem(atPath: path + "/" + n)
        }
    }

    /// Names of scratch environments (verify, migration) inside the store directory.
    static let scratchPrefix = ".scratch-"

    /// Names of generation directories being deleted in the background.
    static let retiredPrefix = ".retired-"

    /// Deletes a closed generation directory without making the caller wait for the file
    /// system to free its blocks (unlinking a large data file takes tens of milliseconds per
    /// 100 MB on ext4): it is renamed out of the generation namespace at once, then removed on a
    /// background queue. A process that ends first leaves it for the next open to remove.
    static func retire(generation dir: String) {
        let url = URL(fileURLWithPath: dir)
        let retired = url.deletingLastPathComponent().appendingPathComponent(retiredPrefix + url.lastPathComponent + "-" + UUID().uuidString).path
        guard rename(dir, retired) == 0 else {
            try? FileManager.default.removeItem(atPath: dir)
            return
        }
        DispatchQueue.global(qos: .utility).async { try? FileManager.default.removeItem(atPath: retired) }
    }

    /// `code` first, so that call sites read `errno` before building the message (which
    /// allocates, and may change `errno`).
    func posixError(code: Int32, _ what: String) -> StrataError {
        .lmdb(LMDBError(code: code, operation: what))
    }
}

/// The shared (and, for a switch, exclusive) fcntl lock on `strata.lock`.
///
/// fcntl locks belong to the process, so `F_GETLK` and `/proc/locks` show other processes only.
/// It is `Sendable` because its state is two constants and an atomic flag; the lock calls are
/// system calls.
final class StoreLock: Sendable {
    let fd: Int32
    let path: String
    private let released = Atomic<Bool>(false)

    /// Opens and read-locks `path`, waiting while a compaction holds it exclusively. Returns nil
    /// for a read-only directory without a lock file (an immutable store nobody writes to).
    /// A read-write open creates a missing lock file with the store's file mode
    /// (`permissions`). The file is never opened through a symbolic link (`O_NOFOLLOW`) and
    /// must be a regular file (`O_NONBLOCK`, so a FIFO planted there cannot block the open).
    /// `store` is the store directory, for messages.
    init?(path: String, readOnly: Bool, permissions: StorePermissions, store: String) throws {
        let flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
        func refused(_ code: Int32) -> StrataError {
            code == ELOOP
                ? StrataError.insecure(path: store, reason: "\(path) is a symbolic link; Strata never opens a store's files through a link (remove it: an open makes it again)")
                : StrataError.lmdb(LMDBError(code: code, operation: "open \(path) (the store's lock file)"))
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
        while fcntl(fd, F_SETLKW, &lock) != 0 {
            if errno == EINTR { continue }
            let e = errno
            close(fd)
            throw StrataError.lmdb(LMDBError(code: e, operation: "fcntl(F_SETLKW) \(path)"))
        }
    }

    deinit { release() }

    /// Closes the descriptor, which drops the lock (idempotent).
    func release() {
        if released.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged { close(fd) }
    }

    /// Process ids of the other processes that have the store open: every holder listed in
    /// `/proc/locks` for this file, plus the one `F_GETLK` reports (in case /proc is unavailable).
    func otherHolders() -> [Int32] {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return [] }
        let me = getpid()
        var pids = Set<Int32>()
        // /proc/locks names the file as MAJOR:MINOR:INODE, major and minor in hex.
        let major = (st.st_dev >> 8) & 0xfff, minor = (st.st_dev & 0xff) | ((st.st_dev >> 12) & 0xfff00)
        let inode = "\(st.st_ino)"
        for line in Self.readProcLocks().split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            guard f.count >= 6, f[1] == "POSIX", let pid = Int32(f[4]), pid != me else { continue }
            let dev = f[5].split(separator: ":")
            guard dev.count == 3, dev[2] == inode, UInt64(dev[0], radix: 16) == UInt64(major), UInt64(dev[1], radix: 16) == UInt64(minor) else { continue }
            pids.insert(pid)
        }
        var probe = flock(l_type: Int16(F_WRLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
        if fcntl(fd, F_GETLK, &probe) == 0, probe.l_type != Int16(F_UNLCK), probe.l_pid > 0 { pids.insert(probe.l_pid) }
        return pids.sorted()
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
        var lock = flock(l_type: Int16(F_WRLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
        return fcntl(fd, F_SETLK, &lock) == 0
    }

    /// Back to shared.
    func shared() {
        var lock = flock(l_type: Int16(F_RDLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
        _ = fcntl(fd, F_SETLK, &lock)
    }
}
