import Foundation

/// Every truncation of `body`, every single-bit change (8 masks per byte) and every byte set to
/// 0xff: inputs for checking that a decoder returns a value or refuses as corrupt, never traps.
func byteMutations(of body: [UInt8]) -> [[UInt8]] {
    var out = (0..<body.count).map { Array(body[..<$0]) }
    for i in body.indices {
        for mask: UInt8 in [0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80] {
            var m = body
            m[i] ^= mask
            out.append(m)
        }
        var high = body
        high[i] = 0xff
        out.append(high)
    }
    return out
}
