import Foundation

extension Store {
    /// Problems listed in a ``VerifyReport`` at most.
    public static let verifyProblemLimit = 20

    /// Checks that the stored state is exactly what the log implies: every log entry's checksum,
    /// transaction ids contiguous from 1 (or from the compaction horizon) to the head, and the
    /// records, relationship edges, index entries, unique keys and per-entity counts derived
    /// from the log against the stored ones. Reads one snapshot; saves go on meanwhile, except
    /// that a save which must grow the map waits until the check's reads are done.
    ///
    /// A store never compacted, with at most ``StoreConfiguration/verifyInMemoryObjectLimit``
    /// objects, is first checked in memory (``VerifyReport/Method/inMemory``: the log folded
    /// and both states compared by digest, the two sides on two threads when a second snapshot
    /// of the same transaction can be opened). Otherwise, or when that check finds any
    /// difference, the state is rebuilt in a scratch environment and compared entry by entry
    /// (``VerifyReport/Method/rebuild``), which names every problem.
    ///
    /// ```swift
    /// let report = try store.verify()
    /// if !report.ok { print(report.problemCount, report.problems) }
    /// ```
    ///
    /// - Parameters:
    ///   - rebuild: Skip the in-memory check and always rebuild on disk (to cross-check it, or
    ///     to bound memory on a store close to the limit).
    ///   - progress: Called with the phase and how far it got, on the calling thread. It must not
    ///     use this store or wait for its saves: verify may hold the store's map lock meanwhile
    ///     (on another thread), and a save that grows the map, or a read after another process
    ///     grew it, waits for that lock. It may call ``close()``, which then returns at once and
    ///     finishes when verify's reads end (see ``close()``).
    /// - Complexity: O(changes in the log + entries in the state).
    public func verify(rebuild: Bool = false,
                       progress: (@Sendable (VerifyProgress) -> Void)? = nil) throws -> VerifyReport {
        try checkUsable()
        // The in-memory check calls `progress` outside its reads while its second thread's read
        // waits for this thread: marked as inside a read, so a `close()` from there does not
        // wait for that read.
        return try ThreadReads.marked(store: snapshots) {
            let started = ContinuousClock.now
            let snapshot = try self.snapshot(label: "verify")
            defer { snapshot.close() }
            // Every page is checked before liblmdb is trusted to walk it (a damaged page would
            // make it fault or hand back a value past the end of the file).
            try snapshot.env.checkPages()
            let head = snapshot.transactionID.rawValue
            let shape = try snapshot.read { try Self.logShapeProblems($0, head: head, limit: Self.verifyProblemLimit) }
            if shape.count > 0 {
                // Read by id, such a log would hand the replay other entries than its keys say.
                return VerifyReport(head: snapshot.transactionID, transactions: 0, changes: 0, entriesCompared: 0,
                                    problems: shape.items, problemCount: shape.count,
                                    seconds: (ContinuousClock.now - started).seconds, method: .logShape)
            }
            if !rebuild, let report = try verifyInMemory(snapshot, started: started, progress: progress) {
                return report
            }
            return try verifyByRebuilding(snapshot, started: started, progress: progress)
        }
    }

    /// The log's keys against the compaction horizon and the head (the log's last transaction):
    /// every key a transaction id (8 bytes) after the horizon, none at or before it (compaction
    /// folded those into the state), a horizon no later than the head, and no transaction
    /// missing in between (found here, before the state at the horizon is read back through them).
    static func logShapeProblems(_ view: ReadView, head: UInt64, limit: Int) throws -> ProblemList {
        var problems = ProblemList(limit: limit)
        let horizon = try view.horizon().rawValue
        let hasLog = try view.txn.entryCount(view.env[.log]) > 0
        if hasLog, horizon > head {
            problems.add("meta: the compaction horizon \(horizon) is past the log's last transaction, \(head)")
            return problems
        }
        func missing(_ from: UInt64, _ to: UInt64) {
            problems.add("log: transaction\(to > from ? "s \(from)…\(to) are" : " \(from) is") missing")
        }
        var next = horizon + 1
        try view.txn.scan(view.env[.log]) { key, _ in
            guard key.count == 8 else {
                problems.add("log: a key of \(key.count) bytes, \(Self.shownKey(Array(key))), is no transaction id " +
                             "(8 bytes)")
                return true
            }
            var r = ByteReader(key)
            let tx = try r.u64()
            if tx == 0 {
                problems.add("log: an entry under transaction 0 (transactions start at 1)")
            } else if tx <= horizon {
                problems.add("log: an entry under transaction \(tx), at or before the compaction horizon \(horizon) " +
                             "(compaction folded those into the state)")
            } else {
                if tx > next { missing(next, tx - 1) }
                next = tx + 1
            }
            return true
        }
        if hasLog, next <= head { missing(next, head) }
        return problems
    }

    /// A key of the store as verify shows it: its first 24 bytes in hex, and its size when cut.
    static func shownKey(_ key: [UInt8]) -> String {
        key.prefix(24).map { String(format: "%02x", $0) }.joined() + (key.count > 24 ? "…(\(key.count) bytes)" : "")
    }

    /// The in-memory check; nil when the store needs the rebuild (compacted, too large, or
    /// something differs).
    private func verifyInMemory(_ snapshot: Snapshot, started: ContinuousClock.Instant,
                                progress: (@Sendable (VerifyProgress) -> Void)?) throws -> VerifyReport? {
        let limit = configuration.verifyInMemoryObjectLimit
        guard limit > 0, try snapshot.read({ try $0.horizon() }) == .zero else { return nil }
        let head = snapshot.transactionID
        let capacity = try snapshot.read { try $0.txn.entryCount($0.env[.objects]) }
        // With a second snapshot of the same transaction (and generation: a compaction keeps the
        // head), another thread reads and checks the log for this one to fold, then digests the
        // stored state meanwhile. The ops it hands over point into the map (the values inserts and
        // updates set), and this thread reads them until its digests are done. So the reading
        // thread stays inside its read — holding the map lock shared, so the map is never moved —
        // from the first op it makes until this thread releases it (or cancels), whatever happens
        // in between. Their pages stay too: LMDB reuses no page freed after the oldest open
        // reader, and this snapshot, opened first, stays open throughout. While the channel is
        // full the reading thread waits for this one, which holds no lock as it folds, so it always
        // drains the channel; a map growth by the writer waits for the whole verify.
        let channel = LogEntryChannel()
        // Compressed entries decompressed for the fold: held by both threads until they are done.
        let expanded = InMemoryVerification.ExpandedEntries()
        let stored = Locked<Result<InMemoryVerification.StateDigests?, Error>?>(nil)
        // The second thread, when there is one (the log is then read there, in parallel).
        var done: DispatchGroup?
        if let second = try? self.snapshot(label: "verify-state") {
            if second.transactionID == head && second.env === snapshot.env {
                done = startOnOwnThread(name: "strata.verify-state") {
                    let result = Result { () throws -> InMemoryVerification.StateDigests? in
                        try second.read { view in
                            defer { channel.waitUntilReleased() }
                            let log = Result {
                                try InMemoryVerification.readLog(view, head: head, expanded: expanded, deliver: channel.put)
                            }
                            channel.finish(log)
                            // Only a complete, sound log is worth comparing with.
                            guard case .success(true) = log, !channel.wasCancelled else { return nil }
                            return try InMemoryVerification.digestStoredState(view)
                        }
                    }
                    // A read that failed before reading the log still ends the channel (a no-op
                    // when the log's end was given), or the fold would wait for it forever.
                    if case .failure(let error) = result { channel.finish(.failure(error)) }
                    second.close()
                    stored.withLock { $0 = result }
                }
            } else {
                second.close()
            }
        }
        defer {
            channel.cancel()
            done?.wait()
        }
        if let hook = VerifyTestHooks.beforeFold.withLock({ $0[path] }) { hook() }
        let reportProgress = { (n: Int) -> Void in
            progress?(VerifyProgress(phase: .replaying, done: n, total: Int(head.rawValue)))
        }
        let folded: InMemoryVerification.FoldResult
        if done != nil {
            folded = try InMemoryVerification.foldLog(schema: schema, head: head, objectLimit: limit,
                                                      capacity: capacity, progress: reportProgress) {
                try channel.drain(into: $0)
            }
            channel.release()
        } else {
            // One thread: the fold and its digests inside the read that makes the ops.
            folded = try snapshot.read { view in
                try InMemoryVerification.foldLog(schema: schema, head: head, objectLimit: limit, capacity: capacity,
                                                 progress: reportProgress) {
                    try InMemoryVerification.readLog(view, head: head, expanded: expanded, deliver: $0)
                }
            }
        }
        // The folded digests are made: the decompressed entries may go (not before).
        withExtendedLifetime(expanded) {}
        guard case .folded(let expected, let transactions, let changes) = folded else { return nil }
        done?.wait()
        let actual: InMemoryVerification.StateDigests?
        if done != nil {
            actual = try stored.withLock { $0 }?.get()
        } else {
            actual = try snapshot.read { try InMemoryVerification.digestStoredState($0) }
        }
        guard let actual, actual == expected else { return nil }
        progress?(VerifyProgress(phase: .comparing, done: actual.entries, total: actual.entries))
        return VerifyReport(head: head, transactions: transactions, changes: changes, entriesCompared: actual.entries,
                            problems: [], problemCount: 0, seconds: (ContinuousClock.now - started).seconds,
                            method: .inMemory)
    }

    /// Rebuilds state and indexes from the log in a scratch environment and compares them with
    /// the materialized state byte for byte.
    private func verifyByRebuilding(_ snapshot: Snapshot, started: ContinuousClock.Instant,
                                    progress: (@Sendable (VerifyProgress) -> Void)?) throws -> VerifyReport {
        try checkUsable()   // closed from the in-memory check's callback: no scratch environment
        var problems = ProblemList(limit: Self.verifyProblemLimit)
        // Sized for the state it rebuilds (twice the pages the state's databases use, as entries
        // put in log order fill pages about half), not for the file, which holds the log too:
        // a store mostly log asked for twice its file and was refused for want of that room.
        // The map grows if the estimate is short.
        let statePages = try snapshot.read { view in
            try DatabaseName.state.reduce(0) { $0 + (try view.txn.pageBytes(view.env[$1])) }
        }
        let scratch = try StateRebuilder.scratch(sizeHint: statePages * 2, storeDirectory: path)
        defer { scratch.close() }
        let head = snapshot.transactionID.rawValue
        var applied = (transactions: 0, changes: 0)
        try snapshot.read { view in
            let horizon = try view.horizon().rawValue
            do {
                // The base's links are taken from the live state: checked on their own first
                // (``StateCheck``), as no log is left to rebuild them from.
                if horizon > 0 {
                    var check = StateCheck(schema: schema)
                    let links = view.env[.links]
                    try view.txn.scan(links) { k, _ in try check.link(key: k); return true }
                    try check.finishLinks { visit in try view.txn.scan(links) { k, _ in visit(k); return true } }
                }
                _ = try StateRebuilder.loadBase(from: view, horizon: TransactionID(horizon),
                                                head: snapshot.transactionID, into: scratch, schema: schema)
            } catch let error as StrataError {
                // A log entry that fails its checksum while the state at the horizon is read back
                // through it is the log's damage, named as the replay names it (it was "base:").
                if case .corruptLogEntry = error { problems.add("log: \(error)") } else { problems.add("base: \(error)") }
                return
            } catch {
                problems.add("base: \(error)")
                return
            }
            applied = try StateRebuilder.replay(
                from: view, after: horizon, upTo: head, into: scratch, schema: schema, problem: { problems.add($0) },
                progress: { progress?(VerifyProgress(phase: .replaying, done: $0, total: Int(head - horizon))) })
        }
        var compared = 0
        if problems.count == 0 {
            compared = try compare(snapshot, scratch, problems: &problems, progress: progress)
        }
        return VerifyReport(head: snapshot.transactionID, transactions: applied.transactions, changes: applied.changes,
                            entriesCompared: compared, problems: problems.items, problemCount: problems.count,
                            seconds: (ContinuousClock.now - started).seconds, method: .rebuild)
    }

    /// Compares the state databases (and counts) of the store snapshot and the rebuilt scratch.
    private func compare(_ snapshot: Snapshot, _ scratch: LMDBEnvironment, problems: inout ProblemList,
                         progress: (@Sendable (VerifyProgress) -> Void)?) throws -> Int {
        var compared = 0
        try snapshot.read { live in
            try scratch.read { rebuilt in
                for name in [DatabaseName.objects, .links, .indexes, .uniques, .counts] {
                    compared += try compare(name, live: live.txn, liveEnv: snapshot.env, rebuilt: rebuilt,
                                            scratch: scratch, problems: &problems)
                    progress?(VerifyProgress(phase: .comparing, done: compared, total: compared))
                }
            }
        }
        return compared
    }

    /// Walks both databases in key order (merge join). Of ``DatabaseName/counts`` only the `count/` keys
    /// are state (the others are `meta`'s, in a format-1 store, or LMDB's).
    private func compare(_ name: DatabaseName, live: LMDBTransaction, liveEnv: LMDBEnvironment,
                         rebuilt: LMDBTransaction, scratch: LMDBEnvironment,
                         problems: inout ProblemList) throws -> Int {
        let prefix: [UInt8]? = name == .counts ? MetaKey.countPrefix : nil
        var a = ChunkedScan(txn: live, db: liveEnv[name], prefix: prefix)
        var b = ChunkedScan(txn: rebuilt, db: scratch[name], prefix: prefix)
        var n = 0
        // A count of zero says what no count says: a compaction keeps an emptied entity's zero
        // count, which a rebuild from the log after the horizon does not write.
        let zero = MetaKey.countValue(0)
        func next(_ scan: inout ChunkedScan) throws -> (key: [UInt8], value: [UInt8])? {
            while let entry = try scan.next() {
                if name == .counts, entry.value == zero, MetaKey.isCount(entry.key) { continue }
                return entry
            }
            return nil
        }
        var x = try next(&a), y = try next(&b)
        // Point reads go through branch pages that a scan never consults: look every key of the
        // databases read by key up again, so a corrupt branch page that misroutes them is found.
        let lookUp = name == .objects || name == .uniques || name == .log
        while x != nil || y != nil {
            n += 1
            if lookUp, let l = x, try live.withValue(liveEnv[name], key: l.key, { _ in true }) == nil {
                problems.add("\(name.rawValue): \(describe(l.key, in: name)) is stored but a lookup does not find it " +
                             "(corrupt B-tree page)")
            }
            if let l = x, let r = y, l.key == r.key {
                if l.value != r.value {
                    let detail = name == .counts ? countProblem(l.value, r.value, l.key)
                        : l.value.withUnsafeBytes { recordProblem(name, l.key, $0) }
                    problems.add("\(name.rawValue): \(describe(l.key, in: name)) differs from the log\(detail)")
                }
                x = try next(&a)
                y = try next(&b)
            } else if let l = x, y == nil || Value.compareBytes(l.key, y!.key) < 0 {
                problems.add("\(name.rawValue): extra entry \(describe(l.key, in: name)) (not in the log)")
                x = try next(&a)
            } else if let r = y {
                problems.add(
                    "\(name.rawValue): missing entry \(describe(r.key, in: name)) (the log has it, the state does not)")
                y = try next(&b)
            }
        }
        return n
    }

    private func describe(_ key: [UInt8], in name: DatabaseName) -> String {
        switch name {
        case .objects where key.count == 16:
            let id = key.withUnsafeBytes { ObjectID(keyBytes: $0) }
            return "\(schema.entity(tag: id.entityTag)?.name ?? "?") \(id)"
        case .counts where MetaKey.isCount(key):
            return String(decoding: key.prefix(6), as: UTF8.self)
                + (schema.entity(tag: UInt16(key[6]) << 8 | UInt16(key[7]))?.name ?? "?")
        case .links where key.count == 34:
            let (from, to) = key.withUnsafeBytes {
                (ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: $0[2..<18])),
                 ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: $0[18..<34])))
            }
            let r = schema.relationship(tag: UInt16(key[0]) << 8 | UInt16(key[1]))
            return "\(r.map { "\($0.entityName).\($0.name)" } ?? "?") \(from) → \(to)"
        default:
            return Self.shownKey(key)
        }
    }

    /// The stored and the rebuilt count of a `count/` key that differs.
    private func countProblem(_ stored: [UInt8], _ rebuilt: [UInt8], _ key: [UInt8]) -> String {
        guard MetaKey.isCount(key) else { return "" }
        let tag = UInt16(key[6]) << 8 | UInt16(key[7])
        func shown(_ v: [UInt8]) -> String {
            (try? v.withUnsafeBytes { try MetaKey.countValue($0, tag) }).map(String.init) ?? "unreadable"
        }
        return " (stored \(shown(stored)), the log gives \(shown(rebuilt)))"
    }

    private func recordProblem(_ name: DatabaseName, _ key: [UInt8], _ value: UnsafeRawBufferPointer) -> String {
        guard name == .objects, key.count == 16 else { return "" }
        let id = key.withUnsafeBytes { ObjectID(keyBytes: $0) }
        do {
            _ = try RecordCodec.decode(value, id: id, schema: schema)
            return " (the record decodes, with other values)"
        } catch {
            return " (\(error))"
        }
    }
}

/// The first problems, and how many there were.
struct ProblemList {
    let limit: Int
    var items: [String] = []
    var count = 0
    mutating func add(_ p: String) {
        count += 1
        if items.count < limit { items.append(p) }
    }
}
