import Foundation

/// Rewrites state and log through the migration hops.
///
/// The log is rewritten entry by entry. An update only carries the attributes it changed, and a
/// step (a conversion, a custom step) needs the whole record, so the upcaster keeps the
/// old-schema records in a scratch environment while it walks the log (the records alone: no
/// indexes). The new generation's state is not replayed from the rewritten log: it is the live
/// state, each object transformed once and written in bulk (``BulkStateBuilder``) — the same
/// state, since an upcast update's values are the transform of the whole record after it.
/// `verify` on a migrated store checks that the two agree. The two parts run at once when a
/// second snapshot of the same transaction can be had (``stateSide()``), and a failure on one
/// side stops the other (``MigrationCancellation``). The log rewrite also tracks the unique
/// keys a migration can change through the history (``checkedUniques``): a clash there fails
/// the migration, since the rewritten log could not be replayed. Transactions committed during
/// the build are caught up through ``StateApplier`` as a save would be.
struct Upcaster: Sendable {
    let old: Schema
    let new: Schema
    let hops: [MigrationHop]
    let newEnv: LMDBEnvironment
    let scratch: LMDBEnvironment
    var timings: [Duration]
    var transactions = 0

    /// Per old entity tag: the new entity, and the uniques of it whose keys the log rewrite
    /// tracks (in the scratch's `uniques` database) to refuse a migration under which two
    /// objects would have shared a unique key at some transaction — a replay of the rewritten
    /// log (`verify`'s rebuild) would fail there. A unique over the same attributes, carried
    /// unchanged (no conversion, no custom step, one hop), as an old one is left out: the old
    /// store already held it at every transaction, with the same keys.
    let checkedUniques: [UInt16: (entity: EntityDescription, uniques: [IndexDescription])]
    /// Shared by the two sides of the build (``stateSide()`` copies the reference).
    let cancellation = MigrationCancellation()

    init(old: Schema, new: Schema, hops: [MigrationHop], newEnv: LMDBEnvironment) throws {
        self.old = old
        self.new = new
        self.hops = hops
        self.newEnv = newEnv
        var checked: [UInt16: (entity: EntityDescription, uniques: [IndexDescription])] = [:]
        for e in old.entities {
            guard let target = new.entity(tag: e.tag), !target.uniques.isEmpty else { continue }
            let plan = hops.count == 1 ? hops[0].plans[e.tag] : nil
            let toCheck = target.uniques.filter { u in
                guard let positions = plan?.unchangedPositions(u) else { return true }
                return !e.uniques.contains { $0.attributes == positions }
            }
            if !toCheck.isEmpty { checked[e.tag] = (target, toCheck) }
        }
        checkedUniques = checked
        scratch = try StateRebuilder.scratch(
            sizeHint: 1 << 20, storeDirectory: URL(fileURLWithPath: newEnv.path).deletingLastPathComponent().path)
        timings = Array(repeating: .zero, count: hops.reduce(0) { $0 + $1.steps.count })
    }

    func close() { scratch.close() }

    /// A copy for building the state on another thread: the same schemas, hops and generation,
    /// its own step timings (added back with ``addTimings(of:)``). It does not use the scratch.
    func stateSide() -> Upcaster {
        var side = self
        side.timings = Array(repeating: .zero, count: timings.count)
        side.transformed = 0
        side.transactions = 0
        return side
    }

    /// Adds the step times `other` measured (see ``stateSide()``).
    mutating func addTimings(of other: Upcaster) {
        for i in timings.indices { timings[i] += other.timings[i] }
    }

    /// Records transformed so far; one in ``timingSample`` is timed step by step.
    var transformed = 0
    /// Per-step times are measured on one record in this many and scaled up (an estimate: the
    /// clock reads would otherwise cost more than the steps).
    static let timingSample = 64

    mutating func transform(_ id: ObjectID, _ values: [Value]) throws -> [Value] {
        var v = values
        defer { transformed += 1 }
        guard transformed % Self.timingSample == 0 else {
            for hop in hops { v = try hop.transform(id, v) }
            return v
        }
        var sampled = [Duration](repeating: .zero, count: timings.count)
        var offset = 0
        try sampled.withUnsafeMutableBufferPointer { all in
            for hop in hops {
                v = try hop.transform(
                    id, v, timings: UnsafeMutableBufferPointer(rebasing: all[offset..<offset + hop.steps.count]))
                offset += hop.steps.count
            }
        }
        for i in timings.indices { timings[i] += sampled[i] * Self.timingSample }
        return v
    }

    func mapTag(_ tag: UInt16) -> UInt16? {
        var t: UInt16? = tag
        for hop in hops { t = t.flatMap { hop.relationshipTags[$0] } }
        return t
    }

    /// ``mapTag(_:)`` of a log entry's edge: a migration keeps every relationship (it may only
    /// rename one), so a tag without a place in the new schema is one the store's schema never
    /// declared, a damaged entry (it was left out of the rewritten history without a word, while
    /// the state's build refuses the same edge).
    private func mappedTag(_ tag: UInt16) throws -> UInt16 {
        guard let t = mapTag(tag) else {
            throw MigrationError(reason: """
                an edge of relationship tag \(tag), which the store's schema does not declare: the log is \
                damaged (run verify)
                """)
        }
        return t
    }

    /// For a compacted store: the old-schema state at the horizon into the scratch (the records
    /// the first updates after the horizon need).
    mutating func loadBase(_ view: ReadView, horizon: TransactionID, head: TransactionID) throws {
        guard horizon > .zero else { return }
        _ = try StateRebuilder.loadBase(from: view, horizon: horizon, head: head, into: scratch, schema: old)
        // The scratch's uniques become the new-schema keys of the checked uniques at the horizon.
        let uniques = scratch[.uniques], objects = scratch[.objects]
        try scratch.writeGrowing { try $0.empty(uniques) }
        guard !checkedUniques.isEmpty else { return }
        // A chunk of objects at a time (decoded, transformed, their keys written), each chunk read
        // after the last one's key: memory stays bounded however large the state at the horizon.
        var start: [UInt8]?
        while true {
            var chunk: [(ObjectID, [Value])] = []
            var last: [UInt8]?
            try scratch.read { txn in
                var scan = ChunkedScan(txn: txn, db: objects, prefix: nil, start: start)
                while chunk.count < Self.baseChunkObjects, let (k, v) = try scan.next() {
                    last = k
                    let id = try k.withUnsafeBytes { try ObjectID.stored($0, in: "objects") }
                    guard checkedUniques[id.entityTag] != nil else { continue }
                    chunk.append((id, try v.withUnsafeBytes { try RecordCodec.decode($0, id: id, schema: old) }.values))
                }
            }
            guard let last else { return }
            let transformed = try chunk.map { id, values in (id, try transform(id, values)) }
            try scratch.writeGrowing { txn in
                for (id, values) in transformed { try trackUniques(txn, id, before: nil, after: values) }
            }
            start = last + [0]   // the least key after it
        }
    }

    /// Objects of a compacted store's state at its horizon decoded at once while their unique
    /// keys are checked (``loadBase(_:horizon:head:)``).
    static let baseChunkObjects = 8192

    /// Tags of the new schema's indexes and uniques whose keys the old store holds byte for
    /// byte: one hop, an entity without a custom step, the same tag, and the same attributes
    /// carried over without conversion (an index key is the tag, the attributes' sortable
    /// encodings and the id; a unique's is the tag and the encodings, with the id as value).
    func carriedKeyTags() -> (indexes: Set<UInt16>, uniques: Set<UInt16>) {
        guard hops.count == 1 else { return ([], []) }
        var indexes = Set<UInt16>(), uniques = Set<UInt16>()
        for e in old.entities {
            guard let plan = hops[0].plans[e.tag], let target = new.entity(tag: e.tag) else { continue }
            func carried(_ d: IndexDescription, among old: [IndexDescription]) -> Bool {
                guard let p = plan.unchangedPositions(d) else { return false }
                return old.contains { $0.tag == d.tag && $0.attributes == p }
            }
            for d in target.indexes where carried(d, among: e.indexes) { indexes.insert(d.tag) }
            for d in target.uniques where carried(d, among: e.uniques) { uniques.insert(d.tag) }
        }
        return (indexes, uniques)
    }

    /// Moves `id`'s checked unique keys from those of `before` to those of `after` (new-schema
    /// values; nil: the object does not exist), in the scratch, refusing a key another object
    /// holds — what ``StateApplier`` does to the `uniques` database when the rewritten log is
    /// replayed.
    ///
    /// With `deferring`, a key another object holds is put off (returned) instead of refused, and a
    /// key given up is removed only when `id` holds it: a logged transaction is judged on its
    /// result, as its save was (a child context's commit logs a new object's insert before the
    /// delete of the one whose key it takes, and two objects may swap values), and
    /// ``takeDeferredUniques(_:_:)`` settles the keys put off at the transaction's end.
    @discardableResult
    func trackUniques(_ txn: LMDBTransaction, _ id: ObjectID, before: [Value]?, after: [Value]?,
                      deferring: Bool = false) throws -> [DeferredUniqueKey] {
        guard let (entity, uniques) = checkedUniques[id.entityTag] else { return [] }
        let db = scratch[.uniques]
        var deferred: [DeferredUniqueKey] = []
        for u in uniques {
            let was = try before.flatMap { try Layout.uniqueKey(u, record: $0, entity: entity, id: id) }
            let now = try after.flatMap { try Layout.uniqueKey(u, record: $0, entity: entity, id: id) }
            if was == now { continue }
            // Put off, `id` may never have taken it: the object that holds it keeps it.
            if let was, try !deferring || holder(of: was, txn) == id { _ = try txn.delete(db, key: was) }
            guard let now, let after else { continue }
            if try txn.put(db, key: now, value: id.keyBytes, mode: .noOverwrite) == .keyExists {
                guard let holder = try holder(of: now, txn), holder != id else { continue }
                guard deferring else { throw StrataError.uniqueClash(u, entity, after, id: id, owner: holder) }
                deferred.append(DeferredUniqueKey(key: now, unique: u, entity: entity, id: id))
            }
        }
        return deferred
    }

    /// The object holding unique key `key` in the scratch.
    private func holder(of key: [UInt8], _ txn: LMDBTransaction) throws -> ObjectID? {
        try txn.withValue(scratch[.uniques], key: key) { try ObjectID.stored($0, in: "uniques") } ?? nil
    }

    /// At the end of a logged transaction, the unique keys its changes put off: each one its
    /// object still holds (it exists, and its values, in the new schema, still give that key) is
    /// taken, refused when another object still holds it.
    private mutating func takeDeferredUniques(_ deferred: [DeferredUniqueKey], _ txn: LMDBTransaction) throws {
        let db = scratch[.uniques], objects = scratch[.objects], old = self.old
        for d in deferred {
            guard let r = try txn.withValue(objects, key: d.id.keyBytes, { try RecordCodec.decode($0, id: d.id, schema: old) })
            else { continue }
            let values = try transform(d.id, r.values)
            guard try Layout.uniqueKey(d.unique, record: values, entity: d.entity, id: d.id) == d.key else { continue }
            if try txn.put(db, key: d.key, value: d.id.keyBytes, mode: .noOverwrite) == .keyExists {
                if let holder = try holder(of: d.key, txn), holder != d.id {
                    throw StrataError.uniqueClash(d.unique, d.entity, values, id: d.id, owner: holder)
                }
            }
        }
    }

    /// The new generation's state from `view`'s live state: every object transformed and
    /// written in bulk, links under their new tags, and the object counts (unchanged by a
    /// migration; checked against the objects written).
    mutating func buildState(_ view: ReadView, expectedObjects: Int, progress: (Int) -> Void) throws {
        let (indexTags, uniqueTags) = carriedKeyTags()
        var builder = BulkStateBuilder(
            env: newEnv, schema: new, expectedObjects: expectedObjects,
            carried: .init(source: view.txn, sourceEnv: view.env, indexTags: indexTags, uniqueTags: uniqueTags))
        var objects = ChunkedScan(txn: view.txn, db: view.env[.objects], prefix: nil)
        var done = 0
        while let (k, v) = try objects.next() {
            guard k.count == 16 else {
                throw MigrationError(
                    reason: "the objects database holds a \(k.count)-byte key (ids are 16 bytes); run verify")
            }
            let id = k.withUnsafeBytes { ObjectID(keyBytes: $0) }
            let r = try v.withUnsafeBytes { try RecordCodec.decode($0, id: id, schema: old) }
            try builder.add(id: id, values: try transform(id, r.values), version: r.version)
            done += 1
            if done % 4_096 == 0, cancellation.isCancelled { throw MigrationCancelled() }
            if done % 65_536 == 0 { progress(done) }
        }
        // Damage is not carried into the new generation (``StateCheck``: an entry without its
        // inverse, an id of the wrong entity).
        var check = StateCheck(schema: old)
        var links = ChunkedScan(txn: view.txn, db: view.env[.links], prefix: nil)
        while let (k, _) = try links.next() {
            guard k.count == 34 else {
                throw MigrationError(
                    reason: "the links database holds a \(k.count)-byte key (links are 34 bytes); run verify")
            }
            try k.withUnsafeBytes { try check.link(key: $0) }
            let oldTag = UInt16(k[0]) << 8 | UInt16(k[1])
            guard old.relationship(tag: oldTag) != nil else {
                throw MigrationError(reason: "a link has relationship tag \(oldTag), which \(old.model) " +
                                             "v\(old.version) does not declare; run verify")
            }
            // Every relationship carries over (the shape check refuses steps that drop one).
            guard let tag = mapTag(oldTag) else {
                throw MigrationError(reason: "relationship tag \(oldTag) has no counterpart in v\(new.version)")
            }
            try builder.addLink(Layout.u16(tag) + k.dropFirst(2))
        }
        try check.finishLinks { visit in
            var again = ChunkedScan(txn: view.txn, db: view.env[.links], prefix: nil)
            while let (k, _) = try again.next() { k.withUnsafeBytes(visit) }
        }
        try builder.finish()
        // Counts: the old store's, for every entity it has a count for (also the zero ones a
        // replay of the log leaves), each checked against what was written.
        var counts: [(key: [UInt8], value: [UInt8])] = []
        for e in old.entities {
            let key = MetaKey.count(e.tag)
            let stored = try view.txn.withValue(view.env[.counts], key: key) { b -> UInt64 in
                UInt64(try MetaKey.countValue(b, e.tag))
            }
            let written = builder.objectsPerEntity[e.tag] ?? 0
            guard let stored else {
                guard written == 0 else {
                    throw MigrationError(reason: "\(e.name) has \(written) objects but no stored count; run verify")
                }
                continue
            }
            guard stored == UInt64(written) else {
                throw MigrationError(
                    reason: "\(e.name) has \(written) objects but a stored count of \(stored); run verify")
            }
            counts.append((key, MetaKey.countValue(written)))
        }
        try newEnv.writeGrowing { txn in for c in counts { try txn.put(newEnv[.counts], key: c.key, value: c.value) } }
        progress(done)
    }

    /// Rewrites the log entries (`after`, `upTo`] through the steps into the new generation's
    /// log; with `applyingToState`, also to its state (the catch-up: the state was built before
    /// them). The scratch follows in the old schema.
    mutating func upcastLog(_ view: ReadView, after: TransactionID, upTo: TransactionID, applyingToState: Bool,
                            progress: (Int) -> Void) throws {
        guard upTo > after else { return }
        var batch: [LogEntry] = []
        var batchBytes = 0
        func flush(_ u: inout Upcaster) throws {
            guard !batch.isEmpty else { return }
            let upcast = try u.upcast(batch)
            try u.newEnv.writeGrowing { txn in
                for entry in upcast {
                    if applyingToState {
                        var applier = StateApplier(txn: txn, env: u.newEnv, schema: u.new,
                                                   transactionID: entry.transactionID)
                        try applier.applyLogged(entry.changes)
                    }
                    try txn.put(u.newEnv[.log], key: entry.transactionID.keyBytes, value: LogEntryCodec.encode(entry),
                                mode: .append)
                }
            }
            u.transactions += batch.count
            progress(u.transactions)
            batch.removeAll(keepingCapacity: true)
            batchBytes = 0
        }
        var expected = after.next
        var failure: Error?
        try view.forEachLogEntry(after.next.rawValue...upTo.rawValue) { entry in
            if cancellation.isCancelled {
                failure = MigrationCancelled()
                return false
            }
            guard entry.transactionID == expected else {
                failure = StrataError.corruptLogEntry(transaction: expected,
                                                      reason: "missing from the log; cannot migrate")
                return false
            }
            expected = expected.next
            batch.append(entry)
            batchBytes += entry.changes.count
            if batch.count >= 512 || batchBytes >= 65_536 {
                do { try flush(&self) } catch { failure = error; return false }
            }
            return true
        }
        if let failure { throw failure }
        guard expected == upTo.next else {
            throw StrataError.corruptLogEntry(transaction: expected, reason: "missing from the log; cannot migrate")
        }
        try flush(&self)
    }

    /// Entries in the new schema; the scratch's records advance through the originals.
    private mutating func upcast(_ entries: [LogEntry]) throws -> [LogEntry] {
        var out: [LogEntry] = []
        var pending: [(LogEntry, [LoggedChange])] = []
        // Compute with the scratch's records, then apply the originals to them, in one
        // transaction (redone whole if the scratch's map has to grow).
        let timingsBefore = timings, transformedBefore = transformed
        try scratch.writeGrowing { txn in
            pending.removeAll()
            timings = timingsBefore
            transformed = transformedBefore
            for entry in entries {
                do {
                    pending.append((entry, try upcastChanges(of: entry, txn)))
                } catch {
                    throw Self.naming(entry.transactionID, error)
                }
            }
        }
        for (entry, changes) in pending {
            out.append(
                LogEntry(transactionID: entry.transactionID, schemaVersion: new.version, timestampMs: entry.timestampMs,
                         author: entry.author, metadata: entry.metadata, changes: changes))
        }
        return out
    }

    /// One log entry's changes in the new schema; the scratch's records (in `txn`) advance through
    /// the original changes.
    private mutating func upcastChanges(of entry: LogEntry, _ txn: LMDBTransaction) throws -> [LoggedChange] {
        let objects = scratch[.objects], old = self.old
        func record(_ id: ObjectID) throws -> Record? {
            try txn.withValue(objects, key: id.keyBytes) { try RecordCodec.decode($0, id: id, schema: old) }
        }
        var changes: [LoggedChange] = []
        changes.reserveCapacity(entry.changes.count)
        var deferred: [DeferredUniqueKey] = []
        for c in entry.changes {
            switch c {
            case .insert(let id, let values):
                guard let e = old.entity(tag: id.entityTag), values.count == e.attributes.count else {
                    throw StrataError.corruptLogEntry(
                        transaction: entry.transactionID,
                        reason: "insert of \(id): no entity with its tag and \(values.count) attributes in " +
                                "\(old.model) v\(old.version)")
                }
                let t = try transform(id, values)
                changes.append(.insert(id: id, values: t))
                let record =
                    RecordCodec.encode(Record(entity: e, id: id, values: values, version: entry.transactionID))
                if try txn.put(objects, key: id.keyBytes, value: record, mode: .noOverwrite) == .keyExists {
                    throw StrataError.corruptLogEntry(transaction: entry.transactionID,
                                                      reason: "inserts \(id), which exists")
                }
                deferred += try trackUniques(txn, id, before: nil, after: t, deferring: true)
            case .update(let id, let attrs, let previous):
                guard var record = try record(id) else {
                    throw MigrationError(
                        reason: "transaction \(entry.transactionID) updates missing object \(id)")
                }
                let before = record.values
                for a in attrs {
                    guard a.attribute >= 0, a.attribute < record.values.count else {
                        throw StrataError.corruptLogEntry(
                            transaction: entry.transactionID,
                            reason: "update of \(id) names attribute \(a.attribute) of \(record.values.count)")
                    }
                    record.values[a.attribute] = a.new
                }
                let tb = try transform(id, before), ta = try transform(id, record.values)
                let diff = tb.indices.filter { tb[$0] != ta[$0] }
                    .map { AttributeChange(attribute: $0, old: tb[$0], new: ta[$0]) }
                // Kept even when empty: the update still gave the object this transaction's version.
                changes.append(.update(id: id, changes: diff, previousVersion: previous))
                record.version = entry.transactionID
                try txn.put(objects, key: id.keyBytes, value: RecordCodec.encode(record))
                deferred += try trackUniques(txn, id, before: tb, after: ta, deferring: true)
            case .delete(let id, let values, let previous):
                let t = try transform(id, values)
                changes.append(.delete(id: id, values: t, previousVersion: previous))
                guard try txn.delete(objects, key: id.keyBytes) else {
                    throw StrataError.corruptLogEntry(transaction: entry.transactionID,
                                                      reason: "deletes \(id), which does not exist")
                }
                deferred += try trackUniques(txn, id, before: t, after: nil, deferring: true)
            case .link(let tag, let a, let b):
                changes.append(.link(relationship: try mappedTag(tag), from: a, to: b))
            case .unlink(let tag, let a, let b):
                changes.append(.unlink(relationship: try mappedTag(tag), from: a, to: b))
            }
        }
        try takeDeferredUniques(deferred, txn)
        return changes
    }

    /// `error`, met rewriting the log entry of `tx`, naming that transaction when it is a value
    /// that does not convert or a unique clash: the current state may not show it (a value
    /// changed since). Other errors (a map to grow, a damaged entry) are passed on as they are.
    private static func naming(_ tx: TransactionID, _ error: Error) -> Error {
        switch error {
        case StrataError.validation(let f):
            return StrataError.validation(ValidationFailure(
                kind: f.kind, entity: f.entity, objectID: f.objectID, field: f.field,
                reason: "\(f.reason) (at transaction \(tx) of the log)"))
        case let e as MigrationError where !e.reason.hasPrefix("transaction "):
            return MigrationError(reason: "transaction \(tx) of the log: \(e.reason)")
        default:
            return error
        }
    }

    /// The transaction that records the migration itself (no data changes).
    func writeMarker(_ tx: TransactionID, from: Int, to: Int, steps: [String]) throws {
        try writeMarker(LogEntryCodec.encode(Self.markerEntry(tx, from: from, to: to, steps: steps)), at: tx)
    }

    /// The log entry that records a migration: no changes, the new version, the steps.
    static func markerEntry(_ tx: TransactionID, from: Int, to: Int, steps: [String]) -> LogEntry {
        LogEntry(transactionID: tx, schemaVersion: to, timestampMs: Int64(Date().timeIntervalSince1970 * 1000),
                 author: "migration",
                 metadata: ["migrationFrom": String(from), "migrationTo": String(to),
                            "steps": steps.joined(separator: "; ")],
                 changes: [])
    }

    /// Writes an encoded migration entry at `tx` of the new generation's log.
    func writeMarker(_ bytes: [UInt8], at tx: TransactionID) throws {
        try newEnv.writeGrowing { try $0.put(newEnv[.log], key: tx.keyBytes, value: bytes, mode: .append) }
    }
}
