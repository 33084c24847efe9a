import StrataLMDB

/// The names of the databases every Strata store has. Opened once, at start-up, in one transaction.
///
/// ``counts`` is not a named database of its own: it is where the per-entity object counts
/// live, which is LMDB's unnamed (main) database from store format 2 on and `meta` in a
/// format-1 store. The main database holds the named databases' records, and every commit that
/// changes a named database rewrites its leaf anyway, so a count kept there costs a save no page
/// of its own (in `meta` it cost one page write per commit). Never copied whole
/// (``LMDBEnvironment/copy(_:from:sourceEnv:into:prefix:start:until:batch:transform:)`` refuses
/// it): its other keys are LMDB's.
enum DatabaseName: String {
    case meta, log, objects, links, indexes, uniques, counts

    /// The named databases (every case but ``counts``), in the order they are opened.
    static let named: [DatabaseName] = [.meta, .log, .objects, .links, .indexes, .uniques]
    /// The databases of the materialized state (rebuilt from the log; counts apart).
    static let state: [DatabaseName] = [.objects, .links, .indexes, .uniques]

    /// Position in the environment's handles (``named``, then ``counts``: an array, so finding one
    /// on every read costs no hashing).
    var position: Int {
        switch self {
        case .meta: 0
        case .log: 1
        case .objects: 2
        case .links: 3
        case .indexes: 4
        case .uniques: 5
        case .counts: 6
        }
    }

    /// What an environment of a Strata store opens: the named databases, then the counts' handle,
    /// which is `meta`'s in a format-1 store (read from `meta` in the opening transaction) and
    /// LMDB's main database otherwise (a new, empty environment is written in the current format).
    static let set = DatabaseSet(names: named.map(\.rawValue)) { txn, handles in
        precondition(zip(named, handles).allSatisfy { $0.rawValue == $1.name } && handles.count == counts.position,
                     "DatabaseName.position out of step with DatabaseName.named")
        let format: UInt32?
        do {
            format = try MetaKey.storedFormat(txn, meta: handles[meta.position])
        } catch is DecodingError {
            format = nil   // Store.open reads it again and refuses the store (notAStore)
        }
        return format == MetaKey.countsInMetaFormat ? meta.position : nil
    }
}

extension LMDBEnvironment {
    /// The handle of one of a store's databases.
    @inline(__always)
    subscript(_ name: DatabaseName) -> LMDBDatabase { database(at: name.position) }

    /// Copies database `name` from `source` in key order, `batch` entries per write transaction,
    /// appending (the destination must be empty from the first key on). `transform` may rewrite
    /// or drop each entry.
    func copy(_ name: DatabaseName, from source: LMDBTransaction, sourceEnv: LMDBEnvironment,
              into destination: DatabaseName? = nil, prefix: [UInt8]? = nil, start: [UInt8]? = nil,
              until stop: [UInt8]? = nil, batch: Int = 8192,
              transform: (([UInt8], [UInt8]) -> ([UInt8], [UInt8])?)? = nil) throws -> Int {
        try copy(name, from: .held(source), sourceEnv: sourceEnv, into: destination, prefix: prefix, start: start,
                 until: stop, batch: batch, transform: transform)
    }

    /// ``copy(_:from:sourceEnv:into:prefix:start:until:batch:transform:)`` from a ``ReadSource``:
    /// from a pinned snapshot, each chunk of the source is read in a read of its own, and the
    /// writes happen outside the source's reads.
    func copy(_ name: DatabaseName, from source: ReadSource, sourceEnv: LMDBEnvironment,
              into destination: DatabaseName? = nil, prefix: [UInt8]? = nil, start: [UInt8]? = nil,
              until stop: [UInt8]? = nil, batch: Int = 8192,
              transform: (([UInt8], [UInt8]) -> ([UInt8], [UInt8])?)? = nil) throws -> Int {
        precondition(name != .counts && destination != .counts,
                     "counts are copied key by key (the main database holds LMDB's records too)")
        return try Self.translatingDamage(name) {
            try copy(sourceEnv[name], from: source, sourceEnv: sourceEnv, into: self[destination ?? name],
                     prefix: prefix, start: start, until: stop, batch: batch, transform: transform)
        }
    }

    /// Copies database `name` whole from `source` (see
    /// ``LMDBEnvironment/copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)``).
    func copyDirect(_ name: DatabaseName, from source: LMDBTransaction, sourceEnv: LMDBEnvironment,
                    into destination: DatabaseName?, start: [UInt8]?, until stop: [UInt8]?,
                    batchBytes: Int = 4 << 20) throws -> (entries: Int, bytes: Int, replayedBuffers: Int) {
        try copyDirect(name, from: .held(source), sourceEnv: sourceEnv, into: destination, start: start, until: stop,
                       batchBytes: batchBytes)
    }

    /// ``copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)`` from a ``ReadSource``;
    /// `check` sees every entry copied (see
    /// ``LMDBEnvironment/copyDirect(_:from:sourceEnv:into:start:until:batchBytes:check:)``).
    func copyDirect(_ name: DatabaseName, from source: ReadSource, sourceEnv: LMDBEnvironment,
                    into destination: DatabaseName?, start: [UInt8]?, until stop: [UInt8]?,
                    batchBytes: Int = 4 << 20,
                    check: ((UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void)? = nil)
        throws -> (entries: Int, bytes: Int, replayedBuffers: Int) {
        precondition(name != .counts && destination != .counts,
                     "counts are copied key by key (the main database holds LMDB's records too)")
        return try Self.translatingDamage(name) {
            try copyDirect(sourceEnv[name], from: source, sourceEnv: sourceEnv, into: self[destination ?? name],
                           start: start, until: stop, batchBytes: batchBytes, check: check)
        }
    }

    /// Appending in key order fails only when the source yields keys out of order or of an
    /// impossible size: its B-tree is damaged (LMDB keys carry no checksum).
    private static func translatingDamage<R>(_ name: DatabaseName, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch let e as LMDBError where e.isKeyExists || e.isBadValueSize {
            throw StrataError.corruptRecord(
                id: ObjectID(high: 0, low: 0),
                reason: "\(name.rawValue): the store being copied has keys out of order or of an impossible size (a " +
                        "damaged B-tree; `storectl verify` reports what else is wrong): \(e)")
        }
    }

    /// Records that LMDB write transaction `lmdbTransaction` committed with `transactionID` as the
    /// last key of the log. Call only after the commit succeeded, and only for a transaction that
    /// wrote (LMDB does not advance its transaction id for a commit without changes, so an id of
    /// an empty commit could later name another process's transaction).
    func publishHead(lmdbTransaction: UInt64, transactionID: TransactionID) {
        publishHead(lmdbTransaction: lmdbTransaction, head: transactionID.rawValue)
    }

    /// The log's last transaction id as seen by read transaction `txn`, when this process
    /// committed the LMDB transaction `txn` reads (the common case: it is the newest one); nil
    /// otherwise (another process committed since, or nothing was published yet), and the caller
    /// reads the log. Exact: a read transaction sees precisely the state its LMDB id names.
    func headHint(for txn: OpaquePointer) -> TransactionID? { publishedHead(for: txn).map(TransactionID.init) }
}
