/// Why a replica could not write or apply the shared log.
public struct ReplicationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure it is: whether anything may have been written, and what to do.
    public enum Kind: Sendable, Equatable {
        /// The shared log cannot be reached; nothing was appended.
        case unavailable
        /// The shared log may or may not hold the saves (the connection broke while the append
        /// ran, or a refusal that may have come after its commit could not be looked up).
        /// A replica that catches up shows which.
        case outcomeUnknown
        /// Other machines appended first on every try, up to a bound. Not produced any more: a
        /// save or a migration that keeps losing the race waits its turn instead. Kept so that
        /// code matching on it still compiles.
        case contended
        /// The store is a replica and no shared log is attached: a save would fork its history.
        case notAttached
        /// An entry of the shared log does not fit this replica (a gap, a checksum, a schema
        /// version this code does not hold).
        case rejectedEntry
        /// The replica's position is behind the oldest entry the shared log keeps: it must start
        /// again from a snapshot.
        case behindRetention
        /// The shared log's next entry migrates the cluster to a newer schema version: the replica
        /// applies nothing past it until it is migrated there (StrataCluster's `Cluster.migrate`,
        /// `storectl migrate` with the cluster's URL), by code that holds that version.
        case migrationNeeded
        /// The save's log entry is larger than one save in the shared log may be
        /// (``ReplicatedEntry/maxSaveBytes``); nothing was written. Split it into smaller saves.
        case saveTooLarge
    }

    /// What kind of failure it is.
    public var kind: Kind
    /// What happened, for people.
    public var reason: String

    /// A failure of `kind`, explained by `reason`.
    public init(_ kind: Kind, _ reason: String) {
        self.kind = kind
        self.reason = reason
    }

    /// The reason.
    public var description: String { reason }
}
