/// Reads a database in key order a chunk at a time (bounded memory, no cursor kept across chunks).
/// Over a pinned snapshot (``ReadSource/pinned(_:)``) each chunk is its own read, so the map lock
/// is held for one chunk at a time.
package struct ChunkedScan {
    package let source: ReadSource
    package let db: LMDBDatabase
    package let prefix: [UInt8]?
    private var buffer: [(key: [UInt8], value: [UInt8])] = []
    private var index = 0
    private var lastKey: [UInt8]?
    private var done = false

    private let start: [UInt8]?

    /// Entries per chunk.
    package static let chunkEntries = 4096

    /// Scans `db` from the first key `>= start` (or the first key), keys beginning with `prefix`.
    package init(source: ReadSource, db: LMDBDatabase, prefix: [UInt8]?, start: [UInt8]? = nil) {
        self.source = source
        self.db = db
        self.prefix = prefix
        self.start = start
    }

    /// A scan inside a transaction the caller holds (``ReadSource/held(_:)``).
    package init(txn: LMDBTransaction, db: LMDBDatabase, prefix: [UInt8]?, start: [UInt8]? = nil) {
        self.init(source: .held(txn), db: db, prefix: prefix, start: start)
    }

    package mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
        if index == buffer.count {
            if done { return nil }
            try refill()
            if buffer.isEmpty {
                done = true
                return nil
            }
        }
        defer { index += 1 }
        return buffer[index]
    }

    private mutating func refill() throws {
        let after = lastKey
        let (db, prefix, from) = (self.db, self.prefix, after ?? start ?? prefix)
        let chunk = try source.read { txn -> [(key: [UInt8], value: [UInt8])] in
            var chunk: [(key: [UInt8], value: [UInt8])] = []
            // A new cursor, positioned by key: nothing of the previous chunk's read is reused.
            try txn.scan(db, from: from, prefix: prefix) { k, v in
                // Only keys past the last one: a corrupt branch page can route the seek to an earlier
                // leaf, and re-reading from there would never end.
                if let after, KeyOrder.compare(k, after) <= 0 { return true }
                chunk.append((Array(k), Array(v)))
                return chunk.count < Self.chunkEntries
            }
            return chunk
        }
        buffer = chunk
        index = 0
        lastKey = chunk.last?.key ?? lastKey
    }
}
