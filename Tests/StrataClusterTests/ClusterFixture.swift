import Foundation
import LibraryModel
import Strata
import StrataTestSupport
import Testing
@testable import StrataCluster

/// A cluster for one test: a fresh database on a private PostgreSQL, a first store (seeded, then
/// made the cluster with `Cluster.initialize`) and more replicas joined from the snapshot, each a
/// store of its own directory, all in this process.
final class ClusterFixture: Sendable {
    let postgres: TestPostgres
    let address: ClusterAddress
    let root: URL
    let replicas: [ClusterReplica]

    private init(postgres: TestPostgres, address: ClusterAddress, root: URL, replicas: [ClusterReplica]) {
        self.postgres = postgres
        self.address = address
        self.root = root
        self.replicas = replicas
    }

    /// Makes a cluster of `count` replicas; `seed` runs on the first store before the cluster is made.
    static func make(replicas count: Int, postgres: TestPostgres? = nil, pollInterval: Duration = .milliseconds(50),
                     seed: (Store) async throws -> Void = { _ in }) async throws -> ClusterFixture {
        let server: TestPostgres
        if let postgres { server = postgres } else { server = try await TestPostgres.shared() }
        let address = try await server.freshDatabase()
        let root = temporaryDirectory("strata-cluster")
        let first = try Store.open(at: root.appendingPathComponent("r0"), schema: try librarySchema())
        try await seed(first)
        try await Cluster.initialize(store: first, address: address, name: "r0")
        var replicas = [try await ClusterReplica.open(store: first, address: address, name: "r0",
                                                      pollInterval: pollInterval)]
        for i in 1..<max(count, 1) {
            let store = try await Cluster.join(at: root.appendingPathComponent("r\(i)"), address: address)
            replicas.append(try await ClusterReplica.open(store: store, address: address, name: "r\(i)",
                                                          pollInterval: pollInterval))
        }
        return ClusterFixture(postgres: server, address: address, root: root, replicas: replicas)
    }

    /// Detaches every replica, closes every store, removes the directories.
    func close() async {
        await release()
        try? FileManager.default.removeItem(at: root)
    }

    /// Detaches every replica and closes every store, so that other processes can take them.
    func release() async {
        for r in replicas {
            await r.close()
            r.store.close()
        }
    }

    /// The store directory of replica `i`.
    func storePath(_ i: Int) -> String { root.appendingPathComponent("r\(i)").path }

    /// A URL other processes can reach the cluster's database with.
    var url: String { "postgres://\(address.user)@\(address.host):\(address.port)/\(address.database)" }

    /// Drops the procedures that append and commit in one call, as a database made by an
    /// earlier version has none (appends then run between BEGIN and COMMIT).
    func dropCommittingProcedures() async throws {
        let postgres = postgres, database = address.database
        _ = try await onOwnThread {
            try postgres.sql("DROP PROCEDURE strata_commit_append_after; DROP PROCEDURE strata_commit_append",
                             database: database)
        }
    }

    /// Catches every replica up to the cluster's head; returns the head.
    @discardableResult
    func catchUpAll() async throws -> TransactionID {
        let head = TransactionID(try await Cluster.status(address: address).head)
        for r in replicas { try await r.catchUp(to: head) }
        return head
    }

    /// Every object of every entity of `store`, as exported NDJSON (key order): equal exports
    /// are equal states.
    static func exported(_ store: Store) throws -> String {
        let exporter = Exporter(store: store)
        var text = ""
        for entity in store.schema.entities {
            _ = try exporter.export(Query(entity: entity.name), format: .ndjson) { text += $0 + "\n" }
        }
        return text
    }
}

/// A track with a fresh id and mbid.
func newTrack(_ title: String, duration: Int = 100) -> Track {
    Track(mbid: UUID(), title: title, durationSeconds: duration, addedAt: Date(timeIntervalSince1970: 1_700_000_000))
}

/// Runs `body` with a new cluster of `replicas` replicas, closed afterwards.
func withCluster<R>(replicas: Int, postgres: TestPostgres? = nil, pollInterval: Duration = .milliseconds(50),
                    seed: (Store) async throws -> Void = { _ in },
                    _ body: (ClusterFixture) async throws -> R) async throws -> R {
    let cluster = try await ClusterFixture.make(replicas: replicas, postgres: postgres, pollInterval: pollInterval,
                                                seed: seed)
    do {
        let result = try await body(cluster)
        await cluster.close()
        return result
    } catch {
        await cluster.close()
        throw error
    }
}

/// What `append` did, run on a thread of its own while `holder` holds the cluster's head row in
/// a transaction: "returned" and the outcome, a replication error's kind, or the error. With the
/// row still held, `meanwhile` runs first (it may end `append`'s connection); then the holder
/// waits for `append` to end before it lets the row go.
func appendOutcome(whileHeadRowHeldBy holder: PostgresSession, meanwhile: () throws -> Void = {},
                   _ append: @escaping @Sendable () throws -> ReplicationAppend) throws -> String {
    let answer = Locked("no answer")
    let done = DispatchSemaphore(value: 0)
    try holder.transaction {
        _ = try holder.run("SELECT head FROM strata_cluster WHERE singleton FOR UPDATE")
        Thread.detachNewThread {
            defer { done.signal() }
            do {
                let r = try append()
                answer.withLock { $0 = "returned \(r)" }
            } catch StrataError.replication(let e) {
                answer.withLock { $0 = "\(e.kind)" }
            } catch {
                answer.withLock { $0 = "\(error)" }
            }
        }
        try meanwhile()
        done.wait()
    }
    return answer.withLock { $0 }
}
