/// Strict base64 (RFC 4648, section 4: the standard alphabet, padded), the text form of a `bytes`
/// value. Only the canonical encoding of some bytes is read: a length that is a multiple of 4, `=`
/// only as the last one or two characters, and the bits the last character carries past the end
/// of the data all zero. Anything else is refused rather than read as other bytes (Foundation's
/// decoder read `====` as one zero byte and `AAAA==` as `AAAA`, so an import stored bytes its
/// input did not hold).
enum Base64 {
    /// The bytes `text` encodes, or nil when it is not canonical base64.
    static func decode(_ text: String) -> [UInt8]? {
        if let r = text.utf8.withContiguousStorageIfAvailable({ decode(UnsafeRawBufferPointer($0)) }) { return r }
        return Array(text.utf8).withUnsafeBytes { decode($0) }
    }

    /// The six bits of an alphabet character, or nil.
    @inline(__always)
    private static func sextet(_ c: UInt8) -> UInt32? {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt32(c - UInt8(ascii: "A"))
        case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt32(c - UInt8(ascii: "a") + 26)
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(c - UInt8(ascii: "0") + 52)
        case UInt8(ascii: "+"): 62
        case UInt8(ascii: "/"): 63
        default: nil
        }
    }

    private static func decode(_ b: UnsafeRawBufferPointer) -> [UInt8]? {
        guard b.count % 4 == 0 else { return nil }
        let pad = UInt8(ascii: "=")
        let padding = b.count == 0 ? 0 : (b[b.count - 1] == pad ? (b[b.count - 2] == pad ? 2 : 1) : 0)
        var out: [UInt8] = []
        out.reserveCapacity(b.count / 4 * 3)
        var i = 0
        while i < b.count {
            let last = i + 4 == b.count
            // Characters of this quantum that carry data: 4, or 2 or 3 before the padding.
            let data = last ? 4 - padding : 4
            var bits: UInt32 = 0
            for k in 0..<4 {
                if k < data {
                    guard let v = sextet(b[i + k]) else { return nil }
                    bits = bits << 6 | v
                } else {
                    bits <<= 6
                }
            }
            out.append(UInt8(truncatingIfNeeded: bits >> 16))
            switch data {
            case 4:
                out.append(UInt8(truncatingIfNeeded: bits >> 8))
                out.append(UInt8(truncatingIfNeeded: bits))
            case 3:
                // Two bytes; the last character's low two bits are past them.
                guard bits & 0xFF == 0 else { return nil }
                out.append(UInt8(truncatingIfNeeded: bits >> 8))
            default:
                // One byte; the second character's low four bits are past it.
                guard bits & 0xFFFF == 0 else { return nil }
            }
            i += 4
        }
        return out
    }
}
