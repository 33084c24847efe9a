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

    /// What the counts of this layer were computed against: the LMDB transaction of the base and
    /// the revisions of the layers between the base and this one.
    struct CountBasis: Equatable, Sendable {
        let baseTransaction: UInt64
        let lower: [UInt64]
    }

    /// The fields of the layer behind one reference, copied on the first change of a shared one
    /// (as the standard library's collections are). A child insert moves its layer into an
    /// applier and back: with the fields inline, each move, and each empty layer left behind,
    /// retained and released every dictionary of the layer.
    ///
    /// `@unchecked Sendable` is safe because a `Storage` is only ever mutated through the
    /// `_modify` accessors below, each of which first makes sure (`isKnownUniquelyReferenced`)
    /// that the `Overlay` value being mutated holds the only reference, and copies the storage
    /// otherwise. A storage reachable from two values (on any threads) is therefore never
    /// written, only read; one reachable from one value is only touched by whoever has exclusive
    /// (`inout`) access to that value.
    private final class Storage: @unchecked Sendable {
        var records = [ObjectID: Record?]()
        var order = [Touch]()
        var originals = [ObjectID: [Value]]()
        var edges = [LinkKey: [ObjectID: Bool]]()
        var replaced = Set<LinkKey>()
        var replacedTags = Set<UInt16>()
        var uniques = [ByteKey: ObjectID]()
        var dirty = [UInt16: Set<ObjectID>]()
        var countDelta = [UInt16: Int]()
        var countBasis: CountBasis?
        var factCount = 0

        init() {}

        init(copying o: Storage) {
            records = o.records
            order = o.order
            originals = o.originals
            edges = o.edges
            replaced = o.replaced
            replacedTags = o.replacedTags
            uniques = o.uniques
            dirty = o.dirty
            countDelta = o.countDelta
            countBasis = o.countBasis
            factCount = o.factCount
        }

        /// The storage of every empty layer until its first change.
        static let empty = Storage()
    }

    private var storage: Storage

    private mutating func makeUnique() {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(copying: storage) }
    }

    /// Changed or inserted records; `nil` marks a deletion.
    var records: [ObjectID: Record?] {
        _read { yield storage.records }
        _modify { makeUnique(); yield &storage.records }
    }
    /// The keys of ``records`` in the order they were first changed here (a commit sends its
    /// changes in that order), each with whether it was inserted here (absent below then).
    var order: [Touch] {
        _read { yield storage.order }
        _modify { makeUnique(); yield &storage.order }
    }
    /// The values an object of the state below had when this layer first changed its attributes:
    /// what a commit compares with to send only the attributes changed here.
    var originals: [ObjectID: [Value]] {
        _read { yield storage.originals }
        _modify { makeUnique(); yield &storage.originals }
    }
    /// Explicit edge facts, both directions: target → present (true) or absent (false).
    var edges: [LinkKey: [ObjectID: Bool]] {
        _read { yield storage.edges }
        _modify { makeUnique(); yield &storage.edges }
    }
    /// Keys whose whole target set this layer defines (edges below are not read for them).
    var replaced: Set<LinkKey> {
        _read { yield storage.replaced }
        _modify { makeUnique(); yield &storage.replaced }
    }
    /// The relationship tags of ``replaced`` keys: a read of a key whose inverse tag is not here
    /// needs no per-target check.
    var replacedTags: Set<UInt16> {
        _read { yield storage.replacedTags }
        _modify { makeUnique(); yield &storage.replacedTags }
    }
    /// Unique keys held by records of this layer (every key of an object it inserted or updated),
    /// and their owners.
    var uniques: [ByteKey: ObjectID] {
        _read { yield storage.uniques }
        _modify { makeUnique(); yield &storage.uniques }
    }
    /// Objects whose edges changed, per entity tag. With the keys of ``records`` (objects whose
    /// record changed), the extra candidates a query must look at.
    var dirty: [UInt16: Set<ObjectID>] {
        _read { yield storage.dirty }
        _modify { makeUnique(); yield &storage.dirty }
    }
    /// Live objects added (removed, negative) per entity tag, against ``countBasis``.
    var countDelta: [UInt16: Int] {
        _read { yield storage.countDelta }
        _modify { makeUnique(); yield &storage.countDelta }
    }
    /// The state below that ``countDelta`` was computed against; when the state below is another,
    /// counts are computed from ``records`` instead.
    var countBasis: CountBasis? {
        _read { yield storage.countBasis }
        _modify { makeUnique(); yield &storage.countBasis }
    }
    /// Explicit edge facts held (each edge counts twice, once per direction).
    var factCount: Int {
        _read { yield storage.factCount }
        _modify { makeUnique(); yield &storage.factCount }
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

    func targets<L: LayeredState>(_ tag: UInt16, from id: ObjectID, schema: Schema, over lower: L) throws -> [ObjectID] {
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

    func linked<L: LayeredState>(_ tag: UInt16, from: ObjectID, to: ObjectID, schema: Schema, over lower: L) throws -> Bool {
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
    func uniqueOwner<L: LayeredState>(_ key: ByteKey, over lower: L, excluding: Set<ObjectID> = []) throws -> ObjectID? {
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

/// Reads of one state: a base with some layers merged over it.
protocol LayeredState {
    func record(_ id: ObjectID) throws -> Record?
    func exists(_ id: ObjectID) throws -> Bool
    func targets(_ tag: UInt16, from: ObjectID) throws -> [ObjectID]
    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool
    /// The object that holds unique key `key` in this state, passing over the owners in
    /// `excluding` (and looking further down for another).
    func uniqueOwner(_ key: ByteKey, excluding: Set<ObjectID>) throws -> ObjectID?
    func objectCount(_ entity: EntityDescription) throws -> Int
    /// What the state is: the base's LMDB transaction and the revisions of its layers.
    var basis: Overlay.CountBasis { get }
}

/// Reads through a base (one LMDB transaction) with overlays merged over it, root-most first.
struct MergedSource: ObjectSource {
    let base: ReadView
    let overlays: [Overlay]

    var schema: Schema { base.schema }

    /// The state with the first `depth` overlays merged over the base.
    struct Level: LayeredState {
        let source: MergedSource
        let depth: Int

        private var layer: Overlay { source.overlays[depth - 1] }
        private var below: Level { Level(source: source, depth: depth - 1) }

        func record(_ id: ObjectID) throws -> Record? {
            // The newest layer holding the id decides; no recursion for the common miss.
            var i = depth
            while i > 0 {
                i -= 1
                if let entry = source.overlays[i].records[id] { return entry }
            }
            return try source.base.record(id)
        }

        func exists(_ id: ObjectID) throws -> Bool {
            var i = depth
            while i > 0 {
                i -= 1
                if let entry = source.overlays[i].records[id] { return entry != nil }
            }
            let objects = source.base.env[.objects]
            return try id.withKeyBytes { try source.base.txn.withValue(objects, key: $0) { _ in true } } ?? false
        }

        func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID] {
            depth == 0 ? try source.base.targets(tag, from: id) : try layer.targets(tag, from: id, schema: source.schema, over: below)
        }

        func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool {
            guard depth > 0 else { return try source.base.txn.contains(source.base.env[.links], key: Layout.linkKey(tag, from, to)) }
            return try layer.linked(tag, from: from, to: to, schema: source.schema, over: below)
        }

        func uniqueOwner(_ key: ByteKey, excluding: Set<ObjectID>) throws -> ObjectID? {
            guard depth > 0 else { return try source.base.uniqueOwner(key.bytes).flatMap { excluding.contains($0) ? nil : $0 } }
            return try layer.uniqueOwner(key, over: below, excluding: excluding)
        }

        func objectCount(_ entity: EntityDescription) throws -> Int {
            guard depth > 0 else { return try source.base.objectCount(entity) }
            let lower = try below.objectCount(entity)
            let o = layer
            if let b = o.countBasis, b == below.basis { return lower + (o.countDelta[entity.tag] ?? 0) }
            return lower + (try o.computedCountDelta(entity.tag, over: below))
        }

        var basis: Overlay.CountBasis {
            Overlay.CountBasis(baseTransaction: source.base.stateID, lower: source.overlays.prefix(depth).map(\.revision))
        }
    }

    /// The whole merged state.
    var top: Level { Level(source: self, depth: overlays.count) }

    func record(_ id: ObjectID) throws -> Record? { try top.record(id) }
    func exists(_ id: ObjectID) throws -> Bool { try top.exists(id) }
    func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID] { try top.targets(tag, from: id) }
    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool { try top.linked(tag, from: from, to: to) }
    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? { try top.uniqueOwner(ByteKey(key), excluding: []) }
    /// ``uniqueOwner(_:)-([UInt8])`` with the key already hashed: one hash for the whole chain.
    func uniqueOwner(_ key: ByteKey) throws -> ObjectID? { try top.uniqueOwner(key, excluding: []) }
    func objectCount(_ entity: EntityDescription) throws -> Int { try top.objectCount(entity) }

    /// The base's candidates with dirty objects taken out, merged in id order with the dirty
    /// objects' current records (deleted ones skipped).
    func candidates(_ e: EntityDescription, _ predicate: Filter, _ visit: (Record) throws -> Bool) throws {
        var dirtySet = Set<ObjectID>()
        for o in overlays {
            for id in o.records.keys where id.entityTag == e.tag { dirtySet.insert(id) }
            if let linked = o.dirty[e.tag] { dirtySet.formUnion(linked) }
        }
        if dirtySet.isEmpty { return try base.candidates(e, predicate, visit) }
        let dirty = dirtySet.sorted()
        var next = 0
        var stopped = false
        // Visits dirty objects with ids below `limit` (all when nil); false when the visitor stopped.
        func drain(below limit: ObjectID?) throws -> Bool {
            while next < dirty.count, limit.map({ dirty[next] < $0 }) ?? true {
                let id = dirty[next]
                next += 1
                if let r = try record(id), try !visit(r) { return false }
            }
            return true
        }
        try base.candidates(e, predicate) { r in
            if try !drain(below: r.id) {
                stopped = true
                return false
            }
            if dirtySet.contains(r.id) { return true }
            if try !visit(r) {
                stopped = true
                return false
            }
            return true
        }
        if !stopped { _ = try drain(below: nil) }
    }
}

/// Applies resolved changes to a leaf overlay, reading through the leaf, then its parents' chain.
///
/// The leaf is held only here while changes are applied (never also inside a `MergedSource`),
/// so its dictionaries are mutated in place: a change costs O(its size), not O(overlay).
struct OverlayApplier: StateStore {
    let parents: MergedSource
    private(set) var leaf: Overlay
    /// Previous entries of everything changed, newest last, so a failed change set can be undone
    /// without keeping a second copy of the overlay.
    private var undo: [Undo]
    /// The length of the leaf's ``Overlay/order`` before the first change applied here (a roll
    /// back cuts it there).
    private let orderCountAtStart: Int
    var defersUniqueClashes = false
    private var deferredUniques: [DeferredUniqueKey] = []

    /// One entry of the undo list (internal so a context can keep an emptied list for reuse).
    enum Undo {
        case record(ObjectID, Record??)
        /// An entry of ``Overlay/order`` as it was before it was marked new or not.
        case touch(Int, Overlay.Touch)
        case fact(Overlay.LinkKey, ObjectID, Bool?)
        case replaced(Overlay.LinkKey)
        case unique(ByteKey, ObjectID?)
        /// A count changed by this much (undone by subtracting it).
        case countAdded(UInt16, Int)
    }

    /// Keeps an edge fact that this change set wrote only where it changes what the context
    /// shows: a fact of an edge between two keys that are not replaced here, whose edge is as
    /// visible with the fact the layer held before the set (none, usually) as with the new one,
    /// is put back. A layer then records what a child's commit changed in it, not how: an unlink
    /// and a link of the same edge (a to-many cleared and an edge given back, as the commit of an
    /// object deleted and inserted again sends it) leave no fact, so the edge stays the state
    /// below's, as it was before the commit. Call once a child's net changes have applied; a
    /// change made in the context itself keeps a fact for every edge it touches, step by step.
    /// - Complexity: O(facts the set wrote), each a visibility check.
    mutating func settleFacts() throws {
        var first: [EdgeSide: Bool?] = [:]
        for case .fact(let key, let target, let old) in undo where first[EdgeSide(key: key, target: target)] == nil {
            first[EdgeSide(key: key, target: target)] = .some(old)
        }
        guard !first.isEmpty else { return }
        for (side, oldFact) in first {
            let old = oldFact ?? nil
            let now = leaf.edges[side.key]?[side.target]
            guard now != old, let inverseTag = schema.inverseTag(of: side.key.tag) else { continue }
            let inverse = Overlay.LinkKey(tag: inverseTag, from: side.target)
            // A replaced key (a to-one set here, an object deleted here) defines its targets
            // whatever the facts: left as the set wrote them.
            guard !leaf.replaced.contains(side.key), !leaf.replaced.contains(inverse) else { continue }
            let inverseNow = leaf.edges[inverse]?[side.key.from]
            let visibleNow = try linked(side.key.tag, from: side.key.from, to: side.target)
            let inverseOld = (first[EdgeSide(key: inverse, target: side.key.from)] ?? nil) ?? nil
            setFact(side.key, side.target, old)
            setFact(inverse, side.key.from, inverseOld)
            if try linked(side.key.tag, from: side.key.from, to: side.target) != visibleNow {
                setFact(side.key, side.target, now)
                setFact(inverse, side.key.from, inverseNow)
            }
        }
    }

    /// One direction of an edge fact: its key and its target.
    private struct EdgeSide: Hashable {
        let key: Overlay.LinkKey
        let target: ObjectID
    }

    /// The built overlay, leaving an empty one behind (no second reference to its storage).
    mutating func takeLeaf() -> Overlay {
        if !undo.isEmpty { leaf.revision = Overlay.nextRevision() }
        return Self.take(&leaf)
    }

    /// `overlay`'s value, leaving a placeholder (``Overlay/init(placeholder:)``) in its place,
    /// which the caller overwrites. A swap moves the storage reference without retaining it.
    static func take(_ overlay: inout Overlay) -> Overlay {
        var taken = Overlay(placeholder: ())
        swap(&taken, &overlay)
        return taken
    }

    /// Restores the overlay as it was before the first change applied here.
    mutating func rollBack() -> Overlay {
        while let u = undo.popLast() {
            switch u {
            case .record(let id, let old):
                leaf.records[id] = old
                if old == nil { leaf.originals[id] = nil }
            case .touch(let i, let old): leaf.order[i] = old
            case .fact(let k, let t, let old): setFact(k, t, old)
            case .replaced(let k): leaf.replaced.remove(k)
            case .unique(let k, let old): leaf.uniques[k] = old
            case .countAdded(let t, let delta): leaf.countDelta[t, default: 0] -= delta
            }
        }
        leaf.order.removeLast(leaf.order.count - orderCountAtStart)
        // Dirty marks and replaced tags may stay: a dirty object is only re-read, and an extra
        // replaced tag only costs a lookup, so extra ones are harmless.
        return Self.take(&leaf)
    }

    private mutating func saveRecord(_ id: ObjectID) {
        let previous = leaf.records[id]
        undo.append(.record(id, previous))
        if previous == nil { leaf.order.append(Overlay.Touch(id: id, isNew: false)) }
    }

    /// `undo` is an empty list whose storage is reused (see ``takeUndoStorage()``); without one,
    /// room for four entries is allocated.
    init(base: ReadView, parents: [Overlay], leaf: Overlay, undo: [Undo] = []) {
        self.parents = MergedSource(base: base, overlays: parents)
        self.leaf = leaf
        orderCountAtStart = leaf.order.count
        assert(undo.isEmpty, "an undo list handed in for reuse must be empty")
        self.undo = undo
        // An insert leaves three undo entries (its record, a unique key, the count): one
        // allocation for them instead of growing the array twice.
        if self.undo.capacity < 4 { self.undo.reserveCapacity(4) }
    }

    /// Brings the leaf's counts up to date with the state below (O(leaf) when that state moved
    /// since they were computed, O(1) otherwise); call before applying changes.
    mutating func prepareCounts() throws {
        let below = parents.top
        let basis = below.basis
        if leaf.countBasis != basis { try leaf.recount(over: below, basis: basis) }
    }

    /// The undo list emptied, with its storage, for the next applier (a child filled one insert at
    /// a time allocated and freed one per insert), or an empty one when it grew past
    /// ``reusedUndoCapacity`` (a large change set's list is not kept alive).
    mutating func takeUndoStorage() -> [Undo] {
        guard undo.capacity <= Self.reusedUndoCapacity else {
            undo = []
            return []
        }
        undo.removeAll(keepingCapacity: true)
        var taken: [Undo] = []
        swap(&taken, &undo)
        return taken
    }

    /// The largest undo list kept for reuse.
    static let reusedUndoCapacity = 64

    /// Objects of the state below whose record this applier changed first (updated or deleted,
    /// cascades included), in the order it did: the ones a context remembers a base for.
    var firstTouched: [ObjectID] {
        leaf.order[orderCountAtStart...].lazy.filter { !$0.isNew }.map(\.id)
    }

    var schema: Schema { parents.schema }

    func record(_ id: ObjectID) throws -> Record? { try leaf.record(id, over: parents.top) }
    func exists(_ id: ObjectID) throws -> Bool { try leaf.exists(id, over: parents.top) }
    func targets(_ tag: UInt16, from: ObjectID) throws -> [ObjectID] {
        try leaf.targets(tag, from: from, schema: schema, over: parents.top)
    }
    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool {
        try leaf.linked(tag, from: from, to: to, schema: schema, over: parents.top)
    }
    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? { try leaf.uniqueOwner(ByteKey(key), over: parents.top) }

    mutating func flushCounts() throws {}

    mutating func takeDeferredUniqueKeys() throws {
        let deferred = deferredUniques
        deferredUniques = []
        defersUniqueClashes = false
        for d in deferred {
            // Only if the object still holds the key here; then no other object may.
            guard let r = try record(d.id), try Layout.uniqueKey(d.unique, record: r.values, entity: d.entity, id: d.id) == d.key else { continue }
            let k = ByteKey(d.key)
            var owner = leaf.uniques[k]
            if owner == nil || owner == d.id { owner = try leaf.ownerBelow(k, over: parents.top) }
            if let owner, owner != d.id { throw StrataError.uniqueClash(d.unique, d.entity, r.values, id: d.id, owner: owner) }
            leaf.uniques[k] = d.id
        }
    }

    /// Sets the version of a record this overlay holds (as-of reads restore old versions).
    mutating func setVersion(_ id: ObjectID, _ version: TransactionID) {
        if case .some(.some(var r)) = leaf.records[id] {
            r.version = version
            leaf.records[id] = .some(r)
        }
    }

    mutating func apply(_ change: LoggedChange) throws {
        switch change {
        case .insert(let id, let values):
            guard let e = schema.entity(tag: id.entityTag) else {
                throw StrataError.corruptRecord(id: id, reason: "no entity with tag \(id.entityTag) in a child context")
            }
            // Stored first and put back on a clash: one hash lookup serves the duplicate check,
            // the undo entry and the store.
            let previous = leaf.records.updateValue(.some(Record(entity: e, id: id, values: values, version: .zero)), forKey: id)
            undo.append(.record(id, previous))
            switch previous {
            case .some(.some): throw StrataError.duplicateID(e, id)
            case .some(.none):
                // Deleted here: the id is free again. An object of the state below deleted here
                // and inserted again is a new object if nothing below has it now (a rare path: the
                // entry is looked for from the newest); one inserted here stays new.
                if let i = leaf.order.lastIndex(where: { $0.id == id }), !leaf.order[i].isNew, try !parents.top.exists(id) {
                    undo.append(.touch(i, leaf.order[i]))
                    leaf.order[i] = Overlay.Touch(id: id, isNew: true)
                }
            case .none:
                leaf.order.append(Overlay.Touch(id: id, isNew: true))
                if try parents.top.exists(id) { throw StrataError.duplicateID(e, id) }
            }
            try setUniques(e, old: nil, new: values, id: id)
            undo.append(.countAdded(e.tag, 1))
            leaf.countDelta[e.tag, default: 0] += 1
        case .update(let id, let changes, _):
            guard var r = try record(id) else { throw StrataError.corruptRecord(id: id, reason: "update of a missing object in a child context") }
            let old = r.values
            for c in changes { r.values[c.attribute] = c.new }
            if leaf.records[id] == nil {
                leaf.originals[id] = old
                // The layer answers for the object's unique keys from now on, also when the
                // state below loses the object.
                for u in r.entity.uniques {
                    if let key = try Layout.uniqueKey(u, record: old, entity: r.entity, id: id) {
                        let k = ByteKey(key)
                        undo.append(.unique(k, leaf.uniques.updateValue(id, forKey: k)))
                    }
                }
            }
            try setUniques(r.entity, old: old, new: r.values, id: id)
            saveRecord(id)
            leaf.records[id] = .some(r)
        case .delete(let id, _, _):
            guard let r = try record(id) else { return }
            try setUniques(r.entity, old: r.values, new: nil, id: id)
            if leaf.records[id] == nil { leaf.originals[id] = r.values }
            saveRecord(id)
            leaf.records[id] = .some(nil)
            undo.append(.countAdded(r.entity.tag, -1))
            leaf.countDelta[r.entity.tag, default: 0] -= 1
            // Whatever links the object below, now or later, is gone with it here, and so is every
            // edge this layer gave it (also to objects hidden now, which may come back).
            for rel in r.entity.relationships {
                let key = Overlay.LinkKey(tag: rel.tag, from: id)
                markReplaced(key)
                clearPresentFacts(key)
            }
            leaf.markDirty(id)
        case .link(let tag, let a, let b):
            try edge(tag, a, b, present: true)
        case .unlink(let tag, let a, let b):
            try edge(tag, a, b, present: false)
        }
    }

    private mutating func markReplaced(_ key: Overlay.LinkKey) {
        if leaf.replaced.insert(key).inserted { undo.append(.replaced(key)) }
        leaf.replacedTags.insert(key.tag)
    }

    /// Sets the fact for `key` → `target` (nil removes it), keeping ``Overlay/factCount``.
    private mutating func setFact(_ key: Overlay.LinkKey, _ target: ObjectID, _ fact: Bool?) {
        let old: Bool?
        if let fact {
            old = leaf.edges[key, default: [:]].updateValue(fact, forKey: target)
        } else {
            old = leaf.edges[key]?.removeValue(forKey: target)
            if leaf.edges[key]?.isEmpty == true { leaf.edges[key] = nil }
        }
        leaf.factCount += (fact == nil ? 0 : 1) - (old == nil ? 0 : 1)
    }

    /// Turns every "present" fact of `key` (but `kept`) into "absent", in both directions.
    private mutating func clearPresentFacts(_ key: Overlay.LinkKey, except kept: ObjectID? = nil) {
        guard let facts = leaf.edges[key], let inverse = schema.inverseTag(of: key.tag) else { return }
        for (t, present) in facts where present && t != kept {
            recordFact(key, t, false)
            recordFact(Overlay.LinkKey(tag: inverse, from: t), key.from, false)
        }
    }

    private mutating func recordFact(_ key: Overlay.LinkKey, _ target: ObjectID, _ present: Bool) {
        undo.append(.fact(key, target, leaf.edges[key]?[target]))
        setFact(key, target, present)
    }

    /// Adds or removes an edge and its inverse (the resolver only emits known tags; an unknown one
    /// is reported, not trapped on). A to-one end's key is replaced: the layer now defines it.
    private mutating func edge(_ tag: UInt16, _ a: ObjectID, _ b: ObjectID, present: Bool) throws {
        guard let r = schema.relationship(tag: tag), let inverseTag = schema.inverseTag(of: tag),
              let inverse = schema.relationship(tag: inverseTag) else {
            throw StrataError.corruptRecord(id: a, reason: "unknown relationship tag \(tag) in a child context")
        }
        // A to-one holds one target: a fact this layer kept for another one (an object hidden now,
        // which may come back) is dropped with the replacement.
        if present, !r.isToMany { clearPresentFacts(Overlay.LinkKey(tag: tag, from: a), except: b) }
        if present, !inverse.isToMany { clearPresentFacts(Overlay.LinkKey(tag: inverse.tag, from: b), except: a) }
        recordFact(Overlay.LinkKey(tag: tag, from: a), b, present)
        recordFact(Overlay.LinkKey(tag: inverse.tag, from: b), a, present)
        if !r.isToMany { markReplaced(Overlay.LinkKey(tag: tag, from: a)) }
        if !inverse.isToMany { markReplaced(Overlay.LinkKey(tag: inverse.tag, from: b)) }
        leaf.markDirty(a)
        leaf.markDirty(b)
    }

    private mutating func setUniques(_ e: EntityDescription, old: [Value]?, new: [Value]?, id: ObjectID) throws {
        for u in e.uniques {
            let before = try old.flatMap { try Layout.uniqueKey(u, record: $0, entity: e, id: id) }
            let after = try new.flatMap { try Layout.uniqueKey(u, record: $0, entity: e, id: id) }
            if before == after { continue }
            if let before {
                let k = ByteKey(before)
                if leaf.uniques[k] == id { undo.append(.unique(k, leaf.uniques.removeValue(forKey: k))) }
            }
            if let after, let new {
                // Taken first and given back on a clash: one hash lookup serves the check in this
                // overlay, the undo entry and the store.
                let k = ByteKey(after)
                let previous = leaf.uniques.updateValue(id, forKey: k)
                undo.append(.unique(k, previous))
                // The record is stored after its keys: until then the state below answers for it.
                let owner = try previous ?? leaf.ownerBelow(k, over: parents.top)
                if let owner, owner != id {
                    guard defersUniqueClashes else { throw StrataError.uniqueClash(u, e, new, id: id, owner: owner) }
                    // The holder in this layer keeps it until the set ends (the undo entry has it).
                    if let previous { leaf.uniques[k] = previous }
                    deferredUniques.append(DeferredUniqueKey(key: after, unique: u, entity: e, id: id))
                }
            }
        }
    }
}

/// Bytes as a dictionary key, hashed once, in one pass, when the key is made (`[UInt8]`'s own
/// `Hashable` feeds the hasher one element at a time, which dominated unique-key lookups in child
/// contexts). A dictionary that grows rehashes its keys: from the stored hash that costs a
/// ``KeyedHash`` mix, not a second pass over the bytes.
struct ByteKey: Hashable, Sendable {
    let bytes: [UInt8]
    /// `Hasher`'s (SipHash, randomly seeded) hash of `bytes`.
    private let digest: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        var hasher = Hasher()
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        digest = hasher.finalize()
    }

    static func == (a: ByteKey, b: ByteKey) -> Bool { a.digest == b.digest && a.bytes == b.bytes }

    func hash(into hasher: inout Hasher) { hasher.combine(digest) }

    /// What `Dictionary` and `Set` use: the stored digest mixed with the table's seed.
    func _rawHashValue(seed: Int) -> Int { KeyedHash.hash(UInt64(bitPattern: Int64(digest)), 0, seed: seed) }
}
