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
