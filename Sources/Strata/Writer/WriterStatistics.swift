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
}
