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
            overlay = try snapshot.read { try StateBackward.undoOverlay($0, back: target, from: head) }
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
