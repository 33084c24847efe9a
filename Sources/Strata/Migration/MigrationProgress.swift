/// Progress of a migration.
///
/// The state (`base`) and the log (`log`) are built at the same time, on two threads, so their
/// events interleave; the callback must be safe to call from either.
public struct MigrationProgress: Sendable {
    /// What the migration is doing.
    public enum Phase: String, Sendable {
        /// Building the new state from the live objects (`done`/`total` in objects).
        case base
        /// Rewriting the log through the steps (`done`/`total` in transactions).
        case log
        /// Applying what was committed during the build, on the writer (reported once).
        case catchingUp
        /// Switching to the new generation: once, on the writer's queue with the store held
        /// exclusively, right before the switch.
        case switching
    }
    /// The current phase.
    public let phase: Phase
    /// Units of the phase done so far.
    public let done: Int
    /// Units of the phase in all (0 when not known).
    public let total: Int
}
