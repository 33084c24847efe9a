
/// Builds a new generation's state — objects, index and unique entries, links — from whole
/// records given in id order, for a migration.
///
/// Applying records one by one (``StateApplier``) puts every index and unique key at a random
/// place of its B-tree, so each batch copies and rewrites most of the tree's leaves. Here the
/// records go in with an appending cursor (they arrive in key order), and the index, unique and
/// link keys are gathered, sorted in memory and appended in key order, so every page is written
/// once, full. Memory is bounded: when the gathered keys pass ``runBudgetBytes`` they are
/// written as a run (appended if nothing is in that database yet, else put in key order) and
/// gathering starts again.
///
/// Object counts are not derived here: a migration keeps the objects, so the caller copies the
/// old counts and checks them against ``objectsPerEntity``.
struct BulkStateBuilder {
    let env: LMDBEnvironment
    let schema: Schema
    /// Bytes of gathered keys (with their bookkeeping) held before a run is written, by
    /// default: 256 MiB holds the four index and unique keys of about 1.5M library tracks, so a
    /// store of that size is written in one sorted pass.
    static let defaultRunBudgetBytes = 256 << 20
    let runBudgetBytes: Int
    /// Bytes of keys and values per write transaction (as ``LMDBEnvironment/copyDirect``).
    static let batchBytes = 4 << 20

    /// Live objects per entity tag, counted as they are added.
    private(set) var objectsPerEntity: [UInt16: Int] = [:]
    private var records = KeyRun()
    private var indexes = KeyRun()
    private var uniques = KeyRun()
    private var links = KeyRun()
    /// Databases a run has been written to (later runs cannot append).
    private var started: Set<DatabaseName> = []
    private var lastID: ObjectID?

    /// Objects the caller expects to add (0: unknown): after the first ``sampleObjects`` the
    /// key buffers are sized for them (up to the budget), instead of doubling as they grow.
    let expectedObjects: Int
    static let sampleObjects = 1_024
    private var added = 0

    /// Index and unique keys the old store already holds byte for byte (same tag, the same
    /// attributes carried over unconverted): they are copied from `source` in key order, not
    /// rebuilt, sorted and written again.
    struct CarriedKeys {
        let source: LMDBTransaction
        let sourceEnv: LMDBEnvironment
        let indexTags: Set<UInt16>
        let uniqueTags: Set<UInt16>
    }
    private let carried: CarriedKeys?
    /// Carried tags not copied yet, per database, ascending.
    private var toCopy: [DatabaseName: [UInt16]] = [:]

    init(env: LMDBEnvironment, schema: Schema, runBudgetBytes: Int = defaultRunBudgetBytes, expectedObjects: Int = 0,
         carried: CarriedKeys? = nil) {
        precondition(runBudgetBytes > 0, "run budget must be positive")
        self.env = env
        self.schema = schema
        self.runBudgetBytes = runBudgetBytes
        self.expectedObjects = expectedObjects
        self.carried = carried
        if let carried {
            toCopy[.indexes] = carried.indexTags.sorted()
            toCopy[.uniques] = carried.uniqueTags.sorted()
        }
    }

    /// Adds one object; ids must ascend (the order of the `objects` database they are read from).
    mutating func add(id: ObjectID, values: [Value], version: TransactionID) throws {
        guard let e = schema.entity(tag: id.entityTag) else {
            throw StrataError.corruptRecord(
                id: id, reason: "no entity with tag \(id.entityTag) in schema \(schema.model) v\(schema.version)")
        }
        // `ObjectID`'s order is its key bytes' (big-endian high, then low).
        if let lastID, lastID >= id {
            throw StrataError.corruptRecord(id: id, reason: "objects out of key order after \(lastID)")
        }
        lastID = id
        records.add(key: id.keyBytes,
                    value: RecordCodec.encode(Record(entity: e, id: id, values: values, version: version)),
                    sorted: true)
        for index in e.indexes where carried?.indexTags.contains(index.tag) != true {
            indexes.addKey { Layout.appendIndexKey(index, record: values, id: id, to: &$0) }
        }
        for unique in e.uniques where carried?.uniqueTags.contains(unique.tag) != true {
            if let key = try Layout.uniqueKey(unique, record: values, entity: e, id: id) {
                uniques.add(key: key, value: id.keyBytes)
            }
        }
        objectsPerEntity[e.tag, default: 0] += 1
        added += 1
        if added == Self.sampleObjects, expectedObjects > added {
            let scale = Double(expectedObjects) / Double(added) * 1.05
            let total = gatheredBytes
            let fit = min(1.0, Double(runBudgetBytes) / max(1.0, Double(total) * scale))
            for run in [\BulkStateBuilder.indexes, \.uniques] { self[keyPath: run].reserve(scale: scale * fit) }
        }
        if records.byteCount >= Self.batchBytes { try write(\.records, into: .objects) }
        if gatheredBytes >= runBudgetBytes { try writeRuns() }
    }

    /// Bytes of the index, unique and link keys gathered and not yet written.
    private var gatheredBytes: Int { indexes.byteCount + uniques.byteCount + links.byteCount }

    /// Adds one link key (relationship tag · from · to), in any order.
    mutating func addLink(_ key: [UInt8]) throws {
        links.add(key: key, value: [])
        if gatheredBytes >= runBudgetBytes { try writeRuns() }
    }

    /// Writes everything still gathered (and the carried keys, if no run has yet).
    mutating func finish() throws {
        try write(\.records, into: .objects)
        try writeRuns()
    }

    private mutating func writeRuns() throws {
        // Records first: a unique clash reads the clashing object's values back.
        try write(\.records, into: .objects)
        try write(\.indexes, into: .indexes)
        try write(\.uniques, into: .uniques)
        try write(\.links, into: .links)
    }

    private mutating func write(_ which: WritableKeyPath<BulkStateBuilder, KeyRun>, into name: DatabaseName) throws {
        // Carried keys are copied with the first run written to their database, each tag's
        // range where its order puts it among the run's keys.
        let append = name == .objects || !started.contains(name)
        var pendingCopies = append ? (toCopy[name] ?? [])[...] : []
        toCopy[name] = nil
        guard !self[keyPath: which].entries.isEmpty || !pendingCopies.isEmpty else { return }
        var run = self[keyPath: which]
        self[keyPath: which] = KeyRun()
        defer {
            // The records' buffer is refilled batch after batch: keep its memory.
            if which == \BulkStateBuilder.records {
                run.removeAll()
                self[keyPath: which] = run
            }
        }
        run.sortIfNeeded()
        // Objects arrive in key order (checked by `add`), so every batch appends.
        let db = env[name]
        let isUnique = name == .uniques
        if isUnique, let (earlier, later) = run.firstDuplicate() {
            try env.read { txn -> Void in
                throw try clash(txn, key: run.key(later), id: run.value(later), owner: run.value(earlier))
            }
        }
        func tag(_ i: Int) -> UInt16 { UInt16(truncatingIfNeeded: run.entries[i].prefix >> 48) }
        var next = 0
        while next < run.entries.count || !pendingCopies.isEmpty {
            if let t = pendingCopies.first, let carried, next >= run.entries.count || t < tag(next) {
                // Keys from the tag on, up to the next tag (its 2 bytes alone: every key is longer
                // than its tag, so none equals them), through the appending copy.
                _ = try env.copyDirect(name, from: carried.source, sourceEnv: carried.sourceEnv, into: nil,
                                       start: Layout.u16(t), until: t == .max ? nil : Layout.u16(t + 1))
                pendingCopies.removeFirst()
                continue
            }
            let stopTag = pendingCopies.first
            var end = next
            try env.writeGrowing { txn in
                end = next
                var bytes = 0
                func more() -> Bool {
                    end < run.entries.count && bytes < Self.batchBytes && (stopTag.map { tag(end) < $0 } ?? true)
                }
                if append {
                    try txn.withAppender(db) { appender in
                        while more() {
                            try run.withEntry(end) { k, v in
                                try appender.append(key: k, value: v)
                                bytes += k.count + v.count
                            }
                            end += 1
                        }
                    }
                } else {
                    while more() {
                        try run.withEntry(end) { k, v in
                            if try txn.put(db, key: k, value: v,
                                           mode: isUnique ? .noOverwrite : .replace) == .keyExists {
                                // The stored owner may be damaged (a copied index): an error, not a trap.
                                let owner = try txn.withValue(db, key: k) { try ObjectID.stored($0, in: db.name) }
                                let id = try ObjectID.stored(v, in: db.name)
                                throw try clash(txn, key: Array(k), id: id, owner: owner ?? id)
                            }
                            bytes += k.count + v.count
                        }
                        end += 1
                    }
                }
            }
            next = end
            // As a compaction's copy does: the disk starts on this batch while the next is
            // built, and a new generation's written pages leave the page cache.
            if env.options.noSync { env.startWriteback() }
        }
        started.insert(name)
    }

    /// The validation error of a unique key two objects hold (as ``StateApplier`` reports it).
    private func clash(_ txn: LMDBTransaction, key: [UInt8], id: ObjectID, owner: ObjectID) throws -> StrataError {
        let tag = UInt16(key[0]) << 8 | UInt16(key[1])
        guard let e = schema.entity(tag: id.entityTag), let unique = e.uniques.first(where: { $0.tag == tag }),
              let record = try txn.withValue(env[.objects], key: id.keyBytes,
                                             { try RecordCodec.decode($0, id: id, schema: schema) }) else {
            return StrataError.corruptRecord(id: id,
                                             reason: "unique key clash with \(owner) on an unknown unique (tag \(tag))")
        }
        return StrataError.uniqueClash(unique, e, record.values, id: id, owner: owner)
    }
}
