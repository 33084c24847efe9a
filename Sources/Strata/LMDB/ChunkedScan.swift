/// Reads a database in key order a chunk at a time (bounded memory, no cursor kept across chunks).
struct ChunkedScan {
    let txn: LMDBTransaction
    let db: LMDBDatabase
    let prefix: [UInt8]?
    private var buffer: [(key: [UInt8], value: [UInt8])] = []
    private var index = 0
    private var lastKey: [UInt8]?
    private var done = false

    private let start: [UInt8]?

    /// Scans `db` from the first key `>= start` (or the first key), keys beginning with `prefix`.
    init(txn: LMDBTransaction, db: LMDBDatabase, prefix: [UInt8]?, start: [UInt8]? = nil) {
        self.txn = txn
        self.db = db
        self.prefix = prefix
        self.start = start
    }

    mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
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
        var chunk: [(key: [UInt8], value: [UInt8])] = []
        let after = lastKey
        try txn.scan(db, from: after ?? start ?? prefix, prefix: prefix) { k, v in
            // Only keys past the last one: a corrupt branch page can route the seek to an earlier
            // leaf, and re-reading from there would never end.
            if let after, Value.compareBytes(k, after) <= 0 { return true }
            chunk.append((Array(k), Array(v)))
            return chunk.count < 4096
        }
        buffer = chunk
        index = 0
        lastKey = chunk.last?.key ?? lastKey
    }
}


extension LMDBEnvironment {
    /// Runs a write transaction, growing the map and redoing it on `MDB_MAP_FULL` (for bulk
    /// builds of scratch environments and new generations; `body` must be repeatable).
    func writeGrowing(_ body: (LMDBTransaction) throws -> Void) throws {
        while true {
            do {
                try write(body)
                return
            } catch let e as LMDBError where e.isMapFull {
                guard try growMap() else { throw e }
            }
        }
    }

    /// Copies a database from `source` in key order, `batch` entries per write transaction,
    /// appending (the destination must be empty from the first key on). `transform` may rewrite
    /// or drop each entry.
    func copy(_ name: DatabaseName, from source: LMDBTransaction, sourceEnv: LMDBEnvironment, into destination: DatabaseName? = nil,
              prefix: [UInt8]? = nil, start: [UInt8]? = nil, until stop: [UInt8]? = nil, batch: Int = 8192,
              transform: (([UInt8], [UInt8]) -> ([UInt8], [UInt8])?)? = nil) throws -> Int {
        if transform == nil && prefix == nil {
            return try copyDirect(name, from: source, sourceEnv: sourceEnv, into: destination, start: start, until: stop).entries
        }
        var scan = ChunkedScan(txn: source, db: sourceEnv[name], prefix: prefix, start: start)
        let target = self[destination ?? name]
        var pending: [([UInt8], [UInt8])] = []
        var copied = 0
        func flush() throws {
            guard !pending.isEmpty else { return }
            try writeGrowing { txn in
                for (k, v) in pending { try txn.put(target, key: k, value: v, flags: UInt32(MDB_APPEND)) }
            }
            copied += pending.count
            pending.removeAll(keepingCapacity: true)
        }
        while let entry = try scan.next() {
            if let stop, Value.compareBytes(entry.key, stop) > 0 { break }
            if let transform {
                if let t = transform(entry.key, entry.value) { pending.append(t) }
            } else {
                pending.append((entry.key, entry.value))
            }
            if pending.count >= batch { try flush() }
        }
        try flush()
        return copied
    }

    /// ``copy(_:from:sourceEnv:into:prefix:start:until:batch:transform:)`` without a transform
    /// (returns the entries and the key and value bytes copied):
    /// straight from the source's map through an appending cursor (no copies into Swift arrays),
    /// up to `batchBytes` per write transaction. After each, writeback of what it wrote starts
    /// (``LMDBEnvironment/startWriteback()``, dropping the pages already written for a new
    /// generation), so the disk works while the next is built. 4 MiB
    /// measured no slower than larger batches on a 1M-object compaction and keeps LMDB's dirty
    /// page buffers small. Each transaction resumes after the last key the
    /// previous one wrote (keys not past it are skipped, so a corrupt branch page routing the
    /// seek backwards cannot loop); a transaction redone after map growth starts over from there.
    func copyDirect(_ name: DatabaseName, from source: LMDBTransaction, sourceEnv: LMDBEnvironment,
                            into destination: DatabaseName?, start: [UInt8]?, until stop: [UInt8]?,
                            batchBytes: Int = 4 << 20) throws -> (entries: Int, bytes: Int) {
        let sourceDB = sourceEnv[name]
        let target = self[destination ?? name]
        var after: [UInt8]?
        var copied = 0, copiedBytes = 0
        var finished = false
        while !finished {
            var count = 0, batch = 0
            var last: [UInt8]?
            try writeGrowing { txn in
                count = 0
                batch = 0
                last = nil
                finished = true
                // Only keys past `after`; once one is, the cursor's order keeps the rest past it.
                var pastAfter = after == nil
                try txn.withAppender(target) { appender in
                    try source.scan(sourceDB, from: after ?? start) { key, value in
                        if !pastAfter, let after {
                            if Layout.compare(key, after) <= 0 { return true }
                            pastAfter = true
                        }
                        if let stop, Layout.compare(key, stop) > 0 { return false }
                        try appender.append(key: key, value: value)
                        count += 1
                        batch += key.count + value.count
                        if batch >= batchBytes {
                            last = Array(key)
                            finished = false
                            return false
                        }
                        return true
                    }
                }
            }
            copied += count
            copiedBytes += batch
            after = last
            if options.noSync { startWriteback() }
        }
        return (copied, copiedBytes)
    }
}

import CLMDB
