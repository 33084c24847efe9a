/// What a change-stream subscriber receives.
public enum ChangeEvent: Sendable, Equatable {
    /// The next committed transaction.
    case committed(CommittedTransaction)
    /// The subscriber's buffer was full and `missed` transactions were dropped for it; refetch
    /// what you show instead of applying deltas.
    case fellBehind(missed: Int)
}
