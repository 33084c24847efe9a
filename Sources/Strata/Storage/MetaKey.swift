/// Names in the `meta` database.
enum MetaKey {
    /// Store format (u32). Bumped when the layout changes incompatibly.
    static let format = Array("format".utf8)
    /// Canonical JSON of the schema the store holds.
    static let schema = Array("schema".utf8)
    /// CRC-32C (u32) of ``schema``'s bytes: the stored schema names every entity, attribute and
    /// relationship the store's data is read with, and no other checksum covers it. Written with
    /// the schema; a store made before it has none (its schema is then checked against ``model``
    /// and ``version`` only).
    static let schemaChecksum = Array("schema-crc32c".utf8)
    /// Model name (UTF-8) and version (u32), readable without parsing the schema.
    static let model = Array("model".utf8)
    static let version = Array("version".utf8)
    /// Creation time, ms since 1970 (u64).
    static let created = Array("created".utf8)
    /// Compaction horizon (u64): the log holds only the transactions after it. The state at the
    /// horizon is not stored again: it is the current state with the later transactions undone.
    static let horizon = Array("horizon".utf8)
    /// The cluster this store is a replica of (UTF-8): present, every save goes through the
    /// cluster's shared log. Absent in a store of one machine.
    static let cluster = Array("cluster".utf8)
    /// Written with ``cluster`` by the making of a cluster from this store (UTF-8: the database
    /// it is made in, host, port and name), and removed once the cluster is made: a store marked
    /// with it may be made into that cluster again in that database (the making stopped before
    /// PostgreSQL committed it); a replica without it belongs to a cluster that was made, and is
    /// never made into another.
    static let clusterPending = Array("cluster-pending".utf8)
    /// This replica's name in its cluster (UTF-8), when one was given when the cluster was made
    /// from it; absent: `host:store path`.
    static let replicaName = Array("replica-name".utf8)
    /// Live objects of an entity (u64): "count/" + entity tag, in ``DatabaseName/counts``.
    static func count(_ tag: UInt16) -> [UInt8] { countPrefix + Layout.u16(tag) }
    static let countPrefix = Array("count/".utf8)
    /// A stored count value: eight bytes, at most ``maxCount``; anything else is
    /// ``StrataError/corruptRecord(id:reason:)``, never a trap or a count of 0.
    static func countValue(_ b: UnsafeRawBufferPointer, _ tag: UInt16) throws -> Int {
        guard b.count == 8 else {
            throw StrataError.corruptRecord(id: ObjectID(high: UInt64(tag) << 48, low: 0),
                                            reason: "the object count of entity tag \(tag) is \(b.count) bytes, not 8")
        }
        var r = ByteReader(b)
        let v = try r.u64()
        guard v <= UInt64(maxCount) else {
            throw StrataError.corruptRecord(id: ObjectID(high: UInt64(tag) << 48, low: 0),
                                            reason: "the object count of entity tag \(tag) is \(v), more than a store can hold")
        }
        return Int(v)
    }
    /// The largest object count read as true: 2^44 (each object takes at least 32 bytes of
    /// B-tree, so more would not fit a map of 512 TiB). A damaged count above it is refused: a
    /// save's count update, and the sum over 65,535 entities, then cannot overflow.
    static let maxCount = 1 << 44
    /// Runs `body` with the ``count(_:)`` key of `tag` in a stack buffer (the save path's
    /// count update allocates nothing for it).
    @inline(__always)
    static func withCountKey<R>(_ tag: UInt16, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        // "count/" in ASCII, then the tag big-endian: the bytes of `count(tag)`.
        var key: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0x63, 0x6F, 0x75, 0x6E, 0x74, 0x2F, UInt8(tag >> 8), UInt8(tag & 0xFF))
        return try withUnsafeBytes(of: &key) { try body($0) }
    }
    /// Whether `key` is a ``count(_:)`` key.
    static func isCount(_ key: [UInt8]) -> Bool { key.count == countPrefix.count + 2 && key.starts(with: countPrefix) }
    /// The value of a ``count(_:)`` entry (u64; a count is never negative).
    static func countValue(_ objects: Int) -> [UInt8] {
        precondition(objects >= 0, "negative object count \(objects)")
        var w = ByteWriter(capacity: 8)
        w.u64(UInt64(objects))
        return w.bytes
    }
    /// The format new stores and generations are written in. Format 3 may hold compressed log
    /// entries (``LogEntryCodec``), which a Strata that reads only formats 1 and 2 must not meet;
    /// format 2 keeps the counts in LMDB's main database (``DatabaseName/counts``), as format 3
    /// does; format 1 kept them in `meta`. All three are read and written; compaction, migration,
    /// a bulk load and a replica snapshot write their new generation in this format.
    static let storeFormat: UInt32 = 3
    /// The formats this Strata opens.
    static let readableFormats: ClosedRange<UInt32> = 1...3
    /// The one format that keeps the counts in `meta`.
    static let countsInMetaFormat: UInt32 = 1
    /// The first format whose log may hold compressed entries: a store of an earlier one has its
    /// entries written plain (``logTakesCompressedEntries(_:meta:)``).
    static let compressedLogFormat: UInt32 = 3

    /// Whether the store `txn` reads may have compressed log entries written into it (format 3
    /// and later; an environment without metadata yet is written in the current format).
    static func logTakesCompressedEntries(_ txn: LMDBTransaction, meta: LMDBDatabase) throws -> Bool {
        (try storedFormat(txn, meta: meta) ?? storeFormat) >= compressedLogFormat
    }
    /// The stored `format` (nil in an environment without metadata yet). A value that is not a
    /// u32 throws ``DecodingError``.
    static func storedFormat(_ txn: LMDBTransaction, meta: LMDBDatabase) throws -> UInt32? {
        try txn.withValue(meta, key: format) { b -> UInt32 in
            guard b.count == 4 else {
                throw DecodingError(offset: 0, reason: "the store format is \(b.count) bytes, not 4")
            }
            var r = ByteReader(b)
            return try r.u32()
        }
    }
    /// The stored value of `format`.
    static func formatValue(_ f: UInt32) -> [UInt8] {
        var w = ByteWriter(capacity: 4)
        w.u32(f)
        return w.bytes
    }
}
