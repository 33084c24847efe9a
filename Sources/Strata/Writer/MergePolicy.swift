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
