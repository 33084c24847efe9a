import Foundation

extension LogEntry {
    /// Commit time.
    public var timestamp: Date { Date(timeIntervalSince1970: Double(timestampMs) / 1000) }

    /// Whether any change touches an object of `entity` (by tag).
    func touches(entityTag: UInt16) -> Bool {
        changes.contains { $0.objectIDs.contains { $0.entityTag == entityTag } }
    }
}

extension ReadView {
    /// The transaction id a `log` key holds: eight bytes, or the store is damaged
    /// (``StrataError/damagedStore(path:reason:)``, naming the database and the key's size).
    static func logKeyID(_ key: UnsafeRawBufferPointer, path: String) throws -> UInt64 {
        guard key.count == 8 else {
            throw StrataError.damagedStore(path: path, reason: """
                log: a key of \(key.count == 1 ? "1 byte" : "\(key.count) bytes"), not a transaction id's 8
                """)
        }
        var r = ByteReader(key)
        return try r.u64()
    }

    /// Visits log entries with ids in `range`, in order, decoding (and checksum-checking) each.
    func forEachLogEntry(_ range: ClosedRange<UInt64>, _ body: (LogEntry) throws -> Bool) throws {
        try txn.scan(env[.log], from: TransactionID(range.lowerBound).keyBytes) { key, value in
            let tx = try Self.logKeyID(key, path: env.path)
            guard tx <= range.upperBound else { return false }
            return try body(try LogEntryCodec.decode(value, transactionID: TransactionID(tx)))
        }
    }

    /// ``forEachLogEntry(_:_:)`` over ids that must all be in the log (after the horizon, up to
    /// the head): an id missing from it is damage, thrown as
    /// ``StrataError/corruptLogEntry(transaction:reason:)`` where the visit reaches it, also at
    /// the end of the range (unless `body` stopped first; the head is the log's last key, so that
    /// end is short only if the range was given past it). Without the check, `log` skipped the
    /// gap, and `show` and `history` took the entry for one that never was.
    func forEachContiguousLogEntry(_ range: ClosedRange<UInt64>, _ body: (LogEntry) throws -> Bool) throws {
        var expected: UInt64? = range.lowerBound
        var stopped = false
        try forEachLogEntry(range) { entry in
            let tx = entry.transactionID.rawValue
            if let expected, tx != expected { throw Self.missing(TransactionID(expected)) }
            expected = tx == range.upperBound ? nil : tx + 1
            if try !body(entry) {
                stopped = true
                return false
            }
            return true
        }
        if !stopped, let expected { throw Self.missing(TransactionID(expected)) }
    }

    static func missing(_ tx: TransactionID) -> StrataError {
        .corruptLogEntry(transaction: tx, reason: "missing from the log")
    }

    func logEntry(_ tx: TransactionID) throws -> LogEntry? {
        try txn.withValue(env[.log], key: tx.keyBytes) { try LogEntryCodec.decode($0, transactionID: tx) }
    }
}

extension Store {
    /// What transaction `tx` changed, with its author, time and metadata.
    /// - Throws: ``StrataError/noSuchTransaction(_:)`` for an id at or before the horizon or past
    ///   the head, or ``StrataError/corruptLogEntry(transaction:reason:)`` for an entry that fails
    ///   its checksum or is missing between them.
    public func changes(in tx: TransactionID) throws -> LogEntry {
        let entry = try read { view -> LogEntry? in
            if let entry = try view.logEntry(tx) { return entry }
            // After the horizon and up to the head, every transaction has its entry.
            if tx > (try view.horizon()), tx <= (try view.lastTransactionID()) { throw ReadView.missing(tx) }
            return nil
        }
        guard let entry else { throw StrataError.noSuchTransaction(tx) }
        return entry
    }

    /// Visits the transactions from `from` to `to` (inclusive, default: all), optionally only those
    /// by `author` or touching `entity`, in order, from one snapshot, until `body` returns false.
    /// The log is read a chunk of entries at a time, and `body` runs between the reads, never
    /// inside one: a slow `body` holds no lock of the store, so saves go on meanwhile, including
    /// one that grows the map. A ``close()`` from `body` closes the store, and the visit then
    /// throws ``StrataError/closed(path:)``. A damaged or missing entry ends the visit with
    /// ``StrataError/corruptLogEntry(transaction:reason:)`` once `body` has seen every entry
    /// before it.
    public func forEachTransaction(from: TransactionID = TransactionID(1), to: TransactionID? = nil,
                                   author: String? = nil, entity: String? = nil,
                                   _ body: (LogEntry) throws -> Bool) throws {
        let tag = try entity.map { name -> UInt16 in
            guard let e = schema.entity(named: name) else {
                throw StrataError.invalidQuery(entity: EchoedText.shown(name), reason: "no such entity")
            }
            return e.tag
        }
        let snapshot = try self.snapshot(label: "log")
        defer { snapshot.close() }
        let upper = min(to?.rawValue ?? .max, snapshot.transactionID.rawValue)
        var lower = max(from.rawValue, try snapshot.read { try $0.horizon() }.rawValue + 1)
        while lower <= upper {
            // One chunk: up to `logChunkEntries` entries read, or fewer once they hold
            // `logChunkChanges` changes (an entry is never split).
            var chunk: [LogEntry] = []
            var read = 0, changes = 0
            var next: UInt64?
            // An entry that cannot be read (damaged) ends the visit, once the entries before it
            // were visited: they are what an operator reads around the damage.
            var failure: (any Error)?
            do {
                try snapshot.read { view in
                    try view.forEachContiguousLogEntry(lower...upper) { entry in
                        read += 1
                        changes += entry.changes.count
                        if author == nil || entry.author == author, tag.map({ entry.touches(entityTag: $0) }) ?? true {
                            chunk.append(entry)
                        }
                        guard read < Self.logChunkEntries && changes < Self.logChunkChanges else {
                            next = entry.transactionID.rawValue < upper ? entry.transactionID.rawValue + 1 : nil
                            return false
                        }
                        return true
                    }
                }
            } catch {
                failure = error
            }
            for entry in chunk {
                let more = try body(entry)
                // A close() from `body` ends the visit here.
                if isClosed { throw StrataError.closed(path: path) }
                if !more { return }
            }
            if let failure { throw failure }
            guard let next else { return }
            lower = next
        }
    }

    /// Log entries ``forEachTransaction(from:to:author:entity:_:)`` reads per read of its snapshot at most.
    static let logChunkEntries = 256
    /// Changes of the entries one read of ``forEachTransaction(from:to:author:entity:_:)`` gathers
    /// before the chunk ends (a larger entry makes a chunk of its own).
    static let logChunkChanges = 50_000

    /// The transactions from `from` to `to`, filtered as in ``forEachTransaction(from:to:author:entity:_:)``,
    /// at most `limit` of them (none for 0).
    ///
    /// - Throws: ``StrataError/invalidQuery(entity:reason:)`` for a negative `limit` (it returned
    ///   one transaction, as 0 did).
    public func transactions(from: TransactionID = TransactionID(1), to: TransactionID? = nil, author: String? = nil,
                             entity: String? = nil, limit: Int = 10_000) throws -> [LogEntry] {
        guard limit >= 0 else {
            throw StrataError.invalidQuery(entity: "the log", reason: "negative limit \(limit)")
        }
        guard limit > 0 else { return [] }
        var out: [LogEntry] = []
        try forEachTransaction(from: from, to: to, author: author, entity: entity) { entry in
            out.append(entry)
            return out.count < limit
        }
        return out
    }

    /// Every transaction that touched `id` (its attributes, its existence or one of its edges),
    /// oldest first, with the values before and after each change. On a compacted store the
    /// first entry may be the object's squashed state at the horizon (author "compaction",
    /// metadata `squashed: true`): what happened before it is gone.
    ///
    /// - Complexity: O(log size): the log is scanned once.
    public func history(of id: ObjectID) throws -> [HistoryEntry] {
        // One snapshot for the horizon, the state at it and the log, so a compaction running
        // meanwhile cannot make them disagree.
        let snapshot = try self.snapshot(label: "history")
        defer { snapshot.close() }
        return try snapshot.read { view in
            var out: [HistoryEntry] = []
            let horizon = try view.horizon()
            if horizon > .zero {
                let overlay = try StateBackward.undoOverlay(view, back: horizon, from: snapshot.transactionID)
                if let record = try MergedSource(base: view, overlays: [overlay]).record(id) {
                    out.append(HistoryEntry(transactionID: horizon, timestamp: Date(timeIntervalSince1970: 0),
                                            author: "compaction",
                                            metadata: ["squashed": "true", "version": record.version.description],
                                            changes: [.insert(id: id, values: record.values)]))
                }
            }
            guard snapshot.transactionID > horizon else { return out }
            try view.forEachContiguousLogEntry(horizon.next.rawValue...snapshot.transactionID.rawValue) { entry in
                let mine = entry.changes.filter { $0.objectIDs.contains(id) }
                if !mine.isEmpty {
                    out.append(HistoryEntry(transactionID: entry.transactionID, timestamp: entry.timestamp,
                                            author: entry.author, metadata: entry.metadata, changes: mine))
                }
                return true
            }
            return out
        }
    }
}
