import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The change stream (`Store.changes()`) after `cancel()`.
@Suite struct ChangeStreamTests {
    /// After `cancel()`, events already buffered are still delivered, later ones are not, and
    /// the sequence then ends.
    @Test(.timeLimit(.minutes(5))) func cancelledChangeStreamDeliversWhatWasBufferedThenEnds() async throws {
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
