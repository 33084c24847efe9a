/// An order-independent digest of a set of key-value entries (a multiset hash): two lanes of
/// 64-bit hashes of each entry, summed with wrapping arithmetic, plus the number of entries.
///
/// ``Store/verify(rebuild:progress:)`` digests the entries it derives from the log and the entries it
/// scans from the store, in whatever order each side produces them, and compares the digests:
/// equal sets give equal digests; a changed, missing or extra entry changes both sums (by the
/// difference of two 64-bit hashes per lane; the lanes differ only in seed and multiplier, so
/// count an accidental difference as going unseen with a probability of about 2⁻⁶⁴, or better).
/// The hash is not cryptographic: it guards against corruption
/// and bugs, not against someone crafting entries to collide, which anyone able to write the
/// store could do more simply by writing a consistent log.
///
/// - Complexity: ``add(key:value:)`` is O(key + value bytes); combining and comparing are O(1).
struct EntryDigest: Equatable {
    private(set) var count = 0
    private var sumA: UInt64 = 0
    private var sumB: UInt64 = 0

    /// Adds one entry. The key's length is hashed first, so no two different (key, value) pairs
    /// hash the bytes of their concatenation alike.
    @inline(__always)
    mutating func add(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        var a = EntryHash(seed: 0x243F_6A88_85A3_08D3, multiplier: 0x9E37_79B9_7F4A_7C15)
        var b = EntryHash(seed: 0x1319_8A2E_0370_7344, multiplier: 0xC2B2_AE3D_27D4_EB4F)
        a.mix(UInt64(key.count))
        b.mix(UInt64(key.count))
        a.mix(key)
        b.mix(key)
        a.mix(value)
        b.mix(value)
        count += 1
        sumA &+= a.finish(length: key.count + value.count)
        sumB &+= b.finish(length: key.count + value.count)
    }

    mutating func add(key: [UInt8], value: [UInt8]) {
        key.withUnsafeBytes { k in value.withUnsafeBytes { v in add(key: k, value: v) } }
    }

    mutating func add(key: [UInt8], value: UnsafeRawBufferPointer) {
        key.withUnsafeBytes { add(key: $0, value: value) }
    }

    /// Adds every entry of `other`.
    mutating func formUnion(_ other: EntryDigest) {
        count += other.count
        sumA &+= other.sumA
        sumB &+= other.sumB
    }
}

/// One lane of ``EntryDigest``: eight bytes at a time, multiply and rotate, then the murmur3
/// finalizer so every input bit reaches every output bit.
private struct EntryHash {
    private var h: UInt64
    private let multiplier: UInt64

    init(seed: UInt64, multiplier: UInt64) {
        h = seed
        self.multiplier = multiplier
    }

    @inline(__always)
    mutating func mix(_ word: UInt64) {
        h ^= word &* multiplier
        h = (h << 29 | h >> 35) &* 0xFF51_AFD7_ED55_8CCD &+ 0x5851_F42D_4C95_7F2D
    }

    @inline(__always)
    mutating func mix(_ bytes: UnsafeRawBufferPointer) {
        // An empty buffer may or may not have an address: it hashes as the empty tail either way.
        let n = bytes.count
        guard n > 0, let base = bytes.baseAddress else { mix(1); return }
        var i = 0
        while i + 8 <= n {
            mix(UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self)))
            i += 8
        }
        // The tail, with a marker bit after it so trailing zero bytes still count.
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while i < n {
            tail |= UInt64(base.load(fromByteOffset: i, as: UInt8.self)) << shift
            shift += 8
            i += 1
        }
        mix(tail | (1 << shift))
    }

    @inline(__always)
    func finish(length: Int) -> UInt64 {
        var x = h ^ UInt64(length)
        x ^= x >> 33
        x = x &* 0xFF51_AFD7_ED55_8CCD
        x ^= x >> 33
        x = x &* 0xC4CE_B9FE_1A85_EC53
        x ^= x >> 33
        return x
    }
}
