/// One committed transaction as stored in the log.
public struct LogEntry: Sendable, Equatable {
    /// The transaction's id: its position in the log.
    public let transactionID: TransactionID
    /// The schema version the transaction was written with.
    public let schemaVersion: Int
    /// Wall-clock time the writer applied the transaction, milliseconds since 1970: its commit
    /// follows within the group commit that took it. The batches of an import in one
    /// transaction (``ImportOptions/oneTransactionMaxInputBytes``) are applied one after
    /// another and committed together at its end, after their times. The machine's clock is
    /// read as it is: a clock set back gives later transactions earlier times.
    public let timestampMs: Int64
    /// Who saved it (a context label such as "import" or "main").
    public let author: String
    /// Free-form metadata, e.g. `["importID": "…"]`.
    public let metadata: [String: String]
    /// The changes, in the order the writer applied them.
    public let changes: [LoggedChange]
}
