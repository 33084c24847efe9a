/// A read-only context showing the store exactly as it was after one past transaction, with the
/// same fetch, predicate, sort and relationship API as any context.
///
/// Built from a snapshot of the head and the log's previous values: opening one costs O(changes
/// between that transaction and the head), not O(store).
///
/// ```swift
/// let before = try store.snapshot(asOf: TransactionID(41))
/// defer { before.close() }
/// let tracks = try before.count(Track.self)
/// ```
public final class AsOfContext: ObjectReading {
    /// The transaction this context shows the state after.
    public let transactionID: TransactionID
    private let snapshot: Snapshot
    private let overlay: Overlay

    init(store: Store, transactionID target: TransactionID) throws {
        let snapshot = try store.snapshot(label: "as-of \(target)")
        do {
            let head = snapshot.transactionID
            guard target <= head else { throw StrataError.noSuchTransaction(target) }
            let horizon = try snapshot.read { try $0.horizon() }
            guard target >= horizon else { throw StrataError.beforeHorizon(requested: target, horizon: horizon) }
            overlay = try snapshot.read { try Self.undoOverlay($0, back: target, from: head) }
        } catch {
            snapshot.close()
            throw error
        }
        self.snapshot = snapshot
        self.transactionID = target
    }

    deinit { snapshot.close() }

    /// Releases the snapshot underneath.
    public func close() { snapshot.close() }

    /// The changes that take the state of `view` (at `head`) back to the state right after `target`.
    /// - Complexity: O(changes between them).
    static func undoOverlay(_ view: ReadView, back target: TransactionID, from head: TransactionID) throws -> Overlay {
        var applier = OverlayApplier(base: view, parents: [], leaf: Overlay())
        try applier.prepareCounts()
        guard target < head else { return applier.leaf }
        var entries: [LogEntry] = []
        try view.forEachLogEntry((target.rawValue + 1)...head.rawValue) { entries.append($0); return true }
        guard entries.count == Int(head.rawValue - target.rawValue) else {
            // The first transaction missing (the entries come in id order).
            var missing = target.next
            for entry in entries where entry.transactionID == missing { missing = missing.next }
            throw StrataError.corruptLogEntry(transaction: missing,
                                              reason: "missing from the log (needed to read back to \(target) from \(head))")
        }
        for entry in entries.reversed() {
            // Undone as the save was judged, on its result: objects that exchanged unique values
            // in it exchange them back, a clash in between put off to the entry's end.
            applier.defersUniqueClashes = true
            for change in entry.changes.reversed() { try undo(change, &applier) }
            try applier.takeDeferredUniqueKeys()
        }
        return applier.leaf
    }

    private static func undo(_ change: LoggedChange, _ a: inout OverlayApplier) throws {
        switch change {
        case .insert(let id, let values):
            try a.apply(.delete(id: id, values: values, previousVersion: .zero))
        case .update(let id, let changes, let previous):
            try a.apply(
                .update(id: id,
                        changes: changes.map { AttributeChange(attribute: $0.attribute, old: $0.new, new: $0.old) },
                        previousVersion: .zero))
            a.setVersion(id, previous)
        case .delete(let id, let values, let previous):
            try a.apply(.insert(id: id, values: values))
            a.setVersion(id, previous)
        case .link(let tag, let from, let to):
            try a.apply(.unlink(relationship: tag, from: from, to: to))
        case .unlink(let tag, let from, let to):
            try a.apply(.link(relationship: tag, from: from, to: to))
        }
    }

    /// The schema the records follow.
    public var schema: Schema { snapshot.schema }

    func read<R>(_ body: (MergedSource) throws -> R) throws -> R {
        try snapshot.read { try body(MergedSource(base: $0, overlays: [overlay])) }
    }

    /// The record with this id in the store as it was after ``transactionID``, or nil when it does not exist there.
    public func record(_ id: ObjectID) throws -> Record? { try read { try $0.record(id) } }
    /// The objects `id` is linked to through `relationship` in the store as it was after ``transactionID``, in id
    /// order.
    public func relatedIDs(_ relationship: RelationshipDescription, of id: ObjectID) throws -> [ObjectID] {
        try read { try $0.targets(relationship.tag, from: id) }
    }
    /// The records matching `query` in the store as it was after ``transactionID``, sorted and windowed.
    public func fetch(_ query: Query) throws -> [Record] { try read { try $0.fetch(query) } }
    /// How many records match `query` in the store as it was after ``transactionID``.
    public func count(_ query: Query) throws -> Int { try read { try $0.count(query) } }
}

extension AsOfContext: SourceReading {
    func withSource<R>(_ body: (any ObjectSource) throws -> R) throws -> R { try read { try body($0) } }
}
