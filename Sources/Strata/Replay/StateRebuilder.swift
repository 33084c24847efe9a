
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
    static func loadBase(from view: ReadView, horizon: TransactionID, head: TransactionID, into target: LMDBEnvironment,
                         schema: Schema) throws -> Int {
        guard horizon > .zero else { return 0 }
        let overlay = try StateBackward.undoOverlay(view, back: horizon, from: head)
        let past = MergedSource(base: view, overlays: [overlay])
        var objects = 0
        for e in schema.entities {
            var chunk: [Record] = []
            func flush() throws {
                guard !chunk.isEmpty else { return }
                try StateApplier.insertAll(chunk, into: target, schema: schema)
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
        // Undoing the log leaves a fact for every edge that changed (a replaced key hides no edge
        // without one: every edge the writer replaced or deleted was unlinked in the log).
        var removed = Set<[UInt8]>(), added: [[UInt8]] = []
        for (k, facts) in overlay.edges {
            for (t, present) in facts {
                if present {
                    added.append(Layout.linkKey(k.tag, k.from, t))
                } else {
                    removed.insert(Layout.linkKey(k.tag, k.from, t))
                }
            }
        }
        _ = try target.copy(.links, from: view.txn, sourceEnv: view.env, into: .links) { k, v in
            removed.contains(k) ? nil : (k, v)
        }
        try target.writeGrowing { txn in for k in added { try txn.put(target[.links], key: k, value: []) } }
        return objects
    }

    /// Applies the log entries after `horizon` up to `head` from `view` to `target`, checking
    /// checksums and that ids are contiguous. Stops at the first problem (reported through
    /// `problem`). Returns the transactions and changes applied.
    static func replay(from view: ReadView, after horizon: UInt64, upTo head: UInt64, into target: LMDBEnvironment,
                       schema: Schema, problem: (String) -> Void,
                       progress: ((Int) -> Void)? = nil) throws -> (transactions: Int, changes: Int) {
        let read = try readLog(view, after: horizon, upTo: head, batchChanges: 50_000, problem: problem) { batch in
            // A change that does not apply to the state before it (an id inserted twice, an
            // update of an object that is not there, a unique key taken) is the log's damage,
            // named as such; only the store's own errors (I/O, a full map) end the rebuild.
            var refused: (TransactionID, StrataError)?
            try target.writeGrowing { txn in
                refused = nil
                for entry in batch {
                    var applier = StateApplier(txn: txn, env: target, schema: schema,
                                               transactionID: entry.transactionID)
                    do { try applier.applyLogged(entry.changes) } catch let e as StrataError {
                        if case .lmdb = e { throw e }
                        refused = (entry.transactionID, e)
                        return
                    }
                }
            }
            if let (tx, error) = refused {
                problem("log: transaction \(tx.rawValue) does not apply to the state before it: \(error)")
                return false
            }
            if let last = batch.last { progress?(Int(last.transactionID.rawValue - horizon)) }
            return true
        }
        return (read.transactions, read.changes)
    }

    /// How far ``readLog(_:after:upTo:batchChanges:problem:deliver:)`` got.
    struct LogRead {
        /// Transactions horizon+1…head were all there, passed their checksums and were delivered.
        let complete: Bool
        /// Entries read and decoded in order (also when it stopped early), and their changes.
        let transactions: Int
        let changes: Int
    }

    /// Reads the log entries after `horizon` up to `head` of `view` in order, checking that ids
    /// are contiguous and that every entry decodes (checksum), and hands them to `deliver` in
    /// batches of at least `batchChanges` changes (the last one smaller). Stops at the first log
    /// problem, reported through `problem`, or when `deliver` returns false (then the entry whose
    /// batch was refused does not count as read, the batch's earlier ones do). Replay, compaction's
    /// catch-up and verify's rebuild read the log through it; the in-memory check reads it with
    /// ``scanLog(_:after:upTo:problem:entry:)``.
    static func readLog(_ view: ReadView, after horizon: UInt64, upTo head: UInt64, batchChanges: Int,
                        problem: (String) -> Void, deliver: ([LogEntry]) throws -> Bool) throws -> LogRead {
        precondition(batchChanges > 0, "batchChanges must be positive")
        var changes = 0
        var batch: [LogEntry] = [], pending = 0
        let scan = try scanLog(view, after: horizon, upTo: head, problem: problem) { tx, value in
            let entry: LogEntry
            do {
                entry = try LogEntryCodec.decode(value, transactionID: TransactionID(tx))
            } catch {
                problem("log: \(error)")
                return false
            }
            changes += entry.changes.count
            pending += entry.changes.count
            batch.append(entry)
            if pending >= batchChanges {
                guard try deliver(batch) else { return false }
                batch.removeAll(keepingCapacity: true)
                pending = 0
            }
            return true
        }
        let read = { (complete: Bool) in LogRead(complete: complete, transactions: scan.read, changes: changes) }
        guard scan.complete else { return read(false) }
        if batch.isEmpty { return read(true) }
        return read(try deliver(batch))
    }

    /// Walks the log entries after `horizon` up to `head` of `view` in order, checking that ids
    /// are contiguous and reach `head`, and hands each entry's transaction id and bytes (valid for
    /// the read transaction) to `entry`, which returns false to stop (having reported why, if it
    /// is a problem). A gap or a key out of order is reported through `problem`. Returns whether
    /// every entry was there and accepted, and how many were accepted.
    static func scanLog(_ view: ReadView, after horizon: UInt64, upTo head: UInt64, problem: (String) -> Void,
                        entry: (_ transaction: UInt64, _ bytes: UnsafeRawBufferPointer) throws -> Bool)
        throws -> (complete: Bool, read: Int) {
        guard head > horizon else { return (true, 0) }
        var next = horizon + 1
        var stopped = false
        try view.txn.scan(view.env[.log], from: TransactionID(next).keyBytes) { key, value in
            var r = ByteReader(key)
            let tx = try r.u64()
            guard tx <= head else { return false }
            guard tx == next else {
                problem(tx > next
                        ? "log: transaction\(tx - next > 1 ? "s \(next)…\(tx - 1) are" : " \(next) is") missing"
                        : "log: key \(tx) out of order")
                stopped = true
                return false
            }
            guard try entry(tx, value) else {
                stopped = true
                return false
            }
            next += 1
            return true
        }
        let read = Int(next - 1 - horizon)
        guard !stopped else { return (false, read) }
        guard next > head else {
            problem("log: transaction\(head > next ? "s \(next)…\(head) are" : " \(next) is") missing")
            return (false, read)
        }
        return (true, read)
    }

    /// A scratch environment, removed when closed: in the store directory `storeDirectory` when
    /// given, writable and with room for `sizeHint` bytes, else in the temporary directory when
    /// that has the room; else `ENOSPC`, with nothing created. It is named `.scratch-…`: one that
    /// a process killed meanwhile leaves is removed by the next scratch made in either place
    /// (``ScratchDirectories/removeAbandoned(in:inStore:)``), and in the store directory by its next read-write open
    /// that no other process shares.
    ///
    /// The map (`MDB_WRITEMAP`: the file's size) is allocated up front and at each growth
    /// (``LMDBEnvironment/allocate(_:bytes:)``): a full file system is an error, never a SIGBUS
    /// from a write through the map. It starts at the hint (at least 1 MiB) and grows by doubling.
    static func scratch(sizeHint: Int, storeDirectory: String? = nil) throws -> LMDBEnvironment {
        let size = max(1 << 20, sizeHint)
        func hasRoom(_ dir: String) -> Bool { (LMDBEnvironment.freeBytes(dir) ?? Int.max) >= size }
        let temporary = FileManager.default.temporaryDirectory
        // What killed processes left (twice a store's size each) goes first, from both places:
        // a read-only store's verify puts its scratch in the temporary directory, which no open
        // of the store sweeps.
        if let storeDirectory, access(storeDirectory, W_OK) == 0 { ScratchDirectories.removeAbandoned(in: storeDirectory) }
        ScratchDirectories.removeAbandoned(in: temporary.path, inStore: false)
        let parent: URL
        if let storeDirectory, access(storeDirectory, W_OK) == 0, hasRoom(storeDirectory) {
            parent = URL(fileURLWithPath: storeDirectory)
        } else if hasRoom(temporary.path) {
            parent = temporary
        } else {
            let place = storeDirectory.map { "\($0) or \(temporary.path)" } ?? temporary.path
            throw LMDBError(code: ENOSPC, operation: "room for a scratch environment of \(size) bytes in \(place)")
        }
        let path = parent.appendingPathComponent(StoreDirectory.scratchPrefix + UUID().uuidString).path
        // Noted before it exists: a sweep by this process must not take it for abandoned.
        ScratchDirectories.noteOpen(path)
        let env: LMDBEnvironment
        do {
            // Private whatever the umask (it holds a copy of the store's state).
            try StorePermissions.private.makeDirectory(path)
            var options = LMDBOptions(mapSizeBytes: size, maxMapSizeBytes: 1 << 42, maxReaders: 8, readOnly: false,
                                      noSync: true, noLock: false)
            options.writeMap = true
            env = try LMDBEnvironment(path: path, options: options)
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            ScratchDirectories.noteRemoved(path)
            throw error
        }
        env.onClose {
            try? FileManager.default.removeItem(atPath: path)
            ScratchDirectories.noteRemoved(path)
        }
        return env
    }
}

import Foundation
