import Foundation
import LibraryModel
@testable import Strata
import StrataTestSupport
import Testing
@testable import StrataCluster

/// A cluster's layout says whether its log may hold compressed entries. A new cluster is of
/// layout 2 and gets a large save compressed, as the replica's own log does. A cluster of layout 1
/// was made by a Strata that cannot read compressed entries and may still run replicas of it: it
/// gets every entry plain, in the shared log and in each replica's own log. A layout later than
/// this Strata knows is refused.
@Suite(.serialized) struct ClusterLayoutTests {
    /// 300 tracks in one save: its log entry is well over 1 KiB and compresses.
    private func largeSave(_ store: Store) async throws -> TransactionID {
        try await store.save { c in for i in 0..<300 { c.insert(newTrack("layout track \(i)", duration: 100 + i)) } }
    }

    /// Runs `statement` in the cluster's database (psql, on a thread of its own).
    private func sql(_ c: ClusterFixture, _ statement: String) async throws -> String {
        try await onOwnThread { try c.postgres.sql(statement, database: c.address.database) }
    }

    /// The format byte of entry `tx` in the shared log and in `store`'s own log.
    private func formats(_ c: ClusterFixture, _ store: Store, _ tx: TransactionID) async throws -> (shared: String, local: UInt8?) {
        let shared = try await sql(c, "SELECT get_byte(entry, 0) FROM strata_log WHERE id = \(tx.rawValue)")
        let env = store.env
        let local = try env.read { txn in try txn.withValue(env[.log], key: tx.keyBytes) { $0.first } } ?? nil
        return (shared, local)
    }

    @Test func aNewClusterTakesCompressedEntries() async throws {
        try await withCluster(replicas: 2) { c in
            #expect(try await sql(c, "SELECT layout FROM strata_cluster") == "2")
            #expect(try await Cluster.status(address: c.address).layout == 2)
            let tx = try await largeSave(c.replicas[0].store)
            let written = try await formats(c, c.replicas[0].store, tx)
            #expect(written.shared == "\(LogEntryCodec.compressedFormat)")
            #expect(written.local == LogEntryCodec.compressedFormat)
            try await c.replicas[1].catchUp(to: tx)
            #expect(try await formats(c, c.replicas[1].store, tx).local == LogEntryCodec.compressedFormat)
            #expect(try ClusterFixture.exported(c.replicas[1].store) == ClusterFixture.exported(c.replicas[0].store))
        }
    }

    @Test func aClusterOfLayout1GetsEveryEntryPlain() async throws {
        try await withCluster(replicas: 2) { c in
            _ = try await sql(c, "UPDATE strata_cluster SET layout = 1")
            // Opened again, the replicas read the layout.
            var replicas: [ClusterReplica] = []
            for (i, r) in c.replicas.enumerated() {
                await r.close()
                replicas.append(try await ClusterReplica.open(store: r.store, address: c.address, name: "r\(i)"))
            }
            let tx = try await largeSave(replicas[0].store)
            let written = try await formats(c, replicas[0].store, tx)
            #expect(written.shared == "\(LogEntryCodec.format)")
            #expect(written.local == LogEntryCodec.format)
            try await replicas[1].catchUp(to: tx)
            #expect(try await formats(c, replicas[1].store, tx).local == LogEntryCodec.format)
            #expect(try ClusterFixture.exported(replicas[1].store) == ClusterFixture.exported(replicas[0].store))
            #expect(try await sql(c, "SELECT layout FROM strata_cluster") == "1")
            for r in replicas { await r.close() }
            let status = try await storectl(["cluster", "status", c.storePath(0), "--postgres", c.url, "--json"])
            #expect(status.status == 0, "\(status.stderr)")
            #expect(try JSONValue.parse(status.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["layout"] == .int(1))
            let text = try await storectl(["cluster", "status", c.storePath(0), "--postgres", c.url])
            #expect(text.stdout.contains("layout:    1 (log entries plain, readable by earlier Strata versions)"), "\(text.stdout)")
        }
    }

    /// A cluster command whose standard output is a pipe its reader closed ends quietly with
    /// SIGPIPE (141 in the shell), as every other storectl command and Unix tool does: the
    /// connection to PostgreSQL has the process ignore SIGPIPE, and the write failed with EPIPE,
    /// which was reported as an I/O error (exit 74, "Broken pipe").
    @Test func aClusterCommandWhoseReaderLeftEndsWithSIGPIPE() async throws {
        try await withCluster(replicas: 2) { c in
            for r in c.replicas { await r.close() }
            // `true` reads nothing and is gone long before storectl has connected and writes.
            let r = try await run("/bin/bash", ["-c", #""$0" cluster status "$1" --postgres "$2" | true; echo "${PIPESTATUS[0]}""#,
                                                storectlPath, c.storePath(0), c.url])
            #expect(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "141", "\(r.stdout) \(r.stderr)")
            #expect(!r.stderr.contains("Broken pipe"), "\(r.stderr)")
        }
    }

    @Test func aLaterLayoutIsRefused() async throws {
        try await withCluster(replicas: 1) { c in
            _ = try await sql(c, "UPDATE strata_cluster SET layout = 3")
            let replica = c.replicas[0]
            await replica.close()
            do {
                let reopened = try await ClusterReplica.open(store: replica.store, address: c.address, name: "r0")
                await reopened.close()
                Issue.record("a cluster of layout 3 was followed")
            } catch let e as ClusterError {
                #expect(e.kind == .noCluster)
                #expect(e.reason.contains("uses table layout 3; this Strata knows layout 2 and older"), "\(e.reason)")
            }
        }
    }
}
