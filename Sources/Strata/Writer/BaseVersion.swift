/// The version (and values) a change was based on.
public struct BaseVersion: Sendable, Equatable {
    /// The object's version: the transaction that last changed its attributes.
    public let version: TransactionID
    /// The object's values at that version, one per attribute.
    public let values: [Value]
}
