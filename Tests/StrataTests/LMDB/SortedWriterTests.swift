import Foundation
import StrataLMDB
import StrataTestSupport
import Testing
@testable import Strata

/// `LMDBTransaction.withSortedWriter`: puts and deletes through one cursor give exactly what
/// `mdb_put` and `mdb_del` give, whatever the order, the repeats and the page splits. A seeded
/// differential run against a dictionary: batches of puts (new keys and existing ones, values up
/// to 200 bytes, so leaves split) and deletes (of keys there and not there), most batches sorted
/// as a save's index entries are, some shuffled, each applied in one write transaction and the
/// database read back whole after each. A failing seed is printed with the batch.
@Suite struct SortedWriterTests {
    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6, 7, 8])
    func sortedWritesMatchAModel(seed: UInt64) throws {
        let dir = temporaryDirectory("sorted-writer")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let env = try LMDBEnvironment(path: dir.path, options: LMDBOptions(
            mapSizeBytes: 64 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: true, noLock: false))
        defer { env.close() }
        let db = env[.indexes]
        var rng = SeededGenerator(seed: seed)
        var model: [[UInt8]: [UInt8]] = [:]
        for batch in 0..<40 {
            // Keys from a space small enough that puts repeat and deletes find what they delete.
            var ops: [(key: [UInt8], value: [UInt8]?)] = (0..<(1 + Int(rng.next() % 400))).map { _ in
                let n = rng.next() % 3_000
                let key = Array("k\(n)".utf8) + Array(repeating: UInt8(n % 251), count: Int(n % 40))
                let put = rng.next() % 4 != 0
                let value = put ? (0..<Int(rng.next() % 200)).map { _ in UInt8(truncatingIfNeeded: rng.next()) } : nil
                return (key, value)
            }
            let shuffled = batch % 5 == 4
            if !shuffled { ops.sort { Layout.precedes($0.key, $1.key) } }
            var deleted: [Bool] = []
            try env.write { txn in
                try txn.withSortedWriter(db) { writer in
                    for op in ops {
                        try op.key.withUnsafeBytes { k in
                            if let value = op.value {
                                try value.withUnsafeBytes { try writer.put(key: k, value: $0) }
                            } else {
                                deleted.append(try writer.delete(key: k))
                            }
                        }
                    }
                }
            }
            var expectedDeleted: [Bool] = []
            for op in ops {
                if let value = op.value { model[op.key] = value } else { expectedDeleted.append(model.removeValue(forKey: op.key) != nil) }
            }
            #expect(deleted == expectedDeleted, "seed \(seed) batch \(batch): deletes' answers")
            var stored: [[UInt8]: [UInt8]] = [:]
            var order: [[UInt8]] = []
            try env.read { txn in
                try txn.scan(db) { k, v in
                    stored[Array(k)] = Array(v)
                    order.append(Array(k))
                    return true
                }
            }
            #expect(stored == model, "seed \(seed) batch \(batch) (shuffled: \(shuffled)): \(stored.count) entries stored, \(model.count) expected")
            #expect(order == order.sorted(by: Layout.precedes), "seed \(seed) batch \(batch): keys out of order")
            if stored != model { return }
        }
        #expect(model.count > 500, "the run kept few keys: the leaves never split")
    }
}
