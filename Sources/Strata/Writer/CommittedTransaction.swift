import Foundation

/// A committed transaction as published to observers.
public struct CommittedTransaction: Sendable, Equatable {
    /// The transaction's id.
    public let id: TransactionID
    /// Who saved it (the `author` of the save, or a child context's label).
    public let author: String
    /// When it was committed.
    public let timestamp: Date
    /// The metadata saved with it.
    public let metadata: [String: String]
    /// Every object inserted, updated, deleted or re-linked, by entity name.
    public let changedObjects: [String: Set<ObjectID>]
}
