import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Snapshots: what holds a reader slot and what frees it.
@Suite struct SnapshotTests {
    @Test func readerCountIsActiveReadersNotAHighWaterMark() async throws {
        try await withLibraryStore { store in
            let snapshots = try (0..<5).map { try store.snapshot(label: "s\($0)") }
            let during = try store.info().readers
            for s in snapshots { s.close() }
            let after = try store.info().readers
            #expect(during >= 6)   // five pinned plus info's own
            #expect(after == 1)
        }
    }

    @Test func aSnapshotReleasedWithoutCloseFreesItsSlot() async throws {
        var config = StoreConfiguration()
        config.maxOpenSnapshots = 1
        try await withLibraryStore(config) { store in
            do {
                let s = try store.snapshot(label: "dropped")
                #expect(try s.count(Query(entity: "Genre")) == 0)
                #expect(try store.openSnapshots().map(\.label) == ["dropped"])
            }
            #expect(store.snapshots.count == 0, "the released snapshot still holds its slot")
            #expect(try store.openSnapshots().isEmpty)
            let again = try store.snapshot(label: "again")
            again.close()
        }
    }
}
