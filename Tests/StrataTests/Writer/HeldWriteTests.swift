import Foundation
import LibraryModel
import Testing
@testable import Strata

/// One write transaction held across steps (``HeldWrite``, what an import in one pass writes
/// through): its saves gather their index entries and write them once, sorted together, before
/// the commit. Nothing may tell that apart from each save writing its own: an entry one step puts
/// and a later one deletes, or deletes and puts again, ends as the last step left it.
@Suite struct HeldWriteTests {
    private func track(_ i: Int, _ title: String) -> Track {
        Track(mbid: UUID(uuidString: "00000000-0000-4000-8000-00000000000\(i)")!, title: title,
              durationSeconds: i, addedAt: Date(timeIntervalSince1970: 0))
    }

    private func retitle(_ id: ObjectID, _ title: String) -> ChangeSet {
        var c = ChangeSet()
        c.set(Track.title, of: id, to: title)
        return c
    }

    private func titles(_ store: Store) throws -> [String: [Int]] {
        var byTitle: [String: [Int]] = [:]
        for title in ["a", "b", "c", "d"] {
            byTitle[title] = try store.mainContext.fetch(Track.self, where: Track.title == title)
                .map(\.durationSeconds).sorted()
        }
        return byTitle
    }

    /// The same steps applied held and committed once, and saved one by one: the same index.
    @Test func indexEntriesChangedByLaterStepsEndAsTheLastStepLeftThem() async throws {
        var answers: [Bool: [String: [Int]]] = [:]
        for held in [true, false] {
            try await withLibraryStore { store in
                let t1 = track(1, "a"), t2 = track(2, "b"), t3 = track(3, "c")
                _ = try await store.save {
                    $0.insert(t1)
                    $0.insert(t2)
                    $0.insert(t3)
                }
                let fourth = track(4, "d")
                var t4 = ChangeSet()
                t4.insert(fourth)
                var gone = ChangeSet()
                gone.delete(t3.id)
                // t1: a → b → a (its entry deleted and put back); t2: b → c (put, then a later
                // step's delete of the same key) → d; t3 deleted after a retitle; t4 inserted
                // and retitled.
                let steps: [ChangeSet] = [retitle(t1.id, "b"), retitle(t2.id, "c"), retitle(t1.id, "a"),
                                          retitle(t3.id, "a"), t4, retitle(t2.id, "d"), gone,
                                          retitle(fourth.id, "c")]
                if held {
                    let writer = try #require(store.writer)
                    let write = try await HeldWrite(writer)
                    for (i, step) in steps.enumerated() {
                        try await write.apply([(step, ["step": "\(i)"])], author: "held")
                    }
                    let ids = try await write.commit()
                    #expect(ids.count == steps.count)
                } else {
                    for step in steps { _ = try await store.save(step) }
                }
                let report = try store.verify()
                #expect(report.ok, "\(report.problems)")
                answers[held] = try titles(store)
            }
        }
        #expect(answers[true] == ["a": [1], "b": [], "c": [4], "d": [2]])
        #expect(answers[true] == answers[false])
    }
}
