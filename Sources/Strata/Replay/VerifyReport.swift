/// The result of ``Store/verify(rebuild:progress:)``.
public struct VerifyReport: Sendable, Equatable {
    /// How the state derived from the log was compared with the stored state.
    public enum Method: String, Sendable {
        /// The log folded in memory and both states compared by digest (a healthy store, never
        /// compacted, with at most ``StoreConfiguration/verifyInMemoryObjectLimit`` objects).
        case inMemory
        /// The state rebuilt in a scratch LMDB environment and compared entry by entry: a
        /// compacted or very large store, or one where the in-memory check found a difference
        /// (this method names each problem).
        case rebuild
        /// Neither: the log's keys are out of shape (a key that is no transaction id, one at or
        /// before the compaction horizon, a gap, a horizon past the head), which are the only
        /// problems reported; the state read through such a log would not be what its keys say.
        case logShape
    }

    /// True when every log entry checks out, transaction ids run 1…head with no gap, and the
    /// state the log implies is the materialized state (equal digests of every entry in memory,
    /// or, rebuilt on disk, byte for byte).
    public var ok: Bool { problems.isEmpty }
    /// The head transaction verified.
    public let head: TransactionID
    /// Log entries replayed (those after the compaction horizon).
    public let transactions: Int
    /// Changes replayed.
    public let changes: Int
    /// Entries compared, in all (objects, links, indexes, uniques and counts together).
    public let entriesCompared: Int
    /// The first problems found (at most ``Store/verifyProblemLimit``), most precise first.
    public let problems: [String]
    /// All problems, including those not listed.
    public let problemCount: Int
    /// Wall-clock time of the whole verification.
    public let seconds: Double
    /// The method whose result this is.
    public let method: Method
}
