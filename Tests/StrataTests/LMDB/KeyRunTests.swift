import Foundation
import StrataTestSupport
import Testing
@testable import Strata

/// A ``KeyRun`` that takes other runs one after another (what a held transaction's saves hand
/// their index entries to) sorts as one run made in that order would: every key once, in key
/// order, with the operation added last. Checked against a plain model (an array of keys and
/// operations in the order added), with seeds that replay.
@Suite struct KeyRunTests {
    /// The model's answer: for each key, in key order (bytes compared as LMDB does), the
    /// operation added last.
    private func lastByKey(_ added: [([UInt8], UInt8)]) -> [([UInt8], UInt8)] {
        var last: [[UInt8]: UInt8] = [:]
        for (key, op) in added { last[key] = op }
        return last.sorted { Layout.compare($0.key, $1.key) < 0 }.map { ($0.key, $0.value) }
    }

    /// What the writer does with a sorted run: every key once, the last of equal keys kept.
    private func written(_ run: inout KeyRun) -> [([UInt8], UInt8)] {
        run.sortIfNeeded()
        var out: [([UInt8], UInt8)] = []
        let count = run.entries.count
        for i in 0..<count where !(i + 1 < count && run.sameKey(i, i + 1)) {
            out.append((run.key(i), run.tag(i)))
        }
        return out
    }

    @Test(arguments: [1, 2, 3, 0xBEEF] as [UInt64])
    func runsTakenOneAfterAnotherSortAsOneRun(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        var held = KeyRun()
        var model: [([UInt8], UInt8)] = []
        // Keys of a few lengths over a small alphabet, so that equal keys, shared 16-byte
        // prefixes, keys shorter than 16 bytes and several 2-byte tags all occur; many runs of
        // a few entries each (a save of a record or two), and some of none.
        for _ in 0..<400 {
            var run = KeyRun()
            for _ in 0..<Int.random(in: 0...6, using: &rng) {
                let tag = UInt8.random(in: 0...2, using: &rng)
                let length = [3, 15, 16, 17, 30][Int.random(in: 0..<5, using: &rng)]
                var key: [UInt8] = [0, tag]
                for _ in 2..<length { key.append(UInt8.random(in: 0...2, using: &rng)) }
                let op = UInt8.random(in: 0...1, using: &rng)
                run.addKey(tag: op) { $0.append(contentsOf: key) }
                model.append((key, op))
            }
            held.append(contentsOf: run)
        }
        #expect(held.entries.count == model.count, "seed \(seed)")
        let got = written(&held)
        let want = lastByKey(model)
        #expect(got.map(\.0) == want.map(\.0), "seed \(seed): keys")
        #expect(got.map(\.1) == want.map(\.1), "seed \(seed): the operation added last")
    }

    /// A run taken while in key order, into an empty run, stays known to be in order; taken
    /// after other entries, it is sorted with them.
    @Test func aRunTakenAfterOthersIsSortedWithThem() {
        var first = KeyRun(), second = KeyRun()
        first.add(key: [0, 1, 9], value: [1], sorted: true)
        second.add(key: [0, 1, 2], value: [0], sorted: true)
        second.add(key: [0, 1, 9], value: [0], sorted: true)
        var held = KeyRun()
        held.append(contentsOf: first)
        held.append(contentsOf: second)
        #expect(written(&held).map(\.0) == [[0, 1, 2], [0, 1, 9]])
        var again = KeyRun()
        again.append(contentsOf: first)
        again.append(contentsOf: second)
        #expect(written(&again).map(\.1) == [0, 0], "the later delete of [0, 1, 9] wins")
    }
}
