import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Group commit within the writer's limits: a save over `maxChangesPerSave` inside a group commit
/// is refused alone (the other saves of the group commit together), and `maxSavesPerGroup` caps
/// the saves of one LMDB commit. Deterministic: the writer is held with `exclusive` while saves
/// queue up, and `maxPendingSaves` tells when they are all queued (a save is refused with
/// `writerOverloaded` only once the queue is full, and it cannot empty while the writer is held).
@Suite struct GroupCommitLimitsTests {
    /// Holds the writer, starts the saves, waits until one is refused (so `maxPendingSaves` are
    /// queued), releases the writer and returns every save's outcome, in the order given.
    func queueWhileHeld(_ store: Store, _ saves: [ChangeSet]) async throws -> [Result<TransactionID, Error>] {
        let held = try await holdWriter(store)
        let refused = Locked(0)
        let tasks = saves.map { changes in
            Task { () -> Result<TransactionID, Error> in
                do { return .success(try await store.save(changes)) } catch {
                    if case StrataError.writerOverloaded = error { refused.withLock { $0 += 1 } }
                    return .failure(error)
                }
            }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while refused.withLock({ $0 }) < 1 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        #expect(refused.withLock { $0 } == 1)
        #expect(store.statistics.lmdbCommits == 0, "a commit ran while the writer was held")
        try await held.release()
        var out: [Result<TransactionID, Error>] = []
        for t in tasks { out.append(await t.value) }
        return out
    }

    /// Two saves over the limit and two under it race for three queue slots: whichever three are
    /// queued, both kinds are in the one group. Each oversized save fails alone with
    /// `saveTooLarge`; the others commit, in the same LMDB commit, with consecutive ids.
    @Test(.timeLimit(.minutes(15))) func saveTooLargeInsideAGroupFailsAloneAndTheOthersCommit() async throws {
        var config = StoreConfiguration()
        config.maxChangesPerSave = 3
        config.maxPendingSaves = 3
        config.groupCommitGatherMicroseconds = 0
        try await withLibraryStore(config) { store in
            let big = [0, 1], small = [2, 3]
            let saves = [genres(4, prefix: "big0"), genres(4, prefix: "big1"), genres(3, prefix: "small0"), genres(1, prefix: "small1")]
            let results = try await queueWhileHeld(store, saves)
            var committed: [TransactionID] = []
            var tooLarge = 0
            for (i, r) in results.enumerated() {
                switch r {
                case .success(let tx):
                    #expect(small.contains(i), "save \(i) (\(saves[i].count) changes) was committed")
                    committed.append(tx)
                case .failure(StrataError.writerOverloaded(let limit)):
                    #expect(limit == 3)
                case .failure(StrataError.saveTooLarge(let changes, let limit)):
                    #expect(big.contains(i) && changes == 4 && limit == 3)
                    tooLarge += 1
                case .failure(let e):
                    Issue.record("save \(i): \(e)")
                }
            }
            #expect(tooLarge >= 1 && !committed.isEmpty && tooLarge + committed.count == 3)
            #expect(committed.sorted() == (0..<committed.count).map { TransactionID(UInt64($0) + 1) })
            let stats = store.statistics
            #expect(stats.lmdbCommits == 1, "\(stats)")
            #expect(stats.transactions == committed.count && stats.saves == committed.count && stats.failedSaves == tooLarge, "\(stats)")
            // Nothing of the oversized saves, all of the others.
            let names = Set(try store.mainContext.fetch(Genre.self).map(\.name))
            #expect(!names.contains { $0.hasPrefix("big") })
            let expected = results.indices.filter { if case .success = results[$0] { true } else { false } }
                .reduce(0) { $0 + saves[$1].count }
            #expect(names.count == expected)
            #expect(try store.lastTransactionID == TransactionID(UInt64(committed.count)))
        }
    }

    /// Five queued saves with `maxSavesPerGroup` 2 commit in three LMDB commits (2, 2, 1), each
    /// with its own transaction.
    @Test(.timeLimit(.minutes(15))) func groupsNeverExceedMaxSavesPerGroup() async throws {
        var config = StoreConfiguration()
        config.maxSavesPerGroup = 2
        config.maxPendingSaves = 5
        config.groupCommitGatherMicroseconds = 0
        try await withLibraryStore(config) { store in
            let saves = (0..<6).map { genres(1, prefix: "s\($0)") }
            let results = try await queueWhileHeld(store, saves)
            let committed = results.compactMap { try? $0.get() }
            #expect(committed.sorted() == (1...5).map { TransactionID(UInt64($0)) })
            let stats = store.statistics
            #expect(stats.lmdbCommits == 3, "\(stats)")
            #expect(stats.transactions == 5 && stats.saves == 5 && stats.failedSaves == 0, "\(stats)")
            #expect(try store.mainContext.count(Genre.self) == 5)

            // With a limit of 5 the same five go in one commit.
            var one = config
            one.maxSavesPerGroup = 5
            try await withLibraryStore(one) { store in
                let results = try await queueWhileHeld(store, saves)
                #expect(results.compactMap { try? $0.get() }.count == 5)
                #expect(store.statistics.lmdbCommits == 1, "\(store.statistics)")
            }
        }
    }
}
