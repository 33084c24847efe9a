/// Appends big-endian integers, varints and length-prefixed bytes to a growing buffer.
struct ByteWriter {
    var bytes: [UInt8]

    init(capacity: Int = 64) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    mutating func u8(_ v: UInt8) { bytes.append(v) }

    mutating func u16(_ v: UInt16) {
        bytes.append(UInt8(truncatingIfNeeded: v >> 8))
        bytes.append(UInt8(truncatingIfNeeded: v))
    }

    // Fixed-width integers are appended as one block of big-endian bytes (one capacity check
    // instead of one per byte: records and log entries are mostly such integers).
    mutating func u32(_ v: UInt32) {
        withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func u64(_ v: UInt64) {
        withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// LEB128 unsigned varint.
    mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    /// A varint length followed by the bytes.
    mutating func lengthPrefixed<C: Collection>(_ data: C) where C.Element == UInt8 {
        varint(UInt64(data.count))
        bytes.append(contentsOf: data)
    }

    mutating func string(_ s: String) {
        var s = s
        s.withUTF8 { lengthPrefixed($0) }
    }

    mutating func append(_ other: [UInt8]) { bytes.append(contentsOf: other) }
}
