import Foundation

/// A cluster's state: the log's head and retention horizon in PostgreSQL, the replicas last seen,
/// the latest snapshot, and one replica's position when asked from one.
public struct ClusterStatus: Sendable, Codable, Equatable {
    /// A replica as it last reported itself (`strata_replicas`).
    public struct Replica: Sendable, Codable, Equatable {
        /// Its name (`host:store path` unless given).
        public var name: String
        /// The last transaction it had applied when last seen.
        public var applied: UInt64
        /// The machine it runs on.
        public var host: String
        /// The process that had it open.
        public var processID: Int32
        /// Seconds since its last report.
        public var secondsSinceSeen: Double
    }

    /// The snapshot new replicas start from.
    public struct Snapshot: Sendable, Codable, Equatable {
        /// The transaction the snapshot's state is at.
        public var position: UInt64
        /// Its size.
        public var bytes: Int
        /// When it was published.
        public var created: Date
    }

    /// The cluster's id (each replica's `Store.replicaClusterID`).
    public var clusterID: String
    /// The model and schema version of the cluster's stores.
    public var model: String
    /// The schema version the cluster's log is written with.
    public var schemaVersion: Int
    /// The cluster's layout: 2, its log may hold compressed entries; 1, a cluster made by a
    /// Strata that cannot read them, into which every entry is appended plain.
    public var layout = 2
    /// The last transaction in the cluster's log.
    public var head: UInt64
    /// The log holds the transactions after this one only.
    public var horizon: UInt64
    /// The replica asked from: its last applied transaction (nil when asked without a store).
    public var applied: UInt64?
    /// Whether the replica asked from holds another history than the cluster's: its last
    /// transaction is not the cluster's of that id, or is past the cluster's head (a database
    /// restored from an older backup). Such a replica is refused at its open; `storectl cluster
    /// reset` starts it again. Nil when asked without a store.
    public var historyDiverged: Bool?
    /// Transactions the replica asked from has yet to apply.
    public var lag: UInt64? { applied.map { head > $0 ? head - $0 : 0 } }
    /// The replicas that reported themselves, by name.
    public var replicas: [Replica] = []
    /// The latest complete snapshot.
    public var snapshot: Snapshot?

    /// A status with no replicas and no snapshot yet.
    public init(clusterID: String, model: String, schemaVersion: Int, head: UInt64, horizon: UInt64) {
        self.clusterID = clusterID
        self.model = model
        self.schemaVersion = schemaVersion
        self.head = head
        self.horizon = horizon
    }
}
