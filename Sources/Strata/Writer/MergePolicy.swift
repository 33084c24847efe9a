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

    /// Which side's value a ``MergePolicy/propertyMerge(preferring:)`` keeps for an attribute changed on both
    /// sides.
    public enum Side: Sendable {
        /// This context's value wins.
        case context
        /// The store's value wins.
        case store
    }
}

/// A custom resolver's decision.
public enum MergeResolution: Sendable, Equatable {
    /// Resolve as ``MergePolicy/contextWins``: write this context's changes.
    case keepContext
    /// Resolve as ``MergePolicy/storeWins``: drop this context's changes to the object.
    case keepStore
    /// Write exactly these values (one per attribute).
    case values([Value])
}
