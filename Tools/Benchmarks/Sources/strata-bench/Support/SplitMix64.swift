/// A small seeded generator (SplitMix64) so every engine sees the same records and the same
/// random read order, run after run.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return Self.mix(state)
    }

    /// The SplitMix64 finalizer: a good 64-bit hash of `x`.
    static func mix(_ x: UInt64) -> UInt64 {
        var z = x
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `count` indexes drawn uniformly from `0..<bound`.
    static func indexes(count: Int, below bound: Int, seed: UInt64) -> [Int] {
        precondition(bound > 0, "no records to draw from")
        var g = SplitMix64(seed: seed)
        return (0..<count).map { _ in Int(g.next() % UInt64(bound)) }
    }
}
