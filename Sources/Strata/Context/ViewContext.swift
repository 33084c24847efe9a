
/// A context for readers (the "main context" of Core Data).
///
/// With `autoRefresh` (the default for ``Store/mainContext``) every read sees the latest committed
/// transaction and nothing is pinned between reads. Without it, the context reads one pinned
/// snapshot until ``refresh()``: several reads then agree with each other.
///
/// ```swift
/// let view = try store.newViewContext(label: "inspector", autoRefresh: false)
/// let before = try view.count(Query(entity: "Track"))
/// _ = try await store.save(changes)
/// try view.count(Query(entity: "Track")) == before   // still pinned
/// try view.refresh()                                   // now sees the save
/// ```
public final class ViewContext: ObjectReading {
    /// The context's name; its pinned snapshot is listed under it by ``Store/openSnapshots()``.
    public let label: String
    /// Whether every read sees the latest committed state (`true`) or one pinned snapshot until ``refresh()``.
    public let autoRefresh: Bool
    let store: Store
    private let pinned: Locked<Snapshot?>
    let observers = ContextObservers()

    init(store: Store, label: String, autoRefresh: Bool) throws {
        self.store = store
        self.label = label
        self.autoRefresh = autoRefresh
        pinned = Locked(autoRefresh ? nil : try store.snapshot(label: label))
    }

    /// An auto-refreshing context (it pins nothing, so making it cannot fail).
    init(store: Store, label: String) {
        self.store = store
        self.label = label
        autoRefresh = true
        pinned = Locked(nil)
    }

    /// The schema the records follow.
    public var schema: Schema { store.schema }

    /// The transaction this context reads (for an auto-refreshing one: the latest).
    public var transactionID: TransactionID {
        get throws {
            if let s = pinned.withLock({ $0 }) { return s.transactionID }
            return try store.read { try $0.lastTransactionID() }
        }
    }

    /// Moves a pinned context to the latest committed transaction (no-op when auto-refreshing).
    public func refresh() throws {
        guard !autoRefresh else { return }
        // Release first, so a context can refresh even when the snapshot limit is reached.
        let released = pinned.withLock { p -> Snapshot? in
            defer { p = nil }
            return p
        }
        released?.close()
        // Told also when pinning the latest fails: the released snapshot is gone either way, and
        // the next read pins whatever is latest then, which live queries must follow.
        defer { observers.changed() }
        let fresh = try store.snapshot(label: label)
        pinned.withLock { p in
            if p == nil { p = fresh } else { fresh.close() }
        }
    }

    /// Releases the pinned snapshot, if any (reads after this re-pin the latest, and the
    /// context's live queries are evaluated again against it).
    public func close() {
        let released = pinned.withLock { p -> Snapshot? in
            defer { p = nil }
            return p
        }
        released?.close()
        if released != nil { observers.changed() }
    }

    /// Runs `body` against one consistent state (the pinned snapshot, or one short read).
    func read<R>(_ body: (ReadView) throws -> R) throws -> R {
        try withReadState { try read(in: $0, body) }
    }

    /// Runs `attempt` with the snapshot this context's reads go to (pinned now when none is;
    /// nil for an auto-refreshing context, whose reads each go to the latest state), and runs it
    /// again with the one pinned then when ``refresh()`` or ``close()`` let that snapshot go
    /// before `attempt` read it (its read then finds it closed, though the store is open).
    /// `attempt` reads through ``read(in:_:)`` with it, and must leave nothing changed when that
    /// read throws at its start. What a child reads over the state (the layers it committed that
    /// the view does not show yet) is chosen against the snapshot it is read with, so a refresh
    /// between the two cannot mix them.
    func withReadState<R>(_ attempt: (Snapshot?) throws -> R) throws -> R {
        while true {
            let snapshot: Snapshot? = autoRefresh ? nil : try pinned.withLock { p -> Snapshot in
                if let p { return p }
                let s = try store.snapshot(label: label)
                p = s
                return s
            }
            do {
                return try attempt(snapshot)
            } catch StrataError.closed where snapshot.map({ s in s.isClosed && pinned.withLock { $0 !== s } }) ?? false {
                // Let go by a refresh or a close of this context, not by the store's close.
                try store.checkUsable()
            }
        }
    }

    /// `body` against `snapshot` (from ``withReadState(_:)``), or one short read of the latest
    /// state when it is nil.
    func read<R>(in snapshot: Snapshot?, _ body: (ReadView) throws -> R) throws -> R {
        if let snapshot { return try snapshot.read(body) }
        return try store.read(body)
    }

    /// The record with this id in this context's state (the pinned snapshot, or the latest committed state), or nil
    /// when it does not exist there.
    public func record(_ id: ObjectID) throws -> Record? { try read { try $0.record(id) } }
    /// The objects `id` is linked to through `relationship` in this context's state (the pinned snapshot, or the
    /// latest committed state), in id order.
    public func relatedIDs(_ relationship: RelationshipDescription, of id: ObjectID) throws -> [ObjectID] {
        try read { try $0.targets(relationship.tag, from: id) }
    }
    /// The records matching `query` in this context's state (the pinned snapshot, or the latest committed state),
    /// sorted and windowed.
    public func fetch(_ query: Query) throws -> [Record] { try read { try $0.fetch(query) } }
    /// How many records match `query` in this context's state (the pinned snapshot, or the latest committed state).
    public func count(_ query: Query) throws -> Int { try read { try $0.count(query) } }
}
