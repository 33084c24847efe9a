/// What a compaction did (or, for a dry run, would do).
public struct CompactionReport: Sendable, Equatable {
    /// Whether nothing was changed: a dry run builds the whole new generation, then deletes it.
    public let dryRun: Bool
    /// History up to and including this transaction is squashed.
    public let horizon: TransactionID
    /// The horizon before (``TransactionID/zero`` for a store never compacted).
    public let previousHorizon: TransactionID
    /// The last transaction included (committed during the run ones are caught up).
    public let head: TransactionID
    /// Size of the old generation's `data.mdb`.
    public let bytesBefore: Int
    /// Size of the new generation's `data.mdb`.
    public let bytesAfter: Int
    /// Log entries before the compaction.
    public let logEntriesBefore: Int
    /// Log entries after it, the caught-up ones included.
    public let logEntriesAfter: Int
    /// Live objects.
    public let objects: Int
    /// Bytes of the live records as stored (keys and values of the objects database): the
    /// logical size the file is compared with.
    public let liveDataBytes: Int
    /// Bytes of every key and value the new generation holds: the records, link, index and
    /// unique entries, counts and the log entries kept after the horizon — the data a compact
    /// store cannot do without; the file's size over it is the B-tree's overhead.
    public let liveEntryBytes: Int
    /// Wall-clock time.
    public let seconds: Double
}
