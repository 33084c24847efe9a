import Foundation
import Glibc
import LibraryModel
@testable import Strata
import StrataTestSupport
import Testing
@testable import StrataCluster

/// A replica whose local commit fails with an I/O error stops taking saves, as one machine's
/// store does: the kernel may have dropped the pages it could not write, so nothing more is
/// committed over them (neither a save nor the follower's applies) until the store is opened
/// again. What the shared log already holds stays the cluster's, and the other replicas have it.
@Suite(.serialized) struct ClusterReplicaSyncFailureTests {
    /// A replica that appended a save and then could neither commit it locally nor apply it from
    /// the cluster (a full disk: every local commit fails) appends nothing more until it has
    /// applied it: later saves fail as unavailable with nothing appended. Saves of other objects
    /// were each appended after it (nothing they read had changed) and each reported a failure,
    /// so a caller retrying them saved them twice. Once it can apply again, it goes on.
    @Test func aReplicaThatCannotApplyWhatItAppendedAppendsNothingMoreUntilItHas() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            _ = try await a.store.save { $0.insert(Genre(name: "before")) }
            a.store.env.commitRefusalForTesting.withLock { $0 = ENOSPC }
            do {
                _ = try await a.store.save { $0.insert(Genre(name: "appended")) }
                Issue.record("a save this replica could not commit was acknowledged")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .outcomeUnknown, "\(e)")
            }
            let head = try await Cluster.status(address: c.address).head
            for i in 0..<3 {
                do {
                    _ = try await a.store.save { $0.insert(Genre(name: "refused \(i)")) }
                    Issue.record("a save was taken while an appended one was not applied")
                } catch StrataError.replication(let e) {
                    #expect(e.kind == .unavailable && e.reason.contains("takes no saves"), "\(e)")
                }
            }
            #expect(try await Cluster.status(address: c.address).head == head, "saves appended meanwhile")
            a.store.env.commitRefusalForTesting.withLock { $0 = nil }
            let after = try await a.store.save { $0.insert(Genre(name: "after")) }
            #expect(after.rawValue == head + 1)
            #expect(try a.store.mainContext.fetch(Genre.self).map(\.name).sorted() == ["after", "appended", "before"])
            try await b.catchUp(to: after)
            #expect(try b.store.mainContext.fetch(Genre.self).map(\.name).sorted() == ["after", "appended", "before"])
        }
    }

    @Test func aReplicaWhoseLocalCommitFailsWithAnIOErrorTakesNoMoreSaves() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            _ = try await a.store.save { $0.insert(Genre(name: "before")) }
            a.store.env.commitErrorForTesting.withLock { $0 = EIO }
            do {
                _ = try await a.store.save { $0.insert(Genre(name: "appended")) }
                Issue.record("a save whose local commit failed was acknowledged")
            } catch StrataError.replication(let e) {
                // Appended to the shared log, not applied here: its outcome is the cluster's.
                #expect(e.kind == .outcomeUnknown, "\(e)")
            }
            a.store.env.commitErrorForTesting.withLock { $0 = nil }
            await #expect { _ = try await a.store.save { $0.insert(Genre(name: "after")) } } throws: { error in
                guard case StrataError.lmdb(let e) = error else { return false }
                return e.code == EIO && e.operation.contains("takes no more saves")
            }
            // Another machine's save is not applied over the pages either.
            _ = try await b.store.save { $0.insert(Genre(name: "elsewhere")) }
            await #expect(throws: StrataError.self) { _ = try await a.catchUp() }
            let markers = try UnsyncedCommits.markers(in: a.store.path)
            #expect(markers.count == 1 && markers.allSatisfy(\.flushFailed), "\(markers)")
            // The cluster holds the appended save exactly once.
            _ = try await b.catchUp(to: TransactionID(try await Cluster.status(address: c.address).head))
            let names = try b.store.mainContext.fetch(Genre.self).map(\.name).sorted()
            #expect(names == ["appended", "before", "elsewhere"])
        }
    }
}
