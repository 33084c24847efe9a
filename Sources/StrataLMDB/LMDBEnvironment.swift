import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

public final class LMDBEnvironment: Sendable {
    /// Safe to share: see the type's comment. Never used after ``close()``.
    package nonisolated(unsafe) let handle: OpaquePointer
    package let path: String
    /// Unique among the environments this process opened (a compaction's new generation gets
    /// another): LMDB's transaction ids start again in a new file, so a transaction id names a
    /// state only together with this.
    package let serial: UInt64 = LMDBEnvironment.serials.add(1, ordering: .relaxed).newValue
    private static let serials = Atomic<UInt64>(0)
    package let options: LMDBOptions
    @usableFromInline package let mapLock = RWLock()
    /// In the order of ``DatabaseSet/names``, then the last handle.
    @usableFromInline let databases: [LMDBDatabase]
    /// Reset read transactions kept for reuse (renewing one costs far less than beginning one).
    let readPool = Locked<[ReadTxnBox]>([])
    /// One reset read transaction kept outside the pool (its bits; 0: none), taken and given
    /// back with one atomic exchange: a thread that opens and closes snapshots in turn never
    /// locks the pool. Whoever exchanges it out owns it.
    let cachedReadTxn = Atomic<UInt>(0)
    /// The monotonic second in which a reader last used this environment (0: never),
    /// written only when the second changes (readers on several cores do not keep writing one
    /// cache line). See ``hadReadersRecently``.
    let lastReadSecond = Atomic<Int>(0)
    /// Times this process dropped its mapped pages (``releaseMappedPagesHoldingMapLock()``).
    package let mappedPageReleases = Atomic<Int>(0)
    let currentMapSize: Atomic<Int>
    /// Readers cleared by `mdb_reader_check` at open (slots of crashed processes).
    package let staleReadersCleared: Int
    package static let readPoolCapacity = 16
    /// The newest (LMDB transaction id, Strata transaction id) pair this process committed, so
    /// that opening a snapshot need not search the log for its last key (see ``headHint(for:)``).
    let head = Atomic<WordPair>(WordPair(first: 0, second: 0))
    let closed = Atomic<Bool>(false)
    /// A growth of the map failed after liblmdb let go of the old map (``remapHoldingMapLock(to:atLeast:)``):
    /// the environment has no map, and every transaction is refused (``lostMapError``)
    /// instead of reading unmapped memory.
    let mapLost = Atomic<Bool>(false)
    /// Read transactions of this process begun and not yet ended (``beginRead()`` to
    /// ``endRead(_:)``). ``close()`` waits until there are none: LMDB requires every transaction
    /// ended before `mdb_env_close`, and a short read on another thread (a view context's fetch,
    /// which no snapshot registry knows of) would otherwise go on reading an unmapped file. With
    /// ``closed`` it is a Dekker pair: a reader counts itself, then checks `closed`; `close()`
    /// sets `closed`, then waits for the count, both sequentially consistent, so a reader either
    /// sees `closed` (and begins nothing) or is counted (and the close waits for it).
    let activeReads = Atomic<Int>(0)
    /// ``ForkWatch/generation`` when opened: in a child process after `fork()` the environment
    /// is the parent's, and ``close()`` leaves it alone.
    let forkGeneration = ForkWatch.generation
    /// This process's mapping(s) of the data file, read from `/proc/self/maps` once and
    /// forgotten when the map moves (``growMap()``, ``adoptMapSize()``, under ``mapLock``
    /// exclusively), so releasing mapped pages inside a bulk save costs one `madvise`.
    let cachedMappings = Locked<[MappedRange]?>(nil)
    package struct MappedRange: Sendable { let start: UInt; let end: UInt }
    /// Set while this environment is a new generation being built (``Store/makeGeneration(like:)``
    /// until its copy phase ends): its background writebacks then drop what is on disk from the
    /// page cache (see ``startWriteback()``).
    package let isBulkBuild = Atomic<Bool>(false)
    /// Whether a writeback dropped written pages from the page cache (then the file is worth a
    /// ``prefetch()`` once it is in use).
    package let droppedWrittenPages = Atomic<Bool>(false)
    /// Whether a background writeback (``startWriteback()``) is queued and not
    /// yet started: a bulk build that finishes batches faster than the kernel takes them queues
    /// one at a time.
    let writebackQueued = Atomic<Bool>(false)
    /// The requests to start writing back that commits made while LMDB wrote their pages
    /// (``withWritebackDuringCommit(_:)``), for tests.
    package let commitWritebackRequests = Atomic<Int>(0)
    /// Held while a background writeback runs, and by ``close()`` after it marks the environment
    /// closed, so the file descriptor is never used after `mdb_env_close` (a later writeback
    /// sees `closed` and does nothing). Holds the file's size when the previous writeback
    /// started (every page below it had been submitted for writing then) and the first error a
    /// writeback that waited for its pages, or a background flush (``requestFlush(onError:)``),
    /// saw: the kernel reports a write error once, so ``sync()`` throws the kept one.
    let writebackGate = Locked<WritebackState>(WritebackState())
    package struct WritebackState {
        package var submittedBelow = 0
        package var error: Int32?
    }
    /// The background flush of a relaxed (`MDB_NOSYNC`) environment (``requestFlush(onError:)``):
    /// whether one is running, and whether a request came after the running one had started.
    let flushState = Locked<FlushState>(FlushState())
    package struct FlushState {
        package var running = false
        package var requested = false
        package var completed = 0
    }
    /// Where this environment's background flushes run (``requestFlush(onError:)``): a queue
    /// per environment, so a store whose flushes never end under load does not hold up another's.
    let flushQueue = DispatchQueue(label: "strata.flush", qos: .userInitiated)
    /// Runs on the flush queue before each background flush (tests hold a flush up with it).
    package let beforeFlushForTesting = Locked<(@Sendable () -> Void)?>(nil)
    /// Calls of ``sync()`` (what tests count).
    package let syncCalls = Atomic<Int>(0)
    /// Tests only: the code a background flush reports instead of syncing (a disk that fails).
    package let flushErrorForTesting = Locked<Int32?>(nil)
    /// Tests only: the code a write transaction's commit reports (the commit itself is made, as
    /// when its pages reached the cache but their sync failed).
    package let commitErrorForTesting = Locked<Int32?>(nil)
    /// Tests only: the code every write transaction's commit fails with, the transaction
    /// aborted instead (a disk that is full: nothing is committed).
    package let commitRefusalForTesting = Locked<Int32?>(nil)
    /// Runs once after the environment is closed (used to remove a replaced generation).
    let afterClose = Locked<(@Sendable () -> Void)?>(nil)

    /// A read-only descriptor of `lock.mdb`, kept from the open until after `mdb_env_close`
    /// (closing any descriptor of the file drops every fcntl lock this process holds on it,
    /// liblmdb's included), for ``otherProcessHoldsLockFile()``; -1 without one.
    private let lockProbe = Locked<Int32>(-1)

    package init(path: String, options: LMDBOptions) throws {
        var env: OpaquePointer?
        try lmdbCheck(mdb_env_create(&env), "mdb_env_create")
        guard let env else { throw LMDBError(code: EINVAL, operation: "mdb_env_create") }
        var flags = UInt32(MDB_NOTLS) | UInt32(MDB_NORDAHEAD)
        if options.readOnly { flags |= UInt32(MDB_RDONLY) }
        if options.noSync { flags |= UInt32(MDB_NOSYNC) }
        if options.noLock { flags |= UInt32(MDB_NOLOCK) }
        if options.writeMap { flags |= UInt32(MDB_WRITEMAP) | UInt32(MDB_MAPASYNC) }
        var info = MDB_envinfo()
        do {
            try lmdbCheck(mdb_env_set_maxdbs(env, MDB_dbi(options.databases.names.count + 2)), "mdb_env_set_maxdbs")
            try lmdbCheck(mdb_env_set_maxreaders(env, options.maxReaders), "mdb_env_set_maxreaders")
            try lmdbCheck(mdb_env_set_mapsize(env, try Self.reservableMapSize(options.mapSizeBytes)),
                          "mdb_env_set_mapsize")
            try Self.prepareFiles(path: path, options: options)
            if options.checkPages {
                try PageAudit.checkMetas(dataFile: path + "/data.mdb", store: path, policy: options.policy)
            }
            let opened = mdb_env_open(env, path, flags, options.fileMode)
            if opened == EACCES || opened == EPERM || opened == EROFS {
                // Which of the files refused this process: LMDB names only the directory.
                let needs = options.readOnly ? R_OK : R_OK | W_OK
                let refused = ["data.mdb", "lock.mdb"].first { access(path + "/" + $0, needs) != 0 && errno != ENOENT }
                let what = refused.map { " (\($0) cannot be \(options.readOnly ? "read" : "read and written") by this process)" }
                throw LMDBError(code: opened, operation: "mdb_env_open(\(path))" + (what ?? ""))
            }
            try lmdbCheck(opened, "mdb_env_open(\(path))")
            // A map written in place (MDB_WRITEMAP) is the file's size (LMDB ftruncates the file
            // to it, sparse): its blocks are allocated now, so that a full file system is an
            // error here and not a SIGBUS at the first write through the map.
            if options.writeMap { try Self.allocate(path + "/data.mdb", bytes: options.mapSizeBytes) }
            var dead: Int32 = 0
            if !options.noLock { try lmdbCheck(mdb_reader_check(env, &dead), "mdb_reader_check") }
            staleReadersCleared = Int(dead)
            try Self.checkFileSize(env, path: path, policy: options.policy)
            if options.checkPages {
                try Self.checkPages(env, path: path, policy: options.policy, memo: options.pageCheckMemo)
            }
            databases = try Self.openDatabases(env, options, readOnly: options.readOnly)
            try lmdbCheck(mdb_env_info(env, &info), "mdb_env_info")
        } catch {
            mdb_env_close(env)
            throw error
        }
        self.handle = env
        self.path = path
        self.options = options
        self.currentMapSize = Atomic(info.me_mapsize)
        if !options.noLock {
            let fd = Glibc.open(path + "/lock.mdb", O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            lockProbe.withLock { $0 = fd }
        }
    }

    /// Whether another process holds a lock on this environment's `lock.mdb`, which liblmdb
    /// read-locks in every process that has the environment open (``FileLockProbe``). Nil when it
    /// cannot be told (opened without a lock file, closed, or the probe failed).
    package func otherProcessHoldsLockFile() -> Bool? {
        lockProbe.withLock { fd in fd >= 0 ? FileLockProbe.otherProcessHolds(fd) : nil }
    }

    /// What LMDB will open, made safe first: `data.mdb` and `lock.mdb` must be regular files (a
    /// symbolic link is refused: LMDB would write where it points), and a missing one that LMDB
    /// would create is created here with ``LMDBOptions/fileMode`` exactly (LMDB's own creation
    /// applies the umask). A read-only open does not create `data.mdb`, and goes on when it may
    /// not create `lock.mdb` (the caller then opens without a lock).
    package static func prepareFiles(path: String, options: LMDBOptions) throws {
        for file in ["data.mdb", "lock.mdb"] { try options.policy.checkFile(path + "/" + file, in: path) }
        let mode = options.fileMode
        func create(_ file: String) throws {
            let fd = Glibc.open(file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
            guard fd >= 0 else {
                let code = errno
                if code == EEXIST { return }
                throw LMDBError(code: code, operation: "create \(file)")
            }
            defer { Glibc.close(fd) }
            try options.policy.setMode(fd, mode, file: file)
        }
        if !options.readOnly { try create(path + "/data.mdb") }
        if !options.noLock {
            do { try create(path + "/lock.mdb") } catch let e as LMDBError
                where options.readOnly && (e.code == EACCES || e.code == EROFS) {}
            // LMDB maps the lock file shared and writes its reader table through the map: on a
            // full file system a sparse lock file is a SIGBUS at open. Its blocks are allocated
            // first, so that is an error (ENOSPC) instead. (A lock file that cannot be opened for
            // writing is left to LMDB, which opens it read-only or refuses.)
            let lock = Glibc.open(path + "/lock.mdb", O_RDWR | O_NOFOLLOW | O_CLOEXEC)
            if lock >= 0 {
                defer { Glibc.close(lock) }
                // Never longer than it is once in use: a process with the environment open has
                // mapped its reader table at the file's size then, and liblmdb in a later opener
                // takes the number of slots from the size it finds, so a longer file let readers
                // past the first one's map. A file that holds a table keeps its size (its blocks
                // are allocated, or the first opener is gone and LMDB sizes it again); a new one,
                // still empty, gets this opener's size.
                var st = stat()
                let bytes = fstat(lock, &st) == 0 && st.st_size > 0
                    ? Int(st.st_size) : lockFileBytes(maxReaders: options.maxReaders)
                let rc = posix_fallocate(lock, 0, off_t(bytes))
                if rc != 0 && rc != EOPNOTSUPP && rc != EINVAL && rc != EBADF {
                    throw LMDBError(code: rc, operation: "posix_fallocate(\(path)/lock.mdb)")
                }
            }
        }
    }

    /// Allocates the first `bytes` of `file` (`posix_fallocate`), extending it if shorter.
    /// - Throws: ``LMDBError`` with the call's result (`ENOSPC` on a full file system).
    package static func allocate(_ file: String, bytes: Int) throws {
        let fd = Glibc.open(file, O_RDWR | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw LMDBError(code: errno, operation: "open(\(file)) to allocate it") }
        defer { Glibc.close(fd) }
        let rc = posix_fallocate(fd, 0, off_t(bytes))
        // A file system without fallocate (EOPNOTSUPP) is left to LMDB's ftruncate.
        if rc != 0 && rc != EOPNOTSUPP && rc != EINVAL {
            throw LMDBError(code: rc, operation: "posix_fallocate(\(file), \(bytes) bytes)")
        }
    }

    /// The size of `lock.mdb` liblmdb 0.9.24 uses for `maxReaders` slots on a 64-bit system:
    /// the header (two 64-byte cache lines) and one 64-byte slot per reader.
    package static func lockFileBytes(maxReaders: UInt32) -> Int { 128 + Int(max(1, maxReaders)) * 64 }

    /// ``lmdbCheck(_:_:)`` for a call that writes the data file (a commit, a sync). liblmdb reports
    /// a short write — what a full file system or the process's file-size limit gives — as `EIO`.
    /// When the file system holding the store has less than a megabyte left, the error is
    /// reported as `ENOSPC`; when the data file is within a megabyte of the process's
    /// `RLIMIT_FSIZE`, as `EFBIG`: which it is, with the figures.
    package func checkWrite(_ rc: Int32, _ operation: @autoclosure () -> String) throws {
        guard rc != MDB_SUCCESS else { return }
        if rc == EIO || rc == ENOSPC, let free = Self.freeBytes(path), free < 1 << 20 {
            throw LMDBError(code: ENOSPC,
                            operation: "\(operation()) (\(free) bytes left on the file system of \(path))")
        }
        if rc == EIO || rc == EFBIG, let limit = Self.fileSizeLimit() {
            let size = fileBytes
            if size + (1 << 20) > limit {
                throw LMDBError(code: EFBIG, operation: "\(operation()) (the data file is \(size) bytes and the " +
                                                        "process's file-size limit, RLIMIT_FSIZE, is \(limit) bytes)")
            }
        }
        throw LMDBError(code: rc, operation: operation())
    }

    /// The process's file-size limit (`RLIMIT_FSIZE`), nil when there is none.
    package static func fileSizeLimit() -> Int? {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max,
              limit.rlim_cur < UInt64(Int.max) else { return nil }
        return Int(limit.rlim_cur)
    }

    /// What ``freeBytes(_:)`` answers for a path (tests: a full file system without filling one).
    package static let freeBytesForTesting = Locked<[String: Int]>([:])

    /// Bytes an unprivileged writer may still use on the file system of `path` (`statvfs`).
    package static func freeBytes(_ path: String) -> Int? {
        if let given = freeBytesForTesting.withLock({ $0[path] }) { return given }
        var s = statvfs()
        guard statvfs(path, &s) == 0 else { return nil }
        // Saturated: a file system may report counts whose product passes Int.max.
        guard let blocks = Int(exactly: s.f_bavail), let size = Int(exactly: s.f_frsize) else { return Int.max }
        let (bytes, overflow) = blocks.multipliedReportingOverflow(by: size)
        return overflow ? Int.max : bytes
    }

    /// `bytes`, or less when a map of that size cannot be reserved now with as much left beside
    /// it (``canReserveMap(_:)``): halved until it can, down to 1 MiB. A map that is too
    /// small grows on demand; one that cannot be mapped fails the open. LMDB raises the size to
    /// the pages in use when it opens the file.
    package static func reservableMapSize(_ bytes: Int) throws -> Int {
        var size = bytes
        while size > 1 << 20, !(try canReserveMap(size)) { size = max(1 << 20, size / 2) }
        return size
    }

    static func openDatabases(_ env: OpaquePointer, _ options: LMDBOptions, readOnly: Bool) throws -> [LMDBDatabase] {
        let set = options.databases
        var txn: OpaquePointer?
        try lmdbCheck(mdb_txn_begin(env, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn), "mdb_txn_begin(open databases)")
        guard let txn else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin(open databases)") }
        var result: [LMDBDatabase] = []
        do {
            for name in set.names {
                var dbi: MDB_dbi = 0
                try lmdbCheck(mdb_dbi_open(txn, name, readOnly ? 0 : UInt32(MDB_CREATE), &dbi), "mdb_dbi_open(\(name))")
                result.append(LMDBDatabase(dbi: dbi, name: name))
            }
            if let again = try set.lastHandle(LMDBTransaction(handle: txn, isWrite: !readOnly, environment: nil),
                                              result) {
                precondition(result.indices.contains(again), "DatabaseSet.lastHandle chose no named database")
                result.append(result[again])
            } else {
                var main: MDB_dbi = 0
                try lmdbCheck(mdb_dbi_open(txn, nil, 0, &main), "mdb_dbi_open(main)")
                result.append(LMDBDatabase(dbi: main, name: "main"))
            }
        } catch {
            mdb_txn_abort(txn)
            throw error
        }
        // Commit (even read-only) so the handles stay open for the environment's lifetime.
        try lmdbCheck(mdb_txn_commit(txn), "mdb_txn_commit(open databases)")
        return result
    }

    /// A view of `handle`, a transaction of this environment.
    @inline(__always)
    @usableFromInline package func transaction(_ handle: OpaquePointer, isWrite: Bool) -> LMDBTransaction {
        LMDBTransaction(handle: handle, isWrite: isWrite, environment: self)
    }

    /// The handle at `position`: the named databases in the order of ``DatabaseSet/names``, then
    /// the last handle.
    @inlinable @inline(__always)
    public func database(at position: Int) -> LMDBDatabase { databases[position] }

    package var mapSizeBytes: Int { currentMapSize.load(ordering: .relaxed) }

    /// Closes the environment (idempotent). Reads begun before it, on other threads, are waited
    /// for (``activeReads``); reads asked for after it throw ``StrataError/closed(path:)``. Long
    /// reads (snapshots) must have been ended first: the store's close ends its snapshots'
    /// (``SnapshotRegistry/closeAll()``), and a replaced generation closes when its last snapshot
    /// is released, or with the store. Must not be called by a thread inside a read of this
    /// environment, which would wait for itself. An environment that is released without `close()` closes itself.
    package func close() {
        guard closed.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged else {
            return
        }
        // In a forked child the handle, its reader slots and locks are the parent's (LMDB does
        // not support an environment across fork()): refused from now on, left as it is.
        guard ForkWatch.generation == forkGeneration else { return }
        var pause: UInt32 = 20
        var nextWarning = ContinuousClock.now + .seconds(2)
        while activeReads.load(ordering: .sequentiallyConsistent) > 0 {
            usleep(pause)
            pause = min(pause * 2, 1_000)
            if ContinuousClock.now >= nextWarning {   // say what the close waits for, every 10 s
                Logger(label: "strata.lmdb").warning(
                    "closing \(path) waits for \(activeReads.load(ordering: .relaxed)) read(s) still under way")
                nextWarning = ContinuousClock.now + .seconds(10)
            }
        }
        // A background writeback in flight finishes first; later ones see `closed`.
        writebackGate.withLock { _ in }
        let pooled = readPool.withLock { pool -> [ReadTxnBox] in
            defer { pool.removeAll() }
            return pool
        }
        for box in pooled { mdb_txn_abort(box.txn) }
        if let cached = OpaquePointer(bitPattern: cachedReadTxn.exchange(0, ordering: .acquiring)) {
            mdb_txn_abort(cached)
        }
        // The map goes with the handle: the mapping ranges cached for page releases are
        // forgotten with it (an address range freed here may hold other memory later, which a
        // release would zero; a release checks `closed`, set above, before it uses them). Not
        // under the map lock taken exclusively: a thread inside a read of this environment may
        // be waiting for the one closing it (a replaced generation closes on whatever thread
        // lets its last snapshot go), and the close would then wait for ever (the full test
        // suite hung so).
        cachedMappings.withLock { $0 = nil }
        mdb_env_close(handle)
        lockProbe.withLock { fd in
            if fd >= 0 { Glibc.close(fd) }
            fd = -1
        }
        afterClose.withLock { $0 }?()
    }

    deinit { close() }

    /// Whether ``close()`` was called.
    package var isClosed: Bool { closed.load(ordering: .acquiring) }

    /// Sets what runs after the environment closes.
    package func onClose(_ body: @escaping @Sendable () -> Void) { afterClose.withLock { $0 = body } }

    /// Turns `MDB_NOSYNC` on or off (a generation is built without syncs, then synced once).
    package func setNoSync(_ on: Bool) throws {
        try lmdbCheck(mdb_env_set_flags(handle, UInt32(MDB_NOSYNC), on ? 1 : 0), "mdb_env_set_flags(MDB_NOSYNC)")
    }

    /// Turns `MDB_NOMETASYNC` on or off: a commit then syncs its data pages but not the meta page
    /// that makes it current, which the next commit's sync (or the kernel) writes. LMDB keeps the
    /// file consistent either way; an OS crash may only undo the last commit.
    package func setNoMetaSync(_ on: Bool) throws {
        try lmdbCheck(mdb_env_set_flags(handle, UInt32(MDB_NOMETASYNC), on ? 1 : 0),
                      "mdb_env_set_flags(MDB_NOMETASYNC)")
    }
}
