import Foundation
import LibraryModel
import Strata
import StrataTestSupport
import Testing

/// The checker of recorded histories finds each kind of violation it is there for (a checker
/// that cannot fail would prove nothing).
@Suite struct ClusterHistoryTests {
    func history(_ lines: [String]) throws -> ClusterHistory {
        let file = temporaryDirectory("strata-history").appendingPathComponent("h")
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
        return try ClusterHistory(files: [file])
    }

    @Test func theCheckerFindsEachKindOfViolation() async throws {
        try await withLibraryStore { store in
            // Transactions 1…4 insert p-0, p-1, p-2 (twice: a duplicate) and a phantom.
            for title in ["p-0", "p-1", "p-2", "p-2", "ghost"] {
                _ = try await store.save { $0.insert(newTrack(title)) }
            }
            let clean = try history(["call p 0 10", "ok p 0 1 20", "call p 1 30", "ok p 1 2 40"])
            #expect(try clean.problems(in: store, others: ["p-2", "ghost"]).count == 1, "p-2 is there twice")

            let problems = try history([
                "call p 0 10", "ok p 0 2 20",              // acknowledged with another transaction id
                "call p 1 30", "fail p 1 unavailable 40",  // failed, yet present
                "call p 2 50",                             // unknown, present twice
            ]).problems(in: store)
            #expect(problems.contains { $0.hasPrefix("p-0: acknowledged as transaction 2, inserted by 1") })
            #expect(problems.contains { $0.hasPrefix("p-1: failed (unavailable)") })
            #expect(problems.contains { $0.hasPrefix("p-2: outcome unknown, found 2 times") })
            #expect(problems.contains { $0.hasPrefix("ghost: in the store 1 time(s), never saved") })

            // p-1 was called after p-0's acknowledgement, yet has the smaller id.
            let reordered = try history(["call p 1 5", "call q 0 10", "ok q 0 2 20", "call p 0 30", "ok p 0 1 40",
                                         "ok p 1 2 50"])
            #expect(try reordered.problems(in: store, others: ["p-2", "ghost"]).contains {
                $0.contains("was called after") && $0.hasPrefix("p-0")
            })
        }
    }
}
