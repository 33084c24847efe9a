import Foundation
import Testing
@testable import Strata

/// ``ObjectID`` and ``ByteKey`` give `Dictionary` and `Set` a ``KeyedHash`` instead of SipHash.
/// These tests check what a hash owes its tables: equal keys hash equally, and keys that differ
/// in a few bits spread evenly over the buckets (a weak mixer fails the bucket counts).
@Suite struct KeyedHashTests {
    /// How many of `hashes` fall in each of `buckets` buckets (by the low bits, as `Dictionary`
    /// picks them).
    private func bucketCounts(_ hashes: [Int], buckets: Int) -> [Int] {
        var counts = [Int](repeating: 0, count: buckets)
        for h in hashes { counts[h & (buckets - 1)] += 1 }
        return counts
    }

    @Test func equalIDsHashEquallyForEverySeed() {
        for seed in [0, 1, 12345, -7, Int.max] {
            let a = ObjectID(high: 3 << 48 | 123, low: 456), b = ObjectID(high: 3 << 48 | 123, low: 456)
            #expect(a._rawHashValue(seed: seed) == b._rawHashValue(seed: seed))
        }
        #expect(ObjectID(high: 1, low: 2).hashValue == ObjectID(high: 1, low: 2).hashValue)
        #expect(ByteKey([1, 2, 3]).hashValue == ByteKey([1, 2, 3]).hashValue)
        #expect(ByteKey([1, 2, 3]) != ByteKey([1, 2, 4]))
    }

    /// Ids as Strata makes them differ in the low bits of either half: sequential counters in one
    /// millisecond, or one per millisecond. Each pattern must fill 1,024 buckets evenly: about 98
    /// ids a bucket, so a bucket outside 30...170 (seven standard deviations) means the mixer
    /// kept the pattern.
    @Test func structuredIDsSpreadOverTheBuckets() {
        let n = 100_000
        let patterns: [(String, (Int) -> ObjectID)] = [
            ("sequential low", { ObjectID(high: 3 << 48 | 1_700_000_000_000, low: UInt64($0)) }),
            ("sequential high", { ObjectID(high: 3 << 48 | UInt64($0), low: 42) }),
            ("strided low", { ObjectID(high: 3 << 48, low: UInt64($0) << 20) }),
            ("both", { ObjectID(high: 3 << 48 | UInt64($0), low: UInt64($0)) }),
        ]
        for (name, make) in patterns {
            for seed in [0, 99] {
                let counts = bucketCounts((0..<n).map { make($0)._rawHashValue(seed: seed) }, buckets: 1_024)
                #expect(counts.min()! >= 30 && counts.max()! <= 170, "\(name), seed \(seed): \(counts.min()!)...\(counts.max()!) (key \(KeyedHash.keys))")
            }
        }
        let keys = bucketCounts((0..<n).map { ByteKey([0, 7] + withUnsafeBytes(of: UInt32($0).bigEndian, Array.init))._rawHashValue(seed: 0) },
                                buckets: 1_024)
        #expect(keys.min()! >= 30 && keys.max()! <= 170, "unique keys: \(keys.min()!)...\(keys.max()!)")
    }

    /// `Set`, `Dictionary` and `AnyHashable` must use the keyed hash (`hashValue` is
    /// `_rawHashValue(seed: 0)`); if Swift stopped calling the override this fails.
    @Test func theStandardLibraryUsesTheKeyedHash() {
        let id = ObjectID(high: 3 << 48 | 77, low: 5)
        #expect(id.hashValue == id._rawHashValue(seed: 0))
        #expect(AnyHashable(id).hashValue == id._rawHashValue(seed: 0))
        var sip = Hasher(); id.hash(into: &sip)
        #expect(sip.finalize() != id.hashValue, "still SipHash (key \(KeyedHash.keys))")
        let key = ByteKey([9, 8, 7])
        #expect(key.hashValue == key._rawHashValue(seed: 0))
    }

    /// Two tables (two seeds) put the same ids in unrelated buckets: copying one table into another
    /// in iteration order then stays linear. About 1/1,024 of the ids share a bucket by chance.
    @Test func theTableSeedChangesTheBuckets() {
        let ids = (0..<20_000).map { ObjectID(high: 3 << 48 | 1_700_000_000_000, low: UInt64($0)) }
        let same = ids.filter { ($0._rawHashValue(seed: 12_345) & 1_023) == ($0._rawHashValue(seed: 67_890) & 1_023) }.count
        #expect(same < 60, "\(same) of 20,000 ids in the same bucket under both seeds (key \(KeyedHash.keys))")
    }

    @Test func setsAndDictionariesOfIDsWork() {
        var set = Set<ObjectID>()
        var dictionary: [ObjectID: Int] = [:]
        for i in 0..<50_000 {
            let id = ObjectID(high: 3 << 48 | UInt64(i / 100), low: UInt64(i % 100))
            set.insert(id)
            dictionary[id] = i
        }
        #expect(set.count == 50_000 && dictionary.count == 50_000)
        for i in stride(from: 0, to: 50_000, by: 7) {
            let id = ObjectID(high: 3 << 48 | UInt64(i / 100), low: UInt64(i % 100))
            #expect(set.contains(id) && dictionary[id] == i)
        }
        #expect(!set.contains(ObjectID(high: 3 << 48 | 999, low: 0)))
    }
}
