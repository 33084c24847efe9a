/// What an import did.
public struct ImportSummary: Sendable, Equatable {
    /// The import id stored as `importID` in the metadata of every transaction of the import.
    public let importID: String
    /// Records written (inserted or updated).
    public let records: Int
    /// Records rejected (only with ``ImportOptions/continueOnError``).
    public let rejected: Int
    /// With ``ImportOptions/continueOnError``: relationships not linked because their other end
    /// was rejected.
    public let skippedLinks: Int
    /// Transactions this import committed (batches plus deferred-link batches); a batch that
    /// changed nothing is not counted. Other processes' transactions committed meanwhile are
    /// never counted, also when they interleave with this import's.
    public let transactions: Int
    /// The first and the last of this import's own transactions (nil when it committed none);
    /// other transactions may lie between them.
    public let firstTransaction: TransactionID?
    /// The last of this import's own transactions (nil when it committed none).
    public let lastTransaction: TransactionID?
    /// Wall-clock time of the import.
    public let seconds: Double
    /// How the records were written: ``ImportMode/bulk`` or ``ImportMode/incremental`` (what
    /// ``ImportMode/auto`` chose).
    public let mode: ImportMode
    /// Whether a bulk import resolved its records in memory
    /// (``ImportOptions/bulkInMemoryMaxInputBytes``) rather than through the new generation's
    /// B-trees; false for an incremental import.
    public let inMemory: Bool
    /// Whether an incremental import was checked and written in one pass and committed in one
    /// write transaction (``ImportOptions/oneTransactionMaxInputBytes``).
    public let oneTransaction: Bool
}
