/// What every context can read: records by id, relationships, queries and counts.
///
/// Snapshots, view contexts (and child contexts) conform; the typed API (`fetch(Track.self, …)`)
/// is built on these four primitives.
public protocol ObjectReading: Sendable {
    /// The schema the records follow.
    var schema: Schema { get }
    /// The record with this id, or nil when it does not exist (here).
    func record(_ id: ObjectID) throws -> Record?
    /// The objects `id` is linked to through `relationship`, in id order.
    func relatedIDs(_ relationship: RelationshipDescription, of id: ObjectID) throws -> [ObjectID]
    /// The records matching `query`, sorted and windowed.
    func fetch(_ query: Query) throws -> [Record]
    /// How many records match `query` (ignoring its sort and window).
    func count(_ query: Query) throws -> Int
}

extension Snapshot: ObjectReading {
    /// The schema the records follow.
    public var schema: Schema { registry.schema }
    /// The record with this id in the snapshot, or nil when it does not exist there.
    public func record(_ id: ObjectID) throws -> Record? { try read { try $0.record(id) } }
    /// The objects `id` is linked to through `relationship` in the snapshot, in id order.
    public func relatedIDs(_ relationship: RelationshipDescription, of id: ObjectID) throws -> [ObjectID] {
        try read { try $0.targets(relationship.tag, from: id) }
    }
    /// The records matching `query` in the snapshot, sorted and windowed.
    public func fetch(_ query: Query) throws -> [Record] { try read { try $0.fetch(query) } }
    /// How many records match `query` in the snapshot.
    public func count(_ query: Query) throws -> Int { try read { try $0.count(query) } }
}
