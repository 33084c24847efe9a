import Foundation

/// A scratchpad over a parent context (a view context or another child), any depth.
///
/// Changes are buffered in the child and applied to an in-memory overlay with the writer's own
/// rules (defaults, types, unique constraints, delete rules, to-one replacement), so everything
/// read through the child — fetch by id, predicates including relationship ones, sort order,
/// limit/offset, counts, both directions of relationships — sees them exactly as if saved.
/// ``commit()`` pushes the changes one level up; at the root they become one log transaction.
/// ``discard()`` drops them.
///
/// ```swift
/// let editor = try store.mainContext.newChild(label: "editor")
/// try editor.set(Track.title, of: trackID, to: "Jóga (live)")
/// let preview = try editor.fetch(Track.self, where: Track.title.hasPrefix("Jóga"))   // sees the edit
/// try await editor.commit()          // one transaction; or editor.discard()
/// ```
///
/// Every change remembers the version of each object it was based on; at the root commit the
/// writer compares it with the store and applies the child's ``MergePolicy``.
public final class ChildContext: ObjectReading {
    enum Parent: Sendable {
        case view(ViewContext)
        case child(ChildContext)
    }

    struct State: Sendable {
        var overlay = Overlay()
        var operations: [ChangeSet.Operation] = []
        var bases: [ObjectID: BaseVersion] = [:]
        /// An emptied undo list kept for the next change's ``OverlayApplier`` (see
        /// ``OverlayApplier/takeUndoStorage()``).
        var spareUndo: [OverlayApplier.Undo] = []

        /// The spare undo list, leaving none behind (so the applier holds its only reference).
        mutating func takeSpareUndo() -> [OverlayApplier.Undo] {
            var taken: [OverlayApplier.Undo] = []
            swap(&taken, &spareUndo)
            return taken
        }
    }

    public let label: String
    public let mergePolicy: MergePolicy
    let parent: Parent
    let store: Store
    /// Nesting depth: 1 for a child of a view context.
    public let depth: Int
    private let state = Locked(State())
    let observers = ContextObservers()

    init(parent: Parent, label: String, mergePolicy: MergePolicy) {
        self.parent = parent
        self.label = label
        self.mergePolicy = mergePolicy
        switch parent {
        case .view(let v):
            store = v.store
            depth = 1
        case .child(let c):
            store = c.store
            depth = c.depth + 1
        }
    }

    public var schema: Schema { store.schema }

    /// A child of this child (its commits go into this context).
    public func newChild(label: String, mergePolicy: MergePolicy? = nil) -> ChildContext {
        ChildContext(parent: .child(self), label: label, mergePolicy: mergePolicy ?? self.mergePolicy)
    }

    /// Whether there are changes not yet committed.
    public var hasChanges: Bool { state.withLock { !$0.operations.isEmpty } }

    /// Operations waiting for ``commit()``.
    public var pendingOperationCount: Int { state.withLock { $0.operations.count } }

    // MARK: Reading

    /// Overlays from the root-most child down to this one (O(depth) copies of copy-on-write values).
    func overlayChain() -> [Overlay] {
        let mine = state.withLock { $0.overlay }
        switch parent {
        case .view: return [mine]
        case .child(let p): return p.overlayChain() + [mine]
        }
    }

    private var root: ViewContext {
        switch parent {
        case .view(let v): v
        case .child(let c): c.root
        }
    }

    func read<R>(_ body: (MergedSource) throws -> R) throws -> R {
        let chain = overlayChain()
        return try root.read { try body(MergedSource(base: $0, overlays: chain)) }
    }

    public func record(_ id: ObjectID) throws -> Record? { try read { try $0.record(id) } }
    public func relatedIDs(_ relationship: RelationshipDescription, of id: ObjectID) throws -> [ObjectID] {
        try read { try $0.targets(relationship.tag, from: id) }
    }
    public func fetch(_ query: Query) throws -> [Record] { try read { try $0.fetch(query) } }
    public func count(_ query: Query) throws -> Int { try read { try $0.count(query) } }

    // MARK: Changing

    /// Applies a change set to this context (all or nothing). Validation errors are thrown here,
    /// when the change is made; required to-one relationships are checked at the root commit.
    public func apply(_ changes: ChangeSet) throws {
        for type in changes.entityTypes.values { try schema.check(type) }
        try apply(changes.operations, baseVersions: changes.baseVersions, mergePolicy: changes.mergePolicy)
    }

    /// Applies operations whose entity types were checked: to the overlay with the writer's
    /// rules, then appended to the pending ones (all or nothing).
    private func apply(_ operations: [ChangeSet.Operation], baseVersions: [ObjectID: BaseVersion] = [:], mergePolicy: MergePolicy = .fail) throws {
        let parents: [Overlay] = switch parent {
        case .view: []
        case .child(let p): p.overlayChain()
        }
        try state.withLock { s in
            try root.read { view in
                try rememberBases(operations, base: view, into: &s)
                // Hand the overlay to the applier and drop this reference, so the applier holds the
                // only one and changes the dictionaries in place (a second reference would make
                // every change copy the whole overlay: O(n) per change).
                var resolver = SaveResolver(applier: OverlayApplier(base: view, parents: parents, leaf: OverlayApplier.take(&s.overlay), undo: s.takeSpareUndo()),
                                            limits: store.configuration, collectsChanges: false)
                do {
                    try resolver.run(operations, bases: baseVersions, policy: mergePolicy, checkRequired: false)
                } catch {
                    s.overlay = resolver.applier.rollBack()
                    throw error
                }
                s.overlay = resolver.applier.takeLeaf()
                s.spareUndo = resolver.applier.takeUndoStorage()
                s.operations += operations
            }
        }
        observers.changed()
    }

    /// One insert, applied without building a ``SaveResolver``: for an insert the resolver does
    /// exactly this (find the entity, ``ValueRules/prepared(_:_:_:maxValueBytes:)``, one `.insert`
    /// change through ``OverlayApplier``), and an insert has no base version to remember. Building
    /// and dropping a resolver, its merge state and its undo list cost about a tenth of a child's
    /// insert (`perf` of W7); a child filled one object at a time pays it once per object.
    private func insertOne(_ id: ObjectID, _ input: [Value]) throws {
        let parents: [Overlay] = switch parent {
        case .view: []
        case .child(let p): p.overlayChain()
        }
        try state.withLock { s in
            try root.read { view in
                // Checked inside the read, as the resolver does: a closed store reports `.closed`
                // before any validation error.
                let e = try ValueRules.entity(schema, id)
                let values = try ValueRules.prepared(e, id, input, maxValueBytes: store.configuration.maxValueBytes)
                // As in `apply`: the applier holds the only reference to the overlay meanwhile.
                var applier = OverlayApplier(base: view, parents: parents, leaf: OverlayApplier.take(&s.overlay), undo: s.takeSpareUndo())
                do {
                    try applier.apply(.insert(id: id, values: values))
                } catch {
                    s.overlay = applier.rollBack()
                    throw error
                }
                s.overlay = applier.takeLeaf()
                s.spareUndo = applier.takeUndoStorage()
            }
            s.operations.append(.insert(id: id, values: input))
        }
        observers.changed()
    }

    /// The version each existing object had when this context chain first touched it.
    private func rememberBases(_ operations: [ChangeSet.Operation], base: ReadView, into s: inout State) throws {
        for op in operations {
            let id: ObjectID
            switch op {
            case .update(let i, _), .delete(let i), .put(let i, _): id = i
            default: continue
            }
            guard s.bases[id] == nil else { continue }
            if let inherited = inheritedBase(id) {
                s.bases[id] = inherited
            } else if let r = try base.record(id) {
                s.bases[id] = BaseVersion(version: r.version, values: r.values)
            }
        }
    }

    private func inheritedBase(_ id: ObjectID) -> BaseVersion? {
        guard case .child(let p) = parent else { return nil }
        return p.state.withLock { $0.bases[id] } ?? p.inheritedBase(id)
    }

    /// Builds a change set with `body` and applies it.
    public func change(_ body: (inout ChangeSet) throws -> Void) throws {
        var c = ChangeSet()
        try body(&c)
        try apply(c)
    }

    public func insert<E: Entity>(_ object: E) throws {
        try schema.check(E.self)
        try insertOne(object.id, object.storedValues)
    }
    public func insert(_ record: Record) throws { try change { $0.insert(record) } }
    public func update<E: Entity>(_ object: E) throws { try change { $0.update(object) } }
    public func delete(_ id: ObjectID) throws { try change { $0.delete(id) } }
    public func set<E: Entity, V>(_ key: Attribute<E, V>, of id: ObjectID, to value: V) throws { try change { $0.set(key, of: id, to: value) } }
    public func set<E: Entity, T: Entity>(_ relationship: ToOne<E, T>, of id: ObjectID, to target: ObjectID?) throws {
        try change { $0.set(relationship, of: id, to: target) }
    }
    public func add<E: Entity, T: Entity>(_ target: ObjectID, to relationship: ToMany<E, T>, of id: ObjectID) throws {
        try change { $0.add(target, to: relationship, of: id) }
    }
    public func remove<E: Entity, T: Entity>(_ target: ObjectID, from relationship: ToMany<E, T>, of id: ObjectID) throws {
        try change { $0.remove(target, from: relationship, of: id) }
    }

    // MARK: Commit and discard

    /// Pushes the changes one level up. Into a view context (the root) they are saved as one
    /// transaction, whose id is returned; into a parent child they become its pending changes
    /// (nil is returned). Nothing to commit returns nil.
    @discardableResult
    public func commit() async throws -> TransactionID? {
        switch parent {
        case .child(let p):
            let committed = try state.withLock { s -> State? in
                guard !s.operations.isEmpty else { return nil }
                try p.absorb(ChangeSet(operations: s.operations), bases: s.bases)
                return Self.take(&s)
            }
            if let committed { Self.release(committed) }
            observers.changed()
            return nil
        case .view:
            let (changes, taken) = state.withLock { s -> (ChangeSet, Int) in
                var c = ChangeSet(operations: s.operations)
                c.baseVersions = s.bases
                c.mergePolicy = mergePolicy
                return (c, s.operations.count)
            }
            guard taken > 0 else { return nil }
            let tx = try await store.save(changes, author: label)
            try rebase(after: taken)
            return tx
        }
    }

    /// A child's committed changes, applied here with their base versions (earlier bases win).
    func absorb(_ changes: ChangeSet, bases: [ObjectID: BaseVersion]) throws {
        // The child's bases first: for an object this context had not touched, the version the
        // child read is the one the change was based on (not the store's version now).
        let added = state.withLock { s -> [ObjectID] in
            let new = bases.keys.filter { s.bases[$0] == nil }
            for id in new { s.bases[id] = bases[id] }
            return new
        }
        do {
            try apply(changes)
        } catch {
            state.withLock { s in for id in added { s.bases[id] = nil } }
            throw error
        }
    }

    /// Accepts the store's current version of every object this context changed as the new base:
    /// after a ``StrataError/conflict(_:)``, call it to write this context's values over the
    /// store's on the next ``commit()`` (having looked at what the store changed).
    public func rebase() throws {
        let ids = state.withLock { Array($0.bases.keys) }
        let current = try root.read { view in
            try ids.compactMap { id in try view.record(id).map { (id, BaseVersion(version: $0.version, values: $0.values)) } }
        }
        state.withLock { s in
            for id in ids { s.bases[id] = nil }
            for (id, base) in current { s.bases[id] = base }
        }
    }

    /// After a root commit: drop what was committed; changes made meanwhile are re-applied over
    /// the new state.
    private func rebase(after taken: Int) throws {
        let (later, committed) = state.withLock { s -> ([ChangeSet.Operation], State) in
            let rest = Array(s.operations.dropFirst(taken))
            return (rest, Self.take(&s))
        }
        Self.release(committed)
        if !later.isEmpty {
            try apply(later)
        } else {
            observers.changed()
        }
    }

    /// Drops every pending change.
    public func discard() {
        Self.release(state.withLock { Self.take(&$0) })
        observers.changed()
    }

    /// Empties `s`, returning what it held.
    private static func take(_ s: inout State) -> State {
        defer { s = State() }
        return s
    }

    /// Frees committed or discarded changes on a background queue. A child of n changes holds
    /// O(n) small allocations (records, their values and strings, dictionary storage, operations):
    /// freeing them was about a twentieth of a 20k-insert commit's time, all of it on the caller's
    /// thread after the save (`perf record` of `strata-bench probe child`); the commit now returns
    /// without waiting for it.
    /// Readers that copied the overlay keep their own references, so nothing they use is freed.
    private static func release(_ old: State) {
        guard !old.operations.isEmpty || !old.overlay.records.isEmpty else { return }
        releaseQueue.async { withExtendedLifetime(old) {} }
    }

    private static let releaseQueue = DispatchQueue(label: "strata.child-release", qos: .utility)
}

extension ViewContext {
    /// A child context over this one: reads see this context plus the child's pending changes;
    /// ``ChildContext/commit()`` saves them as one transaction.
    public func newChild(label: String, mergePolicy: MergePolicy = .fail) -> ChildContext {
        ChildContext(parent: .view(self), label: label, mergePolicy: mergePolicy)
    }
}
