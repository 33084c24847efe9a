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
    /// For a rebase's refresh: a key put off whose other holder comes from the state below (not
    /// from this layer's own changes) is taken: the clash is already there below, the parent's
    /// to report (see ``ChildContext/rebase()``).
    var acceptsClashesBelow = false
    private var deferredUniques: [DeferredUniqueKey] = []
    /// Objects a delete of these changes removed (their keys are replaced for that reason).
    private var deletedHere: Set<ObjectID> = []
    /// Set for a child's net changes, which ``settleFacts()`` settles once they are applied: the
    /// targets each to-one key showed before the first edge of these changes touched it.
    var settlesFacts = false
    private var toOneBefore: [Overlay.LinkKey: [ObjectID]] = [:]

    /// One entry of the undo list (internal so a context can keep an emptied list for reuse).
    enum Undo {
        case record(ObjectID, Record??)
        /// An entry of ``Overlay/order`` as it was before it was marked new or not.
        case touch(Int, Overlay.Touch)
        case fact(Overlay.LinkKey, ObjectID, Bool?)
        /// An entry of ``Overlay/edgeOriginals`` as it was before.
        case edgeOriginal(Overlay.LinkKey, ObjectID, Bool?)
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
        try settleToOneKeys(first)
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
            // Put back without a fact, the edge also loses what it was below; kept, it keeps it.
            let original = leaf.edgeOriginals[side.key]?[side.target]
            let inverseOriginal = leaf.edgeOriginals[inverse]?[side.key.from]
            setFact(side.key, side.target, old)
            setFact(inverse, side.key.from, inverseOld)
            if try linked(side.key.tag, from: side.key.from, to: side.target) != visibleNow {
                setFact(side.key, side.target, now)
                setFact(inverse, side.key.from, inverseNow)
                if let original { setOriginal(side.key, side.target, original) }
                if let inverseOriginal { setOriginal(inverse, side.key.from, inverseOriginal) }
            }
        }
    }

    /// The first part of ``settleFacts()``: a to-one key these changes replaced (the to-one end of
    /// an edge they linked or unlinked) of an object they did not delete, whose target they left
    /// as it was (an unlink and a link back, as a child's commit of its object's target deleted and
    /// inserted again sends them), is not replaced by them. The key shows the target it showed
    /// before the changes, and still does with its edges' facts as they were before the changes
    /// and no replaced mark: then the key is left so, and the edge stays the state below's.
    /// (Replaced, the key would keep showing that target after the state below unlinks it.) A key
    /// whose target did change keeps its mark and facts, also where the change shows only through
    /// another of these changes (its target deleted here). `first` holds each changed fact as it
    /// was before the changes.
    private mutating func settleToOneKeys(_ first: [EdgeSide: Bool?]) throws {
        for case .replaced(let key) in undo {
            guard leaf.replaced.contains(key), !deletedHere.contains(key.from),
                  let r = schema.relationship(tag: key.tag), !r.isToMany,
                  let inverseTag = schema.inverseTag(of: key.tag),
                  let before = toOneBefore[key] else { continue }
            let shown = try targets(key.tag, from: key.from)
            guard shown == before else { continue }
            // The facts of the key's edges, in both directions, with what each is now.
            let sides = first.keys.filter {
                $0.key == key || ($0.key.tag == inverseTag && $0.target == key.from)
            }
            let now = sides.map { (fact: leaf.edges[$0.key]?[$0.target], original: leaf.edgeOriginals[$0.key]?[$0.target]) }
            leaf.replaced.remove(key)
            for side in sides { setFact(side.key, side.target, first[side] ?? nil) }
            if try targets(key.tag, from: key.from) == shown { continue }
            // The target did change: the key stays replaced, its facts as the changes wrote them.
            leaf.replaced.insert(key)
            for (side, was) in zip(sides, now) {
                setFact(side.key, side.target, was.fact)
                if let original = was.original { setOriginal(side.key, side.target, original) }
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
            case .edgeOriginal(let k, let t, let old): setOriginal(k, t, old)
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
        try leaf.updateCounts(over: parents.top)
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
            guard let values = try valuesStillHolding(d) else { continue }
            let k = ByteKey(d.key)
            var owner = leaf.uniques[k]
            var ownedBelow = false
            if owner == nil || owner == d.id {
                owner = try leaf.ownerBelow(k, over: parents.top)
                ownedBelow = true
            }
            if let owner, owner != d.id, !(acceptsClashesBelow && ownedBelow) {
                throw StrataError.uniqueClash(d.unique, d.entity, values, id: d.id, owner: owner)
            }
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
            // Changes read back from the log (an as-of context's undo) are checked here too.
            guard values.count == e.attributes.count else {
                throw StrataError.corruptRecord(
                    id: id, reason: "an insert with \(values.count) values; \(e.name) has \(e.attributes.count) attributes")
            }
            // Stored first and put back on a clash: one hash lookup serves the duplicate check,
            // the undo entry and the store.
            let previous = leaf.records.updateValue(.some(Record(entity: e, id: id, values: values, version: .zero)),
                                                    forKey: id)
            undo.append(.record(id, previous))
            switch previous {
            case .some(.some): throw StrataError.duplicateID(e, id)
            case .some(.none):
                // Deleted here: the id is free again. An object of the state below deleted here
                // and inserted again is a new object if nothing below has it now (a rare path: the
                // entry is looked for from the newest); one inserted here stays new.
                if let i = leaf.order.lastIndex(where: { $0.id == id }), !leaf.order[i].isNew,
                   try !parents.top.exists(id) {
                    undo.append(.touch(i, leaf.order[i]))
                    leaf.order[i] = Overlay.Touch(id: id, isNew: true)
                }
            case .none:
                leaf.order.append(Overlay.Touch(id: id, isNew: true))
                if try parents.top.exists(id) { throw StrataError.duplicateID(e, id) }
                // A new object starts without relationships: edges this layer gave an object of
                // the same id that the state below has deleted since are not its own. Only an
                // object an edge touched here can have any (it is marked dirty then).
                if leaf.dirty[e.tag]?.contains(id) == true {
                    for rel in e.relationships { try clearPresentFacts(Overlay.LinkKey(tag: rel.tag, from: id)) }
                }
            }
            try setUniques(e, old: nil, new: values, id: id)
            undo.append(.countAdded(e.tag, 1))
            leaf.countDelta[e.tag, default: 0] += 1
        case .update(let id, let changes, _):
            guard var r = try record(id) else {
                throw StrataError.corruptRecord(id: id, reason: "update of a missing object in a child context")
            }
            let old = r.values
            for c in changes {
                guard c.attribute >= 0, c.attribute < r.values.count else {
                    throw StrataError.corruptRecord(
                        id: id, reason: "an update naming attribute \(c.attribute) of \(r.values.count)")
                }
                r.values[c.attribute] = c.new
            }
            if leaf.records[id] == nil {
                leaf.originals[id] = old
                // The layer answers for the object's unique keys from now on, also when the
                // state below loses the object.
                for u in r.entity.uniques {
                    if let key = try Layout.uniqueKey(u, record: old, entity: r.entity, id: id) {
                        let k = ByteKey(key)
                        // Unless another object holds the key in this layer already (the state
                        // below gave this one the same key since): that holder keeps it.
                        guard leaf.uniques[k] == nil else { continue }
                        undo.append(.unique(k, nil))
                        leaf.uniques[k] = id
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
            deletedHere.insert(id)
            undo.append(.countAdded(r.entity.tag, -1))
            leaf.countDelta[r.entity.tag, default: 0] -= 1
            // Whatever links the object below, now or later, is gone with it here, and so is every
            // edge this layer gave it (also to objects hidden now, which may come back).
            for rel in r.entity.relationships {
                let key = Overlay.LinkKey(tag: rel.tag, from: id)
                markReplaced(key)
                try clearPresentFacts(key)
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

    /// Sets the fact for `key` → `target` (nil removes it, and what the edge was below when it
    /// was set), keeping ``Overlay/factCount``.
    private mutating func setFact(_ key: Overlay.LinkKey, _ target: ObjectID, _ fact: Bool?) {
        let old: Bool?
        if let fact {
            old = leaf.edges[key, default: [:]].updateValue(fact, forKey: target)
        } else {
            old = leaf.edges[key]?.removeValue(forKey: target)
            if leaf.edges[key]?.isEmpty == true { leaf.edges[key] = nil }
            if leaf.edgeOriginals[key]?[target] != nil { setOriginal(key, target, nil) }
        }
        leaf.factCount += (fact == nil ? 0 : 1) - (old == nil ? 0 : 1)
    }

    /// Sets whether the edge `key` → `target` was linked below when the layer set its fact.
    private mutating func setOriginal(_ key: Overlay.LinkKey, _ target: ObjectID, _ linked: Bool?) {
        if let linked {
            leaf.edgeOriginals[key, default: [:]][target] = linked
        } else {
            leaf.edgeOriginals[key]?[target] = nil
            if leaf.edgeOriginals[key]?.isEmpty == true { leaf.edgeOriginals[key] = nil }
        }
    }

    /// Turns every "present" fact of `key` (but `kept`) into "absent", in both directions.
    private mutating func clearPresentFacts(_ key: Overlay.LinkKey, except kept: ObjectID? = nil) throws {
        guard let facts = leaf.edges[key], let inverse = schema.inverseTag(of: key.tag) else { return }
        for (t, present) in facts where present && t != kept {
            try recordFact(key, t, false)
            try recordFact(Overlay.LinkKey(tag: inverse, from: t), key.from, false)
        }
    }

    /// Sets a fact the change made; the first one the layer holds for the edge notes whether the
    /// edge was linked below (``Overlay/edgeOriginals``).
    private mutating func recordFact(_ key: Overlay.LinkKey, _ target: ObjectID, _ present: Bool) throws {
        if leaf.edges[key]?[target] == nil {
            let below = try parents.top.linked(key.tag, from: key.from, to: target)
            undo.append(.edgeOriginal(key, target, leaf.edgeOriginals[key]?[target]))
            setOriginal(key, target, below)
        }
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
        if settlesFacts {
            if !r.isToMany { try noteToOneBefore(Overlay.LinkKey(tag: tag, from: a)) }
            if !inverse.isToMany { try noteToOneBefore(Overlay.LinkKey(tag: inverse.tag, from: b)) }
        }
        // A to-one holds one target: a fact this layer kept for another one (an object hidden now,
        // which may come back) is dropped with the replacement.
        if present, !r.isToMany { try clearPresentFacts(Overlay.LinkKey(tag: tag, from: a), except: b) }
        if present, !inverse.isToMany { try clearPresentFacts(Overlay.LinkKey(tag: inverse.tag, from: b), except: a) }
        try recordFact(Overlay.LinkKey(tag: tag, from: a), b, present)
        try recordFact(Overlay.LinkKey(tag: inverse.tag, from: b), a, present)
        if !r.isToMany { markReplaced(Overlay.LinkKey(tag: tag, from: a)) }
        if !inverse.isToMany { markReplaced(Overlay.LinkKey(tag: inverse.tag, from: b)) }
        leaf.markDirty(a)
        leaf.markDirty(b)
    }

    /// Notes the targets `key` shows before the first edge of these changes touches it.
    private mutating func noteToOneBefore(_ key: Overlay.LinkKey) throws {
        guard toOneBefore[key] == nil else { return }
        toOneBefore[key] = try targets(key.tag, from: key.from)
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
