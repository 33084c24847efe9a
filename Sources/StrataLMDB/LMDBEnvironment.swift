import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

/// Options passed explicitly to `mdb_env_open` (no reliance on LMDB's defaults).
package struct LMDBOptions: Sendable {
    package var mapSizeBytes: Int
    package var maxMapSizeBytes: Int
    package var maxReaders: UInt32
    package var readOnly: Bool
    /// `MDB_NOSYNC`: commits do not fsync; ``LMDBEnvironment/sync()`` does.
    package var noSync: Bool
    /// `MDB_NOLOCK`: only for read-only opens of a directory nobody writes to.
    package var noLock: Bool
    /// `MDB_WRITEMAP | MDB_MAPASYNC`: write transactions change the map in place (no page copies
    /// on the heap, no `pwrite`). Only for throwaway scratch environments: a stray write through
    /// the map would corrupt the file, and nested transactions are refused in this mode. (Tried
    /// for new generations too: compaction's appends in key order were slower with it, faulting
    /// the new file's pages in one by one, and migration no faster.)
    package var writeMap = false
    /// Check every page of the data file (``PageAudit``) after `mdb_env_open`, before any page
    /// but the meta pages is read.
    package var checkPages = false
    /// The mode of `data.mdb` and `lock.mdb` when they are created: they are created here, with
    /// exactly this mode whatever the umask, before LMDB opens them.
    package var fileMode: mode_t = 0o600
    /// The databases opened at start-up.
    package var databases: DatabaseSet
    /// The errors and file checks of the environment's owner.
    package var policy: any EnvironmentPolicy

    package init(mapSizeBytes: Int, maxMapSizeBytes: Int, maxReaders: UInt32, readOnly: Bool, noSync: Bool, noLock: Bool,
                 databases: DatabaseSet, policy: any EnvironmentPolicy = PlainEnvironmentPolicy()) {
        self.mapSizeBytes = mapSizeBytes
        self.maxMapSizeBytes = maxMapSizeBytes
        self.maxReaders = maxReaders
        self.readOnly = readOnly
        self.noSync = noSync
        self.noLock = noLock
        self.databases = databases
        self.policy = policy
    }
}

/// One LMDB environment (a store directory), opened once per process.
///
/// `MDB_env` is safe to share between threads once opened; with `MDB_NOTLS` read transactions are
/// not tied to a thread. Changing the map size is the one environment-wide mutation, and it runs
/// under ``mapLock`` held exclusively while no transaction of this process uses the map.
package final class LMDBEnvironment: Sendable {
    /// Safe to share: see the type's comment. Never used after ``close()``.
    package nonisolated(unsafe) let handle: OpaquePointer
    package let path: String
    package let options: LMDBOptions
    package let mapLock = RWLock()
    /// In the order of ``DatabaseSet/names``, then the last handle.
    private let databases: [LMDBDatabase]
    /// Reset read transactions kept for reuse (renewing one costs far less than beginning one).
    private let readPool = Locked<[ReadTxnBox]>([])
    /// One reset read transaction kept outside the pool (its bits; 0: none), taken and given
    /// back with one atomic exchange: a thread that opens and closes snapshots in turn never
    /// locks the pool. Whoever exchanges it out owns it.
    private let cachedReadTxn = Atomic<UInt>(0)
    /// The monotonic second in which a reader last used this environment (0: never),
    /// written only when the second changes (readers on several cores do not keep writing one
    /// cache line). See ``hadReadersRecently``.
    private let lastReadSecond = Atomic<Int>(0)
    /// Times this process dropped its mapped pages (``releaseMappedPagesHoldingMapLock()``).
    package let mappedPageReleases = Atomic<Int>(0)
    private let currentMapSize: Atomic<Int>
    /// Readers cleared by `mdb_reader_check` at open (slots of crashed processes).
    package let staleReadersCleared: Int
    package static let readPoolCapacity = 16
    /// The newest (LMDB transaction id, Strata transaction id) pair this process committed, so
    /// that opening a snapshot need not search the log for its last key (see ``headHint(for:)``).
    private let head = Atomic<WordPair>(WordPair(first: 0, second: 0))
    private let closed = Atomic<Bool>(false)
    /// Read transactions of this process begun and not yet ended (``beginRead()`` to
    /// ``endRead(_:)``). ``close()`` waits until there are none: LMDB requires every transaction
    /// ended before `mdb_env_close`, and a short read on another thread (a view context's fetch,
    /// which no snapshot registry knows of) would otherwise go on reading an unmapped file. With
    /// ``closed`` it is a Dekker pair: a reader counts itself, then checks `closed`; `close()`
    /// sets `closed`, then waits for the count, both sequentially consistent, so a reader either
    /// sees `closed` (and begins nothing) or is counted (and the close waits for it).
    private let activeReads = Atomic<Int>(0)
    /// ``ForkWatch/generation`` when opened: in a child process after `fork()` the environment
    /// is the parent's, and ``close()`` leaves it alone.
    private let forkGeneration = ForkWatch.generation
    /// This process's mapping(s) of the data file, read from `/proc/self/maps` once and
    /// forgotten when the map moves (``growMap()``, ``adoptMapSize()``, under ``mapLock``
    /// exclusively), so releasing mapped pages inside a bulk save costs one `madvise`.
    private let cachedMappings = Locked<[MappedRange]?>(nil)
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
    private let writebackQueued = Atomic<Bool>(false)
    /// Held while a background writeback runs, and by ``close()`` after it marks the environment
    /// closed, so the file descriptor is never used after `mdb_env_close` (a later writeback
    /// sees `closed` and does nothing). Holds the file's size when the previous writeback
    /// started (every page below it had been submitted for writing then) and the first error a
    /// writeback that waited for its pages, or a background flush (``requestFlush(onError:)``),
    /// saw: the kernel reports a write error once, so ``sync()`` throws the kept one.
    private let writebackGate = Locked<WritebackState>(WritebackState())
    package struct WritebackState {
        package var submittedBelow = 0
        package var error: Int32?
    }
    /// The background flush of a relaxed (`MDB_NOSYNC`) environment (``requestFlush(onError:)``):
    /// whether one is running, and whether a request came after the running one had started.
    private let flushState = Locked<FlushState>(FlushState())
    package struct FlushState {
        package var running = false
        package var requested = false
        package var completed = 0
    }
    /// Where this environment's background flushes run (``requestFlush(onError:)``): a queue
    /// per environment, so a store whose flushes never end under load does not hold up another's.
    private let flushQueue = DispatchQueue(label: "strata.flush", qos: .userInitiated)
    /// Runs on the flush queue before each background flush (tests hold a flush up with it).
    package let beforeFlushForTesting = Locked<(@Sendable () -> Void)?>(nil)
    /// Runs once after the environment is closed (used to remove a replaced generation).
    private let afterClose = Locked<(@Sendable () -> Void)?>(nil)

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
            try lmdbCheck(mdb_env_set_mapsize(env, try Self.reservableMapSize(options.mapSizeBytes)), "mdb_env_set_mapsize")
            try Self.prepareFiles(path: path, options: options)
            if options.checkPages { try PageAudit.checkMetas(dataFile: path + "/data.mdb", store: path, policy: options.policy) }
            try lmdbCheck(mdb_env_open(env, path, flags, options.fileMode), "mdb_env_open(\(path))")
            // A map written in place (MDB_WRITEMAP) is the file's size (LMDB ftruncates the file
            // to it, sparse): its blocks are allocated now, so that a full file system is an
            // error here and not a SIGBUS at the first write through the map.
            if options.writeMap { try Self.allocate(path + "/data.mdb", bytes: options.mapSizeBytes) }
            var dead: Int32 = 0
            if !options.noLock { try lmdbCheck(mdb_reader_check(env, &dead), "mdb_reader_check") }
            staleReadersCleared = Int(dead)
            try Self.checkFileSize(env, path: path, policy: options.policy)
            if options.checkPages { try Self.checkPages(env, path: path, policy: options.policy) }
            databases = try Self.openDatabases(env, options.databases, readOnly: options.readOnly)
            try lmdbCheck(mdb_env_info(env, &info), "mdb_env_info")
        } catch {
            mdb_env_close(env)
            throw error
        }
        self.handle = env
        self.path = path
        self.options = options
        self.currentMapSize = Atomic(info.me_mapsize)
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
            do { try create(path + "/lock.mdb") } catch let e as LMDBError where options.readOnly && (e.code == EACCES || e.code == EROFS) {}
            // LMDB maps the lock file shared and writes its reader table through the map: on a
            // full file system a sparse lock file is a SIGBUS at open. Its blocks are allocated
            // first, so that is an error (ENOSPC) instead. (A lock file that cannot be opened for
            // writing is left to LMDB, which opens it read-only or refuses.)
            let lock = Glibc.open(path + "/lock.mdb", O_RDWR | O_NOFOLLOW | O_CLOEXEC)
            if lock >= 0 {
                defer { Glibc.close(lock) }
                let rc = posix_fallocate(lock, 0, off_t(lockFileBytes(maxReaders: options.maxReaders)))
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
    /// a short write — what a full file system gives — as `EIO`; when the file system holding
    /// the store has less than a megabyte left, the error is reported as `ENOSPC`, which it is.
    package func checkWrite(_ rc: Int32, _ operation: @autoclosure () -> String) throws {
        guard rc != MDB_SUCCESS else { return }
        if rc == EIO || rc == ENOSPC, let free = Self.freeBytes(path), free < 1 << 20 {
            throw LMDBError(code: ENOSPC, operation: "\(operation()) (\(free) bytes left on the file system of \(path))")
        }
        throw LMDBError(code: rc, operation: operation())
    }

    /// Bytes an unprivileged writer may still use on the file system of `path` (`statvfs`).
    package static func freeBytes(_ path: String) -> Int? {
        var s = statvfs()
        guard statvfs(path, &s) == 0 else { return nil }
        return Int(s.f_bavail) * Int(s.f_frsize)
    }

    /// `bytes`, or less when that much address space cannot be reserved now
    /// (``canReserveAddressSpace(_:)``): halved until it can, down to 1 MiB. A map that is too
    /// small grows on demand; one that cannot be mapped fails the open. LMDB raises the size to
    /// the pages in use when it opens the file.
    package static func reservableMapSize(_ bytes: Int) throws -> Int {
        var size = bytes
        while size > 1 << 20, !(try canReserveAddressSpace(size)) { size = max(1 << 20, size / 2) }
        return size
    }

    private static func openDatabases(_ env: OpaquePointer, _ set: DatabaseSet, readOnly: Bool) throws -> [LMDBDatabase] {
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
            if let again = try set.lastHandle(LMDBTransaction(handle: txn, isWrite: !readOnly), result) {
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

    /// The handle at `position`: the named databases in the order of ``DatabaseSet/names``, then
    /// the last handle.
    @inline(__always)
    package func database(at position: Int) -> LMDBDatabase { databases[position] }

    package var mapSizeBytes: Int { currentMapSize.load(ordering: .relaxed) }

    /// Closes the environment (idempotent). Reads begun before it, on other threads, are waited
    /// for (``activeReads``); reads asked for after it throw ``StrataError/closed(path:)``. Long
    /// reads (snapshots) must have been ended first: the store's close ends its snapshots'
    /// (``SnapshotRegistry/closeAll()``), and a replaced generation closes when its last snapshot
    /// is released. Must not be called by a thread inside a read of this environment, which
    /// would wait for itself. An environment that is released without `close()` closes itself.
    package func close() {
        guard closed.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged else { return }
        // In a forked child the handle, its reader slots and locks are the parent's (LMDB does
        // not support an environment across fork()): refused from now on, left as it is.
        guard ForkWatch.generation == forkGeneration else { return }
        var pause: UInt32 = 20
        var nextWarning = ContinuousClock.now + .seconds(2)
        while activeReads.load(ordering: .sequentiallyConsistent) > 0 {
            usleep(pause)
            pause = min(pause * 2, 1_000)
            if ContinuousClock.now >= nextWarning {   // say what the close waits for, every 10 s
                Logger(label: "strata.lmdb").warning("closing \(path) waits for \(activeReads.load(ordering: .relaxed)) read(s) still under way")
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
        if let cached = OpaquePointer(bitPattern: cachedReadTxn.exchange(0, ordering: .acquiring)) { mdb_txn_abort(cached) }
        mdb_env_close(handle)
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

    // MARK: Write transactions

    /// Runs `body` in one write transaction on the calling thread and commits it.
    ///
    /// Begin and commit happen on the same OS thread with no suspension between them, as LMDB
    /// requires. On any error the transaction is aborted and nothing is written.
    package func write<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        precondition(!options.readOnly, "write transaction on a read-only environment")
        while true {
            // The map lock is held shared for the whole transaction: a reader adopting another
            // process's map size must not remap while the writer holds page pointers.
            let outcome: Result<R, Error>? = mapLock.withShared {
                var txn: OpaquePointer?
                let rc = mdb_txn_begin(handle, nil, 0, &txn)
                if rc == MDB_MAP_RESIZED { return nil }
                do {
                    try lmdbCheck(rc, "mdb_txn_begin")
                    guard let txn else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin") }
                    let result: R
                    do {
                        result = try body(LMDBTransaction(handle: txn, isWrite: true))
                    } catch {
                        mdb_txn_abort(txn)
                        throw error
                    }
                    // mdb_txn_commit frees the transaction whether or not it succeeds.
                    try checkWrite(mdb_txn_commit(txn), "mdb_txn_commit")
                    return .success(result)
                } catch {
                    return .failure(error)
                }
            }
            guard let outcome else {
                try adoptMapSize()
                continue
            }
            return try outcome.get()
        }
    }

    /// Runs `body` in a nested write transaction: its changes are kept when it returns and
    /// dropped (without touching the parent's) when it throws.
    package func nested<R>(in parent: LMDBTransaction, _ body: (LMDBTransaction) throws -> R) throws -> R {
        var child: OpaquePointer?
        try lmdbCheck(mdb_txn_begin(handle, parent.handle, 0, &child), "mdb_txn_begin(nested)")
        guard let child else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin(nested)") }
        let result: R
        do {
            result = try body(LMDBTransaction(handle: child, isWrite: true))
        } catch {
            mdb_txn_abort(child)
            throw error
        }
        try checkWrite(mdb_txn_commit(child), "mdb_txn_commit(nested)")
        return result
    }

    /// Another process grew the map past this process's (`MDB_MAP_RESIZED`): maps at least the
    /// data's size again. Sized as a growth (``growMap()``), not at the size the other process
    /// wrote (`mdb_env_set_mapsize(0)`), so that the new size is reserved first; LMDB raises a
    /// size below the pages in use to them.
    package func adoptMapSize() throws {
        try mapLock.withExclusive {
            let current = currentMapSize.load(ordering: .relaxed)
            try remapHoldingMapLock(to: max(current * 2, current + growthStep), atLeast: current + 1 << 20)
        }
    }

    /// Grows the map (up to ``LMDBOptions/maxMapSizeBytes``) to at least twice its size and by at
    /// least ``growthStepBytes`` (see there). Call only while this process has no write
    /// transaction open; readers are held off by ``mapLock`` for the remap.
    ///
    /// Taking ``mapLock`` exclusively waits for the reads holding it at that moment. The long
    /// readers hold it a chunk at a time: their user code runs between reads (an export's `emit`,
    /// a transaction visit's body, a compaction's `progress`), and their scans read a chunk per
    /// hold (``ReadSource``, ``ChunkedScan``, the direct copy), so a growth waits for at most one
    /// chunk of each of them. Verify, migration, single queries and a child's custom merge
    /// closure are the exceptions: see ARCHITECTURE.md, "Map growth and the map lock".
    ///
    /// LMDB documents `mdb_env_set_mapsize` as safe only with no transaction active in the process.
    /// Pinned snapshots keep read transactions open across a growth. That is safe with liblmdb
    /// 0.9.x because an idle read transaction holds no pointer into the map: `mdb_txn_renew0`
    /// copies the meta page's database records into the transaction, and every page is found
    /// from `env->me_map` at the time of access. Page pointers live only in cursors, which Strata
    /// opens and closes inside one operation while holding ``mapLock`` shared.
    /// - Returns: false when the map is already at its maximum.
    package func growMap() throws -> Bool {
        try mapLock.withExclusive {
            let current = currentMapSize.load(ordering: .relaxed)
            guard current < options.maxMapSizeBytes else { return false }
            let next = min(options.maxMapSizeBytes, max(current * 2, current + growthStep))
            try remapHoldingMapLock(to: next, atLeast: min(options.maxMapSizeBytes, current + 1 << 20))
            return true
        }
    }

    /// The least a growth adds: ``growthStepBytes``, or 1 MiB for an `MDB_WRITEMAP` map.
    private var growthStep: Int { options.writeMap ? 1 << 20 : Self.growthStepBytes }

    /// `mdb_env_set_mapsize` to `target` bytes, or less down to `floor` when that much address
    /// space cannot be reserved; the caller holds ``mapLock`` exclusively.
    ///
    /// `mdb_env_set_mapsize` unmaps the old map before it maps the new one, and an environment
    /// whose new map failed has no map at all (its next transaction would read unmapped memory).
    /// So the new size is first reserved as address space (``canReserveAddressSpace(_:)``, with
    /// the old map still in place, which asks for more than the remap will), halving the step
    /// down to `floor` when that fails; when not even that can be reserved, this throws `ENOMEM`
    /// without touching the map, and the environment stays usable at its present size.
    private func remapHoldingMapLock(to target: Int, atLeast floor: Int) throws {
        var size = max(target, floor)
        while !(try Self.canReserveAddressSpace(size)) {
            guard size > floor else {
                throw LMDBError(code: ENOMEM, operation: "mdb_env_set_mapsize(\(size)): no address space for the new map")
            }
            size = max(floor, floor + (size - floor) / 2)
        }
        // Before the map grows over it (see init): a file system without room for the larger
        // file fails the growth, and the map stays as it was.
        if options.writeMap { try Self.allocate(path + "/data.mdb", bytes: size) }
        try lmdbCheck(mdb_env_set_mapsize(handle, size), "mdb_env_set_mapsize(\(size))")
        cachedMappings.withLock { $0 = nil }
        // LMDB raises a size below the pages in use to them.
        var info = MDB_envinfo()
        try lmdbCheck(mdb_env_info(handle, &info), "mdb_env_info")
        currentMapSize.store(info.me_mapsize, ordering: .relaxed)
    }

    /// The least a growth (``growMap()``) adds to a map that is not written in place. Without
    /// `MDB_WRITEMAP` LMDB maps the data file read-only and never extends the file to the map's
    /// size (`mdb_env_map` calls `ftruncate` only with `MDB_WRITEMAP`), so the map is address
    /// space alone: a large step costs nothing, and makes growths (each one a redo of the
    /// writer's group and a moment in which readers pause) rare. `MDB_WRITEMAP` maps (scratch
    /// environments) are the file's size, and grow by doubling, at least 1 MiB.
    package static let growthStepBytes = 1 << 30

    /// Whether `bytes` of address space can be reserved now: maps them (anonymous, `PROT_NONE`,
    /// `MAP_NORESERVE`: no memory, no commit charge) and unmaps them at once. False where the
    /// address space is short (`RLIMIT_AS`, a 47-bit space full of maps).
    package static func canReserveAddressSpace(_ bytes: Int) throws -> Bool {
        guard let region = mmap(nil, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0),
              region != UnsafeMutableRawPointer(bitPattern: -1) else {
            return false
        }
        guard munmap(region, bytes) == 0 else { throw LMDBError(code: errno, operation: "munmap(address space probe)") }
        return true
    }

    /// Drops this process's mappings of the store's pages (`madvise(MADV_DONTNEED)` on the whole
    /// map). The map is read-only and shared (no `MDB_WRITEMAP`), so nothing is lost: the pages
    /// stay in the kernel's page cache and the next access to one faults it back in, also for a
    /// reader running concurrently. Holds ``mapLock`` shared so the map cannot move meanwhile.
    ///
    /// LMDB does not expose the map's address (`me_mapaddr` is only set for `MDB_FIXEDMAP`), so
    /// the mapping is found in `/proc/self/maps` by the data file's device and inode.
    package func releaseMappedPages() throws {
        try mapLock.withShared { try releaseMappedPagesHoldingMapLock() }
    }

    /// ``releaseMappedPages()`` for a caller that holds ``mapLock`` shared already: a write
    /// transaction in progress. Safe in the middle of one: without `MDB_WRITEMAP` the map is a
    /// read-only shared mapping of the file, LMDB writes a transaction's pages to heap copies and
    /// never into the map, and a page it still points into is faulted back in from the page cache
    /// unchanged on its next use.
    package func releaseMappedPagesHoldingMapLock() throws {
        precondition(!options.writeMap, "MDB_WRITEMAP maps are written in place; dropping their pages mid-transaction is not safe")
        let ranges = try cachedMappings.withLock { cached in
            if let cached { return cached }
            let found = try dataFileMappings().map { MappedRange(start: $0.start, end: $0.end) }
            cached = found
            return found
        }
        for range in ranges {
            guard let start = UnsafeMutableRawPointer(bitPattern: range.start) else { continue }
            if madvise(start, Int(range.end - range.start), MADV_DONTNEED) != 0 {
                throw LMDBError(code: errno, operation: "madvise(MADV_DONTNEED)")
            }
        }
        mappedPageReleases.add(1, ordering: .relaxed)
    }

    /// Starts writing the data file's dirty pages to disk without waiting (`sync_file_range`
    /// with `SYNC_FILE_RANGE_WRITE`): a bulk build calls it after each batch so that the disk
    /// works while the next batch is built, and the final sync has less left to wait for. Not a
    /// durability guarantee (that is ``sync()``).
    ///
    /// The call returns at once: `sync_file_range` submits the I/O in the caller's thread (ext4
    /// maps every dirty page to blocks and builds the requests, a third of a compaction's time
    /// when it ran inline), so it runs on a utility queue while the caller builds the next
    /// batch. At most one is queued at a time; one that starts late still covers every page
    /// dirtied before it.
    ///
    /// While ``isBulkBuild`` is set (never for an `MDB_WRITEMAP` environment), each writeback
    /// then writes and waits for every dirty page
    /// below the size the file had at the previous one (`SYNC_FILE_RANGE_WAIT_BEFORE | WRITE |
    /// WAIT_AFTER`), releases this process's mappings of the file (``releaseMappedPages()``:
    /// `POSIX_FADV_DONTNEED` skips mapped pages, and each fault of the build maps up to 16
    /// cached neighbours) and drops those pages from the page cache (`POSIX_FADV_DONTNEED`,
    /// which leaves dirty pages alone). The two meta pages stay, as every transaction reads
    /// them. The cache so holds the batches not yet on disk rather than the whole new file, as
    /// PostgreSQL's bulk writes go through a ring of buffers: what other work had cached stays,
    /// and the build reuses the memory it frees instead of taking fresh pages (on a virtual
    /// machine, each fresh page is also a fault in the host: 500 MB written into the cache for
    /// the first time ran at 530 MB/s here). The price: the new file's pages are read from disk
    /// when next used (see ``prefetch()``).
    ///
    /// Waiting for the pages consumes a write error the kernel would otherwise report to the
    /// next `fdatasync` of this descriptor (LMDB's), so such an error is kept and ``sync()``
    /// throws it: a generation whose pages did not reach the disk is never switched in.
    package func startWriteback() {
        guard Self.syncFileRange != nil, !closed.load(ordering: .acquiring) else { return }
        guard writebackQueued.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        Self.writebackQueue.async { [self] in
            writebackQueued.store(false, ordering: .releasing)
            writebackGate.withLock { state in
                guard !closed.load(ordering: .acquiring) else { return }
                var fd: Int32 = -1
                guard mdb_env_get_fd(handle, &fd) == MDB_SUCCESS, fd >= 0, let syncFileRange = Self.syncFileRange else { return }
                var info = stat()
                let size = fstat(fd, &info) == 0 ? Int(info.st_size) : 0
                _ = syncFileRange(fd, 0, 0, 2 /* SYNC_FILE_RANGE_WRITE: errors are left for the sync */)
                let metaBytes = Self.metaPagesBytes
                let drop = isBulkBuild.load(ordering: .acquiring) && !options.writeMap
                if drop, state.error == nil, state.submittedBelow > metaBytes {
                    let length = state.submittedBelow - metaBytes
                    // WAIT_BEFORE | WRITE | WAIT_AFTER: clean, so that the advice can drop them.
                    if syncFileRange(fd, Int64(metaBytes), Int64(length), 7) != 0 {
                        state.error = errno
                    } else {
                        // A failed madvise only leaves some pages mapped, and so cached.
                        _ = try? releaseMappedPages()
                        if posix_fadvise(fd, off_t(metaBytes), off_t(length), POSIX_FADV_DONTNEED) == 0 {
                            droppedWrittenPages.store(true, ordering: .relaxed)
                        }
                    }
                }
                state.submittedBelow = size
            }
        }
    }

    /// The first error a background writeback saw while waiting for its pages (nil: none). The
    /// kernel reports a write error once per open file, and that wait took it.
    package var backgroundWritebackError: Int32? { writebackGate.withLock { $0.error } }

    /// Records `code` as if a background writeback had seen that write error (tests of the
    /// path no real disk here can produce on demand).
    package func recordWritebackErrorForTesting(_ code: Int32) { writebackGate.withLock { $0.error = code } }

    /// Reads the data file into the page cache (sequential 1 MiB reads of a second descriptor),
    /// when it is at most half of the memory available (`MemAvailable`, and the cgroup's
    /// `memory.max` where one is set), stopping if the environment closes: a new generation
    /// whose build dropped its pages (``startWriteback()``) starts cold, and
    /// readers of a store opened with `MDB_NORDAHEAD` would otherwise fetch it a page per fault
    /// (a compaction that read a cold 318 MB generation took 6 s instead of 0.6).
    /// `POSIX_FADV_WILLNEED` does not do it: the kernel caps it at one readahead window. Errors
    /// only leave the file cold.
    package func prefetch() {
        Self.prefetch(file: path + "/data.mdb") { closed.load(ordering: .relaxed) }
    }

    /// ``prefetch()`` on a utility queue, after every writeback queued before this call and only
    /// if one of them dropped pages. Returns at once. The queue holds the environment weakly: one
    /// that is released meanwhile (a generation replaced again) closes, and the reading stops.
    package func prefetchInBackground() {
        let file = path + "/data.mdb"
        Self.writebackQueue.async { [weak self] in
            guard let self, droppedWrittenPages.load(ordering: .relaxed), !closed.load(ordering: .acquiring) else { return }
            Self.prefetchQueue.async { [weak self] in
                Self.prefetch(file: file) { self.map { $0.closed.load(ordering: .relaxed) } ?? true }
            }
        }
    }

    /// The reading of ``prefetch()``: `stop` is asked before each 1 MiB.
    private static func prefetch(file: String, stop: () -> Bool) {
        let fd = Glibc.open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, let available = availableMemoryBytes(),
              Int(info.st_size) <= available / prefetchAvailableMemoryDivisor else { return }
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        let chunk = prefetchChunkBytes
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 4096)
        defer { buffer.deallocate() }
        var offset: off_t = 0
        while !stop() {
            let n = pread(fd, buffer, chunk, offset)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            offset += off_t(n)
        }
    }

    /// Memory the page cache may use without evicting much: `MemAvailable` from `/proc/meminfo`,
    /// lowered to the cgroup's free `memory.max` where one is set. Nil when unknown.
    package static func availableMemoryBytes() -> Int? {
        guard let meminfo = try? readProcFile("/proc/meminfo"),
              let line = meminfo.split(separator: "\n").first(where: { $0.hasPrefix("MemAvailable:") }),
              let kB = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else { return nil }
        var available = kB * 1024
        if let max = (try? readProcFile("/sys/fs/cgroup/memory.max")).flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }),
           let current = (try? readProcFile("/sys/fs/cgroup/memory.current")).flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) {
            available = min(available, Swift.max(0, max - current))
        }
        return available
    }

    /// Waits until every background writeback queued so far has finished.
    package static func waitForWriteback() { writebackQueue.sync {} }

    /// Waits until every background writeback and prefetch queued so far has finished (tests).
    package static func waitForBackgroundWork() {
        waitForWriteback()
        prefetchQueue.sync {}
    }

    /// The two meta pages at the start of the data file (LMDB's page size is the system's): a
    /// writeback never drops them, every transaction reads them.
    package static let metaPagesBytes = 2 * Int(sysconf(Int32(_SC_PAGESIZE)))
    /// ``prefetch()`` reads a file only when it is at most this fraction (1/n) of the memory
    /// available, so it never pushes much else out of the cache.
    package static let prefetchAvailableMemoryDivisor = 2
    /// The size of ``prefetch()``'s reads.
    package static let prefetchChunkBytes = 1 << 20

    /// Where background writebacks run (one at a time: they contend for the same disk).
    private static let writebackQueue = DispatchQueue(label: "strata.writeback", qos: .utility)
    /// Where prefetches run, apart from writebacks (a long one must not hold up another
    /// store's build).
    private static let prefetchQueue = DispatchQueue(label: "strata.prefetch", qos: .utility)

    /// glibc's `sync_file_range`, which Swift's Glibc module does not import (it is declared
    /// only under `_GNU_SOURCE`); looked up once. Nil where it does not exist.
    private static let syncFileRange: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sync_file_range") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32).self)
    }()

    /// The whole of a `/proc` file. Its size reads as 0 and the kernel hands it out a page at a
    /// time, so this reads until end of file rather than trusting `stat`.
    package static func readProcFile(_ path: String) throws -> String {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw LMDBError(code: errno, operation: "open(\(path))") }
        defer { Glibc.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw LMDBError(code: errno, operation: "read(\(path))")
            }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// This process's mappings of the data file (one: LMDB's map).
    package func dataFileMappings() throws -> [(start: UInt, end: UInt)] {
        var fd: Int32 = -1
        try lmdbCheck(mdb_env_get_fd(handle, &fd), "mdb_env_get_fd")
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw LMDBError(code: errno, operation: "fstat(data.mdb)") }
        return try Self.mappings(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }

    /// This process's mappings of the file with `device` and `inode`, from `/proc/self/maps`
    /// (lines `start-end perms offset major:minor inode path`, numbers in hex but the inode).
    package static func mappings(device: UInt64, inode: UInt64) throws -> [(start: UInt, end: UInt)] {
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        let text = try readProcFile("/proc/self/maps")
        var out: [(start: UInt, end: UInt)] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count >= 5, UInt64(fields[4]) == inode else { continue }
            let dev = fields[3].split(separator: ":")
            guard dev.count == 2, UInt64(dev[0], radix: 16) == major, UInt64(dev[1], radix: 16) == minor else { continue }
            let range = fields[0].split(separator: "-")
            guard range.count == 2, let start = UInt(range[0], radix: 16), let end = UInt(range[1], radix: 16), end > start else { continue }
            out.append((start, end))
        }
        return out
    }

    /// Flushes buffers to disk (`mdb_env_sync(force)`), for `MDB_NOSYNC` environments.
    package func sync() throws {
        try checkWrite(mdb_env_sync(handle, 1), "mdb_env_sync")
        if let error = backgroundWritebackError {
            throw LMDBError(code: error, operation: "background writeback or flush of \(path)")
        }
    }

    /// Asks for a flush (`mdb_env_sync(force)`) on a background queue, for relaxed
    /// (`MDB_NOSYNC`) environments, so the writer commits on while the kernel writes the pages
    /// out. Requests coalesce: every request is followed by a flush that started after it (a
    /// request made while a flush runs waits for that one to end), and at most one flush runs at
    /// a time. A flush holds ``writebackGate``, which ``close()`` takes
    /// after marking the environment closed, so it never touches a closed environment (a request
    /// that runs after the close does nothing). `onError` gets a failed flush's error, which is
    /// also kept for the next ``sync()`` to throw (the flush consumed the kernel's one report of it).
    package func requestFlush(onError: @escaping @Sendable (LMDBError) -> Void) {
        // Without MDB_WRITEMAP a flush is an fdatasync of the descriptor, safe while the map
        // moves; with it, an msync of the map, which a growth could unmap underneath.
        precondition(!options.writeMap, "a background flush of an MDB_WRITEMAP environment would race map growth")
        let start = flushState.withLock { s -> Bool in
            s.requested = true
            guard !s.running else { return false }
            s.running = true
            return true
        }
        guard start else { return }
        flushQueue.async { [self] in
            while flushState.withLock({ s -> Bool in
                if s.requested {
                    s.requested = false
                    return true
                }
                s.running = false
                return false
            }) {
                beforeFlushForTesting.withLock { $0 }?()
                let rc = writebackGate.withLock { state -> Int32? in
                    guard !closed.load(ordering: .acquiring) else { return nil }
                    let rc = mdb_env_sync(handle, 1)
                    if rc != MDB_SUCCESS, state.error == nil { state.error = rc }
                    return rc
                }
                guard let rc else { continue }
                flushState.withLock { $0.completed += 1 }
                if rc != MDB_SUCCESS { onError(LMDBError(code: rc, operation: "mdb_env_sync (background flush of \(path))")) }
            }
        }
    }

    /// Whether a background flush is running or queued.
    package var flushInProgress: Bool { flushState.withLock { $0.running } }

    /// Background flushes that ran so far (``requestFlush(onError:)``; a request after
    /// ``close()`` runs none; tests).
    package var completedFlushes: Int { flushState.withLock { $0.completed } }

    /// Waits until every background flush requested so far has finished. Never call it from
    /// the flush queue itself (an ``onClose(_:)`` body can run there when the queue's block
    /// held the last reference): it would wait for itself.
    package func waitForFlushes() {
        dispatchPrecondition(condition: .notOnQueue(flushQueue))
        flushQueue.sync {}
    }

    // MARK: Read transactions

    /// Begins (or renews a pooled) read-only transaction. Pair with ``endRead(_:)``.
    /// Beginning reads the meta pages in the map, so it holds ``mapLock`` shared.
    package func beginRead() throws -> OpaquePointer {
        activeReads.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if closed.load(ordering: .sequentiallyConsistent) {
            activeReads.wrappingSubtract(1, ordering: .sequentiallyConsistent)
            throw options.policy.closed(path: path)
        }
        do {
            return try beginCountedRead()
        } catch {
            activeReads.wrappingSubtract(1, ordering: .releasing)
            throw error
        }
    }

    /// ``beginRead()`` once the read is counted and the environment known open.
    private func beginCountedRead() throws -> OpaquePointer {
        var pooled: ReadTxnBox?
        if let cached = OpaquePointer(bitPattern: cachedReadTxn.exchange(0, ordering: .acquiring)) {
            pooled = ReadTxnBox(txn: cached)
        } else {
            pooled = readPool.withLock { $0.popLast() }
        }
        while true {
            let attempt: Result<OpaquePointer, LMDBError>? = mapLock.withShared {
                if let box = pooled {
                    pooled = nil
                    let rc = mdb_txn_renew(box.txn)
                    if rc == MDB_SUCCESS { return .success(box.txn) }
                    mdb_txn_abort(box.txn)
                    if rc == MDB_MAP_RESIZED { return nil }
                    return .failure(LMDBError(code: rc, operation: "mdb_txn_renew"))
                }
                var txn: OpaquePointer?
                let rc = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &txn)
                if rc == MDB_MAP_RESIZED { return nil }
                guard rc == MDB_SUCCESS, let txn else { return .failure(LMDBError(code: rc == 0 ? EINVAL : rc, operation: "mdb_txn_begin(read-only)")) }
                return .success(txn)
            }
            guard let attempt else {
                try adoptMapSize()
                continue
            }
            return try attempt.get()
        }
    }

    /// Records that a reader of the store's data (a snapshot, a context's read) is at work now:
    /// see ``hadReadersRecently``. Strata's own reads while opening or maintaining the store do
    /// not call it.
    package func noteReader() { noteReader(second: Self.monotonicSecond()) }

    /// ``noteReader()`` with the time already read (`CLOCK_MONOTONIC_COARSE` nanoseconds).
    package func noteReader(monotonicNanos: Int64) { noteReader(second: Int(monotonicNanos / 1_000_000_000) + 1) }

    private func noteReader(second now: Int) {
        if lastReadSecond.load(ordering: .relaxed) != now { lastReadSecond.store(now, ordering: .relaxed) }
    }

    /// Whether a reader was noted (``noteReader()``) in the current or the previous monotonic
    /// second. The writer then leaves mapped pages alone
    /// while it applies a bulk save: dropping them would make those readers fault their
    /// working set back in again and again (W6's p99 tripled); it still drops them after the
    /// commit.
    package var hadReadersRecently: Bool {
        let last = lastReadSecond.load(ordering: .relaxed)
        return last != 0 && Self.monotonicSecond() - last <= 1
    }

    /// `CLOCK_MONOTONIC_COARSE` in whole seconds, from 1 (a few nanoseconds through the vDSO).
    private static func monotonicSecond() -> Int {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return Int(ts.tv_sec) + 1
    }

    /// Ends a read transaction from ``beginRead()``: it is reset and pooled, or aborted.
    package func endRead(_ txn: OpaquePointer) {
        // Last, on every path: the transaction is reset and pooled (or aborted) before a waiting
        // close() goes on.
        defer { activeReads.wrappingSubtract(1, ordering: .releasing) }
        mdb_txn_reset(txn)
        if cachedReadTxn.compareExchange(expected: 0, desired: UInt(bitPattern: txn), ordering: .releasing).exchanged { return }
        let pooled = readPool.withLock { pool -> Bool in
            guard pool.count < Self.readPoolCapacity else { return false }
            pool.append(ReadTxnBox(txn: txn))
            return true
        }
        if !pooled { mdb_txn_abort(txn) }
    }

    /// Records that LMDB write transaction `lmdbTransaction` committed with `transactionID` as the
    /// last key of the log. Call only after the commit succeeded, and only for a transaction that
    /// wrote (LMDB does not advance its transaction id for a commit without changes, so an id of
    /// an empty commit could later name another process's transaction).
    package func publishHead(lmdbTransaction: UInt64, head value: UInt64) {
        head.store(WordPair(first: UInt(lmdbTransaction), second: UInt(value)), ordering: .releasing)
    }

    /// The log's last transaction id as seen by read transaction `txn`, when this process
    /// committed the LMDB transaction `txn` reads (the common case: it is the newest one); nil
    /// otherwise (another process committed since, or nothing was published yet), and the caller
    /// reads the log. Exact: a read transaction sees precisely the state its LMDB id names.
    package func publishedHead(for txn: OpaquePointer) -> UInt64? {
        let pair = head.load(ordering: .acquiring)
        guard pair.first != 0, UInt(mdb_txn_id(txn)) == pair.first else { return nil }
        return UInt64(pair.second)
    }

    /// The LMDB id of a transaction (a write transaction's id is the one its commit will carry).
    package static func lmdbTransactionID(_ txn: OpaquePointer) -> UInt64 { UInt64(mdb_txn_id(txn)) }

    /// Runs `body` in a short read transaction (holding the map lock shared throughout).
    package func read<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        let txn = try beginRead()
        defer { endRead(txn) }
        return try mapLock.withShared { try body(LMDBTransaction(handle: txn, isWrite: false)) }
    }

    /// Refuses a data file shorter than the pages its meta page says are in use (a truncated
    /// copy): LMDB maps the file and would fault (SIGBUS) on the first read past its end. Runs
    /// right after `mdb_env_open`, before any page but the meta pages is touched.
    package static func checkFileSize(_ env: OpaquePointer, path: String, policy: any EnvironmentPolicy) throws {
        var info = MDB_envinfo()
        var stat = MDB_stat()
        try lmdbCheck(mdb_env_info(env, &info), "mdb_env_info")
        try lmdbCheck(mdb_env_stat(env, &stat), "mdb_env_stat")
        let needed = (info.me_last_pgno + 1) * Int(stat.ms_psize)
        guard let size = (try? FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size]) as? Int else { return }
        if size < needed {
            throw policy.notAStore(path: path, reason: "data.mdb is truncated: \(size) bytes, its pages need \(needed)")
        }
    }

    /// Checks every page of the data file (``PageAudit``) as of a read transaction held open
    /// meanwhile, so no writer reuses a page of that state during the check. Beginning the
    /// transaction reads only the meta page.
    package static func checkPages(_ env: OpaquePointer, path: String, policy: any EnvironmentPolicy) throws {
        var attempt = 0
        while true {
            var txn: OpaquePointer?
            try lmdbCheck(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin(page check)")
            guard let txn else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin(page check)") }
            defer { mdb_txn_abort(txn) }
            do {
                return try PageAudit.check(dataFile: path + "/data.mdb", store: path, txnID: lmdbTransactionID(txn), policy: policy)
            } catch is PageAudit.Outdated where attempt < 100 {
                attempt += 1   // commits overtook the check's meta page: check the newer state
            } catch is PageAudit.Outdated {
                throw policy.busy(path: path)
            }
        }
    }

    /// ``checkPages(_:path:)`` of this open environment.
    package func checkPages() throws {
        try mapLock.withShared { try Self.checkPages(handle, path: path, policy: options.policy) }
    }

    /// Bytes of the data file on disk.
    package var fileBytes: Int {
        var st = stat()
        guard stat(path + "/data.mdb", &st) == 0 else { return 0 }
        return Int(st.st_size)
    }

    /// Reader slots holding a snapshot now, in every process (`mdb_reader_list`). Reset slots kept
    /// for reuse and slots of ended processes are not counted.
    package func readerCount() -> Int {
        final class Counter { var active = 0 }
        let counter = Counter()
        let rc = withExtendedLifetime(counter) {
            mdb_reader_list(handle, { message, ctx in
                // Lines are "pid thread txnid"; a reset slot shows "-" as its txnid, and the
                // header and "(no active readers)" start with a letter or parenthesis.
                guard let message else { return 0 }
                let fields = String(cString: message).split(separator: " ", omittingEmptySubsequences: true)
                if fields.count == 3, Int(fields[0]) != nil, fields[2].trimmingCharacters(in: .whitespacesAndNewlines) != "-" {
                    Unmanaged<Counter>.fromOpaque(ctx!).takeUnretainedValue().active += 1
                }
                return 0
            }, Unmanaged.passUnretained(counter).toOpaque())
        }
        return rc >= 0 ? counter.active : 0
    }
}

/// A pooled, reset read transaction handle. Only ever used by one owner at a time (taken out of
/// the pool under its mutex), which is what makes sending it between threads safe.
package struct ReadTxnBox: @unchecked Sendable {
    package let txn: OpaquePointer
}
