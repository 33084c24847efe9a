/// A summary of a store, as printed by `storectl info`.
public struct StoreInfo: Sendable, Equatable {
    /// The store directory.
    public let path: String
    /// The model name of the stored schema.
    public let model: String
    /// The version of the stored schema.
    public let schemaVersion: Int
    /// The store's on-disk format: 3 for stores created, compacted, migrated or bulk-imported into
    /// by this Strata (large log entries stored compressed); 2 for older stores, whose log entries
    /// are all written plain; 1 for older still, which also keep their object counts in `meta`
    /// (one more page written a commit). `storectl compact --horizon 0` rewrites a store of format 1 or 2
    /// in format 3 (squashing nothing).
    public let storeFormat: Int
    /// The last committed transaction (0 for an empty store).
    public let lastTransaction: TransactionID
    /// Live objects per entity name.
    public let entities: [String: Int]
    /// Size of `data.mdb` on disk.
    public let fileBytes: Int
    /// Current map size (address space reserved).
    public let mapSizeBytes: Int
    /// Entries in the log.
    public let logEntries: Int
    /// Reader slots in use, all processes.
    public let readers: Int
    /// Snapshots this process has pinned.
    public let openSnapshots: Int
}
