import Foundation

/// A cluster's state: the log's head and retention horizon in PostgreSQL, the replicas last seen,
/// the latest snapshot, and one replica's position when asked from one.
public struct ClusterStatus: Sendable, Codable, Equatable {
    public struct Replica: Sendable, Codable, Equatable {
        public var name: String
        /// The last transaction it had applied when last seen.
        public var applied: UInt64
        public var host: String
        public var processID: Int32
        public var secondsSinceSeen: Double
    }

    public struct Snapshot: Sendable, Codable, Equatable {
        /// The transaction the snapshot's state is at.
        public var position: UInt64
        public var bytes: Int
        public var created: Date
    }

    public var clusterID: String
    public var model: String
    public var schemaVersion: Int
    /// The last transaction in the cluster's log.
    public var head: UInt64
    /// The log holds the transactions after this one only.
    public var horizon: UInt64
    /// The replica asked from: its last applied transaction (nil when asked without a store).
    public var applied: UInt64?
    /// Transactions the replica asked from has yet to apply.
    public var lag: UInt64? { applied.map { head > $0 ? head - $0 : 0 } }
    public var replicas: [Replica] = []
    public var snapshot: Snapshot?

    public init(clusterID: String, model: String, schemaVersion: Int, head: UInt64, horizon: UInt64) {
        self.clusterID = clusterID
        self.model = model
        self.schemaVersion = schemaVersion
        self.head = head
        self.horizon = horizon
    }
}
