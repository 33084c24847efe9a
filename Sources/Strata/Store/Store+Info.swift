/// A summary of a store, as printed by `storectl info`.
public struct StoreInfo: Sendable, Equatable {
    /// The store directory.
    public let path: String
    /// The model name of the stored schema.
    public let model: String
    /// The version of the stored schema.
    public let schemaVersion: Int
    /// The store's on-disk format: 2 for stores created or compacted by this Strata; 1 for older
    /// stores, which keep their object counts in `meta` (one more page written a commit).
    /// `storectl compact --horizon 0` rewrites a format-1 store in format 2 (squashing nothing).
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

extension Store {
    /// Reads a consistent summary from one short read transaction.
    public func info() throws -> StoreInfo {
        try read { view in
            let env = view.env
            var counts: [String: Int] = [:]
            for e in schema.entities { counts[e.name] = try view.objectCount(e) }
            // An open store has a readable format (Store.open checked it).
            let format = try MetaKey.storedFormat(view.txn, meta: env[.meta]) ?? MetaKey.storeFormat
            return StoreInfo(path: path, model: schema.model, schemaVersion: schema.version, storeFormat: Int(format),
                             lastTransaction: try view.lastTransactionID(), entities: counts,
                             fileBytes: env.fileBytes, mapSizeBytes: env.mapSizeBytes,
                             logEntries: try view.txn.entryCount(env[.log]), readers: env.readerCount(),
                             openSnapshots: snapshots.count)
        }
    }
}
