import Glibc
import CLMDB

/// A borrowed view of an open LMDB transaction (read or write).
///
/// It is only ever handed to a closure (`LMDBEnvironment.write`, a snapshot's `read`), and must
/// not be stored: the pointer is invalid once the closure returns. Values it returns are copied
/// or decoded inside the closure; no pointer into the map escapes.
public struct LMDBTransaction {
    package let handle: OpaquePointer
    package let isWrite: Bool
    /// The environment the transaction belongs to (nil while it opens its databases). Unowned and
    /// unretained: a transaction only lives inside a closure of its environment (or of a snapshot
    /// that keeps it), so the environment outlives it; copying a transaction copies one word.
    package unowned(unsafe) let environment: LMDBEnvironment?

    /// A view of `handle`, a transaction of `environment` (``LMDBEnvironment/transaction(_:isWrite:)``).
    package init(handle: OpaquePointer, isWrite: Bool, environment: LMDBEnvironment?) {
        self.handle = handle
        self.isWrite = isWrite
        self.environment = environment
    }

    /// Calls `body` with the bytes stored at `key`, or returns nil when the key is absent.
    /// The buffer is valid only inside `body`. Inlined into callers in other modules (with the
    /// lookup itself, ``value(_:key:)``, a plain call), so no call goes through an unspecialized
    /// generic.
    @inlinable @inline(__always)
    public func withValue<R>(_ db: LMDBDatabase, key: [UInt8],
                             _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        try key.withUnsafeBytes { try withValue(db, key: $0, body) }
    }

    /// ``withValue(_:key:_:)`` for a key that lives elsewhere (an id's bytes on the stack).
    @inlinable @inline(__always)
    public func withValue<R>(_ db: LMDBDatabase, key: UnsafeRawBufferPointer,
                             _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        guard let bytes = try value(db, key: key) else { return nil }
        return try body(bytes)
    }

    /// The bytes stored at `key`, valid until the transaction ends or writes; nil when absent.
    @usableFromInline
    package func value(_ db: LMDBDatabase, key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer? {
        // Keys looked up are made from what the store holds (a log entry's ids, a record's values):
        // a size LMDB cannot hold comes from a damaged entry, reported as such, not a trap.
        guard key.count > 0 && key.count <= LMDBLimits.maxKeyBytes else {
            let reason = "a lookup made from stored data has a \(key.count)-byte key, outside 1…\(LMDBLimits.maxKeyBytes)"
            // Reported as the owner's error; while the environment opens (no owner yet), as LMDB would.
            throw environment?.options.policy.corruptKey(database: db.name, reason: reason)
                ?? LMDBError(code: MDB_BAD_VALSIZE, operation: "mdb_get(\(db.name)): \(reason)")
        }
        var data = MDB_val()
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        let rc = mdb_get(handle, db.dbi, &k, &data)
        if rc == MDB_NOTFOUND { return nil }
        try lmdbCheck(rc, "mdb_get(\(db.name))")
        return UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)
    }

    /// Whether `key` is present.
    package func contains(_ db: LMDBDatabase, key: [UInt8]) throws -> Bool {
        try withValue(db, key: key) { _ in true } ?? false
    }

    /// How a put treats a key that is already there.
    package enum PutMode: Sendable {
        /// Replaces the value.
        case replace
        /// Leaves the stored value and reports ``PutResult/keyExists`` (`MDB_NOOVERWRITE`: one
        /// B-tree search for the check and the put).
        case noOverwrite
        /// The key sorts after every key of the database (`MDB_APPEND`: no search); a key that
        /// does not throws an ``LMDBError`` with `MDB_KEYEXIST`.
        case append

        package var flags: UInt32 {
            switch self {
            case .replace: 0
            case .noOverwrite: UInt32(MDB_NOOVERWRITE)
            case .append: UInt32(MDB_APPEND)
            }
        }
    }

    /// What a put did.
    package enum PutResult: Sendable, Equatable {
        case stored
        /// The key was there already (``PutMode/noOverwrite``); nothing was written.
        case keyExists
    }

    /// `mdb_put` of bytes that live elsewhere (another environment's map, during a copy).
    @discardableResult
    package func put(_ db: LMDBDatabase, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer,
                     mode: PutMode = .replace) throws -> PutResult {
        precondition(isWrite, "put on a read-only transaction")
        precondition(key.count > 0 && key.count <= LMDBLimits.maxKeyBytes,
                     "key size \(key.count) outside 1...\(LMDBLimits.maxKeyBytes)")
        try Self.checkValueSize(value.count, "mdb_put(\(db.name))")
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        return try Self.result(mdb_put(handle, db.dbi, &k, &v, mode.flags), mode, db)
    }

    /// Refuses a value longer than ``LMDBLimits/maxDataBytes`` as liblmdb would
    /// (`MDB_BAD_VALSIZE`), saying how long it is and what the limit is (liblmdb's own refusal
    /// names neither).
    static func checkValueSize(_ count: Int, _ operation: @autoclosure () -> String) throws {
        guard count > LMDBLimits.maxDataBytes else { return }
        throw LMDBError(code: MDB_BAD_VALSIZE, operation: """
            \(operation()) of a \(count)-byte value (LMDB holds at most \(LMDBLimits.maxDataBytes) bytes in one \
            value)
            """)
    }

    private static func result(_ rc: Int32, _ mode: PutMode, _ db: LMDBDatabase) throws -> PutResult {
        if rc == MDB_KEYEXIST, mode == .noOverwrite { return .keyExists }
        try lmdbCheck(rc, "mdb_put(\(db.name))")
        return .stored
    }

    /// Runs `body` with an appender: a write cursor on `db` that puts keys in ascending order
    /// (`MDB_APPEND`). Unlike `mdb_put`, which opens a cursor and searches from the root for
    /// every key, the cursor stays on the last leaf, so a bulk load costs no tree descent per
    /// key. A key not after the last one is `MDB_KEYEXIST`.
    package func withAppender<R>(_ db: LMDBDatabase, _ body: (Appender) throws -> R) throws -> R {
        precondition(isWrite, "append on a read-only transaction")
        return try withWriteCursor(db) { try body(Appender(cursor: $0, db: db)) }
    }

    /// Runs `body` with a cursor on `db` of this write transaction, closed when it returns.
    private func withWriteCursor<R>(_ db: LMDBDatabase, _ body: (OpaquePointer) throws -> R) throws -> R {
        var cursor: OpaquePointer?
        try lmdbCheck(mdb_cursor_open(handle, db.dbi, &cursor), "mdb_cursor_open(\(db.name))")
        guard let cursor else { throw LMDBError(code: EINVAL, operation: "mdb_cursor_open(\(db.name))") }
        defer { mdb_cursor_close(cursor) }
        return try body(cursor)
    }

    /// See ``withAppender(_:_:)``; valid only inside its body.
    package struct Appender {
        fileprivate let cursor: OpaquePointer
        package let db: LMDBDatabase

        /// Appends `key` (after every key in the database) with `value`.
        package func append(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
            // The keys come from another store (a compaction's copy): a size LMDB cannot hold is
            // a damaged source, reported as LMDB would (MDB_BAD_VALSIZE), not a trap.
            guard key.count > 0 && key.count <= LMDBLimits.maxKeyBytes else {
                throw LMDBError(code: MDB_BAD_VALSIZE,
                                operation: "mdb_cursor_put(\(db.name), MDB_APPEND) of a \(key.count)-byte key")
            }
            try LMDBTransaction.checkValueSize(value.count, "mdb_cursor_put(\(db.name), MDB_APPEND)")
            var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
            var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
            try lmdbCheck(mdb_cursor_put(cursor, &k, &v, UInt32(MDB_APPEND)), "mdb_cursor_put(\(db.name), MDB_APPEND)")
        }
    }

    /// Runs `body` with a write cursor on `db` for keys given in ascending order. `mdb_put` and
    /// `mdb_del` open a cursor and search from the root for every key; this cursor stays on the
    /// leaf it last wrote, and LMDB looks there first (it compares the key with the leaf's first
    /// and last keys), so keys in order that fall on one leaf cost no descent. Keys in any other
    /// order are still written correctly, each with its own search.
    package func withSortedWriter<R>(_ db: LMDBDatabase, _ body: (SortedWriter) throws -> R) throws -> R {
        precondition(isWrite, "sorted writes on a read-only transaction")
        return try withWriteCursor(db) { try body(SortedWriter(cursor: $0, db: db)) }
    }

    /// See ``withSortedWriter(_:_:)``; valid only inside its body.
    package struct SortedWriter {
        fileprivate let cursor: OpaquePointer
        package let db: LMDBDatabase

        /// Stores `value` at `key` (replacing what is there), as `mdb_put` without flags.
        package func put(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
            precondition(key.count > 0 && key.count <= LMDBLimits.maxKeyBytes,
                         "key size \(key.count) outside 1...\(LMDBLimits.maxKeyBytes)")
            try LMDBTransaction.checkValueSize(value.count, "mdb_cursor_put(\(db.name))")
            var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
            var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
            try lmdbCheck(mdb_cursor_put(cursor, &k, &v, 0), "mdb_cursor_put(\(db.name))")
        }

        /// Deletes `key`; false when it was not there.
        @discardableResult
        package func delete(key: UnsafeRawBufferPointer) throws -> Bool {
            precondition(key.count > 0 && key.count <= LMDBLimits.maxKeyBytes,
                         "key size \(key.count) outside 1...\(LMDBLimits.maxKeyBytes)")
            var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
            var v = MDB_val()
            let rc = mdb_cursor_get(cursor, &k, &v, MDB_SET)
            if rc == MDB_NOTFOUND { return false }
            try lmdbCheck(rc, "mdb_cursor_get(\(db.name), MDB_SET)")
            try lmdbCheck(mdb_cursor_del(cursor, 0), "mdb_cursor_del(\(db.name))")
            return true
        }
    }

    /// Deletes every entry of `db` (`mdb_drop` without deleting the database itself).
    package func empty(_ db: LMDBDatabase) throws {
        precondition(isWrite, "empty on a read-only transaction")
        // LMDB's main (unnamed) database also holds the named
        // databases' records: emptying it would lose them.
        precondition(db.name != "main", "empty on LMDB's main database")
        try lmdbCheck(mdb_drop(handle, db.dbi, 0), "mdb_drop(\(db.name))")
    }

    /// Stores `value` at `key` as `mode` says.
    @discardableResult
    package func put(_ db: LMDBDatabase, key: [UInt8], value: [UInt8], mode: PutMode = .replace) throws -> PutResult {
        try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in try put(db, key: k, value: v, mode: mode) } }
    }

    /// Deletes `key`; returns false when it was not there.
    @discardableResult
    package func delete(_ db: LMDBDatabase, key: [UInt8]) throws -> Bool {
        try key.withUnsafeBytes { try delete(db, key: $0) }
    }

    /// ``delete(_:key:)`` of a key that lives in a buffer; false when it was not there.
    package func delete(_ db: LMDBDatabase, key: UnsafeRawBufferPointer) throws -> Bool {
        precondition(isWrite, "delete on a read-only transaction")
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        let rc = mdb_del(handle, db.dbi, &k, nil)
        if rc == MDB_NOTFOUND { return false }
        try lmdbCheck(rc, "mdb_del(\(db.name))")
        return true
    }

    /// Visits keys in ascending order starting at the first key `>= start` (or the first key),
    /// while they begin with `prefix` (if given) and `body` returns true.
    package func scan(
        _ db: LMDBDatabase, from start: [UInt8]? = nil, prefix: [UInt8]? = nil,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        var cursor: OpaquePointer?
        try lmdbCheck(mdb_cursor_open(handle, db.dbi, &cursor), "mdb_cursor_open(\(db.name))")
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val()
        var v = MDB_val()
        let seek = start ?? prefix
        var rc: Int32
        if let seek, !seek.isEmpty {
            rc = seek.withUnsafeBytes { sb in
                k = MDB_val(mv_size: sb.count, mv_data: UnsafeMutableRawPointer(mutating: sb.baseAddress))
                return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
            }
        } else {
            rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        }
        while rc == MDB_SUCCESS {
            let key = UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size)
            if let prefix, !key.starts(with: prefix) { return }
            let value = UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size)
            if try !body(key, value) { return }
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try lmdbCheck(rc, "mdb_cursor_get(\(db.name))") }
    }

    /// The last key and value of `db` (within `prefix` if given), passed to `body`.
    package func last<R>(_ db: LMDBDatabase,
                         _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> R) throws -> R? {
        var cursor: OpaquePointer?
        try lmdbCheck(mdb_cursor_open(handle, db.dbi, &cursor), "mdb_cursor_open(\(db.name))")
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val()
        var v = MDB_val()
        let rc = mdb_cursor_get(cursor, &k, &v, MDB_LAST)
        if rc == MDB_NOTFOUND { return nil }
        try lmdbCheck(rc, "mdb_cursor_get(\(db.name), MDB_LAST)")
        return try body(UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size),
                        UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size))
    }

    /// Bytes of the pages `db` uses (branch, leaf and overflow pages).
    package func pageBytes(_ db: LMDBDatabase) throws -> Int {
        var stat = MDB_stat()
        try lmdbCheck(mdb_stat(handle, db.dbi, &stat), "mdb_stat(\(db.name))")
        return (stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages) * Int(stat.ms_psize)
    }

    /// Number of entries in `db`.
    package func entryCount(_ db: LMDBDatabase) throws -> Int {
        var stat = MDB_stat()
        try lmdbCheck(mdb_stat(handle, db.dbi, &stat), "mdb_stat(\(db.name))")
        return stat.ms_entries
    }
}

extension UnsafeRawBufferPointer {
    @inline(__always)
    package func starts(with prefix: [UInt8]) -> Bool {
        guard count >= prefix.count else { return false }
        for i in 0..<prefix.count where self[i] != prefix[i] { return false }
        return true
    }
}
