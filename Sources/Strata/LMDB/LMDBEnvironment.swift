import CLMDB
import Glibc
import Synchronization

/// Options passed explicitly to `mdb_env_open` (no reliance on LMDB's defaults).
struct LMDBOptions: Sendable {
    var mapSizeBytes: Int
    var maxMapSizeBytes: Int
    var maxReaders: UInt32
    var readOnly: Bool
    /// `MDB_NOSYNC`: commits do not fsync; ``LMDBEnvironment/sync()`` does.
    var noSync: Bool
    /// `MDB_NOLOCK`: only for read-only opens of a directory nobody writes to.
    var noLock: Bool
}

/// The names of the databases every Strata store has. Opened once, at start-up, in one transaction.
enum DatabaseName: String, CaseIterable {
    case meta, log, objects, links, indexes, uniques
}

/// One LMDB environment (a store directory), opened once per process.
///
/// `MDB_env` is safe to share between threads once opened; with `MDB_NOTLS` read transactions are
/// not tied to a thread. Changing the map size is the one environment-wide mutation, and it runs
/// under ``mapLock`` held exclusively while no transaction of this process uses the map.
final class LMDBEnvironment: Sendable {
    /// Safe to share: see the type's comment. Never used after ``close()``.
    nonisolated(unsafe) let handle: OpaquePointer
    let path: String
    let options: LMDBOptions
    let mapLock = RWLock()
    let databases: [DatabaseName: LMDBDatabase]
    /// Reset read transactions kept for reuse (renewing one costs far less than beginning one).
    private let readPool = Mutex<[ReadTxnBox]>([])
    private let currentMapSize: Atomic<Int>
    /// Readers cleared by `mdb_reader_check` at open (slots of crashed processes).
    let staleReadersCleared: Int
    static let readPoolCapacity = 16

    init(path: String, options: LMDBOptions) throws {
        var env: OpaquePointer?
        try lmdbCheck(mdb_env_create(&env), "mdb_env_create")
        guard let env else { throw LMDBError(code: EINVAL, operation: "mdb_env_create") }
        var flags = UInt32(MDB_NOTLS) | UInt32(MDB_NORDAHEAD)
        if options.readOnly { flags |= UInt32(MDB_RDONLY) }
        if options.noSync { flags |= UInt32(MDB_NOSYNC) }
        if options.noLock { flags |= UInt32(MDB_NOLOCK) }
        do {
            try lmdbCheck(mdb_env_set_maxdbs(env, MDB_dbi(DatabaseName.allCases.count + 2)), "mdb_env_set_maxdbs")
            try lmdbCheck(mdb_env_set_maxreaders(env, options.maxReaders), "mdb_env_set_maxreaders")
            try lmdbCheck(mdb_env_set_mapsize(env, options.mapSizeBytes), "mdb_env_set_mapsize")
            try lmdbCheck(mdb_env_open(env, path, flags, 0o644), "mdb_env_open(\(path))")
            var dead: Int32 = 0
            if !options.noLock { try lmdbCheck(mdb_reader_check(env, &dead), "mdb_reader_check") }
            staleReadersCleared = Int(dead)
            databases = try Self.openDatabases(env, readOnly: options.readOnly)
        } catch {
            mdb_env_close(env)
            throw error
        }
        var info = MDB_envinfo()
        mdb_env_info(env, &info)
        self.handle = env
        self.path = path
        self.options = options
        self.currentMapSize = Atomic(info.me_mapsize)
    }

    private static func openDatabases(_ env: OpaquePointer, readOnly: Bool) throws -> [DatabaseName: LMDBDatabase] {
        var txn: OpaquePointer?
        try lmdbCheck(mdb_txn_begin(env, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn), "mdb_txn_begin(open databases)")
        var result: [DatabaseName: LMDBDatabase] = [:]
        do {
            for name in DatabaseName.allCases {
                var dbi: MDB_dbi = 0
                try lmdbCheck(mdb_dbi_open(txn, name.rawValue, readOnly ? 0 : UInt32(MDB_CREATE), &dbi),
                              "mdb_dbi_open(\(name.rawValue))")
                result[name] = LMDBDatabase(dbi: dbi, name: name.rawValue)
            }
        } catch {
            mdb_txn_abort(txn)
            throw error
        }
        // Commit (even read-only) so the handles stay open for the environment's lifetime.
        try lmdbCheck(mdb_txn_commit(txn), "mdb_txn_commit(open databases)")
        return result
    }

    subscript(_ name: DatabaseName) -> LMDBDatabase { databases[name]! }

    var mapSizeBytes: Int { currentMapSize.load(ordering: .relaxed) }

    /// Closes the environment. Every transaction must have ended.
    func close() {
        let pooled = readPool.withLock { pool -> [ReadTxnBox] in
            defer { pool.removeAll() }
            return pool
        }
        for box in pooled { mdb_txn_abort(box.txn) }
        mdb_env_close(handle)
    }

    // MARK: Write transactions

    /// Runs `body` in one write transaction on the calling thread and commits it.
    ///
    /// Begin and commit happen on the same OS thread with no suspension between them, as LMDB
    /// requires. On any error the transaction is aborted and nothing is written.
    func write<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        precondition(!options.readOnly, "write transaction on a read-only environment")
        let txn = try beginTransaction(flags: 0)
        let result: R
        do {
            result = try body(LMDBTransaction(handle: txn, isWrite: true))
        } catch {
            mdb_txn_abort(txn)
            throw error
        }
        // mdb_txn_commit frees the transaction whether or not it succeeds.
        try lmdbCheck(mdb_txn_commit(txn), "mdb_txn_commit")
        return result
    }

    /// Runs `body` in a nested write transaction: its changes are kept when it returns and
    /// dropped (without touching the parent's) when it throws.
    func nested<R>(in parent: LMDBTransaction, _ body: (LMDBTransaction) throws -> R) throws -> R {
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
        try lmdbCheck(mdb_txn_commit(child), "mdb_txn_commit(nested)")
        return result
    }

    private func beginTransaction(flags: UInt32) throws -> OpaquePointer {
        for _ in 0..<3 {
            var txn: OpaquePointer?
            let rc = mdb_txn_begin(handle, nil, flags, &txn)
            if rc == MDB_MAP_RESIZED {
                try adoptMapSize()
                continue
            }
            try lmdbCheck(rc, "mdb_txn_begin")
            guard let txn else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin") }
            return txn
        }
        throw LMDBError(code: MDB_MAP_RESIZED, operation: "mdb_txn_begin (map resized repeatedly)")
    }

    /// Another process grew the map: adopt the size it wrote.
    func adoptMapSize() throws {
        try mapLock.withExclusive {
            try lmdbCheck(mdb_env_set_mapsize(handle, 0), "mdb_env_set_mapsize(adopt)")
            var info = MDB_envinfo()
            mdb_env_info(handle, &info)
            currentMapSize.store(info.me_mapsize, ordering: .relaxed)
        }
    }

    /// Doubles the map (up to ``LMDBOptions/maxMapSizeBytes``). Call only while this process has
    /// no write transaction open; readers are held off by ``mapLock`` for the remap.
    /// - Returns: false when the map is already at its maximum.
    func growMap() throws -> Bool {
        try mapLock.withExclusive {
            let current = currentMapSize.load(ordering: .relaxed)
            guard current < options.maxMapSizeBytes else { return false }
            let next = min(options.maxMapSizeBytes, max(current * 2, current + 1 << 20))
            try lmdbCheck(mdb_env_set_mapsize(handle, next), "mdb_env_set_mapsize(\(next))")
            currentMapSize.store(next, ordering: .relaxed)
            return true
        }
    }

    /// Flushes buffers to disk (`mdb_env_sync(force)`), for `MDB_NOSYNC` environments.
    func sync() throws {
        try lmdbCheck(mdb_env_sync(handle, 1), "mdb_env_sync")
    }

    // MARK: Read transactions

    /// Begins (or renews a pooled) read-only transaction. Pair with ``endRead(_:)``.
    func beginRead() throws -> OpaquePointer {
        if let box = readPool.withLock({ $0.popLast() }) {
            let rc = mdb_txn_renew(box.txn)
            if rc == MDB_SUCCESS { return box.txn }
            mdb_txn_abort(box.txn)
            if rc != MDB_MAP_RESIZED { try lmdbCheck(rc, "mdb_txn_renew") }
        }
        return try beginTransaction(flags: UInt32(MDB_RDONLY))
    }

    /// Ends a read transaction from ``beginRead()``: it is reset and pooled, or aborted.
    func endRead(_ txn: OpaquePointer) {
        mdb_txn_reset(txn)
        let pooled = readPool.withLock { pool -> Bool in
            guard pool.count < Self.readPoolCapacity else { return false }
            pool.append(ReadTxnBox(txn: txn))
            return true
        }
        if !pooled { mdb_txn_abort(txn) }
    }

    /// Runs `body` in a short read transaction (holding the map lock shared throughout).
    func read<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        let txn = try beginRead()
        defer { endRead(txn) }
        return try mapLock.withShared { try body(LMDBTransaction(handle: txn, isWrite: false)) }
    }

    /// Bytes of the data file on disk.
    var fileBytes: Int {
        var st = stat()
        guard stat(path + "/data.mdb", &st) == 0 else { return 0 }
        return Int(st.st_size)
    }

    /// Active reader slots (including other processes').
    func readerCount() -> Int {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        return Int(info.me_numreaders)
    }
}

/// A pooled, reset read transaction handle. Only ever used by one owner at a time (taken out of
/// the pool under its mutex), which is what makes sending it between threads safe.
struct ReadTxnBox: @unchecked Sendable {
    let txn: OpaquePointer
}
