import CLMDBBench
import Foundation
import Synchronization

/// A failed liblmdb call, with the call's name and LMDB's message.
struct LMDBFailure: Error, CustomStringConvertible {
    let code: Int32
    let operation: String
    var description: String { "\(operation): \(String(cString: mdb_strerror(code))) (\(code))" }
}

@inline(__always)
func lmdbCheck(_ rc: Int32, _ operation: @autoclosure () -> String) throws {
    if rc != MDB_SUCCESS { throw LMDBFailure(code: rc, operation: operation()) }
}

/// A minimal, direct use of the LMDB C API: the baseline Strata is measured against.
///
/// One environment, one or more named databases (one for the plain baseline), `MDB_NOTLS` (read transactions are not tied to a thread),
/// an explicit map size, and either synchronous commits (the default, fsync per commit) or
/// `MDB_NOSYNC` for the relaxed comparison.
///
/// `@unchecked Sendable` is safe: `MDB_env` is designed to be shared by threads once opened, the
/// database handle is an integer opened once before any other use, and every transaction pointer
/// stays inside the closure or thread that created it.
final class RawLMDB: @unchecked Sendable {
    let env: OpaquePointer
    /// The handles of `databaseNames`, in order.
    let dbis: [MDB_dbi]
    /// The first database's handle (the plain baseline's only one).
    var dbi: MDB_dbi { dbis[0] }
    let path: String
    let noSync: Bool

    init(directory: URL, mapSizeBytes: Int, noSync: Bool, readOnly: Bool = false, databaseNames: [String?] = ["tracks"]) throws {
        precondition(!databaseNames.isEmpty && databaseNames.count <= 8, "1 to 8 databases")
        var e: OpaquePointer?
        try lmdbCheck(mdb_env_create(&e), "mdb_env_create")
        guard let e else { throw LMDBFailure(code: EINVAL, operation: "mdb_env_create") }
        var flags = UInt32(MDB_NOTLS)
        if noSync { flags |= UInt32(MDB_NOSYNC) }
        if readOnly { flags |= UInt32(MDB_RDONLY) }
        do {
            try lmdbCheck(mdb_env_set_maxdbs(e, 8), "mdb_env_set_maxdbs")
            try lmdbCheck(mdb_env_set_maxreaders(e, 126), "mdb_env_set_maxreaders")
            try lmdbCheck(mdb_env_set_mapsize(e, mapSizeBytes), "mdb_env_set_mapsize")
            try lmdbCheck(mdb_env_open(e, directory.path, flags, 0o644), "mdb_env_open(\(directory.path))")
            var txn: OpaquePointer?
            try lmdbCheck(mdb_txn_begin(e, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn), "mdb_txn_begin(open)")
            var handles: [MDB_dbi] = []
            for name in databaseNames {
                var handle: MDB_dbi = 0
                let rc = mdb_dbi_open(txn, name, readOnly ? 0 : UInt32(MDB_CREATE), &handle)
                if rc != MDB_SUCCESS {
                    mdb_txn_abort(txn)
                    throw LMDBFailure(code: rc, operation: "mdb_dbi_open(\(name ?? "main"))")
                }
                handles.append(handle)
            }
            try lmdbCheck(mdb_txn_commit(txn), "mdb_txn_commit(open)")
            dbis = handles
        } catch {
            mdb_env_close(e)
            throw error
        }
        env = e
        path = directory.path
        self.noSync = noSync
    }

    /// Waits for a background flush in flight (``requestFlush()``), then closes; later requests
    /// do nothing.
    func close() {
        flushState.withLock { $0.closed = true }
        flushQueue.sync {}
        mdb_env_close(env)
    }

    /// Where ``requestFlush()`` runs; `flushState` is (running, requested).
    private let flushQueue = DispatchQueue(label: "bench.raw-lmdb.flush", qos: .userInitiated)
    private let flushState = Mutex<(running: Bool, requested: Bool, closed: Bool)>((false, false, false))
    /// The first error of a background flush, thrown by the next ``sync()``.
    private let flushError = Mutex<LMDBFailure?>(nil)

    /// Asks for an `mdb_env_sync(force)` on a background queue (what Strata's writer does in
    /// relaxed mode): requests coalesce, one flush runs at a time, and every request is followed
    /// by a flush that started after it. Throws the error of an earlier background flush, so a
    /// run whose flushes failed reports no figure.
    func requestFlush() throws {
        if let e = flushError.withLock({ $0 }) { throw e }
        let start = flushState.withLock { s -> Bool in
            guard !s.closed else { return false }
            s.requested = true
            guard !s.running else { return false }
            s.running = true
            return true
        }
        guard start else { return }
        flushQueue.async { [self] in
            while flushState.withLock({ s -> Bool in
                if s.requested && !s.closed {
                    s.requested = false
                    return true
                }
                s.running = false
                return false
            }) {
                let rc = mdb_env_sync(env, 1)
                if rc != MDB_SUCCESS { flushError.withLock { $0 = $0 ?? LMDBFailure(code: rc, operation: "mdb_env_sync (background)") } }
            }
        }
    }

    /// One write transaction on the calling thread; committed when `body` returns, aborted when it throws.
    func write<R>(_ body: (OpaquePointer) throws -> R) throws -> R {
        var txn: OpaquePointer?
        try lmdbCheck(mdb_txn_begin(env, nil, 0, &txn), "mdb_txn_begin")
        guard let txn else { throw LMDBFailure(code: EINVAL, operation: "mdb_txn_begin") }
        let result: R
        do {
            result = try body(txn)
        } catch {
            mdb_txn_abort(txn)
            throw error
        }
        try lmdbCheck(mdb_txn_commit(txn), "mdb_txn_commit")
        return result
    }

    func put(_ txn: OpaquePointer, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
        try put(txn, dbi, key: key, value: value)
    }

    /// `mdb_put` into database `db` with `flags` (`MDB_NOOVERWRITE`, `MDB_APPEND`, …).
    func put(_ txn: OpaquePointer, _ db: MDB_dbi, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: Int32 = 0) throws {
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        try lmdbCheck(mdb_put(txn, db, &k, &v, UInt32(flags)), "mdb_put")
    }

    /// Calls `body` with the value at `key` (valid only inside `body`), or returns nil.
    func get<R>(_ txn: OpaquePointer, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        try get(txn, dbi, key: key, body)
    }

    /// ``get(_:key:_:)`` in database `db`.
    func get<R>(_ txn: OpaquePointer, _ db: MDB_dbi, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val()
        let rc = mdb_get(txn, db, &k, &v)
        if rc == MDB_NOTFOUND { return nil }
        try lmdbCheck(rc, "mdb_get")
        return try body(UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size))
    }

    func beginRead() throws -> OpaquePointer {
        var txn: OpaquePointer?
        try lmdbCheck(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin(read)")
        guard let txn else { throw LMDBFailure(code: EINVAL, operation: "mdb_txn_begin(read)") }
        return txn
    }

    func entryCount() throws -> Int {
        let txn = try beginRead()
        defer { mdb_txn_abort(txn) }
        var st = MDB_stat()
        try lmdbCheck(mdb_stat(txn, dbi, &st), "mdb_stat")
        return Int(st.ms_entries)
    }

    func sync() throws {
        flushQueue.sync {}
        if let e = flushError.withLock({ $0 }) { throw e }
        try lmdbCheck(mdb_env_sync(env, 1), "mdb_env_sync")
    }
}

extension RawLMDB {
    /// The last key of database `db` read as a big-endian u64 (its first 8 bytes), or 0 when empty.
    func lastKeyU64(_ txn: OpaquePointer, _ db: MDB_dbi) throws -> UInt64 {
        var cursor: OpaquePointer?
        try lmdbCheck(mdb_cursor_open(txn, db, &cursor), "mdb_cursor_open")
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val(), v = MDB_val()
        let rc = mdb_cursor_get(cursor, &k, &v, MDB_LAST)
        if rc == MDB_NOTFOUND { return 0 }
        try lmdbCheck(rc, "mdb_cursor_get(MDB_LAST)")
        guard k.mv_size >= 8, let p = k.mv_data else { throw LMDBFailure(code: EINVAL, operation: "last key shorter than 8 bytes") }
        return UInt64(bigEndian: p.loadUnaligned(as: UInt64.self))
    }
}
