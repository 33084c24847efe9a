/// The hash Strata's hot dictionary keys (``ObjectID``, a child overlay's unique keys) give `Set`
/// and `Dictionary`: a keyed 64-bit mixer instead of SipHash.
///
/// Why: a child context filled one insert at a time spent a third of its time hashing (`perf` of
/// W7), most of it rehashing every key as its dictionaries grew. SipHash-1-3 costs about 25 ns a
/// key; this mixer a few. A microbenchmark of 10k inserts into a `[ObjectID: Record?]` went from
/// 146 to 86 ns an insert.
///
/// Crafted keys (hash flooding; ids can come from an import file): the hash depends on three
/// secret 64-bit words drawn from the standard library's per-process random hashing seed (so
/// `SWIFT_DETERMINISTIC_HASHING` makes it deterministic, as it does `Hasher`), and on the seed each
/// table passes (its storage address: not secret, but different per table, which keeps copies
/// between tables from going quadratic). The low half is keyed and mixed (murmur3's 64-bit
/// finalizer), combined with the keyed high half, multiplied by a secret odd number and mixed
/// again. The multiply is there because XORing a key in before a fixed mixer leaves its
/// differentials the same under every key (a reviewer found an input difference that collides
/// with probability about 2^-16 whatever the key); after a secret multiply they depend on it.
/// This is a heuristic, not a cryptanalysed MAC: no practical way to flood it is known to us, and
/// an attacker who can time millions of lookups in one process is outside what it defends against.
enum KeyedHash {
    /// Secret words from `Hasher`'s random per-process seed; `multiplier` is odd.
    static let keys: (low: UInt64, high: UInt64, multiplier: UInt64) = {
        func word(_ n: UInt64) -> UInt64 {
            var h = Hasher()
            h.combine(0x5374_7261_7461_4B65 &+ n)   // any constants: the seed makes them secret
            return UInt64(bitPattern: Int64(h.finalize()))
        }
        return (word(1), word(2), word(3) | 1)
    }()

    /// murmur3's fmix64: a bijection on 64 bits in which every input bit flips each output bit with
    /// probability about one half (on average over inputs).
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
        let k = keys
        let inner = mix(low ^ k.low ^ UInt64(bitPattern: Int64(seed)))
        return Int(truncatingIfNeeded: mix((inner ^ high ^ k.high) &* k.multiplier))
    }
}
