import Synchronization

/// A child context's pending changes, kept as *net state* over whatever lies below it (its
/// parent's view): the records it changed, explicit facts about the edges it added or removed,
/// the relationship keys whose whole target set it defines, and the unique keys its records hold.
///
/// The layer never holds deltas that only make sense against the state it was built on, so the
/// state below may change (the store commits, a parent changes) and the merged view still has one
/// value per attribute, at most one target per to-one, both directions of every edge in agreement
/// and a count equal to what a fetch returns. The rules (ARCHITECTURE.md, "Child contexts"):
///
/// - a record the layer holds wins (nil: deleted here); any other record is read below;
/// - an edge (r, a, b) is visible iff both ends exist and either the layer holds the fact
///   "present" for it, or it holds no fact for it, neither (r, a) nor (inverse r, b) is
///   *replaced* here, and the edge is visible below;
/// - a key (r, a) is replaced when a to-one (r) of `a` was set or cleared here (also as the
///   inverse side of a to-many edit) and for every relationship of an object deleted here.
///
/// It is a value (dictionaries are copy-on-write), so a read takes a copy in O(1) and evaluates
/// without holding any lock; making a change costs O(size of the change), never O(store).
struct Overlay: Sendable {
    struct LinkKey: Hashable, Sendable {
        let tag: UInt16
        let from: ObjectID
    }

    /// An object's first change in a layer.
    struct Touch: Sendable {
        let id: ObjectID
        /// Inserted here: the object did not exist below.
        let isNew: Bool
    }

    /// What the counts of this layer were computed against: the state of the base (its
    /// environment and LMDB transaction) and the revisions of the layers between the base and
    /// this one.
    struct CountBasis: Equatable, Sendable {
        let base: StateID
        let lower: [UInt64]
    }

    /// The fields of the layer behind one reference, copied on the first change of a shared one
    /// (as the standard library's collections are). A child insert moves its layer into an
    /// applier and back: with the fields inline, each move, and each empty layer left behind,
    /// retained and released every dictionary of the layer.
    ///
    /// `@unchecked Sendable` is safe because a `Storage` is only ever mutated through the
    /// `_modify` accessors below and ``insertIfClear(_:_:_:over:)``, each of which first makes sure
    /// (`makeUnique()`, `isKnownUniquelyReferenced`) that the `Overlay` value being mutated holds
    /// the only reference, and copies the storage otherwise. A storage reachable from two values
    /// (on any threads) is therefore never written, only read; one reachable from one value is
    /// only touched by whoever has exclusive (`inout`) access to that value.
    private final class Storage: @unchecked Sendable {
        /// In one struct, so that a change of several fields is one exclusive access of the
        /// class's property, not one (checked at run time) per field.
        var fields = Fields()

        init() {}
        init(copying o: Storage) { fields = o.fields }

        /// The storage of every empty layer until its first change.
        static let empty = Storage()
    }

    private struct Fields {
        var records = [ObjectID: Record?]()
        var order = [Touch]()
        var originals = [ObjectID: [Value]]()
        var edges = [LinkKey: [ObjectID: Bool]]()
        var edgeOriginals = [LinkKey: [ObjectID: Bool]]()
        var replaced = Set<LinkKey>()
        var replacedTags = Set<UInt16>()
        var uniques = [ByteKey: ObjectID]()
        var dirty = [UInt16: Set<ObjectID>]()
        var countDelta = [UInt16: Int]()
        var countBasis: CountBasis?
        var factCount = 0
    }

    private var storage: Storage

    private mutating func makeUnique() {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(copying: storage) }
    }

    /// Changed or inserted records; `nil` marks a deletion.
    var records: [ObjectID: Record?] {
        _read { yield storage.fields.records }
        _modify { makeUnique(); yield &storage.fields.records }
    }
    /// The keys of ``records`` in the order they were first changed here (a commit sends its
    /// changes in that order), each with whether it was inserted here (absent below then).
    var order: [Touch] {
        _read { yield storage.fields.order }
        _modify { makeUnique(); yield &storage.fields.order }
    }
    /// The values an object of the state below had when this layer first changed its attributes:
    /// what a commit compares with to send only the attributes changed here.
    var originals: [ObjectID: [Value]] {
        _read { yield storage.fields.originals }
        _modify { makeUnique(); yield &storage.fields.originals }
    }
    /// Explicit edge facts, both directions: target → present (true) or absent (false).
    var edges: [LinkKey: [ObjectID: Bool]] {
        _read { yield storage.fields.edges }
        _modify { makeUnique(); yield &storage.fields.edges }
    }
    /// For each edge fact of ``edges`` the layer set itself (not one built for a committed
    /// layer): whether the edge was linked below when the layer set it, so that a fact that says
    /// the same (an edge added and removed again) is no change to commit. Dropped with its fact.
    var edgeOriginals: [LinkKey: [ObjectID: Bool]] {
        _read { yield storage.fields.edgeOriginals }
        _modify { makeUnique(); yield &storage.fields.edgeOriginals }
    }
    /// Keys whose whole target set this layer defines (edges below are not read for them).
    var replaced: Set<LinkKey> {
        _read { yield storage.fields.replaced }
        _modify { makeUnique(); yield &storage.fields.replaced }
    }
    /// The relationship tags of ``replaced`` keys: a read of a key whose inverse tag is not here
    /// needs no per-target check.
    var replacedTags: Set<UInt16> {
        _read { yield storage.fields.replacedTags }
        _modify { makeUnique(); yield &storage.fields.replacedTags }
    }
    /// Unique keys held by records of this layer (every key of an object it inserted or updated),
    /// and their owners.
    var uniques: [ByteKey: ObjectID] {
        _read { yield storage.fields.uniques }
        _modify { makeUnique(); yield &storage.fields.uniques }
    }
    /// Objects whose edges changed, per entity tag. With the keys of ``records`` (objects whose
    /// record changed), the extra candidates a query must look at.
    var dirty: [UInt16: Set<ObjectID>] {
        _read { yield storage.fields.dirty }
        _modify { makeUnique(); yield &storage.fields.dirty }
    }
    /// Live objects added (removed, negative) per entity tag, against ``countBasis``.
    var countDelta: [UInt16: Int] {
        _read { yield storage.fields.countDelta }
        _modify { makeUnique(); yield &storage.fields.countDelta }
    }
    /// The state below that ``countDelta`` was computed against; when the state below is another,
    /// counts are computed from ``records`` instead.
    var countBasis: CountBasis? {
        _read { yield storage.fields.countBasis }
        _modify { makeUnique(); yield &storage.fields.countBasis }
    }
    /// Explicit edge facts held (each edge counts twice, once per direction).
    var factCount: Int {
        _read { yield storage.fields.factCount }
        _modify { makeUnique(); yield &storage.fields.factCount }
    }
    /// Changes with every successful change of the layer; unique across layers of the process.
    var revision: UInt64

    /// An empty layer with a revision of its own.
    init() {
        storage = .empty
        revision = Overlay.nextRevision()
    }

    /// An empty layer that only holds a place while its content is moved elsewhere
    /// (``OverlayApplier/take(_:)``); it is overwritten before anything reads it.
    init(placeholder: Void) {
        storage = .empty
        revision = 0
    }

    private static let revisions = Atomic<UInt64>(0)
    static func nextRevision() -> UInt64 { revisions.add(1, ordering: .relaxed).newValue }

    /// Whether the layer holds any change.
    var isEmpty: Bool { records.isEmpty && edges.isEmpty }

    /// Objects and edges with a pending change.
    var changeCount: Int { records.count + factCount / 2 }

    mutating func markDirty(_ id: ObjectID) { dirty[id.entityTag, default: []].insert(id) }

    /// The records of the layer with `version` as their version (a root commit's transaction).
    mutating func stampVersions(_ version: TransactionID) {
        for (id, entry) in records {
            if var r = entry {
                r.version = version
                records[id] = .some(r)
            }
        }
    }

    // MARK: Inserting

    /// Inserts a new object (`values` prepared for `e`) when nothing stands in its way: the layer
    /// holds no entry for `id` and no edge of it, `lower` has no object with `id`, and no record
    /// here or below holds any of its unique keys. Then the layer changes as
    /// ``OverlayApplier/apply(_:)`` would change it for the insert, without an undo list (there
    /// is nothing to roll back: every check comes before the first change), and true is returned.
    /// Otherwise nothing changes and false is returned: the applier then decides (and throws the
    /// duplicate or the clash, or inserts again an object deleted here).
    ///
    /// The id is looked at before the keys, as the applier does: a duplicate is reported as one
    /// even when its unique key is also too long. The layer's counts are brought up to date with
    /// `lower` first (``updateCounts(over:)``), as the applier's are.
    /// - Complexity: O(unique keys of `e`), each a lookup here and below.
    mutating func insertIfClear<L: LayeredState>(_ e: EntityDescription, _ id: ObjectID, _ values: [Value],
                                                 over lower: L) throws -> Bool {
        try updateCounts(over: lower)
        guard records[id] == nil, dirty.isEmpty || dirty[e.tag]?.contains(id) != true, try !lower.exists(id) else {
            return false
        }
        // The keys, checked below before anything changes; one entity's keys differ by their tags.
        var first: ByteKey?
        var more: [ByteKey] = []
        for u in e.uniques {
            guard let bytes = try Layout.uniqueKey(u, record: values, entity: e, id: id) else { continue }
            let k = ByteKey(bytes)
            guard try ownerBelow(k, over: lower) == nil else { return false }
            if first == nil { first = k } else { more.append(k) }
        }
        makeUnique()
        let inserted = Self.insertNew(&storage.fields, Record(entity: e, id: id, values: values, version: .zero),
                                      first: first, more: more)
        if inserted { revision = Overlay.nextRevision() }
        return inserted
    }

    /// ``insertIfClear(_:_:_:over:)``'s change of a layer that holds no entry for the record's
    /// id, one hash probe per unique key: each key is stored, and when the layer held it already
    /// (an object this layer inserted or changed holds it), that holder is put back, the entries
    /// stored before are taken out, and false is returned (nothing has changed then).
    private static func insertNew(_ f: inout Fields, _ record: Record, first: ByteKey?, more: [ByteKey]) -> Bool {
        let id = record.id
        f.records[id] = .some(record)
        if let first {
            if let previous = f.uniques.updateValue(id, forKey: first) {
                f.uniques[first] = previous
                f.records[id] = nil
                return false
            }
            for (i, k) in more.enumerated() {
                guard let previous = f.uniques.updateValue(id, forKey: k) else { continue }
                f.uniques[k] = previous
                for taken in more[..<i] { f.uniques[taken] = nil }
                f.uniques[first] = nil
                f.records[id] = nil
                return false
            }
        }
        f.order.append(Touch(id: id, isNew: true))
        f.countDelta[record.entity.tag, default: 0] += 1
        return true
    }

    // MARK: Reading through the layer

    func record<L: LayeredState>(_ id: ObjectID, over lower: L) throws -> Record? {
        if let entry = records[id] { return entry }
        return try lower.record(id)
    }

    func exists<L: LayeredState>(_ id: ObjectID, over lower: L) throws -> Bool {
        if let entry = records[id] { return entry != nil }
        return try lower.exists(id)
    }

    /// Whether the layer hides the edge (tag, from) → `to` of the state below without a fact
    /// of its own: one of its keys is replaced here.
    private func hides(_ key: LinkKey, _ to: ObjectID, inverse: UInt16?) -> Bool {
        if replaced.contains(key) { return true }
        guard let inverse, replacedTags.contains(inverse) else { return false }
        return replaced.contains(LinkKey(tag: inverse, from: to))
    }

    func targets<L: LayeredState>(_ tag: UInt16, from id: ObjectID, schema: Schema,
                                  over lower: L) throws -> [ObjectID] {
        let key = LinkKey(tag: tag, from: id)
        let facts = edges[key]
        let inverse = replacedTags.isEmpty ? nil : schema.inverseTag(of: tag)
        let checksInverse = inverse.map { replacedTags.contains($0) } ?? false
        let isReplaced = !replaced.isEmpty && replaced.contains(key)
        if facts == nil, !checksInverse, !isReplaced { return try lower.targets(tag, from: id) }
        var result: [ObjectID] = []
        if !isReplaced {
            for t in try lower.targets(tag, from: id) {
                if let present = facts?[t] {
                    if present { result.append(t) }
                } else if !checksInverse || !hides(key, t, inverse: inverse) {
                    result.append(t)
                }
            }
        }
        guard let facts else { return result }
        let fromBelow = result.count
        var listed = Set(result)
        for (t, present) in facts where present && !listed.contains(t) {
            guard try exists(t, over: lower) else { continue }
            result.append(t)
            listed.insert(t)
        }
        if result.count > fromBelow { result.sort() }
        if !result.isEmpty, try !exists(id, over: lower) { return [] }
        return result
    }

    func linked<L: LayeredState>(_ tag: UInt16, from: ObjectID, to: ObjectID, schema: Schema,
                                 over lower: L) throws -> Bool {
        let key = LinkKey(tag: tag, from: from)
        if let present = edges[key]?[to] {
            guard present else { return false }
            return try exists(from, over: lower) && exists(to, over: lower)
        }
        if !replaced.isEmpty, hides(key, to, inverse: schema.inverseTag(of: tag)) { return false }
        return try lower.linked(tag, from: from, to: to)
    }

    /// The owner of a unique key: a record of this layer that holds it, or the owner below unless
    /// this layer changed that object so that it no longer holds the key. Owners in `excluding`
    /// are passed over (a layer above changed them so that they no longer hold it).
    func uniqueOwner<L: LayeredState>(_ key: ByteKey, over lower: L,
                                      excluding: Set<ObjectID> = []) throws -> ObjectID? {
        if let owner = uniques[key], !excluding.contains(owner) { return owner }
        return try ownerBelow(key, over: lower, excluding: excluding)
    }

    /// The owner of `key` below this layer, as this layer shows it: an owner this layer changed
    /// or deleted holds the key only if its record here still does. When it no longer does, the
    /// next owner further down is asked for: layers below may each claim the key for another
    /// object (the store gave it to one after a layer gave it to another), and the view shows
    /// whichever of them still holds it.
    func ownerBelow<L: LayeredState>(_ key: ByteKey, over lower: L, excluding: Set<ObjectID> = []) throws -> ObjectID? {
        var excluded = excluding
        while let owner = try lower.uniqueOwner(key, excluding: excluded) {
            guard let entry = records[owner] else { return owner }
            if try holds(entry, key, owner) { return owner }
            excluded.insert(owner)
        }
        return nil
    }

    /// Whether `entry` (a record of this layer, nil when deleted here) holds unique key `key`.
    private func holds(_ entry: Record?, _ key: ByteKey, _ owner: ObjectID) throws -> Bool {
        guard let record = entry, key.bytes.count >= 2 else { return false }
        let tag = UInt16(key.bytes[0]) << 8 | UInt16(key.bytes[1])
        guard let u = record.entity.uniques.first(where: { $0.tag == tag }) else { return false }
        return try Layout.uniqueKey(u, record: record.values, entity: record.entity, id: owner) == key.bytes
    }

    /// Live objects of `tag` added by this layer over `lower`, computed from the records.
    /// - Complexity: O(records of the layer).
    func computedCountDelta<L: LayeredState>(_ tag: UInt16, over lower: L) throws -> Int {
        var delta = 0
        for (id, entry) in records where id.entityTag == tag {
            delta += (entry == nil ? 0 : 1) - (try lower.exists(id) ? 1 : 0)
        }
        return delta
    }

    /// Brings ``countDelta`` up to date with `lower`: O(layer) when `lower` moved since it was
    /// computed, O(1) otherwise. Call before a change that adds to it.
    mutating func updateCounts<L: LayeredState>(over lower: L) throws {
        let basis = lower.basis
        if countBasis != basis { try recount(over: lower, basis: basis) }
    }

    /// Recomputes every entity's ``countDelta`` against `lower`, whose basis is `basis`.
    /// - Complexity: O(records of the layer).
    mutating func recount<L: LayeredState>(over lower: L, basis: CountBasis) throws {
        var delta: [UInt16: Int] = [:]
        for (id, entry) in records {
            let d = (entry == nil ? 0 : 1) - (try lower.exists(id) ? 1 : 0)
            if d != 0 { delta[id.entityTag, default: 0] += d }
        }
        countDelta = delta
        countBasis = basis
    }
}
