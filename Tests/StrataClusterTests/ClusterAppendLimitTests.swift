import Foundation
import LibraryModel
@testable import Strata
import StrataTestSupport
import Synchronization
import Testing
@testable import StrataCluster

/// One append of several saves to the shared log carries at most
/// `ReplicatedEntry.maxAppendBytes` of entries, and one save's entry is at most
/// `ReplicatedEntry.maxSaveBytes` (PostgreSQL holds one value to 1 GB). A replica's group of
/// saves over the first is appended again in halves; a save over the second is refused with
/// nothing written, and the replica goes on. Reads of the log stop at a byte budget. The limits
/// are lowered for one store or database here, so that the entries stay small.
@Suite(.serialized) struct ClusterAppendLimitTests {
    /// `count` track titles of random hex (so that a compressed log entry stays large).
    private func titles(_ tag: String, _ count: Int, seed: UInt64) -> [String] {
        var rng = SeededGenerator(seed: seed)
        return (0..<count).map { i in
            "\(tag) \(i) " + (0..<32).map { _ in String(format: "%016llx", rng.next()) }.joined()
        }
    }

    private func save(_ store: Store, _ titles: [String]) async throws -> TransactionID {
        try await store.save { c in for t in titles { c.insert(newTrack(t)) } }
    }

    private func sql(_ c: ClusterFixture, _ statement: String) async throws -> String {
        try await onOwnThread { try c.postgres.sql(statement, database: c.address.database) }
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func aGroupOverTheAppendLimitGoesInHalvesAndASaveOverItsOwnLimitIsRefused() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            // Calibrated on a save of the same shape: one such save fits, two do not.
            let probe = try await save(a.store, titles("probe", 80, seed: 1))
            let probeBytes = try #require(Int(try await sql(c, "SELECT length(entry) FROM strata_log WHERE id = \(probe.rawValue)")))
            let limit = probeBytes + probeBytes / 2, saveLimit = probeBytes * 2 + probeBytes / 2
            Writer.appendLimitsForTesting.withLock { $0 = (a.store.path, limit, saveLimit) }
            defer { Writer.appendLimitsForTesting.withLock { $0 = nil } }

            // Two saves queued behind a held writer are taken as one group, larger than an append.
            let writer = try #require(a.store.writer)
            let gate = DispatchSemaphore(value: 0)
            let held = Atomic<Bool>(false)
            let holder = Task { try await writer.exclusive { held.store(true, ordering: .releasing); gate.wait() } }
            while !held.load(ordering: .acquiring) { try await Task.sleep(for: .milliseconds(1)) }
            let (t1, t2) = (titles("first", 80, seed: 2), titles("second", 80, seed: 3))
            let first = Task { try await save(a.store, t1) }
            let second = Task { try await save(a.store, t2) }
            while writer.pendingForTesting < 2 { try await Task.sleep(for: .milliseconds(1)) }
            gate.signal()
            try await holder.value
            let (id1, id2) = (try await first.value, try await second.value)
            #expect(id1 != id2)
            let sizes = try await sql(c, "SELECT length(entry) FROM strata_log WHERE id IN (\(id1.rawValue), \(id2.rawValue)) ORDER BY id")
                .split(separator: "\n").compactMap { Int($0) }
            #expect(sizes.count == 2)
            // What makes the case: each alone fits, both together do not.
            #expect(sizes.allSatisfy { $0 <= limit } && sizes.reduce(0, +) > limit, "\(sizes)")

            // One save over a group's limit but not a save's goes alone.
            let alone = try await save(a.store, titles("alone", 160, seed: 4))
            let aloneBytes = try #require(Int(try await sql(c, "SELECT length(entry) FROM strata_log WHERE id = \(alone.rawValue)")))
            #expect(aloneBytes > limit && aloneBytes <= saveLimit, "\(aloneBytes)")

            // One save over a save's limit: refused, nothing in the shared log or the local store.
            let head = try a.store.lastTransactionID
            do {
                _ = try await save(a.store, titles("too large", 240, seed: 5))
                Issue.record("a save over the append limit was appended")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .saveTooLarge, "\(e)")
                #expect(e.reason.contains("\(saveLimit) bytes"), "\(e.reason)")
            }
            #expect(try a.store.lastTransactionID == head)
            #expect(try await sql(c, "SELECT head FROM strata_cluster") == "\(head.rawValue)")
            #expect(try a.store.mainContext.count(Track.self) == 400)

            // The replica goes on, and the other one holds the same.
            let after = try await a.store.save { $0.insert(newTrack("after")) }
            try await b.catchUp(to: after)
            #expect(try b.store.mainContext.count(Track.self) == 401)
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(b.store))
        }
    }

    /// A read of the log stops once its entries reach the read budget (lowered here to a byte, so
    /// that every read answers one entry): a replica that was away still catches up to the head
    /// when it opens, reading again while answers are cut, and a save on it after that is
    /// validated at the head.
    @Test func readsCutAtTheByteBudgetStillCatchUpToTheHead() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            await b.close()
            for i in 0..<40 { _ = try await a.store.save { $0.insert(Genre(name: "g\(i)")) } }
            let head = try a.store.lastTransactionID
            SharedLog.readBytesForTesting.withLock { $0[c.address.database] = 1 }
            defer { SharedLog.readBytesForTesting.withLock { $0[c.address.database] = nil } }
            // A replica opened with a poll far away: only its own catch-up can bring it to the head.
            let again = try await ClusterReplica.open(store: b.store, address: c.address, name: "r1 again",
                                                      pollInterval: ClusterReplica.maxPollInterval)
            #expect(try again.store.lastTransactionID == head)
            #expect(try again.store.mainContext.count(Genre.self) == 40)
            let cut = try await onOwnThread { try again.log.entries(after: TransactionID(0), limit: 1_000) }
            #expect(cut.count == 1 && again.log.mayBeFollowed(cut, limit: 1_000))
            do {
                _ = try await again.store.save { $0.insert(Genre(name: "g0")) }
                Issue.record("a duplicate unique name was saved")
            } catch StrataError.validation(let f) {
                #expect(f.kind == .uniqueConstraint)
            }
            await again.close()
        }
    }
}
