extension Store {
    /// Squashes history up to `horizon` (default: the head; on a replica of a cluster at most the
    /// transaction before its head, whose entry the replica keeps for its history check) into
    /// the state at that point, drops deleted objects' history, and rewrites the store compactly
    /// in a new generation that is switched in atomically, so disk space comes back.
    ///
    /// Online: readers and writers of this process go on; transactions committed meanwhile are
    /// caught up before the switch, on the writer, so none is lost. Snapshots opened before the
    /// switch keep reading the old generation until they close. Transactions after the horizon
    /// keep their ids and stay replayable; as-of reads before it fail with
    /// ``StrataError/beforeHorizon(requested:horizon:)``.
    ///
    /// Crash-safe: the switch is one `rename(2)` of the `current` link; a crash before it leaves
    /// the old store, after it the new one (a half-built generation is removed at the next open).
    ///
    /// Page cache: the copied state is dropped from the cache once it is on disk, so the build
    /// does not push out what other work had cached; the new generation is read back in the
    /// background after the switch (before the catch-up when saves arrived during the build).
    /// A write error during the build fails the compaction and leaves the old store.
    ///
    /// With `rebuildIndexes`, the secondary indexes are not copied but built again from the
    /// objects, in key order: what repairs index entries `verify` reports as damaged (the objects
    /// are the truth the indexes are derived from).
    ///
    /// - Throws: ``StrataError/storeBusy(path:processIDs:)`` when another process has the store open.
    public func compact(horizon requested: TransactionID? = nil, dryRun: Bool = false, rebuildIndexes: Bool = false,
                        progress: (@Sendable (CompactionProgress) -> Void)? = nil) async throws -> CompactionReport {
        try checkUsable()
        guard let writer, let lock else { throw StrataError.readOnly(path: path) }
        // After a migration or compaction that ran first: `checkUsable` again (a migration
        // retires this instance), and the build starts from the generation it left.
        await maintenance.enter()
        defer { maintenance.leave() }
        try Task.checkCancellation()   // cancelled while it waited: do not start
        try checkUsable()
        let started = ContinuousClock.now
        try refuseWhileShared(lock)
        let snapshot = try self.snapshot(label: "compaction")
        defer { snapshot.close() }
        let oldEnv = snapshot.env
        let t0 = snapshot.transactionID
        // The log must hold every transaction after the horizon: a compaction dropping the part
        // with a gap would hide the damage from `verify` for good.
        let (previousHorizon, logBefore) = try checkLogShape(snapshot, for: "a compaction would drop them unnoticed")
        var horizon = max(previousHorizon, min(requested ?? t0, t0))
        // A replica keeps the entry of its last transaction: opening it compares that entry
        // with the cluster's of the same id, which is how a replica whose history is not the
        // cluster's any more (the cluster's database restored from an older backup) is told so.
        // Squashed away, that check had nothing to compare, and the replica went on with another
        // history than the cluster's.
        if horizon == t0, t0 > previousHorizon, try Self.storedClusterID(oldEnv) != nil {
            horizon = TransactionID(t0.rawValue - 1)
        }
        let bytesBefore = oldEnv.fileBytes

        try checkRoomForGeneration(snapshot)
        let generation = try makeGeneration(like: oldEnv)
        let newEnv = generation.env
        // Set on the writer the moment `current` names the new generation: from then on it is
        // the live store and must never be abandoned, whatever fails after.
        let switched = Locked(false)
        defer { if !switched.withLock({ $0 }) { generation.abandon() } }
        let copied = try copyGeneration(newEnv, from: snapshot, horizon: horizon,
                                        indexes: rebuildIndexes ? .rebuilt : .copied, progress: progress)
        generation.endBulkBuild()
        let objects = try newEnv.read { txn in
            try schema.entities.reduce(0) { $0 + (try ReadView(txn: txn, env: newEnv, schema: schema).objectCount($1)) }
        }
        let liveDataBytes = copied.recordBytes
        let liveEntryBytes = copied.allBytes

        if dryRun {
            try newEnv.sync()
            let logAfter = try newEnv.read { try $0.entryCount(newEnv[.log]) }
            return CompactionReport(dryRun: true, horizon: horizon, previousHorizon: previousHorizon, head: t0,
                                    bytesBefore: bytesBefore, bytesAfter: newEnv.fileBytes, logEntriesBefore: logBefore,
                                    logEntriesAfter: logAfter, objects: objects, liveDataBytes: liveDataBytes,
                                    liveEntryBytes: liveEntryBytes, seconds: (ContinuousClock.now - started).seconds)
        }
        progress?(CompactionProgress(phase: .catchingUp, done: 0))
        try checkUsable()
        try prefetchBeforeCatchUp(generation, builtAt: t0)
        // The new generation's log is counted inside the writer's body: once the body ends, a
        // close() waiting for the queue may close the new environment (the store's now).
        let (head, logAfter) = try await writer.exclusive { [self, horizon] in
            let head = try catchUpAndSwitch(to: generation, caughtUpFrom: t0, lock: lock, writer: writer,
                                            oldEnv: oldEnv)
            switched.withLock { $0 = true }
            // Nothing after the switch fails the compaction (it is done): a count that cannot be
            // read is the one the log's shape gives, the transactions after the horizon.
            let counted = try? newEnv.read { try $0.entryCount(newEnv[.log]) }
            return (head, counted ?? Int(head.rawValue - horizon.rawValue))
        }
        return CompactionReport(dryRun: false, horizon: horizon, previousHorizon: previousHorizon, head: head,
                                bytesBefore: bytesBefore, bytesAfter: newEnv.fileBytes, logEntriesBefore: logBefore,
                                logEntriesAfter: logAfter, objects: objects, liveDataBytes: liveDataBytes,
                                liveEntryBytes: liveEntryBytes, seconds: (ContinuousClock.now - started).seconds)
    }

    /// Writes the new generation: the state, compactly, and the log after the horizon. The state at
    /// the horizon is not stored: it is derived (current state with later transactions undone).
    /// Copies the live state and the log after the horizon; returns the bytes of the records and
    /// of every entry copied.
    ///
    /// The snapshot is read a chunk at a time (``ReadSource/pinned(_:)``): the old environment's
    /// map lock is held for one buffer's read at a time, never for the whole build, so a save that
    /// grows the map meanwhile waits for one chunk at most. `progress` runs between reads.
    func copyGeneration(
        _ newEnv: LMDBEnvironment, from snapshot: Snapshot, horizon: TransactionID, indexes: IndexCopy = .copied,
        loadingStateInto memory: BulkMemoryState? = nil,
        progress: (@Sendable (CompactionProgress) -> Void)?) throws -> (recordBytes: Int, allBytes: Int) {
        try copyGeneration(newEnv, from: .pinned(snapshot), sourceEnv: snapshot.env, head: snapshot.transactionID,
                           horizon: horizon, indexes: indexes, loadingStateInto: memory, progress: progress)
    }

    /// What a generation's copy does with the secondary indexes.
    enum IndexCopy {
        /// Copied as they are.
        case copied
        /// Built from the copied objects, in key order: the source has none, or stale ones (a bulk
        /// load's saves leave them alone).
        case rebuilt
        /// Left out: the copy is a bulk load's starting point, whose indexes are rebuilt when it
        /// is copied again.
        case omitted
    }

    /// ``copyGeneration(_:from:horizon:indexes:loadingStateInto:progress:)`` from any source:
    /// `oldEnv` read through `source`, whose last transaction is `t0`.
    ///
    /// With `memory` (a bulk load in memory from a store with objects), the state is loaded into
    /// it instead of copied (checked as a copy checks it; the indexes left out, as `.omitted`):
    /// the new generation gets the log, the metadata and the counts, and the load writes the
    /// state once it has resolved its saves.
    func copyGeneration(
        _ newEnv: LMDBEnvironment, from source: ReadSource, sourceEnv oldEnv: LMDBEnvironment, head t0: TransactionID,
        horizon: TransactionID, indexes: IndexCopy = .copied, loadingStateInto memory: BulkMemoryState? = nil,
        progress: (@Sendable (CompactionProgress) -> Void)?) throws -> (recordBytes: Int, allBytes: Int) {
        precondition(memory == nil || indexes == .omitted, "a state loaded into memory has its indexes built from it")
        // Between databases, and after each callback: a `close()` (from the callback, or from
        // anywhere while the copy runs) lets the build end here instead of copying on.
        func report(_ p: CompactionProgress) throws {
            progress?(p)
            try checkUsable()
        }
        try report(CompactionProgress(phase: .copying, done: 0))
        var recordBytes = 0, allBytes = 0
        // Objects per entity tag, as copied: the counts carried over must be theirs.
        var objectsCopied: [UInt16: Int] = [:]
        var runTag: UInt16 = 0, run = 0
        /// Every entry of `name` given to `load` (into `memory`), counted as a copy counts them.
        func loaded(_ name: DatabaseName, _ load: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void)
            throws -> (entries: Int, bytes: Int, replayedBuffers: Int) {
            var entries = 0, bytes = 0
            try source.scanInChunks(oldEnv[name]) { k, v in
                try load(k, v)
                entries += 1
                bytes += k.count + v.count
            }
            return (entries, bytes, 0)
        }
        for name in DatabaseName.state {
            if name == .indexes, indexes != .copied {
                if indexes == .rebuilt {
                    let built = try rebuildIndexes(newEnv, from: source, sourceEnv: oldEnv)
                    allBytes += built.bytes
                    try report(CompactionProgress(phase: .copying, done: built.entries))
                }
                continue
            }
            // What the new generation's log will no longer hold the making of is checked as it is
            // copied (``StateCheck``): a damaged record or link is refused, not carried over.
            var check = StateCheck(schema: schema)
            let c: (entries: Int, bytes: Int, replayedBuffers: Int)
            switch (name, memory) {
            case (.objects, let memory?):
                c = try loaded(.objects) { k, v in
                    try check.object(key: k, value: v)
                    try memory.loadObject(key: k, record: v)
                    objectsCopied[UInt16(k[0]) << 8 | UInt16(k[1]), default: 0] += 1
                }
                recordBytes = c.bytes
            case (.links, let memory?):
                c = try loaded(.links) { k, _ in
                    try check.link(key: k)
                    try memory.loadLinkEntry(key: k)
                }
            case (.uniques, let memory?):
                c = try loaded(.uniques, memory.loadUnique)
            case (.objects, nil):
                c = try newEnv.copyDirect(name, from: source, sourceEnv: oldEnv, into: nil, start: nil, until: nil) {
                    try check.object(key: $0, value: $1)
                    // Keys in order, an entity's objects one run: counted a run at a time.
                    let tag = UInt16($0[0]) << 8 | UInt16($0[1])
                    if tag != runTag {
                        if run > 0 { objectsCopied[runTag, default: 0] += run }
                        (runTag, run) = (tag, 0)
                    }
                    run += 1
                }
                if run > 0 { objectsCopied[runTag, default: 0] += run }
                recordBytes = c.bytes
            case (.links, nil):
                c = try newEnv.copyDirect(name, from: source, sourceEnv: oldEnv, into: nil, start: nil, until: nil) {
                    k, _ in try check.link(key: k)
                }
            default:
                c = try newEnv.copyDirect(name, from: source, sourceEnv: oldEnv, into: nil, start: nil, until: nil)
            }
            if name == .links {
                try check.finishLinks { visit in
                    try source.read { txn in try txn.scan(oldEnv[.links]) { k, _ in visit(k); return true } }
                }
            }
            allBytes += c.bytes
            try report(CompactionProgress(phase: .copying, done: c.entries))
        }
        // The new generation is written in the current format: its counts go to its
        // `counts` (LMDB's main database), wherever the old generation kept them.
        _ = try newEnv.copy(.meta, from: source, sourceEnv: oldEnv) { k, v in
            if k == MetaKey.horizon || k == MetaKey.format || MetaKey.isCount(k) { return nil }
            allBytes += k.count + v.count
            return (k, v)
        }
        var counts: [(key: [UInt8], value: [UInt8])] = []
        var scan = ChunkedScan(source: source, db: oldEnv[.counts], prefix: MetaKey.countPrefix)
        while let entry = try scan.next() { if MetaKey.isCount(entry.key) { counts.append(entry) } }
        try checkCounts(counts, against: objectsCopied)
        var h = ByteWriter(capacity: 8)
        h.u64(horizon.rawValue)
        let format = MetaKey.formatValue(MetaKey.storeFormat)
        try newEnv.writeGrowing { txn in
            try txn.put(newEnv[.meta], key: MetaKey.horizon, value: h.bytes)
            try txn.put(newEnv[.meta], key: MetaKey.format, value: format)
            for c in counts { try txn.put(newEnv[.counts], key: c.key, value: c.value) }
        }
        allBytes += MetaKey.horizon.count + h.bytes.count + MetaKey.format.count + format.count
        allBytes += counts.reduce(0) { $0 + $1.key.count + $1.value.count }
        // Every entry of the log is checked against its checksum: one squashed away would take
        // the damage out of `verify`'s sight for good, and one copied would carry it over.
        let previousHorizon = try source.read { txn in try ReadView(txn: txn, env: oldEnv, schema: schema).horizon() }
        if previousHorizon < min(horizon, t0) {
            let last = min(horizon, t0).keyBytes
            var squashed = ChunkedScan(source: source, db: oldEnv[.log], prefix: nil, start: previousHorizon.next.keyBytes)
            while let entry = try squashed.next(), !last.lexicographicallyPrecedes(entry.key) {
                try entry.key.withUnsafeBytes { k in try entry.value.withUnsafeBytes { try Self.checkLogEntry(key: k, value: $0) } }
            }
        }
        if horizon < t0 {
            try report(CompactionProgress(phase: .squashing, done: Int(t0.rawValue - horizon.rawValue)))
            let c = try newEnv.copyDirect(.log, from: source, sourceEnv: oldEnv, into: nil,
                                          start: horizon.next.keyBytes, until: t0.keyBytes) { k, v in
                try Self.checkLogEntry(key: k, value: v)
            }
            allBytes += c.bytes
        }
        return (recordBytes, allBytes)
    }

    /// Refuses a log entry whose key is not a transaction id or whose bytes fail their checksum.
    static func checkLogEntry(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
        guard key.count == 8 else {
            throw StrataError.corruptLogEntry(transaction: .zero, reason: "log: a key of \(key.count) bytes (8 expected)")
        }
        var r = ByteReader(key)
        try LogEntryCodec.checkStored(value, TransactionID(try r.u64()))
    }

    /// Writes `newEnv`'s secondary indexes from the objects `oldEnv` holds (read through `source`
    /// a chunk at a time): every key gathered and sorted (``ExternalKeySort``, with run files in
    /// the new generation's directory past ``StoreConfiguration/indexSortBudgetBytes``), then
    /// appended in key order, so each page is written once, full. Returns the entries and the
    /// bytes written.
    private func rebuildIndexes(_ newEnv: LMDBEnvironment, from source: ReadSource,
                                sourceEnv oldEnv: LMDBEnvironment) throws -> (entries: Int, bytes: Int) {
        var sorter = ExternalKeySort(budgetBytes: configuration.indexSortBudgetBytes, directory: newEnv.path,
                                     permissions: StorePermissions(configuration))
        defer {
            sorter.discard()
            for path in sorter.unremovedFiles {
                logger.warning("could not remove \(path), a temporary file of an index build: remove it by hand")
            }
        }
        var objects = ChunkedScan(source: source, db: oldEnv[.objects], prefix: nil)
        var done = 0
        while let (k, v) = try objects.next() {
            guard k.count == 16 else {
                throw StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                                reason: "objects: a key of \(k.count) bytes (16 expected)")
            }
            let id = k.withUnsafeBytes { ObjectID(keyBytes: $0) }
            let r = try v.withUnsafeBytes { try RecordCodec.decode($0, id: id, schema: schema) }
            for index in r.entity.indexes {
                try sorter.addKey { Layout.appendIndexKey(index, record: r.values, id: id, to: &$0) }
            }
            done += 1
            if done % 65_536 == 0 { try checkUsable() }
        }
        var entries = 0, written = 0
        let db = newEnv[.indexes]
        try sorter.drain(batchBytes: BulkStateBuilder.batchBytes) { batch in
            try newEnv.writeGrowing { txn in
                try txn.withAppender(db) { appender in
                    for i in batch.entries.indices {
                        try batch.withEntry(i) { k, v in try appender.append(key: k, value: v) }
                    }
                }
            }
            entries += batch.entries.count
            written += batch.bytes.count
            // As a compaction's copy does: the disk starts on this batch while the next is built.
            if newEnv.options.noSync { newEnv.startWriteback() }
            try checkUsable()
        }
        return (entries, written)
    }

    /// On the writer queue: applies what was committed since the build started, then switches
    /// `current` to the new generation and the process to the new environment.
    private func catchUpAndSwitch(to generation: PendingGeneration, caughtUpFrom t0: TransactionID,
                                  lock: StoreLock, writer: Writer, oldEnv: LMDBEnvironment) throws -> TransactionID {
        let newEnv = generation.env
        // The maintenance gate keeps the generation the build started from the live one.
        assert(env === oldEnv, "the live generation changed during a compaction")
        var head = t0
        // Exclusive from the catch-up's read to the switch: another process that committed after
        // the read and closed before the switch would have its transactions left behind.
        try takeExclusive(lock)
        defer { lock.shared() }
        try oldEnv.read { txn in
            let view = ReadView(txn: txn, env: oldEnv, schema: schema)
            let last = try view.lastTransactionID()
            guard last > t0 else { return }
            var problems: [String] = []
            _ = try StateRebuilder.replay(from: view, after: t0.rawValue, upTo: last.rawValue, into: newEnv,
                                          schema: schema, problem: { problems.append($0) })
            if let first = problems.first {
                throw StrataError.corruptLogEntry(transaction: last, reason: "cannot catch up: \(first)")
            }
            _ = try newEnv.copy(.log, from: txn, sourceEnv: oldEnv, start: t0.next.keyBytes, until: last.keyBytes)
            head = last
        }
        runBeforeSwitchHookForTesting()
        try switchGeneration(generation, lock: lock, replacing: oldEnv)
        // The old generation goes when its last snapshot does, or with the store's close.
        _ = swapEnvironment(newEnv)
        writer.replaceEnvironment(newEnv)
        return head
    }
}

extension Store {
    /// The horizon of `snapshot` and the number of its log's entries, once the log is seen to
    /// hold exactly the transactions after the horizon up to the snapshot's (a compaction or migration rebuilds the log from them). A horizon
    /// past the log's end, or entries missing or out of place, is
    /// ``StrataError/damagedStore(path:reason:)``, with `consequence` saying what the
    /// maintenance would do with the damage.
    func checkLogShape(_ snapshot: Snapshot, for consequence: String) throws -> (horizon: TransactionID, entries: Int) {
        let (horizon, entries) = try snapshot.read { (try $0.horizon(), try $0.txn.entryCount($0.env[.log])) }
        let head = snapshot.transactionID
        guard horizon <= head else {
            throw StrataError.damagedStore(
                path: path, reason: "meta: the compaction horizon \(horizon.rawValue) is past the log's last transaction, " +
                    "\(head.rawValue) (storectl verify names the damage)")
        }
        let expected = head.rawValue - horizon.rawValue
        guard entries == Int(expected) else {
            throw StrataError.damagedStore(
                path: path, reason: "the log holds \(entries) entries for the \(expected) transactions after " +
                    "the horizon \(horizon.rawValue) up to \(head.rawValue): some are missing or out of place, and " +
                    "\(consequence) (storectl verify names them)")
        }
        // The right count is not the right keys: a flipped bit in a key (LMDB keys carry no
        // checksum) moves an entry under a transaction at or before the horizon, leaving the
        // count as it was. Every key is read (one cursor walk over the log's leaves; the entries
        // themselves are not decoded) and held to the shape `verify` holds it to.
        let problems = try snapshot.read { try Self.logShapeProblems($0, head: head.rawValue, limit: 3) }
        if let first = problems.items.first {
            throw StrataError.damagedStore(
                path: path, reason: "\(first)\(problems.count > 1 ? " (and \(problems.count - 1) more)" : ""): " +
                    "\(consequence) (storectl verify names the damage)")
        }
        return (horizon, entries)
    }
}

extension Store {
    /// Refuses a generation's copy whose stored object counts (`count/` entries) are not the
    /// objects it copied, per entity: a damaged count would be made permanent, with no log left
    /// to tell (`verify` names it), as a damaged record or link is refused.
    func checkCounts(_ counts: [(key: [UInt8], value: [UInt8])], against objects: [UInt16: Int]) throws {
        var stored: [UInt16: Int] = [:]
        for c in counts {
            let tag = UInt16(c.key[c.key.count - 2]) << 8 | UInt16(c.key[c.key.count - 1])
            stored[tag] = try c.value.withUnsafeBytes { try MetaKey.countValue($0, tag) }
        }
        for tag in Set(stored.keys).union(objects.keys).sorted() where stored[tag, default: 0] != objects[tag, default: 0] {
            let entity = schema.entity(tag: tag)?.name ?? "entity tag \(tag)"
            throw StrataError.damagedStore(path: path, reason: """
                counts: the stored count of \(entity) is \(stored[tag, default: 0]), but the store holds \
                \(objects[tag, default: 0]) of its objects; copying the state into a new generation (a compaction, \
                a bulk import, a cluster snapshot) would make it permanent (storectl verify names it)
                """)
        }
    }
}
