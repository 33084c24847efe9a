/// One committed transaction as stored in the log.
public struct LogEntry: Sendable, Equatable {
    /// The transaction's id: its position in the log.
    public let transactionID: TransactionID
    /// The schema version the transaction was written with.
    public let schemaVersion: Int
    /// Wall-clock commit time, milliseconds since 1970.
    public let timestampMs: Int64
    /// Who saved it (a context label such as "import" or "main").
    public let author: String
    /// Free-form metadata, e.g. `["importID": "…"]`.
    public let metadata: [String: String]
    /// The changes, in the order the writer applied them.
    public let changes: [LoggedChange]
}
