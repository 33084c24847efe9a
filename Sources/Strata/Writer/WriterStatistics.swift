/// Counters kept by the writer, for tests, `storectl info` and the benchmark harness.
public struct WriterStatistics: Sendable, Equatable {
    /// Saves that returned successfully (including ones with nothing to change).
    public var saves = 0
    /// Saves refused (validation, limits, I/O); nothing of them was written.
    public var failedSaves = 0
    /// Log transactions appended.
    public var transactions = 0
    /// LMDB write transactions committed: with group commit, fewer than ``transactions``.
    public var lmdbCommits = 0
    /// Times the map was grown after `MDB_MAP_FULL`.
    public var mapGrowths = 0
    /// Nanoseconds the writer spent in commits (applying saves, writing and syncing pages).
    public var commitNanoseconds: UInt64 = 0
    /// Nanoseconds the writer spent gathering saves for a group commit (see
    /// ``StoreConfiguration/groupCommitGatherMicroseconds``).
    public var gatherNanoseconds: UInt64 = 0
    /// Asynchronous saves committed on their caller's thread instead of the writer's: small
    /// saves in ``Durability/relaxed`` mode that found the writer idle (see ``Store/save(_:author:metadata:)``).
    public var inlineAsyncSaves = 0
    /// A replica's appends to the cluster's shared log answered as taken, one a group (0 on a
    /// store that is not a replica). An append whose answer was lost (the save's outcome
    /// unknown) is not counted, though the log may hold it.
    public var sharedLogAppends = 0
    /// Of ``sharedLogAppends``, those the shared log placed after entries other machines had
    /// appended since the group was validated (the group touched none of what they did): the
    /// replica then applies those entries and its group from the shared log, in its order.
    public var sharedLogAppendsMoved = 0
    /// A replica's appends answered as refused with nothing appended because the shared head
    /// had moved: another machine's entry touched what the group read or wrote, the group could
    /// not be placed after other entries (an update of an object it wrote itself), or
    /// PostgreSQL refused the statement before appending (a serialization failure, a deadlock, a
    /// lock or statement timeout). The writer then catches up and judges the group again.
    public var sharedLogRacesLost = 0
    /// Nanoseconds a replica's writer waited for the answers to its appends (the round trip to
    /// PostgreSQL, its lock waits and its commit; in a turn, the wait for the turn and its
    /// commit). The rest of ``commitNanoseconds`` is the writer's own work: validating and
    /// applying, its reads of the shared log to catch up, the local commit and its sync.
    public var sharedLogNanoseconds: UInt64 = 0
}
