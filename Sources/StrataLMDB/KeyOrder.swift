import Glibc

/// LMDB's default key order, which every database here uses: bytes compared with `memcmp`, a
/// shorter key first when one is a prefix of the other.
package enum KeyOrder {
    /// Negative, zero or positive as `a` sorts before, with or after `b`.
    @inlinable
    package static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let n = min(a.count, b.count)
        let c = n == 0 ? 0 : memcmp(a.baseAddress!, b.baseAddress!, n)
        if c != 0 { return Int(c) }
        return a.count < b.count ? -1 : (a.count > b.count ? 1 : 0)
    }

    @inlinable
    package static func compare(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Int {
        b.withUnsafeBytes { compare(a, $0) }
    }

    @inlinable
    package static func compare(_ a: [UInt8], _ b: [UInt8]) -> Int {
        a.withUnsafeBytes { compare($0, b) }
    }
}
