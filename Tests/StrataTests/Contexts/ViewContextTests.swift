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
