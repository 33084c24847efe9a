/// Progress of a compaction.
public struct CompactionProgress: Sendable {
    /// The steps of a compaction.
    public enum Phase: String, Sendable {
        /// Copying the state into the new generation; reported after each database, `done` counting the entries
        /// copied.
        case copying
        /// Copying the log entries after the horizon; `done` is how many there are.
        case squashing
        /// About to apply, on the writer, the transactions committed during the build.
        case catchingUp
        /// Switching `current` to the new generation (not reported).
        case switching
    }
    /// The step the compaction is in.
    public let phase: Phase
    /// The count that goes with the phase (see ``Phase``).
    public let done: Int
}
