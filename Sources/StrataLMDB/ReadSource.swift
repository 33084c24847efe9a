import CLMDB
/// Where a long read takes its chunks from.
///
/// Growing the map (``LMDBEnvironment/growMap()``) takes the map lock exclusively, so it waits
/// for every read holding it shared. A long read over a pinned snapshot therefore reads one
/// chunk per hold of the lock (``pinned(_:)``) and holds nothing between chunks: no cursor, no
/// value pointing into the map (chunks are copied or decoded), only the snapshot's idle read
/// transaction, which survives a remap (see ``LMDBEnvironment/growMap()``). Each chunk opens a
/// cursor and positions it by key, so a remap between chunks is never seen.
package enum ReadSource {
    /// A transaction the caller reads inside, holding the map lock for as long (a write
    /// transaction, a short read, a scratch environment nobody grows meanwhile).
    case held(LMDBTransaction)
    /// A pinned snapshot, read in one ``PinnedRead/readPinned(_:)`` per chunk.
    case pinned(any PinnedRead)

    /// Runs `body` in a read of the source: for a snapshot, one read of its own (holding the map
    /// lock shared until `body` returns). Nothing pointing into the map may leave `body`.
    package func read<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        switch self {
        case .held(let txn): return try body(txn)
        case .pinned(let snapshot): return try snapshot.readPinned(body)
        }
    }
}

extension ReadSource {
    /// Visits every entry of `db` in key order, `chunkEntries` entries per read of the source (a
    /// new cursor positioned by key at the first entry the read before did not visit), so that a
    /// pinned snapshot's map lock is held for one chunk at a time. `body` sees keys and values in
    /// place: nothing of them may outlive its call.
    /// - Throws: ``LMDBError`` (`MDB_CORRUPTED`) when a key does not follow the one before it (a
    ///   damaged B-tree: LMDB keys carry no checksum), as a copy's appends refuse it.
    package func scanInChunks(_ db: LMDBDatabase, chunkEntries: Int = 65_536,
                              _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        precondition(chunkEntries > 0, "a chunk holds at least one entry")
        // Where the next read starts (the first key not yet visited); nil once all are.
        var resume: [UInt8]?
        var first = true
        while first || resume != nil {
            let from = resume
            first = false
            resume = nil
            try read { txn in
                var seen = 0
                var seeking = from != nil
                var previous: UnsafeRawBufferPointer?
                try txn.scan(db, from: from) { key, value in
                    // A damaged branch page can route the seek before the key asked for: skip up to it.
                    if seeking, let from {
                        if KeyOrder.compare(key, from) < 0 { return true }
                        seeking = false
                    }
                    if let previous, KeyOrder.compare(key, previous) <= 0 {
                        throw LMDBError(code: MDB_CORRUPTED,
                                        operation: "scan of \(db.name): a key out of order (a damaged B-tree)")
                    }
                    previous = key
                    if seen == chunkEntries {
                        resume = Array(key)
                        return false
                    }
                    seen += 1
                    try body(key, value)
                    return true
                }
            }
        }
    }
}
