/// FNV-1a, 64 bits: a hash of bytes that is the same on every machine, in every run (never
/// Swift's seeded `Hasher`). Its low bits mix poorly on their own; a caller that needs them
/// mixed finalizes the value itself.
package struct FNV1a: Sendable {
    package static let offsetBasis: UInt64 = 0xcbf2_9ce4_8422_2325
    package static let prime: UInt64 = 0x0000_0100_0000_01b3

    /// The hash of the bytes added so far.
    package private(set) var value = FNV1a.offsetBasis

    package init() {}

    package mutating func add(_ byte: UInt8) { value = (value ^ UInt64(byte)) &* Self.prime }

    package mutating func add(_ bytes: UnsafeRawBufferPointer) {
        var v = value
        for b in bytes { v = (v ^ UInt64(b)) &* Self.prime }
        value = v
    }

    /// The hash of `bytes` alone.
    package static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h = FNV1a()
        h.add(UnsafeRawBufferPointer(bytes))
        return h.value
    }
}
