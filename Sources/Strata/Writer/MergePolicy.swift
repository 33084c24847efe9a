/// What a save does when an object it changes was changed (or deleted) in the store after the
/// context read it — optimistic concurrency, as Core Data's merge policies, but with a choice.
///
/// ```swift
/// let editor = try store.mainContext.newChild(label: "editor", mergePolicy: .propertyMerge(preferring: .context))
/// ```
public enum MergePolicy: Sendable {
    /// Refuse the save with ``StrataError/conflict(_:)`` listing every conflicting object and
    /// attribute. The default.
    case fail
    /// Keep the store's version of conflicting objects (this context's changes to them are dropped).
    case storeWins
    /// Write this context's changes over the store's (a deleted object is inserted again).
    case contextWins
    /// Attributes changed on one side only merge; attributes changed on both take `preferring`.
    case propertyMerge(preferring: Side)
    /// Decide per conflict. Runs on the writer inside its transaction: keep it short and do not block.
    case custom(@Sendable (MergeConflict) -> MergeResolution)

    public enum Side: Sendable { case context, store }
}

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

/// A custom resolver's decision.
public enum MergeResolution: Sendable, Equatable {
    case keepContext
    case keepStore
    /// Write exactly these values (one per attribute).
    case values([Value])
}

/// The version (and values) a change was based on.
public struct BaseVersion: Sendable, Equatable {
    public let version: TransactionID
    public let values: [Value]
}
