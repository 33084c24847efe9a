/// One object changed on both sides.
public struct MergeConflict: Sendable, Equatable, CustomStringConvertible {
    /// How the store changed the object since the context's base.
    public enum Kind: String, Sendable {
        /// The store changed the object's attributes.
        case changed
        /// The store deleted the object.
        case deleted
    }
    /// Whether the store changed or deleted the object.
    public let kind: Kind
    /// The object in conflict.
    public let objectID: ObjectID
    /// The name of the object's entity.
    public let entity: String
    /// The version the context based its change on: the transaction that last changed the object's attributes
    /// when the context first changed it.
    public let baseVersion: TransactionID
    /// The object's version in the store now (nil: deleted).
    public let storeVersion: TransactionID?
    /// The attributes the store changed since the base.
    public let changedByStore: [String]
    /// The attributes this context changes.
    public let changedByContext: [String]
    /// The object's values at the base, one per attribute.
    public let baseValues: [Value]
    /// The object's values in the store now (empty when deleted).
    public let storeValues: [Value]
    /// The values this context would write, one per attribute (for a delete, those it read).
    public let contextValues: [Value]
    /// Whether this context deletes the object (a custom resolver's `.values(v)` then keeps it,
    /// with `v`, instead; `.keepContext` deletes it).
    public let contextDeletes: Bool

    /// The conflict in one line, for example `Track 0003…: changed in the store (version 1 → 3, attributes
    /// rating); this context changes title`.
    public var description: String {
        switch kind {
        case .deleted:
            "\(entity) \(objectID): deleted in the store after version \(baseVersion); this context changes " +
            "\(changedByContext.joined(separator: ", "))"
        case .changed:
            "\(entity) \(objectID): changed in the store (version \(baseVersion) → " +
            "\(storeVersion.map(\.description) ?? "?"), attributes \(changedByStore.joined(separator: ", "))); this " +
            (contextDeletes ? "context deletes it" : "context changes \(changedByContext.joined(separator: ", "))")
        }
    }
}
