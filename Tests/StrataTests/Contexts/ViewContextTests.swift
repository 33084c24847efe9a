import Foundation
import LibraryModel
import Testing
@testable import Strata

/// View contexts with `autoRefresh: true`, a pinned context's `close()`, a snapshot released
/// without `close()`, live queries on a pinned context (evaluated at `refresh()`), through a
/// relationship's destination, on a nested child (an ancestor's pending changes) and on an
/// auto-refreshing view context, and a change stream's `cancel()`.
@Suite struct ViewContextTests {
    /// Collects what an async sequence delivers, in a task, so a test can wait with a deadline.
    final class Collector<Element: Sendable>: Sendable {
        let items = Locked<[Element]>([])
        let finished = Locked(false)
        let task: Task<Void, Never>

        init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
            let items = self.items, finished = self.finished
            task = Task {
                do {
                    for try await e in sequence { items.withLock { $0.append(e) } }
                } catch {}
                finished.withLock { $0 = true }
            }
        }

        var all: [Element] { items.withLock { $0 } }

        /// Waits until `count` items arrived (or the deadline passed) and returns what arrived.
        func wait(for count: Int, seconds: Double = 10) async throws -> [Element] {
            let deadline = ContinuousClock.now + .seconds(seconds)
            while all.count < count && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
            return all
        }

        func cancel() { task.cancel() }
    }

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

    @Test(.timeLimit(.minutes(1))) func pinnedContextLiveQueryIsEvaluatedAtRefresh() async throws {
        try await withLibraryStore { store in
            let view = try store.newViewContext(label: "pinned")
            let live = Collector(view.observe(FetchRequest<Genre>(sortedBy: [Genre.name.ascending])).map(\.objects))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1).map { $0.map(\.name) } == [[]])
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            try view.refresh()
            #expect(try await live.wait(for: 2).map { $0.map(\.name) } == [[], ["a"]])
        }
    }

    /// A filter through a relationship also watches the destination entity: a commit that changes
    /// only albums re-evaluates a query on tracks.
    @Test(.timeLimit(.minutes(1))) func liveQueryFollowsTheEntitiesItsFilterReaches() async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "A", year: 1985)
            let track = makeTrack(title: "t", duration: 1)
            _ = try await store.save { c in
                c.insert(album); c.insert(track)
                c.set(Track.album, of: track.id, to: album.id)
            }
            let live = Collector(try store.mainContext.observe(FetchRequest<Track>(where: Track.album.matches(Album.year >= 1990))).map(\.objects))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1).map { $0.map(\.id) } == [[]])
            _ = try await store.save { $0.set(Album.year, of: album.id, to: 1995) }
            #expect(try await live.wait(for: 2).map { $0.map(\.id) } == [[], [track.id]])
        }
    }

    /// A view context with `autoRefresh: true` follows commits like the main context.
    @Test(.timeLimit(.minutes(1))) func autoRefreshingViewContextLiveQueryFollowsCommits() async throws {
        try await withLibraryStore { store in
            let view = try store.newViewContext(label: "following", autoRefresh: true)
            let live = Collector(view.observe(Query(entity: "Genre")).map(\.records.count))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1) == [0])
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            #expect(try await live.wait(for: 2) == [0, 1])
        }
    }

    /// A nested child's live query follows its ancestors' pending changes.
    @Test(.timeLimit(.minutes(1))) func nestedChildLiveQueryFollowsAnAncestorsPendingChanges() async throws {
        try await withLibraryStore { store in
            let parent = try store.mainContext.newChild(label: "parent")
            let child = parent.newChild(label: "child")
            let live = Collector(child.observe(FetchRequest<Genre>(sortedBy: [Genre.name.ascending])).map { $0.objects.map(\.name) })
            defer { live.cancel() }
            #expect(try await live.wait(for: 1) == [[]])
            try parent.insert(Genre(name: "from the parent"))
            #expect(try await live.wait(for: 2) == [[], ["from the parent"]])
            parent.discard()
            #expect(try await live.wait(for: 3) == [[], ["from the parent"], []])
        }
    }

    /// After `cancel()`, events already buffered are still delivered, later ones are not, and
    /// the sequence then ends.
    @Test(.timeLimit(.minutes(1))) func cancelledChangeStreamDeliversWhatWasBufferedThenEnds() async throws {
        try await withLibraryStore { store in
            let stream = store.changes()
            // A second subscriber, registered later, is published to after the first: once it
            // has an event, the first one has it buffered.
            let witness = Collector(store.changes())
            defer { witness.cancel() }
            let tx1 = try await store.save { $0.insert(Genre(name: "a")) }
            let tx2 = try await store.save { $0.insert(Genre(name: "b")) }
            #expect(try await witness.wait(for: 2).count == 2)
            stream.cancel()
            _ = try await store.save { $0.insert(Genre(name: "c")) }
            #expect(try await witness.wait(for: 3).count == 3)
            var ids: [TransactionID] = []
            var ended = false
            var iterator = stream.makeAsyncIterator()
            while true {
                guard let event = await iterator.next() else {
                    ended = true
                    break
                }
                guard case .committed(let tx) = event else {
                    Issue.record("unexpected \(event)")
                    break
                }
                ids.append(tx.id)
            }
            #expect(ids == [tx1, tx2])
            #expect(ended)
        }
    }
}
