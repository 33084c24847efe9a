import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The change stream (`Store.changes()`) after `cancel()`.
@Suite struct ChangeStreamTests {
    /// After `cancel()`, events already buffered are still delivered, later ones are not, and
    /// the sequence then ends.
    @Test(.timeLimit(.minutes(15))) func cancelledChangeStreamDeliversWhatWasBufferedThenEnds() async throws {
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

    /// A stream is iterated by one task at a time: a second task waiting on it at the same time
    /// ends its iteration at once, and the first one gets the next event (the second waiter
    /// replaced the first, which then waited for ever, even when cancelled).
    @Test(.timeLimit(.minutes(15))) func aSecondTaskIteratingTheSameStreamEndsAtOnce() async throws {
        try await withLibraryStore { store in
            let stream = store.changes()
            defer { stream.cancel() }
            let first = Task { () -> ChangeEvent? in
                var it = stream.makeAsyncIterator()
                return await it.next()
            }
            while !stream.subscriber.isWaitingForTesting { try await Task.sleep(for: .milliseconds(1)) }
            var it = stream.makeAsyncIterator()
            #expect(await it.next() == nil, "the second waiter ends")
            let tx = try await store.save { $0.insert(Genre(name: "a")) }
            guard case .committed(let committed)? = await first.value else {
                Issue.record("the first waiter got no commit")
                return
            }
            #expect(committed.id == tx)
        }
    }

    /// A cancelled stream still held by its owner no longer counts as a subscriber: the store
    /// builds no summaries and reads no other process's commits for it.
    @Test func aCancelledStreamNoLongerCounts() async throws {
        try await withLibraryStore { store in
            #expect(!store.hub.hasSubscribers)
            let stream = store.changes()
            #expect(store.hub.hasSubscribers)
            stream.cancel()
            #expect(!store.hub.hasSubscribers)
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            withExtendedLifetime(stream) {}
        }
    }

    /// A subscriber that comes when every earlier one is gone starts at the log's head, as the
    /// first one does: another process's commits made meanwhile, not yet seen by the watch
    /// (whose look here is a minute away), are not published to it.
    @Test(.timeLimit(.minutes(15))) func aLaterSubscriberDoesNotGetCommitsFromBeforeIt() async throws {
        var config = StoreConfiguration()
        config.otherProcessPollMilliseconds = 60_000
        let dir = temporaryDirectory("later-subscriber")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("store")
        let store = try Store.open(at: path, schema: librarySchema(), configuration: config)
        defer { store.close() }
        do {
            let early = store.changes()
            early.cancel()
        }
        let input = dir.appendingPathComponent("g.ndjson")
        try Data(#"{"entity": "Genre", "name": "theirs"}"#.utf8).write(to: input)
        let imported = try await storectl("import", path.path, input.path, "--quiet")
        #expect(imported.status == 0, "\(imported.stderr)")
        let events = Collector(store.changes())
        defer { events.cancel() }
        let mine = try await store.save(author: "here") { $0.insert(Genre(name: "mine")) }
        let seen = try await events.wait(for: 1)
        guard case .committed(let tx)? = seen.first else {
            Issue.record("\(seen)")
            return
        }
        #expect(tx.id == mine && tx.author == "here", "\(seen)")
    }
}
