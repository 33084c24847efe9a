/// A child context's pending changes, kept as resolved state over its parent: changed records,
/// added and removed relationship edges, unique keys taken or freed, count deltas.
///
/// It is a value (dictionaries are copy-on-write), so a read takes a copy in O(1) and evaluates
/// without holding any lock; making a change costs O(size of the change), never O(store).
struct Overlay: Sendable {
    struct LinkKey: Hashable, Sendable {
        let tag: UInt16
        let from: ObjectID
    }

    /// Changed or inserted records; `nil` marks a deletion.
    // `Dictionary()` rather than `[:]`: an overlay is made empty twice per child insert, and the
    // literal goes through `init(dictionaryLiteral:)`.
    var records = [ObjectID: Record?]()
    var added = [LinkKey: Set<ObjectID>]()
    var removed = [LinkKey: Set<ObjectID>]()
    /// Unique keys taken (owner) or freed (nil) here.
    var uniques = [ByteKey: ObjectID?]()
    /// Objects whose edges changed, per entity tag. With the keys of ``records`` (objects whose
    /// record changed), the extra candidates a query must look at; records are not marked here
    /// too, which saves two hash operations per change.
    var dirty = [UInt16: Set<ObjectID>]()
    var countDelta = [UInt16: Int]()

    mutating func markDirty(_ id: ObjectID) { dirty[id.entityTag, default: []].insert(id) }

    mutating func link(_ tag: UInt16, _ a: ObjectID, _ b: ObjectID) {
        let k = LinkKey(tag: tag, from: a)
        if removed[k]?.remove(b) == nil { added[k, default: []].insert(b) }
        if removed[k]?.isEmpty == true { removed[k] = nil }
        markDirty(a)
    }

    mutating func unlink(_ tag: UInt16, _ a: ObjectID, _ b: ObjectID) {
        let k = LinkKey(tag: tag, from: a)
        if added[k]?.remove(b) == nil { removed[k, default: []].insert(b) }
        if added[k]?.isEmpty == true { added[k] = nil }
        markDirty(a)
    }
}

/// Reads through a base (one LMDB transaction) with overlays merged over it, root-most first.
struct MergedSource: ObjectSource {
    let base: ReadView
    let overlays: [Overlay]

    var schema: Schema { base.schema }

    func record(_ id: ObjectID) throws -> Record? {
        for o in overlays.reversed() {
            if let entry = o.records[id] { return entry }
        }
        return try base.record(id)
    }

    func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID] {
        let key = Overlay.LinkKey(tag: tag, from: id)
        guard overlays.contains(where: { $0.added[key] != nil || $0.removed[key] != nil }) else { return try base.targets(tag, from: id) }
        var set = Set(try base.targets(tag, from: id))
        for o in overlays {
            if let r = o.removed[key] { set.subtract(r) }
            if let a = o.added[key] { set.formUnion(a) }
        }
        return set.sorted()
    }

    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool {
        let key = Overlay.LinkKey(tag: tag, from: from)
        for o in overlays.reversed() {
            if o.added[key]?.contains(to) == true { return true }
            if o.removed[key]?.contains(to) == true { return false }
        }
        return try base.txn.contains(base.env[.links], key: Layout.linkKey(tag, from, to))
    }

    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? { try uniqueOwner(ByteKey(key)) }

    /// ``uniqueOwner(_:)-([UInt8])`` with the key already hashed: one hash for the whole chain.
    func uniqueOwner(_ key: ByteKey) throws -> ObjectID? {
        for o in overlays.reversed() {
            if let entry = o.uniques[key] { return entry }
        }
        return try base.uniqueOwner(key.bytes)
    }

    func objectCount(_ entity: EntityDescription) throws -> Int {
        try base.objectCount(entity) + overlays.reduce(0) { $0 + ($1.countDelta[entity.tag] ?? 0) }
    }

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

    /// One entry of the undo list (internal so a context can keep an emptied list for reuse).
    enum Undo {
        case record(ObjectID, Record??)
        case added(Overlay.LinkKey, Set<ObjectID>?)
        case removed(Overlay.LinkKey, Set<ObjectID>?)
        case unique(ByteKey, ObjectID??)
        /// A count changed by this much (undone by subtracting it).
        case countAdded(UInt16, Int)
    }

    /// The built overlay, leaving an empty one behind (no second reference to its storage).
    mutating func takeLeaf() -> Overlay { Self.take(&leaf) }

    /// `overlay`'s value, leaving an empty one in its place. A swap moves the six dictionary
    /// references; `defer { x = Overlay() }; return x` copied them (six retains) and then
    /// released the originals, twice per child insert.
    static func take(_ overlay: inout Overlay) -> Overlay {
        var taken = Overlay()
        swap(&taken, &overlay)
        return taken
    }

    /// Restores the overlay as it was before the first change applied here.
    mutating func rollBack() -> Overlay {
        while let u = undo.popLast() {
            switch u {
            case .record(let id, let old): leaf.records[id] = old
            case .added(let k, let old): leaf.added[k] = old
            case .removed(let k, let old): leaf.removed[k] = old
            case .unique(let k, let old): leaf.uniques[k] = old
            case .countAdded(let t, let delta): leaf.countDelta[t, default: 0] -= delta
            }
        }
        // Edge dirty marks may stay: a dirty object is only re-read, so extra ones are harmless.
        return takeLeaf()
    }

    private mutating func saveRecord(_ id: ObjectID) { undo.append(.record(id, leaf.records[id])) }
    private mutating func saveLinks(_ tag: UInt16, _ from: ObjectID) {
        let k = Overlay.LinkKey(tag: tag, from: from)
        undo.append(.added(k, leaf.added[k]))
        undo.append(.removed(k, leaf.removed[k]))
    }

    /// `undo` is an empty list whose storage is reused (see ``takeUndoStorage()``); without one,
    /// room for four entries is allocated.
    init(base: ReadView, parents: [Overlay], leaf: Overlay, undo: [Undo] = []) {
        self.parents = MergedSource(base: base, overlays: parents)
        self.leaf = leaf
        assert(undo.isEmpty, "an undo list handed in for reuse must be empty")
        self.undo = undo
        // An insert leaves three undo entries (its record, a unique key, the count): one
        // allocation for them instead of growing the array twice.
        if self.undo.capacity < 4 { self.undo.reserveCapacity(4) }
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

    var schema: Schema { parents.schema }

    func record(_ id: ObjectID) throws -> Record? {
        if let entry = leaf.records[id] { return entry }
        return try parents.record(id)
    }

    func exists(_ id: ObjectID) throws -> Bool { try record(id) != nil }

    func targets(_ tag: UInt16, from: ObjectID) throws -> [ObjectID] {
        let key = Overlay.LinkKey(tag: tag, from: from)
        let base = try parents.targets(tag, from: from)
        guard leaf.added[key] != nil || leaf.removed[key] != nil else { return base }
        var set = Set(base)
        if let r = leaf.removed[key] { set.subtract(r) }
        if let a = leaf.added[key] { set.formUnion(a) }
        return set.sorted()
    }

    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool {
        let key = Overlay.LinkKey(tag: tag, from: from)
        if leaf.added[key]?.contains(to) == true { return true }
        if leaf.removed[key]?.contains(to) == true { return false }
        return try parents.linked(tag, from: from, to: to)
    }

    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? {
        let k = ByteKey(key)
        if let entry = leaf.uniques[k] { return entry }
        return try parents.uniqueOwner(k)
    }

    mutating func flushCounts() throws {}

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
            case .some(.none): break   // deleted here: the id is free again
            case .none: if try parents.record(id) != nil { throw StrataError.duplicateID(e, id) }
            }
            try setUniques(e, old: nil, new: values, id: id)
            undo.append(.countAdded(e.tag, 1))
            leaf.countDelta[e.tag, default: 0] += 1
        case .update(let id, let changes, _):
            guard var r = try record(id) else { throw StrataError.corruptRecord(id: id, reason: "update of a missing object in a child context") }
            let old = r.values
            for c in changes { r.values[c.attribute] = c.new }
            try setUniques(r.entity, old: old, new: r.values, id: id)
            saveRecord(id)
            leaf.records[id] = .some(r)
        case .delete(let id, _, _):
            guard let r = try record(id) else { return }
            try setUniques(r.entity, old: r.values, new: nil, id: id)
            saveRecord(id)
            leaf.records[id] = .some(nil)
            undo.append(.countAdded(r.entity.tag, -1))
            leaf.countDelta[r.entity.tag, default: 0] -= 1
        case .link(let tag, let a, let b):
            try edge(tag, a, b, add: true)
        case .unlink(let tag, let a, let b):
            try edge(tag, a, b, add: false)
        }
    }

    /// Adds or removes an edge and its inverse (the resolver only emits known tags; an unknown one
    /// is reported, not trapped on).
    private mutating func edge(_ tag: UInt16, _ a: ObjectID, _ b: ObjectID, add: Bool) throws {
        guard let r = schema.relationship(tag: tag) else {
            throw StrataError.corruptRecord(id: a, reason: "unknown relationship tag \(tag) in a child context")
        }
        let inverse = schema.inverse(of: r).tag
        saveLinks(tag, a)
        saveLinks(inverse, b)
        if add {
            leaf.link(tag, a, b)
            leaf.link(inverse, b, a)
        } else {
            leaf.unlink(tag, a, b)
            leaf.unlink(inverse, b, a)
        }
    }

    private mutating func setUniques(_ e: EntityDescription, old: [Value]?, new: [Value]?, id: ObjectID) throws {
        for u in e.uniques {
            let before = try old.flatMap { try Layout.uniqueKey(u, record: $0, entity: e, id: id) }
            let after = try new.flatMap { try Layout.uniqueKey(u, record: $0, entity: e, id: id) }
            if before == after { continue }
            if let before {
                let k = ByteKey(before)
                undo.append(.unique(k, leaf.uniques.updateValue(ObjectID?.none, forKey: k)))
            }
            if let after, let new {
                // Taken first and given back on a clash: one hash lookup serves the check in this
                // overlay, the undo entry and the store.
                let k = ByteKey(after)
                let previous = leaf.uniques.updateValue(.some(id), forKey: k)
                undo.append(.unique(k, previous))
                let owner: ObjectID? = switch previous {
                case .some(let inLeaf): inLeaf
                case .none: try parents.uniqueOwner(k)
                }
                if let owner, owner != id {
                    throw StrataError.uniqueClash(u, e, new, id: id, owner: owner)
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
