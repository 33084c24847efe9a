import Foundation
import Synchronization
import Logging
import Strata

extension Cluster {
    /// Migrates the replica at `url` to schema `target` (default: the last of `schemas`) at one
    /// position of the cluster's log, the same on every replica.
    ///
    /// The first replica to migrate appends the cluster's migration entry right after the log's
    /// head (``Store/migrationMarker(schemas:to:registry:at:)``); from then on no replica applies
    /// or appends anything past it until it is migrated itself: their saves and followers stop
    /// with ``ReplicationError/Kind/migrationNeeded``, and a replica running older code stays
    /// stopped there. Each replica is then migrated with this call (by code that holds the new
    /// schema): it applies the log up to the entry, migrates its store locally at that position
    /// (``Store/migrateReplica(schemas:to:registry:marker:progress:)``: the same steps give every
    /// replica the same state), and applies the log after it. Like
    /// ``Store/migrate(at:schemas:to:registry:dryRun:configuration:progress:)`` it needs the store to
    /// itself (no other process may have it open).
    ///
    /// Returns nil when the replica is already at the target version and the cluster has no
    /// migration entry it has yet to apply.
    @discardableResult
    public static func migrate(at url: URL, address: ClusterAddress, schemas: [Schema], to target: Int? = nil,
                               registry: MigrationRegistry = MigrationRegistry(),
                               configuration: StoreConfiguration = StoreConfiguration(),
                               progress: (@Sendable (MigrationProgress) -> Void)? = nil)
        async throws -> MigrationReport? {
        let logger = Logger(label: "strata.cluster")
        let store = try Store.openExisting(at: url, configuration: configuration)
        let marked: String?
        do { marked = try store.replicaClusterID } catch {
            store.close()
            throw error
        }
        guard let clusterID = marked else {
            store.close()
            throw ClusterError(.wrongStore, "\(store.path) is not a replica of a cluster")
        }
        do {
            // What opening the replica refuses, refused here too: a migration catches the replica
            // up first, and applying the cluster's entries on a torn file or on another history
            // would hide the damage for good (its last entry would then be the cluster's).
            try ClusterReplica.refuseIfTorn(store)
            let check = PostgresSession(address: address, logger: logger)
            defer { check.close() }
            try await requireCluster(clusterID, of: store.path, session: check, address: address)
            try await ClusterReplica.checkHistory(store, check, address: address)
        } catch {
            store.close()
            throw error
        }
        let session = PostgresSession(address: address, logger: logger, expectedCluster: clusterID)
        defer { session.close() }
        let layout: Int
        do { layout = try await offPool("migrate") { try Cluster.readCluster(session).layout } } catch {
            store.close()
            throw error
        }
        let log = SharedLog(session: session, replica: "\(ClusterReplica.defaultName(store)) (migration)", layout: layout)
        let report: MigrationReport
        do {
            try store.attachReplication(log)
            let marker: ReplicatedEntry
            if let pending = try await pendingMigration(store, log) {
                marker = pending
            } else {
                let goal = target ?? schemas.last?.version ?? store.schema.version
                guard goal > store.schema.version else {
                    await store.detachReplication()
                    store.close()
                    return nil
                }
                // Built aside and thrown away first: a migration that fails on this data, on this
                // disk or beside another process fails before the cluster holds its entry (which
                // would stop every replica until it can be applied). The entry goes in only at
                // the head the dry run saw: what other machines append meanwhile could fail the
                // migration (a value a new unique or a step refuses), so after it the replica
                // catches up and checks again, at most `maxMigrationChecks` times.
                var attempts = 0
                while true {
                    _ = try await store.migrate(schemas: schemas, to: goal, registry: registry, dryRun: true)
                    if let hook = afterMigrationDryRunForTesting.withLock({ $0 }) { try await hook() }
                    attempts += 1
                    if let appended = try await appendMarker(store, log, schemas: schemas, to: goal, registry: registry) {
                        marker = appended
                        break
                    }
                    guard attempts < maxMigrationChecks else {
                        throw ClusterError(.unavailable, """
                            other replicas saved while each of \(attempts) checks of the migration ran, so the \
                            cluster holds data none of them checked: migrate when fewer saves arrive (stop the \
                            services that write to the cluster while it migrates)
                            """)
                    }
                    // Another replica may have appended a migration meanwhile: this one migrates there.
                    if let pending = try await pendingMigration(store, log) {
                        marker = pending
                        break
                    }
                }
                // Another replica's migration entry may be the one returned: applied here up to it
                // (which stops the catch-up), so that the replica migrates right after the entries
                // before it. (It stopped with the cluster's migration committed and the replica not
                // migrated: "the replica's next transaction is … the cluster migrates at …".)
                do { try await store.catchUpReplica() } catch StrataError.replication(let e) where e.kind == .migrationNeeded {}
            }
            if let target, marker.schemaVersion != target {
                throw ClusterError(.wrongStore, """
                    the cluster migrates to v\(marker.schemaVersion) at transaction \(marker.transactionID), \
                    not to v\(target)
                    """)
            }
            await store.detachReplication()
            report = try await store.migrateReplica(schemas: schemas, to: marker.schemaVersion, registry: registry,
                                                    marker: marker, progress: progress)
            store.close()
        } catch {
            await store.detachReplication()
            store.close()
            throw error
        }
        // The migrated store, with its new schema, applies what follows the entry (or does when
        // it is next attached: the migration is done either way).
        if let migrated = try? Store.openExisting(at: url, configuration: configuration) {
            if (try? migrated.attachReplication(log)) != nil {
                do { try await migrated.catchUpReplica() } catch {
                    logger.warning("migrated \(migrated.path); catching up after it failed: \(error)")
                }
                await migrated.detachReplication()
                // Its row in `status` at its new position (best effort: the next open reports it too).
                if let head = try? migrated.lastTransactionID {
                    let name = ClusterReplica.defaultName(migrated)
                    _ = try? await offPool("migrate") { try Follower.report(session, name: name, head: head) }
                }
            }
            migrated.close()
        }
        return report
    }

    /// Run after each of a migration's dry runs, before its entry is appended (tests append other
    /// machines' transactions there).
    static let afterMigrationDryRunForTesting = Mutex<(@Sendable () async throws -> Void)?>(nil)

    /// The dry runs a migration makes before it gives up when other replicas keep saving while
    /// each runs (see ``migrate(at:address:schemas:to:registry:configuration:progress:)``).
    static let maxMigrationChecks = 5

    /// The cluster's migration entry this replica must migrate at next: after catching up, the
    /// entry right after its head when it is one; nil when there is none.
    private static func pendingMigration(_ store: Store, _ log: SharedLog) async throws -> ReplicatedEntry? {
        do {
            try await store.catchUpReplica()
            return nil
        } catch StrataError.replication(let e) where e.kind == .migrationNeeded {
            let head = try store.lastTransactionID
            let next = try await offPool("migrate") { try log.entries(after: head, limit: 1) }
            guard let marker = next.first, marker.schemaVersion > store.schema.version else {
                throw StrataError.replication(e)
            }
            return marker
        }
    }

    /// Appends the migration entry right after the cluster's head, in this replica's turn (other
    /// machines' appends held off, so it cannot lose a race to them), when that head is this
    /// replica's own, the one its dry run checked; returns the entry the replica migrates at,
    /// which is another replica's when one appended a migration first (found among the entries
    /// after this replica's head), or nil when other machines appended and nothing was (the
    /// migration must be checked again with their entries).
    private static func appendMarker(_ store: Store, _ log: SharedLog, schemas: [Schema], to goal: Int,
                                     registry: MigrationRegistry) async throws -> ReplicatedEntry? {
        let local = try store.lastTransactionID
        let version = store.schema.version
        return try await offPool("migrate") {
            var chosen: ReplicatedEntry?
            var moved = false
            try log.appendInTurn { head in
                var position = local
                while position < head {
                    let next = try log.entries(after: position, limit: Follower.batch)
                    if let pending = next.first(where: { $0.schemaVersion > version }) {
                        chosen = pending
                        return []
                    }
                    guard let last = next.last else { break }
                    position = last.transactionID
                }
                guard head == local else {
                    moved = true
                    return []
                }
                let marker = try store.migrationMarker(schemas: schemas, to: goal, registry: registry, at: head.next)
                chosen = marker
                return [marker]
            }
            if moved { return nil }
            guard let chosen else {
                throw StrataError.replication(ReplicationError(.unavailable,
                                                               "the cluster's log did not give the migration its turn"))
            }
            return chosen
        }
    }
}
