/// The version (and values) a change was based on: what an optimistic writer read, given in
/// ``ChangeSet/baseVersions`` so that the writer judges the change with its ``MergePolicy`` when
/// the object changed since (a child context fills them itself).
public struct BaseVersion: Sendable, Equatable {
    /// The object's version: the transaction that last changed its attributes.
    public let version: TransactionID
    /// The object's values at that version, one per attribute.
    public let values: [Value]

    /// A base of `version` with `values`, one per attribute of the object's entity in the
    /// store's schema (a save refuses another count with a `wrongType` validation failure):
    /// typically a ``Record``'s `version` and `values` as read.
    public init(version: TransactionID, values: [Value]) {
        self.version = version
        self.values = values
    }
}
