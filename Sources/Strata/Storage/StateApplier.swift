
/// Applies logged changes to the state databases (objects, links, indexes, uniques, counts) inside
/// one write transaction. The writer and `verify`'s rebuild both use it, which is what makes
/// "state rebuilt from the log is byte-equal to the materialized state" hold by construction.
struct StateApplier: StateStore {
    let txn: LMDBTransaction
    let env: LMDBEnvironment
    let schema: Schema
    /// The transaction being applied (becomes the version of every record it touches).
    var transactionID: TransactionID
    private var countDeltas = CountDeltas()
    var defersUniqueClashes = false
    private var deferredUniques: [DeferredUniqueKey] = []
    /// Secondary-index entries to put (true) or delete (false), written in key order by
    /// ``flushCounts()``: a bulk save then walks each index B-tree once, left to right, instead of
    /// jumping to a random page per object. Nothing reads the index B-trees inside a save.
    /// Each entry's one-byte value says put (1) or delete (0). Kept in one flat buffer
    /// (``KeyRun``): sorted as separate arrays, a bulk save's entries take about a quarter of the
    /// writer's time in a 10k-track import.
    fileprivate var pendingIndex = KeyRun()
    /// When set, ``flushCounts()`` hands the save's index entries to it instead of writing
    /// them: the saves of one held write transaction (``HeldWrite``) gather theirs there, and
    /// they are written once, sorted together, just before the commit
    /// (``HeldIndexEntries/write(_:env:schema:releaseMappedPagesEvery:)``). Nothing reads the index
    /// B-trees inside the transaction, so every save resolves as it would with them written.
    var heldIndexes: HeldIndexEntries?
    /// When positive, the store's mapped pages are released (``LMDBEnvironment/releaseMappedPagesHoldingMapLock()``)
    /// after this many writes at random places: index and unique entries, updated and deleted
    /// records, links (each relationship change: its two link entries, and the lookups that
    /// resolved its ends). A bulk save writes at random places of every index B-tree, and each
    /// page fault maps the neighbouring cached pages too, so without it one large save maps most
    /// of the file into the process. (Inserted records are not counted: their time-ordered ids
    /// append at the right edge of the objects tree.) Links must count: with them left out, the
    /// last batch of a 1M-record `storectl import` (1,000 playlists with 50k track links, 100k
    /// link entries) maps 354 MB of the file, against about 40 MB for the batches before.
    var releaseMappedPagesEvery = 0
    /// The interval the writer uses for saves of at least
    /// ``StoreConfiguration/releaseMappedPagesAfterChanges`` changes. Measured on a 1M-track
    /// import in 10k batches (BENCHMARKS.md, W1): peak RSS 757 MB without, 213 MB every 500
    /// writes, 190 MB every 256, 174 MB every 128, for about 10 % more time (pages faulted in
    /// again), of which 128 costs 3 % more than 256. Of the 174 MB, 129 MB are heap: mostly
    /// LMDB's copies of the pages the save dirties.
    static let bulkReleaseInterval = 128
    /// The interval for the saves of a bulk load into its new generation, which nobody else
    /// maps. Every release costs the faults that map the B-trees' upper pages again. A 1M-record
    /// `storectl import` in 25,000-record chunks (without releases inside the saves: 0.91 GB,
    /// 17.6–19.7 s): at 128, about 27 s; at 2,048, 0.49–0.51 GB and 19.6–22.4 s; at 8,192,
    /// 0.66 GB and 18.5–18.9 s.
    static let bulkLoadReleaseInterval = 2_048
    /// Writes counted since the last release; a bulk load carries it from one save to the next
    /// (one transaction holds many saves, each with an applier of its own).
    var writesSinceRelease = 0
    /// Leaves the secondary indexes alone (neither gathered nor written): set by a bulk load,
    /// whose generation gets its indexes built from its objects, in key order, when the load
    /// copies it (``BulkLoad``). Nothing reads an index inside a save, so the saves resolve as
    /// they would with them; unique keys, which saves do read, are kept as always.
    var skipsIndexes = false

    /// The objects and unique keys this applier's lookups found present: a save that names one
    /// object many times (the album of each of its tracks, found by its key, then checked as the
    /// end of each link) searches the B-trees for it once. The objects it inserted are kept too
    /// (a new track is checked as the end of its links, then for its required to-ones), its own
    /// unique keys are not (a put stores what was absent), and a delete of this applier forgets
    /// what it deleted. This applier is the only writer of the objects and unique keys while it
    /// lives: one save (or one replayed transaction), inside its transaction, each with an
    /// applier of its own, dropped with the save when it fails. Copies of the applier share it,
    /// as they share the transaction.
    private let seen = SeenState()

    /// See ``seen``. A class, so that the protocol's non-mutating lookups can note what they find.
    private final class SeenState {
        /// Objects known to be present.
        var present: Set<ObjectID> = []
        /// Unique keys known to be held, with their objects.
        var owners: [ByteKey: ObjectID] = [:]
    }

    init(txn: LMDBTransaction, env: LMDBEnvironment, schema: Schema, transactionID: TransactionID) {
        self.txn = txn
        self.env = env
        self.schema = schema
        self.transactionID = transactionID
    }

    func entity(of id: ObjectID) throws -> EntityDescription {
        guard let e = schema.entity(tag: id.entityTag) else {
            throw StrataError.corruptRecord(
                id: id, reason: "no entity with tag \(id.entityTag) in schema \(schema.model) v\(schema.version)")
        }
        return e
    }

    func record(_ id: ObjectID) throws -> Record? {
        try txn.withValue(env[.objects], key: id.keyBytes) { try RecordCodec.decode($0, id: id, schema: schema) }
    }

    func exists(_ id: ObjectID) throws -> Bool {
        if seen.present.contains(id) {
            assert((try? txn.contains(env[.objects], key: id.keyBytes)) == true, "a remembered object is stored")
            return true
        }
        let found = try txn.contains(env[.objects], key: id.keyBytes)
        if found { seen.present.insert(id) }
        return found
    }

    /// Targets linked from `from` through relationship `tag`, in id order.
    func targets(_ tag: UInt16, from: ObjectID) throws -> [ObjectID] {
        var result: [ObjectID] = []
        try txn.scan(env[.links], prefix: Layout.linkPrefix(tag, from)) { key, _ in
            // tag (2) + from (16) + to (16)
            guard key.count == 34 else {
                throw StrataError.corruptRecord(id: from, reason: "links: a key of \(key.count) bytes (34 expected)")
            }
            result.append(ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: key[18..<34])))
            return true
        }
        return result
    }

    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool {
        try txn.contains(env[.links], key: Layout.linkKey(tag, from, to))
    }

    /// The object holding unique key `key`, if any.
    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? {
        let memoKey = ByteKey(key)
        if let owner = seen.owners[memoKey] {
            assert((try? txn.withValue(env[.uniques], key: key) { try ObjectID.stored($0, in: "uniques") }) == owner,
                   "a remembered unique key is held by its object")
            return owner
        }
        let owner = try txn.withValue(env[.uniques], key: key) { try ObjectID.stored($0, in: "uniques") }
        if let owner { seen.owners[memoKey] = owner }
        return owner
    }

    mutating func apply(_ change: LoggedChange) throws {
        switch change {
        case .insert(let id, let values):
            let e = try entity(of: id)
            // A log entry read back is checked as much as its checksum allows: the rest here.
            guard values.count == e.attributes.count else {
                throw StrataError.corruptLogEntry(
                    transaction: transactionID,
                    reason: "insert of \(id) with \(values.count) values; \(e.name) has \(e.attributes.count) attributes")
            }
            let record = Record(entity: e, id: id, values: values, version: transactionID)
            // One B-tree search does both the existence check and the put.
            let encoded = RecordCodec.encode(record)
            let put = try id.withKeyBytes { key in
                try encoded.withUnsafeBytes { try txn.put(env[.objects], key: key, value: $0, mode: .noOverwrite) }
            }
            if put == .keyExists { throw StrataError.duplicateID(e, id) }
            seen.present.insert(id)
            try addIndexEntries(e, values, id)
            countDeltas.add(e.tag, 1)
        case .update(let id, let changes, _):
            guard var record = try record(id) else {
                throw StrataError.corruptRecord(id: id, reason: "update of a missing object")
            }
            let before = record.values
            for c in changes {
                guard c.attribute >= 0, c.attribute < record.values.count else {
                    throw StrataError.corruptLogEntry(
                        transaction: transactionID,
                        reason: "update of \(id) names attribute \(c.attribute) of \(record.values.count)")
                }
                record.values[c.attribute] = c.new
            }
            record.version = transactionID
            try txn.put(env[.objects], key: id.keyBytes, value: RecordCodec.encode(record))
            let touched = Set(changes.map(\.attribute))
            try reindex(record.entity, before, record.values, id, touched: touched)
            try countWriteForRelease()
        case .delete(let id, _, _):
            guard let record = try record(id) else {
                throw StrataError.corruptRecord(id: id, reason: "delete of a missing object")
            }
            try removeIndexEntries(record.entity, record.values, id)
            try txn.delete(env[.objects], key: id.keyBytes)
            seen.present.remove(id)
            countDeltas.add(record.entity.tag, -1)
            try countWriteForRelease()
        case .link(let tag, let a, let b):
            let (rel, inverse) = try relationshipPair(tag)
            try txn.put(env[.links], key: Layout.linkKey(rel, a, b), value: [])
            try txn.put(env[.links], key: Layout.linkKey(inverse, b, a), value: [])
            try countWriteForRelease()
        case .unlink(let tag, let a, let b):
            let (rel, inverse) = try relationshipPair(tag)
            try txn.delete(env[.links], key: Layout.linkKey(rel, a, b))
            try txn.delete(env[.links], key: Layout.linkKey(inverse, b, a))
            try countWriteForRelease()
        }
    }

    private func relationshipPair(_ tag: UInt16) throws -> (UInt16, UInt16) {
        guard let r = schema.linkRule(tag: tag) else {
            throw StrataError.corruptLogEntry(transaction: transactionID, reason: "unknown relationship tag \(tag)")
        }
        return (tag, r.inverseTag)
    }

    private mutating func addIndexEntries(_ e: EntityDescription, _ values: [Value], _ id: ObjectID) throws {
        for index in e.indexes where !skipsIndexes {
            pendingIndex.addKey(tag: 1) { Layout.appendIndexKey(index, record: values, id: id, to: &$0) }
        }
        for unique in e.uniques {
            if let key = try Layout.uniqueKey(unique, record: values, entity: e, id: id) {
                try putUnique(key, unique, e, values, id)
            }
        }
    }

    /// Puts a unique key, refusing one another object holds (checked by the put itself), or, when
    /// ``defersUniqueClashes``, putting it off until the set ends.
    private mutating func putUnique(_ key: [UInt8], _ unique: IndexDescription, _ e: EntityDescription,
                                    _ values: [Value], _ id: ObjectID) throws {
        if try txn.put(env[.uniques], key: key, value: id.keyBytes, mode: .noOverwrite) == .keyExists {
            guard let owner = try uniqueOwner(key), owner != id else { return }
            guard defersUniqueClashes else { throw StrataError.uniqueClash(unique, e, values, id: id, owner: owner) }
            deferredUniques.append(DeferredUniqueKey(key: key, unique: unique, entity: e, id: id))
            return
        }
        try countWriteForRelease()
    }

    /// Removes a unique key of `id`. While clashes are deferred the entry may belong to another
    /// object (the one `id` could not take it from): that one is left alone.
    private mutating func deleteUnique(_ key: [UInt8], of id: ObjectID) throws {
        if defersUniqueClashes, let owner = try uniqueOwner(key), owner != id { return }
        try txn.delete(env[.uniques], key: key)
        if !seen.owners.isEmpty { seen.owners[ByteKey(key)] = nil }
    }

    /// Applies a logged transaction's changes as its save was judged: on the save's result, with
    /// unique clashes put off to its end (so that objects exchanging unique values within it, as
    /// a child context's net changes may, apply; a key still held by two objects at the end is
    /// refused), then writes its counts. What every replay of the log uses: a replica applying the
    /// cluster's entries, the rebuild of `verify`, compaction's catch-up, a migration.
    mutating func applyLogged(_ changes: [LoggedChange]) throws {
        defersUniqueClashes = true
        for change in changes { try apply(change) }
        try takeDeferredUniqueKeys()
        try flushCounts()
    }

    mutating func takeDeferredUniqueKeys() throws {
        let held = try stillHeld(deferredUniques)
        deferredUniques = []
        defersUniqueClashes = false
        for (d, values) in held { try putUnique(d.key, d.unique, d.entity, values, d.id) }
    }

    private mutating func removeIndexEntries(_ e: EntityDescription, _ values: [Value], _ id: ObjectID) throws {
        for index in e.indexes where !skipsIndexes {
            pendingIndex.addKey(tag: 0) { Layout.appendIndexKey(index, record: values, id: id, to: &$0) }
        }
        for unique in e.uniques {
            if let key = try Layout.uniqueKey(unique, record: values, entity: e, id: id) {
                try deleteUnique(key, of: id)
            }
        }
    }

    private mutating func reindex(_ e: EntityDescription, _ old: [Value], _ new: [Value], _ id: ObjectID,
                                  touched: Set<Int>) throws {
        for index in e.indexes where !skipsIndexes && index.attributes.contains(where: touched.contains) {
            let before = Layout.indexKey(index, record: old, id: id),
                after = Layout.indexKey(index, record: new, id: id)
            if before == after { continue }
            pendingIndex.add(key: before, value: [0])
            pendingIndex.add(key: after, value: [1])
        }
        for unique in e.uniques where unique.attributes.contains(where: touched.contains) {
            if let key = try Layout.uniqueKey(unique, record: old, entity: e, id: id) { try deleteUnique(key, of: id) }
            if let key = try Layout.uniqueKey(unique, record: new, entity: e, id: id) {
                try putUnique(key, unique, e, new, id)
            }
        }
    }

    /// Counts one write at a random place; see ``releaseMappedPagesEvery``.
    private mutating func countWriteForRelease() throws {
        guard releaseMappedPagesEvery > 0 else { return }
        writesSinceRelease += 1
        guard writesSinceRelease >= releaseMappedPagesEvery else { return }
        writesSinceRelease = 0
        // Only a memory saving: if it fails (no /proc, madvise refused), the save goes on and
        // this save stops trying (the writer logs the same failure after its commit).
        do { try env.releaseMappedPagesHoldingMapLock() } catch { releaseMappedPagesEvery = 0 }
    }

    /// Inserts whole records one by one, each with its own version, in one write transaction of
    /// `env` (redone whole if the map grows), with their index and unique keys and counts.
    static func insertAll(_ records: [Record], into env: LMDBEnvironment, schema: Schema) throws {
        try env.writeGrowing { txn in
            var applier = StateApplier(txn: txn, env: env, schema: schema, transactionID: .zero)
            for r in records {
                applier.transactionID = r.version
                try applier.apply(.insert(id: r.id, values: r.values))
            }
            try applier.flushCounts()
        }
    }

    /// Writes the buffered index entries (in key order) and the per-entity object counts. Called
    /// at the end of every save (and every replayed transaction).
    mutating func flushCounts() throws {
        if let heldIndexes {
            heldIndexes.take(pendingIndex)
            pendingIndex.removeAll()
        } else {
            try writePendingIndexEntries()
        }
        for (tag, delta) in countDeltas.entries where delta != 0 {
            // Key and value on the stack: a save's count update allocates nothing.
            try MetaKey.withCountKey(tag) { key in
                let current = try txn.withValue(env[.counts], key: key) { b -> Int in try MetaKey.countValue(b, tag) }
                    ?? 0
                // Below zero only when the count was already wrong (a store whose counts were
                // lost, or a rebuild replaying deletes of objects from before its horizon):
                // kept at zero, and `verify` reports a count that differs from the objects.
                let value = UInt64(max(0, current + delta)).bigEndian
                _ = try withUnsafeBytes(of: value) { try txn.put(env[.counts], key: key, value: $0) }
            }
        }
        countDeltas.removeAll()
    }

    /// Writes the gathered index entries (``pendingIndex``; one-byte value: put 1, delete 0) in
    /// key order, and holds none afterwards. A stable sort, and for the same key the later
    /// operation wins: a delete then a put of one key leaves it present, a put then a delete
    /// leaves it absent (a delete of a key that is not there is nothing).
    fileprivate mutating func writePendingIndexEntries() throws {
        guard !pendingIndex.entries.isEmpty else { return }
        let db = env[.indexes]
        pendingIndex.sortIfNeeded()
        let count = pendingIndex.entries.count
        // In key order through one cursor: neighbouring entries on one leaf cost no descent.
        try txn.withSortedWriter(db) { writer in
            for i in 0..<count {
                if i + 1 < count, pendingIndex.sameKey(i, i + 1) { continue }
                let put = pendingIndex.tag(i) == 1
                try pendingIndex.withEntry(i) { key, _ in
                    // An empty value at a valid address: LMDB copies it with memcpy, which
                    // must not be given NULL even for zero bytes.
                    if put {
                        try writer.put(key: key, value: UnsafeRawBufferPointer(start: key.baseAddress, count: 0))
                    } else {
                        try writer.delete(key: key)
                    }
                }
                try countWriteForRelease()
            }
        }
        pendingIndex.removeAll()
    }
}

/// The index entries of the saves of one held write transaction (``StateApplier/heldIndexes``),
/// in the order the saves made them, written together before the transaction commits.
///
/// An import of 100,000 records into a store of 1,000,000 puts about 280,000 index entries into
/// index B-trees of about 28,000 leaves. Written save by save (5,000 records each), a save's
/// entries are about one to a leaf, and each put searches the tree from its root; sorted
/// together, about ten go to each leaf in a row, through one cursor. Used on the writer's queue
/// only, inside the one transaction it belongs to; a transaction applied again (after the map
/// grew) starts with a new one.
final class HeldIndexEntries {
    private var run = KeyRun()

    /// The entries held.
    var count: Int { run.entries.count }

    /// Adds the entries of `saveRun`, after those held (a later save's operation on a key wins).
    func take(_ saveRun: KeyRun) { run.append(contentsOf: saveRun) }

    /// Writes every entry held into the indexes of `txn`, in key order, as a save's applier
    /// writes its own (releasing mapped pages every `releaseMappedPagesEvery` writes; 0: never),
    /// and holds none afterwards.
    func write(_ txn: LMDBTransaction, env: LMDBEnvironment, schema: Schema, releaseMappedPagesEvery: Int) throws {
        guard !run.entries.isEmpty else { return }
        var applier = StateApplier(txn: txn, env: env, schema: schema, transactionID: .zero)
        applier.releaseMappedPagesEvery = releaseMappedPagesEvery
        applier.pendingIndex = run
        run = KeyRun()
        try applier.writePendingIndexEntries()
    }
}

/// Net inserts less deletes per entity tag within one save: a save touches a few entities, so a
/// short list searched in order (a dictionary hashed the tag with SipHash at every insert).
struct CountDeltas {
    private(set) var entries: [(tag: UInt16, delta: Int)] = []

    mutating func add(_ tag: UInt16, _ delta: Int) {
        if let i = entries.firstIndex(where: { $0.tag == tag }) {
            entries[i].delta += delta
        } else {
            entries.append((tag, delta))
        }
    }

    mutating func removeAll() { entries.removeAll(keepingCapacity: true) }
}
