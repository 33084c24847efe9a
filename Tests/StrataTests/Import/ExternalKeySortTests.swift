import Foundation
import StrataLMDB
import Testing
@testable import Strata

/// The external merge sort a bulk import builds its indexes with: every key handed out once, in
/// LMDB's key order, whatever the budget, the merge width and the I/O chunk (so whatever the
/// number of run files and merge passes, and entries split across chunks), with the run files
/// gone afterwards and a damaged run file reported.
@Suite struct ExternalKeySortTests {
    /// Keys from 1 to 40 bytes over a small alphabet (so many share prefixes, and some are
    /// prefixes of others or repeat).
    private func randomKeys(_ count: Int, _ rng: inout SeededGenerator) -> [[UInt8]] {
        (0..<count).map { _ in
            (0..<Int.random(in: 1...40, using: &rng)).map { _ in UInt8.random(in: 0...3, using: &rng) &* 85 }
        }
    }

    private func sorted(_ keys: [[UInt8]]) -> [[UInt8]] { keys.sorted { KeyOrder.compare($0, $1) < 0 } }

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

    /// Against a plain sort of the same keys, over seeds choosing the budget (from dozens of run
    /// files to none), the merge width (2: a merge pass per pair) and the I/O chunk (from one
    /// byte: every length and key split across reads).
    @Test(arguments: Array(UInt64(1)...12))
    func handsOutEveryKeyInKeyOrder(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        let budget = [4_096, 20_000, 1 << 20, 64 << 20].randomElement(using: &rng)!
        let width = [2, 3, 8, 64].randomElement(using: &rng)!
        let chunk = [1, 3, 7, 8, 9, 4_096, nil].randomElement(using: &rng)!
        // Reads of a few bytes are a system call each: fewer keys for them.
        let keys = randomKeys(Int.random(in: 0...((chunk ?? 4_096) < 16 ? 1_500 : 20_000), using: &rng), &rng)
        var sorter = ExternalKeySort(budgetBytes: budget, directory: dir.path, mergeWidth: width, ioChunkBytes: chunk)
        for k in keys { try sorter.addKey { $0.append(contentsOf: k) } }
        let spilled = sorter.spilledRuns
        #expect(try runFiles(in: dir).count == spilled, "seed \(seed)")
        let out = try drained(&sorter, batchBytes: Int.random(in: 1...100_000, using: &rng))
        #expect(out == sorted(keys), """
            seed \(seed): budget \(budget), width \(width), chunk \(chunk.map(String.init) ?? "default"), \
            \(spilled) run files, \(keys.count) keys
            """)
        #expect(try runFiles(in: dir).isEmpty, "seed \(seed): run files left behind")
        #expect(sorter.spilledRuns == 0)
        #expect(sorter.unremovedFiles.isEmpty)
    }

    /// A budget passed many times: dozens of run files, merged in several passes of at most the
    /// merge width, each key once.
    @Test func aSmallBudgetMergesManyRunsInPasses() throws {
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        var rng = SeededGenerator(seed: 99)
        let keys = randomKeys(30_000, &rng)
        var sorter = ExternalKeySort(budgetBytes: 4_096, directory: dir.path, mergeWidth: 4)
        for k in keys { try sorter.addKey { $0.append(contentsOf: k) } }
        #expect(sorter.spilledRuns > 50)
        #expect(try drained(&sorter, batchBytes: 4 << 20) == sorted(keys))
        #expect(try runFiles(in: dir).isEmpty)
    }

    /// Runs its caller writes before the budget is reached (``ExternalKeySort/writeRun()``, as a
    /// bulk import bounding its index and unique keys together does), at moments of its choosing
    /// and also with nothing in memory, are merged as spilled ones are: each key once, in order.
    @Test(arguments: Array(UInt64(1)...6))
    func runsWrittenByTheCallerAreMergedToo(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        let keys = randomKeys(Int.random(in: 1_000...8_000, using: &rng), &rng)
        var sorter = ExternalKeySort(budgetBytes: 64 << 20, directory: dir.path, mergeWidth: [2, 64].randomElement(using: &rng)!)
        var written = 0
        for k in keys {
            try sorter.addKey { $0.append(contentsOf: k) }
            if Int.random(in: 0..<400, using: &rng) == 0 {
                #expect(sorter.memoryBytes > 0)
                try sorter.writeRun()
                written += 1
                #expect(sorter.memoryBytes == 0)
                // With nothing in memory: no empty run file.
                try sorter.writeRun()
            }
        }
        #expect(written > 0, "seed \(seed)")
        #expect(try runFiles(in: dir).count == written, "seed \(seed)")
        #expect(try drained(&sorter, batchBytes: 1 << 20) == sorted(keys), "seed \(seed): \(written) runs written")
        #expect(try runFiles(in: dir).isEmpty)
    }

    /// Run files are created with the store's file mode.
    @Test func runFilesTakeTheStoresFileMode() throws {
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        var rng = SeededGenerator(seed: 3)
        for shared in [false, true] {
            var sorter = ExternalKeySort(budgetBytes: 4_096, directory: dir.path,
                                         permissions: StorePermissions(sharedWithGroup: shared))
            for k in randomKeys(2_000, &rng) { try sorter.addKey { $0.append(contentsOf: k) } }
            let file = dir.appendingPathComponent(try #require(try runFiles(in: dir).first)).path
            let mode = try #require(try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int)
            #expect(mode == (shared ? 0o660 : 0o600))
            sorter.discard()
        }
    }

    /// An error from the consumer ends the drain with the run files removed.
    @Test func aFailingConsumerLeavesNoRunFiles() throws {
        struct Stop: Error {}
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        var rng = SeededGenerator(seed: 5)
        var sorter = ExternalKeySort(budgetBytes: 4_096, directory: dir.path, mergeWidth: 3)
        for k in randomKeys(5_000, &rng) { try sorter.addKey { $0.append(contentsOf: k) } }
        #expect(!(try runFiles(in: dir)).isEmpty)
        #expect(throws: Stop.self) { try sorter.drain(batchBytes: 1_000) { _ in throw Stop() } }
        #expect(try runFiles(in: dir).isEmpty)
    }

    /// A run file cut short under the sort is reported, wherever it was cut: inside an entry, or
    /// exactly between two (which the file's own bytes cannot show; its entry count does).
    @Test(arguments: [false, true])
    func aTruncatedRunFileIsReported(atAnEntryBoundary: Bool) throws {
        let dir = temporaryDirectory("external-sort")
        defer { try? FileManager.default.removeItem(at: dir) }
        var rng = SeededGenerator(seed: 6)
        var sorter = ExternalKeySort(budgetBytes: 4_096, directory: dir.path)
        for k in randomKeys(5_000, &rng) { try sorter.addKey { $0.append(contentsOf: k) } }
        let file = dir.appendingPathComponent(try #require(try runFiles(in: dir).sorted().first))
        var bytes = try Data(contentsOf: file)
        if atAnEntryBoundary {
            // Walk the entries to the start of the last one.
            var offset = 0, lastStart = 0
            while offset < bytes.count {
                lastStart = offset
                let length = { (at: Int) in bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) } }
                offset += 8 + length(offset) + length(offset + 4)
            }
            bytes = bytes.prefix(lastStart)
        } else {
            bytes = bytes.dropLast(3)
        }
        try bytes.write(to: file)
        #expect {
            _ = try drained(&sorter, batchBytes: 1 << 20)
        } throws: { error in
            guard case StrataError.corruptRecord(_, let reason) = error else { return false }
            return reason.contains("whole entries of the")
        }
        #expect(try runFiles(in: dir).isEmpty)
    }
}
