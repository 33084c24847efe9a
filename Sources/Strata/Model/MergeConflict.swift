/// One object changed on both sides.
public struct MergeConflict: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable { case changed, deleted }
    public let kind: Kind
    public let objectID: ObjectID
    public let entity: String
    /// The version the context based its change on, and the store's version now (nil: deleted).
    public let baseVersion: TransactionID
    public let storeVersion: TransactionID?
    /// Attributes the store changed since the base, and the ones this context changes.
    public let changedByStore: [String]
    public let changedByContext: [String]
    /// Values at the base, in the store now (empty when deleted), and as this context would write them.
    public let baseValues: [Value]
    public let storeValues: [Value]
    public let contextValues: [Value]

    public var description: String {
        switch kind {
        case .deleted: "\(entity) \(objectID): deleted in the store after version \(baseVersion); this context changes \(changedByContext.joined(separator: ", "))"
        case .changed:
            "\(entity) \(objectID): changed in the store (version \(baseVersion) → \(storeVersion.map(\.description) ?? "?"), attributes \(changedByStore.joined(separator: ", "))); this context changes \(changedByContext.joined(separator: ", "))"
        }
    }
}
