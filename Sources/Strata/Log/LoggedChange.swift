/// One change as the log records it: explicit, with previous values, so that applying the log
/// in order rebuilds state exactly and any change can be undone (as-of reads, history).
///
/// The writer resolves what a save asked for (delete rules, to-one replacement) into these; the
/// log never needs the schema's rules to be re-evaluated.
public enum LoggedChange: Sendable, Equatable {
    /// A new object with all its attribute values.
    case insert(id: ObjectID, values: [Value])
    /// Changed attributes of an existing object, and the version it had before.
    case update(id: ObjectID, changes: [AttributeChange], previousVersion: TransactionID)
    /// A removed object with the values and version it had.
    case delete(id: ObjectID, values: [Value], previousVersion: TransactionID)
    /// A relationship edge added (the inverse edge is implied).
    case link(relationship: UInt16, from: ObjectID, to: ObjectID)
    /// A relationship edge removed (the inverse edge is implied).
    case unlink(relationship: UInt16, from: ObjectID, to: ObjectID)

    /// The object whose record or edges this change touches first.
    public var objectID: ObjectID {
        switch self {
        case .insert(let id, _), .update(let id, _, _), .delete(let id, _, _): id
        case .link(_, let from, _), .unlink(_, let from, _): from
        }
    }

    /// The objects this change touches (both ends of an edge).
    public var objectIDs: [ObjectID] {
        switch self {
        case .insert(let id, _), .update(let id, _, _), .delete(let id, _, _): [id]
        case .link(_, let a, let b), .unlink(_, let a, let b): [a, b]
        }
    }
}
