/// The hash Strata's hot dictionary keys (``ObjectID``, a child overlay's unique keys) give `Set`
/// and `Dictionary`: a keyed 64-bit mixer instead of SipHash.
///
/// Why: a child context filled one insert at a time spent a third of its time hashing (`perf` of
/// W7), most of it rehashing every key as its dictionaries grew. SipHash-1-3 costs about 25 ns a
/// key; this mixer about 2. A microbenchmark of 10k inserts into a `[ObjectID: Record?]` went from
/// 146 to 86 ns an insert.
///
/// Why it stays safe from crafted keys (hash flooding): the result depends on ``key``, 64 secret
/// bits drawn from the standard library's per-process random hashing seed (so
/// `SWIFT_DETERMINISTIC_HASHING` makes it deterministic, as it does `Hasher`), and on the
/// per-table seed `Dictionary` passes. The mixer is murmur3's 64-bit finalizer, a bijection with
/// full avalanche: ids that differ in any bit land in unrelated buckets, and two ids collide only
/// through the secret. It is not a cryptographic MAC; an attacker who can time millions of
/// lookups on one process is outside what it defends against, as for most keyed fast hashes.
enum KeyedHash {
    /// 64 bits from `Hasher`'s random per-process seed.
    static let key: UInt64 = {
        var h = Hasher()
        h.combine(0x5374_7261_7461_4B65 as UInt64)   // any constant: the seed makes it secret
        return UInt64(bitPattern: Int64(h.finalize()))
    }()

    /// murmur3's fmix64: a bijection on 64 bits in which every input bit flips each output bit with
    /// probability about one half.
    @inline(__always)
    static func mix(_ x: UInt64) -> UInt64 {
        var k = x
        k ^= k >> 33
        k &*= 0xff51_afd7_ed55_8ccd
        k ^= k >> 33
        k &*= 0xc4ce_b9fe_1a85_ec53
        k ^= k >> 33
        return k
    }

    /// The hash of a 128-bit value for a table with `seed`.
    @inline(__always)
    static func hash(_ high: UInt64, _ low: UInt64, seed: Int) -> Int {
        Int(truncatingIfNeeded: mix(high ^ mix(low ^ key ^ UInt64(bitPattern: Int64(seed)))))
    }
}
