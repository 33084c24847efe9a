/// What a migration did (or, for a dry run, would do).
public struct MigrationReport: Sendable {
    /// True when nothing was changed (the new generation was built, measured and deleted).
    public let dryRun: Bool
    /// The store's version before.
    public let from: Int
    /// The version migrated to.
    public let to: Int
    /// Live objects after the migration (counted after the catch-up, before the switch).
    public let objects: Int
    /// Log transactions rewritten through the steps (their ids unchanged).
    public let transactionsUpcast: Int
    /// The transaction recording the migration (nil for a dry run).
    public let migrationTransaction: TransactionID?
    /// Time spent in each step, over every object and historical version: an estimate, from
    /// one record in 64 (a positional plan's time is shared among the steps it does).
    public let stepSeconds: [(step: String, seconds: Double)]
    /// Live objects per entity after the migration.
    public let objectsPerEntity: [String: Int]
    /// Size of the old generation's data file.
    public let bytesBefore: Int
    /// Size of the new generation's data file.
    public let bytesAfter: Int
    /// Wall-clock time of the whole migration.
    public let seconds: Double
}
