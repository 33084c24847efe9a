
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

    /// The transaction of the pinned snapshot; nil when nothing is pinned (an auto-refreshing
    /// context, or a pinned one before its first read or after ``close()``: its next read pins
    /// the latest).
    var pinnedTransactionID: TransactionID? { pinned.withLock { $0?.transactionID } }

    /// Moves a pinned context to the latest committed transaction (no-op when auto-refreshing).
    public func refresh() throws {
        guard !autoRefresh else { return }
        // Release first, so a context can refresh even when the snapshot limit is reached.
        pinned.withLock { p -> Snapshot? in
            defer { p = nil }
            return p
        }?.close()
        let fresh = try store.snapshot(label: label)
        pinned.withLock { p in
            if p == nil { p = fresh } else { fresh.close() }
        }
        observers.changed()
    }

    /// Releases the pinned snapshot, if any (reads after this re-pin the latest).
    public func close() {
        pinned.withLock { p -> Snapshot? in
            defer { p = nil }
            return p
        }?.close()
    }

    /// Runs `body` against one consistent state (the pinned snapshot, or one short read).
    func read<R>(_ body: (ReadView) throws -> R) throws -> R {
        if autoRefresh { return try store.read(body) }
        let snapshot = try pinned.withLock { p -> Snapshot in
            if let p { return p }
            let s = try store.snapshot(label: label)
            p = s
            return s
        }
        return try snapshot.read(body)
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
