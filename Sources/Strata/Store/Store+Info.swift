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
