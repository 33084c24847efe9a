/// Information about one open snapshot, for pinned-snapshot accounting.
public struct SnapshotInfo: Sendable, Equatable {
    /// The snapshot's label.
    public let label: String
    /// The last transaction it sees.
    public let transactionID: TransactionID
    /// Seconds since it was opened.
    public let ageSeconds: Double
    /// Transactions committed since (how far behind the head it is).
    public let lagTransactions: UInt64
}
