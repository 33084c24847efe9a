import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Saves queued together in order (`Store.saveInOrder`, what an incremental import submits its
/// batches with): one group commit takes them, each keeps its own transaction, and a failure
/// either refuses every later save (`stopAtFailure`, committed: a prefix) or stays alone.
@Suite struct OrderedGroupTests {
    private func genre(_ name: String) -> ChangeSet {
        var c = ChangeSet()
        c.insert(Genre(name: name))
        return c
    }

    private func names(_ store: Store) throws -> Set<String> {
        Set(try store.mainContext.fetch(Genre.self).map(\.name))
    }

    /// Records an issue for every result that is not a failure `expected` accepts.
    private func expectFailures(_ results: ArraySlice<Result<TransactionID, Error>>, _ what: String,
                                _ expected: (Error) -> Bool) {
        for r in results {
            guard case .failure(let error) = r, expected(error) else {
                Issue.record("expected \(what), got \(r)")
                continue
            }
        }
    }

    /// Three saves queued in order land in one LMDB commit with consecutive transaction ids, in
    /// the order given, each with its own metadata.
    @Test func savesQueuedInOrderShareOneCommitAndKeepTheirOwnTransactions() async throws {
        try await withLibraryStore { store in
            let sets = (1...3).map { (changes: genre("G\($0)"), metadata: ["batch": "\($0)"]) }
            let before = store.statistics
            let results = await store.saveInOrder(sets, author: "test", stopAtFailure: true)
            let ids = try results.map { try $0.get() }
            #expect(ids == [TransactionID(1), TransactionID(2), TransactionID(3)])
            let after = store.statistics
            #expect(after.lmdbCommits - before.lmdbCommits == 1, "\(after)")
            #expect(after.transactions - before.transactions == 3, "\(after)")
            #expect(try ids.map { try store.changes(in: $0).metadata["batch"] } == ["1", "2", "3"])
            #expect(try names(store) == ["G1", "G2", "G3"])
            #expect(try store.verify().ok)
        }
    }

    /// With `stopAtFailure`, the second save's unique clash refuses the third with the same
    /// error: only the first is committed, once, and the store verifies. (The group runs without
    /// nested transactions, so the failure aborts the whole transaction and the first save is
    /// committed again alone.)
    @Test func aFailureRefusesEveryLaterSaveWhenTheGroupStopsAtIt() async throws {
        try await withLibraryStore { store in
            _ = try await store.save(genre("Taken"))
            let sets = [genre("A"), genre("Taken"), genre("C")].map { (changes: $0, metadata: [String: String]()) }
            let results = await store.saveInOrder(sets, author: "test", stopAtFailure: true)
            #expect(try results[0].get() == TransactionID(2))
            expectFailures(results.dropFirst(), "the clash") { error in
                guard case StrataError.validation(let failure) = error else { return false }
                return failure.kind == .uniqueConstraint && failure.reason.contains("Taken")
            }
            #expect(try names(store) == ["Taken", "A"])
            #expect(try store.lastTransactionID == TransactionID(2))
            #expect(try store.verify().ok)
        }
    }

    /// In a group shared with another caller's save (so each save has a nested transaction of
    /// its own), a save over `maxChangesPerSave` still refuses the later saves of its call:
    /// the other caller's save and the saves before it commit, nothing after it does.
    @Test(.timeLimit(.minutes(15))) func aSaveTooLargeInAMixedGroupRefusesTheLaterSavesOfItsCall() async throws {
        var config = StoreConfiguration()
        config.maxChangesPerSave = 1
        config.groupCommitGatherMicroseconds = 0
        try await withLibraryStore(config) { store in
            let writer = try #require(store.writer)
            let held = try await holdWriter(store)
            let other = Task { try await store.save(genre("Other")) }
            try await waitUntil { writer.pendingForTesting == 1 }
            var big = genre("Big 1")
            big.insert(Genre(name: "Big 2"))
            let sets = [genre("A"), big, genre("C")].map { (changes: $0, metadata: [String: String]()) }
            let ordered = Task { await store.saveInOrder(sets, author: "test", stopAtFailure: true) }
            try await waitUntil { writer.pendingForTesting == 4 }
            let before = store.statistics
            try await held.release()
            _ = try await other.value
            let results = await ordered.value
            #expect(store.statistics.lmdbCommits - before.lmdbCommits == 1, "the saves did not share one commit")
            #expect((try? results[0].get()) != nil)
            expectFailures(results.dropFirst(), "saveTooLarge of 2 changes over 1") { error in
                guard case StrataError.saveTooLarge(let changes, let limit) = error else { return false }
                return changes == 2 && limit == 1
            }
            #expect(try names(store) == ["Other", "A"])
            #expect(try store.verify().ok)
        }
    }

    /// Without `stopAtFailure`, the failing save is dropped alone and the one after it commits.
    @Test func aFailureStaysAloneWhenTheGroupDoesNotStop() async throws {
        try await withLibraryStore { store in
            _ = try await store.save(genre("Taken"))
            let sets = [genre("A"), genre("Taken"), genre("C")].map { (changes: $0, metadata: [String: String]()) }
            let results = await store.saveInOrder(sets, author: "test", stopAtFailure: false)
            #expect(try results[0].get() == TransactionID(2))
            if case .success = results[1] { Issue.record("the clashing save was committed") }
            #expect(try results[2].get() == TransactionID(3))
            #expect(try names(store) == ["Taken", "A", "C"])
            #expect(try store.verify().ok)
        }
    }

    /// A closed store refuses the whole group, each save with `closed`.
    @Test func aClosedStoreRefusesEverySave() async throws {
        let store = try Store.temporary(schema: librarySchema())
        store.close()
        let results = await store.saveInOrder([(genre("A"), [:]), (genre("B"), [:])], author: "test",
                                              stopAtFailure: true)
        #expect(results.count == 2)
        expectFailures(results[...], "closed") { error in
            if case StrataError.closed = error { return true }
            return false
        }
    }
}
