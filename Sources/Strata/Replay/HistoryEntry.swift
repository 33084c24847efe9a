import Foundation

/// One transaction's effect on one object, for ``Store/history(of:)``.
public struct HistoryEntry: Sendable, Equatable {
    /// The transaction (the horizon, for the squashed entry that starts the history of a compacted store).
    public let transactionID: TransactionID
    /// When the transaction was committed (1970-01-01 for a squashed entry).
    public let timestamp: Date
    /// Who saved it (`compaction` for a squashed entry).
    public let author: String
    /// The transaction's metadata (`squashed` and `version` for a squashed entry).
    public let metadata: [String: String]
    /// The changes of that transaction that touch the object.
    public let changes: [LoggedChange]
}
