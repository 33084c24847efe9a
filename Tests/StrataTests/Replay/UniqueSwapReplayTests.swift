import Foundation
import LibraryModel
import StrataTestSupport
import Testing
@testable import Strata

/// A child context's commit is judged on its result: two objects may exchange unique values in
/// it. Its log entry then holds "A takes B's value" before "B takes A's": every replay of the log
/// (the rebuild of `verify`, compaction's catch-up, a migration, a replica applying the cluster's
/// entries) applies it as the save was judged, unique clashes put off to the entry's end.
@Suite struct UniqueSwapReplayTests {
    @Test func aRebuildFromTheLogAppliesAnEntryInWhichTwoObjectsExchangeUniqueValues() async throws {
        try await withLibraryStore { store in
            let (a, b, tx) = try await exchangeGenreNames(store)
            #expect(try store.mainContext.object(Genre.self, id: a)?.name == "Blues")
            #expect(try store.mainContext.object(Genre.self, id: b)?.name == "Jazz")
            // The entry holds the exchange itself (not the free value in between).
            let entry = try #require(try store.transactions(from: tx).first)
            #expect(entry.changes.count == 2)
            let report = try store.verify(rebuild: true)
            #expect(report.ok, "\(report)")
        }
    }

    @Test func aStoreWithAnExchangeOfUniqueValuesCompactsAndReadsAsOfBeforeIt() async throws {
        try await withLibraryStore { store in
            let (a, b, tx) = try await exchangeGenreNames(store)
            let before = try store.snapshot(asOf: TransactionID(tx.rawValue - 1))
            #expect(try before.object(Genre.self, id: a)?.name == "Jazz")
            #expect(try before.object(Genre.self, id: b)?.name == "Blues")
            before.close()
            _ = try await store.compact(horizon: .zero)
            #expect(try store.verify(rebuild: true).ok)
            #expect(try store.mainContext.object(Genre.self, id: a)?.name == "Blues")
        }
    }
}
