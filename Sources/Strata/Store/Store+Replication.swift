import Foundation
import StrataLMDB

/// A store as a replica of a cluster: the hooks `StrataCluster` builds on. A replica is an
/// ordinary store whose `meta` names its cluster; its saves go through an attached
/// ``ReplicationLog`` (see ``ReplicationLog`` for the contract), and the entries other machines
/// appended are applied with ``applyReplicated(_:)``, in order, each exactly once.
extension Store {
    /// The cluster this store is a replica of, or nil for a store of one machine.
    public var replicaClusterID: String? {
        get throws {
            try checkUsable()
            return try Self.storedClusterID(env)
        }
    }

    /// The database a making of this replica's cluster was started in and has not finished
    /// (``markAsReplica(clusterID:makingClusterIn:)``, ``finishMakingCluster(clusterID:)``): nil
    /// for a store of one machine and for a replica of a cluster that was made. Only a making in
    /// that same database may go on under the replica's cluster id, so a mark that outlives its
    /// making (brought back by a generation built from an earlier snapshot) cannot let the
    /// replica be made into a cluster elsewhere.
    public var clusterBeingMadeIn: String? {
        get throws {
            try checkUsable()
            return try Self.metaText(env, MetaKey.clusterPending)
        }
    }

    static func storedClusterID(_ env: LMDBEnvironment) throws -> String? { try metaText(env, MetaKey.cluster) }

    /// The UTF-8 text `meta` holds under `key`, if any.
    private static func metaText(_ env: LMDBEnvironment, _ key: [UInt8]) throws -> String? {
        try env.read { txn in try txn.withValue(env[.meta], key: key) { String(decoding: $0, as: UTF8.self) } }
    }

    /// Runs `body` on the writer between two commits, with no compaction, migration or bulk
    /// import of this process under way (the changes of `meta` it makes are no log entry, and
    /// would be lost in a generation built meanwhile).
    private func betweenCommits(_ body: @escaping @Sendable (LMDBEnvironment) throws -> Void) async throws {
        try checkUsable()
        guard let writer else { throw StrataError.readOnly(path: path) }
        await maintenance.enter()
        defer { maintenance.leave() }
        try checkUsable()
        try await writer.exclusive { try body(writer.env) }
    }

    /// Makes this store a replica of the cluster `clusterID`: from now on every save of every
    /// process goes through an attached ``ReplicationLog`` and fails while none is attached
    /// (``ReplicationError/Kind/notAttached``).
    ///
    /// - Throws: ``StrataError/storeBusy(path:processIDs:)`` when another process has the store
    ///   open (it would go on saving locally), ``StrataError/replication(_:)`` when the store is
    ///   already a replica of another cluster.
    ///
    /// With `makingClusterIn`, the store is the first replica of a cluster being made from it in
    /// that database (its host, port and name): it is also marked as such
    /// (``clusterBeingMadeIn``) until ``finishMakingCluster(clusterID:)``.
    public func markAsReplica(clusterID: String, makingClusterIn database: String? = nil) async throws {
        try checkUsable()
        guard let writer, let lock else { throw StrataError.readOnly(path: path) }
        // Not during a compaction, migration or bulk import of this process: the mark is no log
        // entry, so a generation built from a snapshot taken before it would switch in without
        // it (and that switch would hand back the lock held here).
        await maintenance.enter()
        defer { maintenance.leave() }
        try checkUsable()
        // Held exclusively while the mark is written: no process opens the store in between (one
        // that opens later reads the mark at open).
        try takeExclusive(lock)
        defer { lock.shared() }
        let path = self.path
        try await writer.exclusive {
            let env = writer.env
            if let existing = try Self.storedClusterID(env) {
                guard existing == clusterID else {
                    throw StrataError.replication(ReplicationError(.rejectedEntry, """
                        \(path) is already a replica of cluster \(existing)
                        """))
                }
            } else {
                try env.write { txn in
                    try txn.put(env[.meta], key: MetaKey.cluster, value: Array(clusterID.utf8))
                    if let database {
                        try txn.put(env[.meta], key: MetaKey.clusterPending, value: Array(database.utf8))
                    }
                }
            }
            writer.isReplica.store(true, ordering: .releasing)
        }
    }

    /// The name this replica goes by in its cluster when none is given at its open, or nil
    /// (the cluster then names it `host:store path`). Set with ``setReplicaName(_:)``.
    public var replicaName: String? {
        get throws {
            try checkUsable()
            return try Self.metaText(env, MetaKey.replicaName)
        }
    }

    /// Keeps `name` as this replica's name in its cluster (``replicaName``). A replica made from
    /// a snapshot of another does not inherit it.
    public func setReplicaName(_ name: String) async throws {
        try await betweenCommits { env in
            try env.write { _ = try $0.put(env[.meta], key: MetaKey.replicaName, value: Array(name.utf8)) }
        }
    }

    /// Ends the making of the cluster `clusterID` from this store (its first replica): from now
    /// on the store is a replica of a cluster that exists, never made into another
    /// (``clusterBeingMadeIn`` is nil). Nothing to do when already done.
    public func finishMakingCluster(clusterID: String) async throws {
        let path = self.path
        try await betweenCommits { env in
            guard try Self.storedClusterID(env) == clusterID else {
                throw StrataError.replication(ReplicationError(.rejectedEntry, """
                    \(path) is not marked as a replica of cluster \(clusterID)
                    """))
            }
            try env.write { _ = try $0.delete(env[.meta], key: MetaKey.clusterPending) }
        }
    }

    /// Makes this replica of `clusterID` a store of one machine again: its saves are committed
    /// locally from then on, and it no longer follows the cluster (whose later entries it never
    /// gets). Used when making a cluster fails; a store that leaves for good keeps its data.
    ///
    /// - Throws: ``StrataError/storeBusy(path:processIDs:)`` when another process has the store
    ///   open (a compaction there, built from a snapshot that still holds the mark, would bring it
    ///   back), ``StrataError/replication(_:)`` when the store is a replica of another cluster.
    public func leaveCluster(clusterID: String) async throws {
        try checkUsable()
        guard let writer, let lock else { throw StrataError.readOnly(path: path) }
        // Not during a compaction, migration or bulk import of this process (see markAsReplica).
        await maintenance.enter()
        defer { maintenance.leave() }
        try checkUsable()
        // Held exclusively while the mark is removed, as markAsReplica does: no other process has
        // the store open, so none is building a generation from a snapshot that still holds the
        // mark (its switch would bring the mark back).
        try takeExclusive(lock)
        defer { lock.shared() }
        let path = self.path
        try await writer.exclusive {
            let env = writer.env
            guard let existing = try Self.storedClusterID(env) else { return }
            guard existing == clusterID else {
                throw StrataError.replication(ReplicationError(.rejectedEntry, """
                    \(path) is a replica of cluster \(existing), not \(clusterID)
                    """))
            }
            try env.write { txn in
                _ = try txn.delete(env[.meta], key: MetaKey.cluster)
                _ = try txn.delete(env[.meta], key: MetaKey.clusterPending)
                _ = try txn.delete(env[.meta], key: MetaKey.replicaName)
            }
            // Its commits are its own again: each syncs its meta page too.
            try env.setNoMetaSync(false)
            writer.isReplica.store(false, ordering: .releasing)
            writer.replication.withLock { $0 = nil }
        }
    }

    /// Whether `entry` (the shared log's at its id) is the transaction this replica holds under
    /// that id: compared decoded (author, time, metadata and every change), so that encodings of
    /// the same entry (compressed or not) compare equal. Nil when the local log holds no entry
    /// there (a replica made from a snapshot, or whose log was compacted past it). False means
    /// the replica's history is not the cluster's (a cluster database restored from an older
    /// backup, after which other machines appended as many transactions as this one had).
    ///
    /// - Throws: ``StrataError/corruptLogEntry(transaction:reason:)`` when `entry` cannot be decoded.
    public func holdsLogEntry(_ entry: ReplicatedEntry) throws -> Bool? {
        guard let local = try read({ try $0.logEntry(entry.transactionID) }) else { return nil }
        let shared = try entry.bytes.withUnsafeBytes {
            try LogEntryCodec.decode($0, transactionID: entry.transactionID)
        }
        return shared == local
    }

    /// Sends this replica's saves through `log` from the next group commit on.
    public func attachReplication(_ log: any ReplicationLog) throws {
        try checkUsable()
        guard let writer else { throw StrataError.readOnly(path: path) }
        writer.replication.withLock { $0 = log }
    }

    /// Stops sending saves through the attached log, after the group commit running now (if
    /// any): a replica's saves fail again until one is attached.
    public func detachReplication() async {
        guard let writer else { return }
        writer.replication.withLock { $0 = nil }
        // Waits for a group that took the log before it was detached.
        _ = try? await writer.exclusive {}
    }

    /// Applies entries of the shared log (see ``ReplicatedEntry``) on the writer's queue, between
    /// two group commits, in one LMDB transaction: the state through the same code as a save,
    /// each entry into the local log under its id, so the replica's position is committed with
    /// the state. Entries at or before the local head are skipped; the others must follow it
    /// without a gap. Published to change streams and live queries as commits of another
    /// process are. Returns the local head after: the batch's last id, or less when the batch
    /// holds the cluster's migration entry after other entries — those before it are applied
    /// and the call returns there; a later call with the entry first throws
    /// ``ReplicationError/Kind/migrationNeeded``.
    ///
    /// - Throws: ``StrataError/replication(_:)`` (``ReplicationError/Kind/rejectedEntry``) for a
    ///   gap, an entry failing its checksum, or one of another schema version; nothing of the
    ///   batch is applied then. ``ReplicationError/Kind/migrationNeeded`` when the first entry to
    ///   apply is the cluster's migration to a later schema version.
    @discardableResult
    public func applyReplicated(_ entries: [ReplicatedEntry]) async throws -> TransactionID {
        try checkUsable()
        guard let writer else { throw StrataError.readOnly(path: path) }
        return try await writer.exclusive { try writer.applyReplicated(entries) }
    }

    /// Why this store's writer stopped taking commits while open (a failed sync: see
    /// ``Durability``), nil while it takes them. A follower stops following then.
    package var writerStopReason: StrataError? { writer?.stopReason.withLock { $0 } }

    /// Applies everything the attached log holds after the local head (on the writer's queue,
    /// a batch per LMDB transaction). Returns the local head after.
    @discardableResult
    public func catchUpReplica() async throws -> TransactionID {
        try checkUsable()
        guard let writer else { throw StrataError.readOnly(path: path) }
        return try await writer.exclusive {
            guard let log = writer.replication.withLock({ $0 }) else {
                throw StrataError.replication(ReplicationError(.notAttached,
                                                               "no cluster is attached to \(writer.storePath)"))
            }
            try writer.catchUp(from: log)
            let env = writer.env
            return try env.read { try ReadView(txn: $0, env: env, schema: writer.schema).lastTransactionID() }
        }
    }
}
