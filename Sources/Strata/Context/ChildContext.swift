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
        /// The pending changes, as net state over everything below.
        var overlay = Overlay()
        /// The version and values each changed object had in the store when this context chain
        /// first changed it.
        var bases: [ObjectID: BaseVersion] = [:]
        /// An emptied undo list kept for the next change's ``OverlayApplier`` (see
        /// ``OverlayApplier/takeUndoStorage()``).
        var spareUndo: [OverlayApplier.Undo] = []
        /// Counts ``discard()`` calls: a root commit in flight finds out whether what it took was
        /// discarded meanwhile.
        var discards: UInt64 = 0
        /// For a child of a pinned view: the changes it committed that the view's snapshot does
        /// not show yet, oldest first (see ``committedLayers(below:)``).
        var committed: [CommittedLayer] = []
        /// The bases this context's root commits moved on, while it has children: for each object,
        /// the bases its commits carried (nil: an object a commit inserted, read at version zero
        /// below) and the one the object has since. A child's commit that reaches this context
        /// after a root commit landed but before ``rebaseDescendants(from:to:)`` reached the
        /// child carries a base of the chain's own commit, which ``absorb`` moves on here.
        var rebased: [ObjectID: Rebased] = [:]

        /// The spare undo list, leaving none behind (so the applier holds its only reference).
        mutating func takeSpareUndo() -> [OverlayApplier.Undo] {
            var taken: [OverlayApplier.Undo] = []
            swap(&taken, &spareUndo)
            return taken
        }
    }

    /// Objects ``State/rebased`` remembers at most (their bases hold the objects' values).
    static let maxRebasedObjects = 10_000
    /// Root commits of one object ``State/rebased`` remembers at most (the latest).
    static let maxRebasedOlds = 8

    /// The bases an object's root commits carried, and the base it has after the last of them.
    struct Rebased: Sendable {
        var olds: [BaseVersion?]
        var new: BaseVersion

        /// `base` moved on, if it is one of the commits' own.
        func current(_ base: BaseVersion) -> BaseVersion {
            olds.contains { ChildContext.isCarried($0, base) } ? new : base
        }
    }

    /// Whether `base`, held below a root commit, is the one that commit carried for its object
    /// (`carried`), or, for an object the commit inserted (it carried none), the unsaved version
    /// zero a descendant read it at.
    static func isCarried(_ carried: BaseVersion?, _ base: BaseVersion?) -> Bool {
        base == carried || (carried == nil && base?.version == .zero)
    }

    /// Changes committed at the root, shown to a child of a pinned view until the view refreshes.
    struct CommittedLayer: Sendable {
        let overlay: Overlay
        let transaction: TransactionID
    }

    /// A root commit under way: what it took and what it sends.
    private struct Flight {
        let overlay: Overlay
        let bases: [ObjectID: BaseVersion]
        let discards: UInt64
        let changes: ChangeSet
    }

    /// The context's name: the author of the transactions its root commits save.
    public let label: String
    /// How a root commit resolves objects that the store changed since this context (or a parent) first changed
    /// them.
    public let mergePolicy: MergePolicy
    let parent: Parent
    let store: Store
    /// The view context at the root of the chain (kept, not found through the parents on each
    /// read: the store holds its main context weakly, so each retain of it is a slow one).
    private let root: ViewContext
    /// Nesting depth: 1 for a child of a view context.
    public let depth: Int
    private let state = Locked(State())
    /// Runs this context's commits one at a time.
    private let commits = SerialGate()
    /// This context's children (weakly: a child nobody holds goes away), whose bases a root
    /// commit brings forward.
    private let children = Locked<[WeakChild]>([])
    private struct WeakChild: Sendable { weak var context: ChildContext? }
    let observers = ContextObservers()
    /// Run (tests only) by a commit at the root after the store's save returned, before the
    /// commit lands in the context.
    let afterRootSaveForTesting = Locked<(@Sendable () async -> Void)?>(nil)
    /// Tests only: run after a root commit has landed in this context (its lock let go) and
    /// before the bases of its descendants are brought forward.
    let beforeRebasingDescendantsForTesting = Locked<(@Sendable () -> Void)?>(nil)

    init(parent: Parent, label: String, mergePolicy: MergePolicy) {
        self.parent = parent
        self.label = label
        self.mergePolicy = mergePolicy
        switch parent {
        case .view(let v):
            store = v.store
            root = v
            depth = 1
        case .child(let c):
            store = c.store
            root = c.root
            depth = c.depth + 1
        }
    }

    /// The store's schema.
    public var schema: Schema { store.schema }

    /// A child of this child (its commits go into this context).
    public func newChild(label: String, mergePolicy: MergePolicy? = nil) -> ChildContext {
        let child = ChildContext(parent: .child(self), label: label, mergePolicy: mergePolicy ?? self.mergePolicy)
        children.withLock { list in
            list.removeAll { $0.context == nil }
            list.append(WeakChild(context: child))
        }
        return child
    }

    /// Whether there are changes not yet committed: whether ``pendingObjects`` lists any object.
    /// A value set and set back, or an object inserted and deleted again, is none (a commit
    /// would send nothing).
    public var hasChanges: Bool { state.withLock { $0.overlay.hasPendingObjects } }

    /// How many objects and relationship edges have pending changes: the net changes a
    /// ``commit()`` would send, not the number of calls that made them (an object inserted and
    /// then updated counts once; one changed and changed back still counts until committed or
    /// discarded).
    public var pendingOperationCount: Int { state.withLock { $0.overlay.changeCount } }

    /// The objects this child would commit, as inserted, updated and deleted ids (Core Data's
    /// `insertedObjects`, `updatedObjects`, `deletedObjects`): its own pending layer, not what its
    /// children hold until they commit into it.
    public var pendingObjects: PendingObjects { state.withLock { $0.overlay.pendingObjects } }

    // MARK: Reading

    /// Overlays from the root-most child down to this one (O(depth) copies of copy-on-write values).
    /// The overlays this context reads over the root's state, when that state is the snapshot
    /// at `shown` (nil: the latest state, which shows every commit).
    func overlayChain(shown: TransactionID?) -> [Overlay] {
        switch parent {
        case .view:
            return state.withLock { s in Self.committedLayers(&s, shown: shown).map(\.overlay) + [s.overlay] }
        case .child(let p):
            let mine = state.withLock { $0.overlay }
            return p.overlayChain(shown: shown) + [mine]
        }
    }

    /// The overlays under this context's own: its parent's chain, or the layers it committed that
    /// the root's state at `shown` does not show yet.
    private func lowerChain(_ s: inout State, shown: TransactionID?) -> [Overlay] {
        switch parent {
        case .view: return Self.committedLayers(&s, shown: shown).map(\.overlay)
        case .child(let p): return p.overlayChain(shown: shown)
        }
    }

    /// The committed layers a state at `shown` does not show yet; the others are dropped (the
    /// view only moves on). The latest state (nil) shows them all.
    private static func committedLayers(_ s: inout State, shown: TransactionID?) -> [CommittedLayer] {
        guard !s.committed.isEmpty else { return [] }
        s.committed.removeAll { layer in shown.map { layer.transaction <= $0 } ?? true }
        return s.committed
    }

    func read<R>(_ body: (MergedSource) throws -> R) throws -> R {
        try root.withReadState { snapshot in
            let chain = overlayChain(shown: snapshot?.transactionID)
            return try root.read(in: snapshot) { try body(MergedSource(base: $0, overlays: chain)) }
        }
    }

    /// The record with this id as this context shows it (nil when it does not exist here).
    public func record(_ id: ObjectID) throws -> Record? { try read { try $0.record(id) } }
    /// The objects `id` is linked to through `relationship` as this context shows them, in id order.
    public func relatedIDs(_ relationship: RelationshipDescription, of id: ObjectID) throws -> [ObjectID] {
        try read { try $0.targets(relationship.tag, from: id) }
    }
    /// The records matching `query` in this context, pending changes included.
    public func fetch(_ query: Query) throws -> [Record] { try read { try $0.fetch(query) } }
    /// How many records match `query` in this context, pending changes included.
    public func count(_ query: Query) throws -> Int { try read { try $0.count(query) } }

    // MARK: Changing

    /// Applies a change set to this context (all or nothing). Validation errors are thrown here,
    /// when the change is made; required to-one relationships are checked at the root commit.
    public func apply(_ changes: ChangeSet) throws {
        try changes.checkTyped(against: schema)
        try apply(changes.operations, baseVersions: changes.baseVersions, mergePolicy: changes.mergePolicy)
    }

    /// Applies operations whose entity types were checked to the overlay, with the writer's rules
    /// (all or nothing).
    private func apply(_ operations: [ChangeSet.Operation], baseVersions: [ObjectID: BaseVersion] = [:],
                       mergePolicy: MergePolicy = .fail, inheriting inherited: [ObjectID: BaseVersion] = [:],
                       netState: Bool = false) throws {
        try apply(building: nil, operations, baseVersions: baseVersions, mergePolicy: mergePolicy,
                  inheriting: inherited, netState: netState)
    }

    /// What a change made from what the context reads (``apply(building:_:baseVersions:mergePolicy:inheriting:netState:then:)``)
    /// applies: its operations, and the bases its merge policy judges (nil: those given).
    private struct Built {
        var operations: [ChangeSet.Operation]
        var bases: [ObjectID: BaseVersion]? = nil
    }

    /// ``apply(_:baseVersions:mergePolicy:inheriting:netState:)`` of `operations`, or of those
    /// `build` makes from the state below this context's layer and the context's own state,
    /// read in the same state the change is applied to and under the same lock (so a base the
    /// change remembers is the version `build` read, and no change of another thread comes in
    /// between). `then` runs last, under that lock, when the change was applied.
    private func apply(building build: ((MergedSource, inout State) throws -> Built)?,
                       _ given: [ChangeSet.Operation], baseVersions: [ObjectID: BaseVersion] = [:],
                       mergePolicy: MergePolicy = .fail, inheriting inherited: [ObjectID: BaseVersion] = [:],
                       netState: Bool = false, acceptingClashesBelow: Bool = false,
                       then: ((inout State) -> Void)? = nil) throws {
        try state.withLock { s in try root.withReadState { snapshot in
            let lower = lowerChain(&s, shown: snapshot?.transactionID)
            try root.read(in: snapshot) { view in
                // Built in a scope of its own: a view's reference to the layer is gone before the
                // applier takes it (a second reference would make it copy the whole layer).
                let built = try build.map { make in try { try make(MergedSource(base: view, overlays: lower), &s) }() }
                let operations = built?.operations ?? given
                let bases = built?.bases ?? baseVersions
                if build != nil, operations.isEmpty {
                    then?(&s)
                    return
                }
                // Hand the overlay to the applier and drop this reference, so the applier holds the
                // only one and changes the dictionaries in place (a second reference would make
                // every change copy the whole overlay: O(n) per change).
                var resolver = SaveResolver(
                    applier: OverlayApplier(base: view, parents: lower, leaf: OverlayApplier.take(&s.overlay),
                                            undo: s.takeSpareUndo()),
                    limits: store.configuration, collectsChanges: false)
                resolver.applier.acceptsClashesBelow = acceptingClashesBelow
                resolver.applier.settlesFacts = netState
                do {
                    try resolver.applier.prepareCounts()
                    try resolver.run(operations, bases: bases, policy: mergePolicy, checkRequired: false,
                                     netState: netState)
                    if netState { try resolver.applier.settleFacts() }
                    try rememberBases(resolver.applier.firstTouched, inherited: inherited,
                                      below: resolver.applier.parents, into: &s)
                } catch {
                    s.overlay = resolver.applier.rollBack()
                    throw error
                }
                s.overlay = resolver.applier.takeLeaf()
                s.spareUndo = resolver.applier.takeUndoStorage()
                then?(&s)
            }
        } }
        observers.changed()
    }

    /// One insert, applied without building a ``SaveResolver``: for an insert the resolver does
    /// exactly this (find the entity, ``ValueRules/prepared(_:_:_:maxValueBytes:)``, one `.insert`
    /// change through ``OverlayApplier``), and an insert has no base version to remember. Building
    /// and dropping a resolver, its merge state and its undo list cost about a tenth of a child's
    /// insert (`perf` of W7); a child filled one object at a time pays it once per object.
    private func insertOne(_ id: ObjectID, _ input: [Value]) throws {
        try state.withLock { s in try root.withReadState { snapshot in
            let lower = lowerChain(&s, shown: snapshot?.transactionID)
            try root.read(in: snapshot) { view in
                // Checked inside the read, as the resolver does: a closed store reports `.closed`
                // before any validation error.
                let e = try ValueRules.entity(schema, id)
                let values = try ValueRules.prepared(e, id, input, maxValueBytes: store.configuration.maxValueBytes)
                // The usual insert (a new id, keys nobody holds) changes the layer in place; any
                // other goes through the applier, which throws the duplicate or the clash.
                if try s.overlay.insertIfClear(e, id, values, over: MergedSource(base: view, overlays: lower).top) {
                    return
                }
                // As in `apply`: the applier holds the only reference to the overlay meanwhile.
                var applier = OverlayApplier(base: view, parents: lower, leaf: OverlayApplier.take(&s.overlay),
                                             undo: s.takeSpareUndo())
                do {
                    try applier.prepareCounts()
                    try applier.apply(.insert(id: id, values: values))
                } catch {
                    s.overlay = applier.rollBack()
                    throw error
                }
                s.overlay = applier.takeLeaf()
                s.spareUndo = applier.takeUndoStorage()
            }
        } }
        observers.changed()
    }

    /// Remembers a base for every object below that this change touched first: the one a
    /// committing child passed up, else one a parent holds, else the record as the state below
    /// shows it (an object a parent inserted has version zero: never saved, so at the root any
    /// stored object with its id is a conflict; a parent's insert itself carries no base).
    private func rememberBases(_ touched: [ObjectID], inherited: [ObjectID: BaseVersion], below: MergedSource,
                               into s: inout State) throws {
        for id in touched where s.bases[id] == nil {
            if let base = inherited[id] ?? inheritedBase(id) {
                s.bases[id] = base
            } else if let r = try below.record(id) {
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

    /// Inserts an entity value (validated here: types, required values, sizes, unique keys).
    public func insert<E: Entity>(_ object: E) throws {
        try schema.check(E.self)
        // An id of another entity would insert an object of that entity with `E`'s values.
        if let refused = ChangeSet.misdirection(E.self, id: object.id, field: nil) { throw StrataError.validation(refused) }
        try insertOne(object.id, object.storedValues)
    }
    /// Inserts a dynamic record (unset attributes take their defaults).
    public func insert(_ record: Record) throws { try change { $0.insert(record) } }
    /// Sets every attribute of the object to the entity value's (only differences are changes).
    public func update<E: Entity>(_ object: E) throws { try change { $0.update(object) } }

    /// Reads the object as this context shows it, lets `body` change the value, and applies the
    /// attributes it changed, in one step: the base the change remembers is the version `body`
    /// read, so a read-modify-write (a counter, a balance) meets a commit of another writer made
    /// since as a conflict, never as a lost change. (``object(_:id:)`` and then
    /// `set(_:of:to:)` take the base at the set: a commit in between is not seen.) `body` runs
    /// while this context is held: it must not use this context or a context below or above it,
    /// nor, under a pinned view context, any other context of that view (a sibling's change
    /// would wait for this context's hold of the view's snapshot while `body` waits for the
    /// sibling): keep it to changing the value.
    /// It runs again, on a newer value, when a refresh of a pinned view lets go of the snapshot it
    /// read: keep it to changing the value. Returns the value as changed.
    /// - Throws: ``StrataError/validation(_:)`` (`objectNotFound`) when the context shows no such
    ///   object, the error `body` throws (nothing changes), or one the change meets.
    @discardableResult
    public func modify<E: Entity>(_ type: E.Type, id: ObjectID, _ body: (inout E) throws -> Void) throws -> E {
        try schema.check(E.self)
        var result: E?
        // Runs before apply returns: the closure does not outlive this call.
        try withoutActuallyEscaping(body) { body in try apply(building: { below, s in
            guard id.entityTag == E.entityTag,
                  let record = try MergedSource(base: below.base, overlays: below.overlays + [s.overlay]).record(id) else {
                throw StrataError.validation(ValidationFailure(
                    kind: .objectNotFound, entity: E.entityName, objectID: id, field: nil,
                    reason: "cannot modify: no such object"))
            }
            var value = try E(id: id, storedValues: record.values)
            try body(&value)
            result = value
            let values = value.storedValues
            let changed = values.indices.filter { $0 < record.values.count && values[$0] != record.values[$0] }
            return Built(operations: changed.isEmpty ? [] : [.update(id: id, attributes: changed.map {
                ChangeSet.AttributeValue(attribute: $0, value: values[$0])
            })])
        }, []) }
        guard let result else { preconditionFailure("modify's body ran and set its result") }
        return result
    }
    /// Deletes an object; its relationships follow their delete rules.
    public func delete(_ id: ObjectID) throws { try change { $0.delete(id) } }
    /// Sets one attribute of an object.
    public func set<E: Entity, V>(_ key: Attribute<E, V>, of id: ObjectID, to value: V) throws {
        try change { $0.set(key, of: id, to: value) }
    }
    /// Sets (or with nil clears) a to-one relationship, replacing the previous target.
    public func set<E: Entity, T: Entity>(_ relationship: ToOne<E, T>, of id: ObjectID, to target: ObjectID?) throws {
        try change { $0.set(relationship, of: id, to: target) }
    }
    /// Adds `target` to a to-many relationship of `id` (and `id` to the inverse).
    public func add<E: Entity, T: Entity>(_ target: ObjectID, to relationship: ToMany<E, T>, of id: ObjectID) throws {
        try change { $0.add(target, to: relationship, of: id) }
    }
    /// Removes `target` from a to-many relationship of `id` (and `id` from the inverse).
    public func remove<E: Entity, T: Entity>(_ target: ObjectID, from relationship: ToMany<E, T>,
                                             of id: ObjectID) throws {
        try change { $0.remove(target, from: relationship, of: id) }
    }

    // MARK: Commit and discard

    /// Pushes the pending changes one level up: their net state, as ``fetch(_:)`` shows it, not
    /// the calls that made them. Into a view context (the root) they are saved as one
    /// transaction, whose id is returned; into a parent child they become its pending changes
    /// (nil is returned). Nothing to commit returns nil.
    ///
    /// Overlapping calls run one after the other: a second call commits what is pending when
    /// the first has finished. Changes made while a root commit is in flight stay pending; a
    /// ``discard()`` made meanwhile drops them but not the commit in flight. If the commit
    /// throws, the context keeps its changes, so a fix made here commits next time.
    @discardableResult
    public func commit() async throws -> TransactionID? {
        try await commits.run {
            switch parent {
            case .child(let p):
                try commitIntoParent(p)
                return nil
            case .view(let v):
                return try await commitAtRoot(v)
            }
        }
    }

    /// This context's net changes absorbed by its parent `p` (what ``commit()`` does for a nested
    /// child, there inside this context's serial gate; tests call it directly to commit in a
    /// window a hook opens).
    func commitIntoParent(_ p: ChildContext) throws {
        let committed = try state.withLock { s -> State? in
            guard !s.overlay.isEmpty else { return nil }
            let (operations, bases) = try netChanges(&s)
            // A custom resolver runs at the root only, on the writer (as its documentation
            // says): here it would run under this context's lock and the parent's, and a
            // resolver reading either would wait for itself. Into a parent it is `.fail`.
            let policy: MergePolicy = if case .custom = mergePolicy { .fail } else { mergePolicy }
            try p.absorb(operations, bases: bases, read: s.overlay.originals.filter { bases[$0.key] != nil },
                         policy: policy)
            return Self.take(&s)
        }
        if let committed { Self.release(committed) }
        observers.changed()
    }

    private func commitAtRoot(_ v: ViewContext) async throws -> TransactionID? {
        let flight = try state.withLock { s -> Flight? in
            guard !s.overlay.isEmpty else { return nil }
            let (operations, bases) = try netChanges(&s)
            var c = ChangeSet(operations: operations)
            c.baseVersions = bases
            c.mergePolicy = mergePolicy
            c.isNetState = true
            return Flight(overlay: s.overlay, bases: s.bases, discards: s.discards, changes: c)
        }
        guard let flight else { return nil }
        if flight.changes.isEmpty {
            // Changes that cancel out (a value set and set back): nothing to save.
            landed(consume flight, at: nil, pinned: false)
            return nil
        }
        let pinned = !v.autoRefresh
        // A child of a pinned view keeps its commit as a layer, built from the entry the writer
        // wrote (caught as it is published), not read back from the log: a compaction finishing
        // between the save and that read may have squashed the entry into the state.
        let catcher = pinned ? CommitCatcher(author: label) : nil
        if let catcher { store.hub.register(catcher) }
        let tx = try await store.save(flight.changes, author: label)
        if let hook = afterRootSaveForTesting.withLock({ $0 }) { await hook() }
        landed(consume flight, at: tx, pinned: pinned, entry: catcher?.take(tx))
        return tx
    }

    /// The net operations of the pending layer and the bases of the objects they change.
    private func netChanges(_ s: inout State) throws -> ([ChangeSet.Operation], [ObjectID: BaseVersion]) {
        let layer = s.overlay, bases = s.bases
        let operations = try root.withReadState { snapshot in
            let lower = lowerChain(&s, shown: snapshot?.transactionID)
            return try root.read(in: snapshot) { view in
                let merged = MergedSource(base: view, overlays: lower + [layer])
                return try layer.netChanges(schema: schema, bases: bases, view: merged.top,
                                            below: MergedSource.Level(source: merged, depth: lower.count))
            }
        }
        // A base goes with an object the set updates or deletes: the merge policy judges those
        // (an object whose values are back to what was read, or whose edges alone changed, is
        // not judged; one inserted again after a delete is a new object).
        guard !s.bases.isEmpty else { return (operations, [:]) }
        var judged = Set<ObjectID>()
        for op in operations {
            switch op {
            case .update(let id, _), .delete(let id): judged.insert(id)
            default: continue
            }
        }
        return (operations, s.bases.filter { judged.contains($0.key) })
    }

    /// After a root commit of `flight` (at `tx`; nil when there was nothing to save): what was
    /// committed leaves the pending layer, what changed since stays, over a state that now holds
    /// the commit. Objects still pending take the committed values as their base. A child of a
    /// pinned view keeps the committed layer to read until the view shows it.
    private func landed(_ flight: Flight, at tx: TransactionID?, pinned: Bool, entry: LogEntry? = nil) {
        // The bases the commit gives objects still pending here or below: worked out only when
        // something is pending (a commit of a whole layer, the usual case, needs none).
        let hasChildren = !children.withLock { $0.allSatisfy { $0.context == nil } }
        // They are the store's version of each object the commit wrote as this child sent it,
        // read right after it. An object whose change a merge policy resolved against the store
        // (its values kept, or merged with the child's) keeps its old base version: the edits
        // pending on it were made on values the store no longer holds, and the policy judges them
        // at their own commit (given the store's version, they were written over the other
        // writer's change with no conflict); its base values take the store's where the store
        // holds what the chain sent. An object a later save changed keeps its old base (a
        // conflict then, never a lost one), and so does everything when the store cannot be read.
        func committedBases() -> [ObjectID: BaseVersion] {
            guard let tx else { return [:] }
            var written: [ObjectID] = []
            for op in flight.changes.operations {
                switch op {
                case .insert(let id, _), .update(let id, _), .put(let id, _), .upsert(let id, _, _): written.append(id)
                case .delete, .link, .unlink: continue
                }
            }
            let read = try? store.read { view in
                var bases: [ObjectID: BaseVersion] = [:]
                for id in written {
                    guard case .some(.some(let sent)) = flight.overlay.records[id],
                          let r = try view.record(id), r.version == tx else { continue }
                    if r.values == sent.values {
                        bases[id] = BaseVersion(version: r.version, values: r.values)
                    } else if let was = flight.bases[id], was.values.count == r.values.count,
                              sent.values.count == r.values.count {
                        // Resolved by a merge policy: the old version stays (the edits pending
                        // on it are judged again), but an attribute the store now holds as the
                        // chain sent it is the chain's own write, not the other writer's change:
                        // its base is that value (with the old one, a later edit of it below
                        // was taken for a clash with the store and dropped by `.store` merges).
                        var values = was.values
                        for i in values.indices where r.values[i] == sent.values[i] { values[i] = r.values[i] }
                        bases[id] = BaseVersion(version: was.version, values: values)
                    }
                }
                return bases
            }
            return read ?? [:]
        }
        var descendantBases: [ObjectID: BaseVersion] = [:]
        let old = state.withLock { s -> Overlay in
            let old = s.overlay
            if s.discards == flight.discards {
                // Unchanged since the flight took it (the usual case): nothing stays pending.
                s.overlay = s.overlay.revision == flight.overlay.revision
                    ? Overlay() : s.overlay.remainder(after: flight.overlay)
            }
            if let tx {
                // An object the flight deleted and this child inserted again meanwhile was not
                // new when inserted (the state below still had it): once the delete landed it is,
                // and its next commit inserts it (as an update of a deleted object it was lost,
                // or refused for ever). A delete a merge policy dropped leaves it an update. Not
                // after a discard since the flight took the layer: an edit made then was made on
                // the object as the state below still showed it, and judged at its commit (a
                // conflict with the delete, or the merge policy), never a new object.
                let reinserted = s.discards != flight.discards ? [] : s.overlay.order.filter { touch in
                    guard !touch.isNew, case .some(.some) = s.overlay.records[touch.id],
                          case .some(.none) = flight.overlay.records[touch.id] else { return false }
                    return true
                }.map(\.id)
                if !reinserted.isEmpty,
                   let gone = try? store.read({ view in try reinserted.filter { try view.record($0) == nil } }) {
                    let gone = Set(gone)
                    for i in s.overlay.order.indices where gone.contains(s.overlay.order[i].id) {
                        s.overlay.order[i] = Overlay.Touch(id: s.overlay.order[i].id, isNew: true)
                    }
                    for id in gone {
                        s.overlay.originals[id] = nil
                        s.bases[id] = nil
                    }
                }
                if !s.overlay.isEmpty || hasChildren {
                    descendantBases = committedBases()
                    for (id, base) in descendantBases
                        where s.overlay.records[id] != nil && s.bases[id] == flight.bases[id] {
                        s.bases[id] = base
                    }
                }
                if hasChildren {
                    // Kept for a child's commit that reaches this context before the rebase of
                    // the descendants below reaches that child (it may be waiting for this lock).
                    // Bounded (``maxRebasedObjects`` objects, ``maxRebasedOlds`` commits each): past
                    // it, a child committing in that window meets its chain's commit as before.
                    for (id, base) in descendantBases {
                        let carried = flight.bases[id]
                        if var r = s.rebased[id], Self.isCarried(carried, r.new) {
                            r.olds.append(carried)
                            if r.olds.count > Self.maxRebasedOlds { r.olds.removeFirst() }
                            r.new = base
                            s.rebased[id] = r
                        } else if s.rebased[id] != nil || s.rebased.count < Self.maxRebasedObjects {
                            s.rebased[id] = Rebased(olds: [carried], new: base)
                        }
                    }
                } else {
                    s.rebased = [:]
                }
                if pinned {
                    let layer: Overlay
                    if let read = try? committedLayer(at: tx, sent: flight.changes, entry: entry) {
                        layer = read
                    } else {
                        // The store could not be read (closed meanwhile): what the child sent.
                        var sent = flight.overlay
                        sent.stampVersions(tx)
                        sent.countBasis = nil
                        layer = sent
                    }
                    s.committed.append(CommittedLayer(overlay: layer, transaction: tx))
                }
            }
            s.bases = s.overlay.isEmpty ? [:] : s.bases.filter { s.overlay.records[$0.key] != nil }
            return old
        }
        if let hook = beforeRebasingDescendantsForTesting.withLock({ $0 }) { hook() }
        if hasChildren { rebaseDescendants(from: flight.bases, to: descendantBases) }
        // The flight's copy of the layer and its operations go with the old layer.
        Self.releaseQueue.async { withExtendedLifetime((old, flight)) {} }
        observers.changed()
    }

    /// The store's state of everything transaction `tx` changed or the net set `sent` asked to change — the
    /// records with all their relationships, the edges, the to-one relationships — as a layer: what a child of a pinned view
    /// reads of its commit until the view shows it (the writer's merge policy may have kept store
    /// values, and delete rules may have reached further than the child saw). Read right after
    /// the commit. What `tx` changed comes from `entry` (the log entry as the writer wrote it)
    /// when given, else from the store's log.
    /// - Complexity: O(changes of the transaction and of `sent`, plus the edges of every object
    ///   they name: an album renamed with 10,000 tracks holds 10,000 facts until the view refreshes).
    private func committedLayer(at tx: TransactionID, sent: ChangeSet, entry caught: LogEntry?) throws -> Overlay {
        try store.read { view in
            // The store right after `tx`, not as it is now: saves of other writers may have
            // landed since, and the layer must be one state (the as-of reading: the later
            // transactions undone, O(their changes), none in the usual case).
            let head = try view.lastTransactionID()
            let undo = head > tx ? try StateBackward.undoOverlay(view, back: tx, from: head) : nil
            let state = MergedSource(base: view, overlays: undo.map { [$0] } ?? [])
            var objects = Set<ObjectID>()
            var edges = Set<Overlay.LinkKey>(), edgeTargets: [Overlay.LinkKey: Set<ObjectID>] = [:]
            var wholeKeys = Set<Overlay.LinkKey>()
            func edge(_ tag: UInt16, _ a: ObjectID, _ b: ObjectID) {
                let key = Overlay.LinkKey(tag: tag, from: a)
                edges.insert(key)
                edgeTargets[key, default: []].insert(b)
            }
            for op in sent.operations {
                switch op {
                case .insert(let id, _), .update(let id, _), .delete(let id), .put(let id, _), .upsert(let id, _, _):
                    objects.insert(id)
                case .link(let tag, .id(let a), .id(let b)): edge(tag, a, b)
                case .unlink(let tag, .id(let a), .id(let b)?): edge(tag, a, b)
                case .unlink(let tag, .id(let a), nil): wholeKeys.insert(Overlay.LinkKey(tag: tag, from: a))
                case .link, .unlink: break   // a commit names objects by id only
                }
            }
            func take(_ entry: LogEntry) {
                // A set that changed nothing returns the transaction before it, someone else's.
                let named = objects.union(edgeTargets.keys.map(\.from))
                guard entry.transactionID == tx, entry.author == label,
                      entry.changes.contains(where: { $0.objectIDs.contains(where: named.contains) }) else {
                    return
                }
                for change in entry.changes {
                    switch change {
                    case .insert(let id, _), .update(let id, _, _), .delete(let id, _, _): objects.insert(id)
                    case .link(let tag, let a, let b), .unlink(let tag, let a, let b): edge(tag, a, b)
                    }
                }
            }
            if let caught {
                take(caught)
            } else {
                try view.forEachLogEntry(tx.rawValue...tx.rawValue) { entry in
                    take(entry)
                    return false
                }
            }
            var layer = Overlay()
            func setFact(_ tag: UInt16, _ a: ObjectID, _ b: ObjectID, _ present: Bool) {
                guard let inverse = schema.inverseTag(of: tag) else { return }
                layer.edges[Overlay.LinkKey(tag: tag, from: a), default: [:]][b] = present
                layer.edges[Overlay.LinkKey(tag: inverse, from: b), default: [:]][a] = present
                layer.markDirty(a)
                layer.markDirty(b)
            }
            for key in edges {
                for t in edgeTargets[key] ?? [] {
                    setFact(key.tag, key.from, t, try state.linked(key.tag, from: key.from, to: t))
                }
                if let r = schema.relationship(tag: key.tag), !r.isToMany { wholeKeys.insert(key) }
                if let inverse = schema.inverseTag(of: key.tag), let ir = schema.relationship(tag: inverse),
                   !ir.isToMany {
                    for t in edgeTargets[key] ?? [] { wholeKeys.insert(Overlay.LinkKey(tag: inverse, from: t)) }
                }
            }
            for id in objects.sorted() {
                let record = try state.record(id)
                layer.records[id] = .some(record)
                layer.order.append(Overlay.Touch(id: id, isNew: false))
                if let record {
                    for u in record.entity.uniques {
                        if let key = try Layout.uniqueKey(u, record: record.values, entity: record.entity, id: id) {
                            layer.uniques[ByteKey(key)] = id
                        }
                    }
                }
                // Its relationships too: deleted, it has none; alive, it has the store's (which
                // may differ from the view's when another writer changed them, or the object is
                // a new one under the id).
                if let e = schema.entity(tag: id.entityTag) {
                    for r in e.relationships { wholeKeys.insert(Overlay.LinkKey(tag: r.tag, from: id)) }
                }
            }
            // Keys the commit defined whole: exactly the store's targets now. A target's to-one
            // inverse is defined whole too, or it could show its old target from the view as well.
            var keys = Array(wholeKeys), next = 0
            while next < keys.count {
                let key = keys[next]
                next += 1
                layer.replaced.insert(key)
                layer.replacedTags.insert(key.tag)
                let inverse = schema.inverseTag(of: key.tag)
                let inverseIsToOne = inverse.flatMap { schema.relationship(tag: $0) }.map { !$0.isToMany } ?? false
                for t in try state.targets(key.tag, from: key.from) {
                    setFact(key.tag, key.from, t, true)
                    if inverseIsToOne, let inverse, wholeKeys.insert(Overlay.LinkKey(tag: inverse, from: t)).inserted {
                        keys.append(Overlay.LinkKey(tag: inverse, from: t))
                    }
                }
            }
            layer.factCount = layer.edges.values.reduce(0) { $0 + $1.count }
            return layer
        }
    }

    /// Gives every live descendant whose base for an object is the one `flight` carried the
    /// committed version instead, so that a chain never conflicts with its own commit.
    private func rebaseDescendants(from old: [ObjectID: BaseVersion], to new: [ObjectID: BaseVersion]) {
        guard !new.isEmpty else { return }
        for child in children.withLock({ $0.compactMap(\.context) }) {
            child.state.withLock { s in
                for (id, base) in new where s.overlay.records[id] != nil && Self.isCarried(old[id], s.bases[id]) {
                    s.bases[id] = base
                }
            }
            child.rebaseDescendants(from: old, to: new)
        }
    }

    /// A child's committed changes, applied here with their base versions (earlier bases win).
    /// An object the child changed that this context deleted since is judged by the child's
    /// merge `policy`, as one the store deleted is at the root: a conflict under `.fail`, inserted
    /// again with the child's values under `.contextWins`, the change dropped under `.storeWins`
    /// and `.propertyMerge`. (The update met the deleted object as a missing one,
    /// `objectNotFound`, whatever the policy.)
    ///
    /// `read` holds the values the child first read of the objects it judged: the base of an
    /// object this context deleted takes them (with this context's pending values the child saw,
    /// which the store's version does not hold), so that `.contextWins` inserts it again as the
    /// child showed it.
    func absorb(_ operations: [ChangeSet.Operation], bases: [ObjectID: BaseVersion],
                read: [ObjectID: [Value]] = [:], policy: MergePolicy) throws {
        let updated = operations.compactMap { op -> ObjectID? in
            if case .update(let id, _) = op, bases[id] != nil { return id }
            return nil
        }
        // The child's bases first: for an object this context had not touched, the version the
        // child read is the one the change was based on (not the store's version now). Which
        // objects this context deleted is read under its lock, with the change applied.
        try apply(building: { below, s in
            let view = MergedSource(base: below.base, overlays: below.overlays + [s.overlay])
            let gone = Set(try updated.filter { try view.record($0) == nil })
            var judged: [ObjectID: BaseVersion] = [:]
            for (id, base) in bases where gone.contains(id) {
                let shown = read[id].flatMap { $0.count == base.values.count ? $0 : nil }
                judged[id] = BaseVersion(version: base.version, values: shown ?? base.values)
            }
            return Built(operations: operations, bases: judged)
        }, [], mergePolicy: policy, inheriting: bases, netState: true, then: { s in
            // A base the chain's own root commit moved on since the child read it (the commit
            // landed here, and the child's commit came in before the rebase of the descendants
            // reached it): the version that commit gave the object, or this context's next commit
            // would meet its own commit as a conflict.
            var moved: [ObjectID: BaseVersion] = [:]
            for (id, base) in bases {
                guard let r = s.rebased[id] else { continue }
                let now = r.current(base)
                if now != base {
                    moved[id] = now
                    if s.bases[id] == base { s.bases[id] = now }
                }
            }
            // An object this context had changed too keeps the earlier of the two bases: the
            // child may have changed it at a version before this context's own first change, and
            // a store change in between must be judged at the root (keeping this context's later
            // base, that change was never seen by the child, and its value was overwritten
            // without a conflict).
            for (id, given) in bases {
                let base = moved[id] ?? given
                guard base.version != .zero else { continue }
                if let mine = s.bases[id], mine.version != .zero, base.version < mine.version { s.bases[id] = base }
            }
        })
    }

    /// Accepts the store's current version of every object this context changed as the new base:
    /// after a ``StrataError/conflict(_:)``, call it to write this context's values over the
    /// store's on the next ``commit()`` (having looked at what the store changed). An object the
    /// store deleted keeps its base: a commit that changes it is still a conflict (of kind
    /// `.deleted`), which only a merge policy resolves.
    ///
    /// The attributes it left as it first read them then show what the state below shows now (a
    /// commit writes none of them, so the store's values stay): the child shows what its next
    /// commit makes of each object. A value below that the child's own changes cannot take (a
    /// unique value one of its changed objects holds) is refused with the validation error, and
    /// nothing changes. A clash the state below already shows (another writer's save of a
    /// unique value a parent context's change holds) is not the child's, whichever of the two
    /// objects it refreshes: the child shows it as its parent does, and the parent's commit
    /// reports it.
    public func rebase() throws {
        let ids = state.withLock { Array($0.bases.keys) }
        let current = try store.read { view in
            try ids.compactMap { id in
                try view.record(id).map { (id, BaseVersion(version: $0.version, values: $0.values)) }
            }
        }
        // The attributes of each rebased object the child left as it first read them, where the
        // state below shows another value now: worked out, applied and made what the child
        // read in one step under the context's lock (a change of another thread in between
        // would be taken for one of them and undone).
        var stale: [(ObjectID, [ChangeSet.AttributeValue])] = []
        try apply(building: { below, s in
            stale = try current.sorted { $0.0 < $1.0 }.compactMap { id, _ -> (ObjectID, [ChangeSet.AttributeValue])? in
                guard s.bases[id] != nil, case let shown?? = s.overlay.records[id],
                      let first = s.overlay.originals[id], let now = try below.record(id) else { return nil }
                let changes = shown.values.indices.compactMap { i -> ChangeSet.AttributeValue? in
                    guard i < first.count, i < now.values.count, shown.values[i] == first[i],
                          now.values[i] != shown.values[i] else { return nil }
                    return ChangeSet.AttributeValue(attribute: i, value: now.values[i])
                }
                return changes.isEmpty ? nil : (id, changes)
            }
            // One net update, judged when it ends (two objects whose unique values the store
            // swapped take them both).
            return Built(operations: stale.map { .update(id: $0.0, attributes: $0.1) })
        }, [], netState: true, acceptingClashesBelow: true, then: { s in
            for (id, base) in current where s.bases[id] != nil { s.bases[id] = base }
            // What they show now is what the child read: a later commit does not send them.
            for (id, changes) in stale {
                for c in changes where s.overlay.originals[id].map({ c.attribute < $0.count }) == true {
                    s.overlay.originals[id]?[c.attribute] = c.value
                }
            }
        })
    }

    /// Drops every pending change (changes already handed to a commit in flight are not recalled).
    public func discard() {
        let dropped = state.withLock { s -> State in
            let taken = Self.take(&s)
            s.discards = taken.discards &+ 1
            return taken
        }
        Self.release(dropped)
        observers.changed()
    }

    /// Empties the pending changes of `s`, returning what it held. What is not a pending change
    /// stays: the count of discards, the committed layers, and the versions root commits gave
    /// the objects they carried (a child's commit may still bring the older ones).
    private static func take(_ s: inout State) -> State {
        var taken = State()
        swap(&taken, &s)
        s.discards = taken.discards
        s.committed = taken.committed
        s.rebased = taken.rebased
        return taken
    }

    /// Frees committed or discarded changes on a background queue. A child of n changes holds
    /// O(n) small allocations (records, their values and strings, dictionary storage): freeing
    /// them on the caller's thread after the save takes about a twentieth of a 20k-insert
    /// commit's time (`perf record` of `strata-bench probe child`), so the commit returns
    /// without waiting for it.
    /// Readers that copied the overlay keep their own references, so nothing they use is freed.
    private static func release(_ old: State) {
        guard !old.overlay.records.isEmpty || !old.overlay.edges.isEmpty else { return }
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
