import Foundation
import StrataLMDB
import Testing
@testable import Strata

/// The external merge sort a bulk import builds its indexes with: every key handed out once, in
/// LMDB's key order, whatever the budget (so whatever the number of run files), and the run files
/// gone afterwards.
@Suite struct ExternalKeySortTests {
    /// Keys from 1 to 40 bytes over a small alphabet (so many share prefixes, and some are
    /// prefixes of others or repeat).
    private func randomKeys(_ count: Int, _ rng: inout SeededGenerator) -> [[UInt8]] {
        (0..<count).map { _ in
            (0..<Int.random(in: 1...40, using: &rng)).map { _ in UInt8.random(in: 0...3, using: &rng) &* 85 }
        }
    }

    private func drained(_ sorter: inout ExternalKeySort, batchBytes: Int) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        try sorter.drain(batchBytes: batchBytes) { batch in
            for i in batch.entries.indices { try batch.withEntry(i) { k, _ in out.append(Array(k)) } }
        }
        return out
    }

    private func runFiles(in dir: URL) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("sort-run-") }
    }

    /// Against a plain sort of the same keys, over seeds and budgets from one run to dozens.
    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6, 7, 8])
    func handsOutEveryKeyInKeyOrder(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        let keys = randomKeys(Int.random(in: 0...20_000, using: &rng), &rng)
        let budget = [4_096, 20_000, 1 << 20, 64 << 20].randomElement(using: &rng)!
        var sorter = ExternalKeySort(budgetBytes: budget, directory: dir)
        for k in keys { try sorter.addKey { $0.append(contentsOf: k) } }
        let spilled = sorter.spilledRuns
        #expect(try runFiles(in: dir).count == spilled, "seed \(seed)")
        let out = try drained(&sorter, batchBytes: Int.random(in: 1...100_000, using: &rng))
        let expected = keys.sorted { KeyOrder.compare($0, $1) < 0 }
        #expect(out == expected, "seed \(seed): budget \(budget), \(spilled) run files, \(keys.count) keys")
        #expect(try runFiles(in: dir).isEmpty, "seed \(seed): run files left behind")
        #expect(sorter.spilledRuns == 0)
    }

    /// A budget that is passed many times: dozens of run files merged, each key once.
    @Test func aSmallBudgetMergesManyRuns() throws {
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        var rng = SeededGenerator(seed: 99)
        let keys = randomKeys(30_000, &rng)
        var sorter = ExternalKeySort(budgetBytes: 4_096, directory: dir)
        for k in keys { try sorter.addKey { $0.append(contentsOf: k) } }
        #expect(sorter.spilledRuns > 50)
        #expect(try drained(&sorter, batchBytes: 4 << 20) == keys.sorted { KeyOrder.compare($0, $1) < 0 })
    }

    /// An error from the consumer ends the drain with the run files removed.
    @Test func aFailingConsumerLeavesNoRunFiles() throws {
        struct Stop: Error {}
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        var rng = SeededGenerator(seed: 5)
        var sorter = ExternalKeySort(budgetBytes: 4_096, directory: dir)
        for k in randomKeys(5_000, &rng) { try sorter.addKey { $0.append(contentsOf: k) } }
        #expect(!(try runFiles(in: dir)).isEmpty)
        #expect(throws: Stop.self) { try sorter.drain(batchBytes: 1_000) { _ in throw Stop() } }
        #expect(try runFiles(in: dir).isEmpty)
    }

    /// A run file cut short under the sort is reported, not read past its end.
    @Test func aTruncatedRunFileIsReported() throws {
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        var rng = SeededGenerator(seed: 6)
        var sorter = ExternalKeySort(budgetBytes: 4_096, directory: dir)
        for k in randomKeys(5_000, &rng) { try sorter.addKey { $0.append(contentsOf: k) } }
        let file = dir.appendingPathComponent(try #require(try runFiles(in: dir).sorted().first))
        let handle = try FileHandle(forWritingTo: file)
        let size = try handle.seekToEnd()
        try handle.truncate(atOffset: size - 3)
        try handle.close()
        #expect {
            _ = try drained(&sorter, batchBytes: 1 << 20)
        } throws: { error in
            guard case StrataError.corruptRecord(_, let reason) = error else { return false }
            return reason.contains("ends inside an entry")
        }
        #expect(try runFiles(in: dir).isEmpty)
    }
}
