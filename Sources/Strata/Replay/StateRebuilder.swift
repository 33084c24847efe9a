import CLMDB

/// Rebuilds materialized state from the log into another environment: the state at the
/// compaction horizon first, then every log entry after it. `verify` compares the result with the
/// store; compaction uses `replay` to catch up; migration uses both in the old schema.
enum StateRebuilder {
    /// Loads the state at the compaction horizon into `target`: the live state of `view` with
    /// the transactions after the horizon undone (the log keeps previous values for that). Records
    /// keep their versions; indexes, uniques and counts are derived as the writer derives them.
    /// For a store never compacted (horizon 0) the base is empty.
    ///
    /// After a compaction, verify therefore checks the log after the horizon against the state,
    /// every record's checksum, and indexes, uniques and counts against the records. Links at the
    /// horizon are taken from the live state, so an edge that is wrong there and untouched since
    /// is not detected; what happened before the horizon is gone and cannot be checked.
    static func loadBase(from view: ReadView, horizon: TransactionID, head: TransactionID, into target: LMDBEnvironment, schema: Schema) throws -> Int {
        guard horizon > .zero else { return 0 }
        let overlay = try AsOfContext.undoOverlay(view, back: horizon, from: head)
        let past = MergedSource(base: view, overlays: [overlay])
        var objects = 0
        for e in schema.entities {
            var chunk: [Record] = []
            func flush() throws {
                guard !chunk.isEmpty else { return }
                try target.writeGrowing { txn in
                    var applier = StateApplier(txn: txn, env: target, schema: schema, transactionID: .zero)
                    for r in chunk {
                        applier.transactionID = r.version
                        try applier.apply(.insert(id: r.id, values: r.values))
                    }
                    try applier.flushCounts()
                }
                objects += chunk.count
                chunk.removeAll(keepingCapacity: true)
            }
            var failure: Error?
            try past.candidates(e, .all) { r in
                chunk.append(r)
                if chunk.count >= 8192 {
                    do { try flush() } catch { failure = error; return false }
                }
                return true
            }
            if let failure { throw failure }
            try flush()
        }
        // Links as of the horizon: the live edges minus those added since, plus those removed since.
        var removed = Set<[UInt8]>(), added: [[UInt8]] = []
        for (k, targets) in overlay.removed { for t in targets { removed.insert(Layout.linkKey(k.tag, k.from, t)) } }
        for (k, targets) in overlay.added { for t in targets { added.append(Layout.linkKey(k.tag, k.from, t)) } }
        _ = try target.copy(.links, from: view.txn, sourceEnv: view.env, into: .links) { k, v in
            removed.contains(k) ? nil : (k, v)
        }
        try target.writeGrowing { txn in for k in added { try txn.put(target[.links], key: k, value: []) } }
        return objects
    }

    /// Applies the log entries after `horizon` up to `head` from `view` to `target`, checking
    /// checksums and that ids are contiguous. Stops at the first problem (reported through
    /// `problem`). Returns the transactions and changes applied.
    static func replay(from view: ReadView, after horizon: UInt64, upTo head: UInt64, into target: LMDBEnvironment, schema: Schema,
                       problem: (String) -> Void, progress: ((Int) -> Void)? = nil) throws -> (transactions: Int, changes: Int) {
        var next = horizon + 1
        var changes = 0
        var batch: [LogEntry] = []
        var batchChanges = 0
        var failed = false
        func flush() throws {
            guard !batch.isEmpty else { return }
            try target.writeGrowing { txn in
                for entry in batch {
                    var applier = StateApplier(txn: txn, env: target, schema: schema, transactionID: entry.transactionID)
                    for c in entry.changes { try applier.apply(c) }
                    try applier.flushCounts()
                }
            }
            batch.removeAll(keepingCapacity: true)
            batchChanges = 0
            progress?(Int(next - 1 - horizon))
        }
        guard head > horizon else { return (0, 0) }
        try view.txn.scan(view.env[.log], from: TransactionID(next).keyBytes) { key, value in
            var r = ByteReader(key)
            let tx = try r.u64()
            guard tx <= head else { return false }
            guard tx == next else {
                problem(tx > next ? "log: transaction\(tx - next > 1 ? "s \(next)…\(tx - 1) are" : " \(next) is") missing" : "log: key \(tx) out of order")
                failed = true
                return false
            }
            do {
                let entry = try LogEntryCodec.decode(value, transactionID: TransactionID(tx))
                batch.append(entry)
                batchChanges += entry.changes.count
                changes += entry.changes.count
            } catch {
                problem("log: \(error)")
                failed = true
                return false
            }
            next += 1
            if batchChanges >= 50_000 { try flush() }
            return true
        }
        if !failed && next <= head {
            problem("log: transaction\(head > next ? "s \(next)…\(head) are" : " \(next) is") missing")
            failed = true
        }
        if !failed { try flush() }
        return (Int(next - 1 - horizon), changes)
    }

    /// A scratch environment, removed when closed: in the store directory `storeDirectory` when
    /// given and writable (named `.scratch-…`, so a process killed meanwhile leaves nothing the
    /// next open of the store does not remove), else in the temporary directory.
    static func scratch(sizeHint: Int, storeDirectory: String? = nil) throws -> LMDBEnvironment {
        let parent: URL
        if let storeDirectory, access(storeDirectory, W_OK) == 0 {
            parent = URL(fileURLWithPath: storeDirectory)
        } else {
            parent = FileManager.default.temporaryDirectory
        }
        let path = parent.appendingPathComponent(StoreDirectory.scratchPrefix + UUID().uuidString).path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let env = try LMDBEnvironment(path: path, options: LMDBOptions(
            mapSizeBytes: max(64 << 20, sizeHint), maxMapSizeBytes: 1 << 42, maxReaders: 8, readOnly: false, noSync: true, noLock: false, writeMap: true))
        env.onClose { try? FileManager.default.removeItem(atPath: path) }
        return env
    }
}

import Foundation
