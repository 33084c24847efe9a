/// Progress of a verify run.
public struct VerifyProgress: Sendable {
    /// What verify is doing.
    public enum Phase: String, Sendable {
        /// Reading the log and applying every entry to the rebuilt state.
        case replaying
        /// Comparing the rebuilt state with the stored one.
        case comparing
    }
    /// The phase reported.
    public let phase: Phase
    /// Transactions replayed (``Phase/replaying``) or entries compared (``Phase/comparing``) so far.
    public let done: Int
    /// Transactions to replay, or entries compared so far when the total is not known.
    public let total: Int
}
