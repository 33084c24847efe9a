import Foundation
import LibraryModel
import Testing
@testable import Strata

/// View contexts: with `autoRefresh: true` they read the latest state; a pinned one reads its
/// snapshot until `refresh()`, pins the latest again after `close()`, and refreshes at the
/// snapshot limit.
@Suite struct ViewContextTests {

    @Test func autoRefreshingViewContextReadsTheLatestState() async throws {
        try await withLibraryStore { store in
            let view = try store.newViewContext(label: "following", autoRefresh: true)
            #expect(view.autoRefresh)
            #expect(try view.count(Genre.self) == 0)
            let tx = try await store.save { $0.insert(Genre(name: "a")) }
            #expect(try view.count(Genre.self) == 1)
            #expect(try view.transactionID == tx)
            try view.refresh()   // nothing to do
            #expect(try store.openSnapshots().isEmpty, "an auto-refreshing context pinned a snapshot")
        }
    }

    @Test func closingAPinnedContextMakesItsNextReadPinTheLatest() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            let view = try store.newViewContext(label: "pinned")
            let tx = try await store.save { $0.insert(Genre(name: "b")) }
            #expect(try view.count(Genre.self) == 1)
            view.close()
            #expect(try store.openSnapshots().isEmpty)
            #expect(try view.count(Genre.self) == 2)
            #expect(try view.transactionID == tx)
            _ = try await store.save { $0.insert(Genre(name: "c")) }
            #expect(try view.count(Genre.self) == 2, "re-pinned, so pinned again")
        }
    }

    /// A pinned context's live queries follow what its reads show after `close()`, whose next
    /// read pins the latest state. They stayed on the released snapshot's results, unlike a fresh
    /// fetch, until some later refresh. (A `refresh()` that releases its snapshot and then fails
    /// to pin another tells them too.)
    @Test func aPinnedContextsLiveQueryFollowsItsClose() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            let view = try store.newViewContext(label: "pinned")
            let live = Collector(view.observe(Query(entity: "Genre")))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1).last?.records.count == 1)
            _ = try await store.save { $0.insert(Genre(name: "b")) }
            try await Task.sleep(for: .milliseconds(50))
            #expect(live.all.count == 1, "a pinned context's live query does not follow commits")
            view.close()
            #expect(try await live.wait(for: 2).last?.records.count == 2, "after close()")
            #expect(try view.count(Genre.self) == 2)
        }
    }

    @Test func pinnedContextRefreshesAtTheSnapshotLimit() async throws {
        var config = StoreConfiguration()
        config.maxOpenSnapshots = 1
        try await withLibraryStore(config) { store in
            let view = try store.newViewContext(label: "only")
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            try view.refresh()
            #expect(try view.count(Genre.self) == 1)
        }
    }
}
