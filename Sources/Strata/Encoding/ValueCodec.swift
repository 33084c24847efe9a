import Foundation

/// The binary form of a ``Value``: a type tag byte then the payload. Used inside log entries and
/// state records. Integers are zig-zag varints; doubles and dates are their IEEE-754 bits.
enum ValueCodec {
    static func encode(_ value: Value, into w: inout ByteWriter) {
        switch value {
        case .null: w.u8(0)
        case .string(let s): w.u8(AttributeType.string.tag); w.string(s)
        case .int(let i): w.u8(AttributeType.int.tag); w.varint(UInt64(bitPattern: (i << 1) ^ (i >> 63)))
        case .double(let d): w.u8(AttributeType.double.tag); w.u64(d.bitPattern)
        case .bool(let b): w.u8(AttributeType.bool.tag); w.u8(b ? 1 : 0)
        case .date(let d): w.u8(AttributeType.date.tag); w.u64(d.timeIntervalSinceReferenceDate.bitPattern)
        case .bytes(let b): w.u8(AttributeType.bytes.tag); w.lengthPrefixed(b)
        case .uuid(let u): w.u8(AttributeType.uuid.tag); withUnsafeBytes(of: u.uuid) { w.bytes.append(contentsOf: $0) }
        }
    }

    static func decode(from r: inout ByteReader) throws -> Value {
        let at = r.offset
        switch try r.u8() {
        case 0: return .null
        case AttributeType.string.tag: return .string(try r.string())
        case AttributeType.int.tag:
            let z = try r.varint()
            return .int(Int64(bitPattern: z >> 1) ^ -Int64(bitPattern: z & 1))
        case AttributeType.double.tag: return .double(Double(bitPattern: try r.u64()))
        case AttributeType.bool.tag:
            let b = try r.u8()
            guard b <= 1 else { throw DecodingError(offset: at, reason: "bool byte \(b)") }
            return .bool(b == 1)
        case AttributeType.date.tag: return .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try r.u64())))
        case AttributeType.bytes.tag: return .bytes(try r.bytes())
        case AttributeType.uuid.tag:
            let raw = try r.fixed(16)
            var t: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &t) { $0.copyMemory(from: raw) }
            return .uuid(UUID(uuid: t))
        case let tag: throw DecodingError(offset: at, reason: "unknown value type tag \(tag)")
        }
    }

    /// Moves past one value, with exactly the checks of ``decode(from:)`` (it throws for the same
    /// bytes), without making the value.
    static func check(from r: inout ByteReader) throws {
        let at = r.offset
        switch try r.u8() {
        case 0: return
        case AttributeType.string.tag: try r.checkString()
        case AttributeType.int.tag: _ = try r.varint()
        case AttributeType.double.tag, AttributeType.date.tag: _ = try r.u64()
        case AttributeType.bool.tag:
            let b = try r.u8()
            guard b <= 1 else { throw DecodingError(offset: at, reason: "bool byte \(b)") }
        case AttributeType.bytes.tag: _ = try r.lengthPrefixed()
        case AttributeType.uuid.tag: _ = try r.fixed(16)
        case let tag: throw DecodingError(offset: at, reason: "unknown value type tag \(tag)")
        }
    }
}

/// Order-preserving byte encoding of values for index keys: comparing encodings byte by byte
/// gives the order of ``Value/compare(_:_:)``. Strings and bytes are escaped (0x00 → 0x00 0xFF)
/// and terminated with 0x00 0x01, so no encoding is a prefix of another.
enum SortableEncoding {
    /// Encodes `value`; strings and bytes longer than `truncateBytes` are cut first (monotone, so
    /// range scans stay correct; candidates are re-checked against the record).
    static func encode(_ value: Value, into out: inout [UInt8], truncateBytes: Int = Int.max) {
        switch value {
        case .null: out.append(0x00)
        case .string(let s):
            out.append(0x01)
            var s = s  // withUTF8 makes a bridged string native first; native ones are used as they are
            s.withUTF8 { escaped(UnsafeBufferPointer(rebasing: $0.prefix(truncateBytes)), into: &out) }
        case .bytes(let b):
            out.append(0x01)
            b.withUnsafeBufferPointer { escaped(UnsafeBufferPointer(rebasing: $0.prefix(truncateBytes)), into: &out) }
        case .int(let i): out.append(0x01); u64(UInt64(bitPattern: i) ^ (1 << 63), into: &out)
        case .double(let d): out.append(0x01); u64(orderedBits(d), into: &out)
        case .date(let d): out.append(0x01); u64(orderedBits(d.timeIntervalSinceReferenceDate), into: &out)
        case .bool(let b): out.append(0x01); out.append(b ? 1 : 0)
        case .uuid(let u): out.append(0x01); withUnsafeBytes(of: u.uuid) { out.append(contentsOf: $0) }
        }
    }

    static func orderedBits(_ d: Double) -> UInt64 {
        let bits = (d == 0 ? 0.0 : d).bitPattern  // -0 sorts with +0
        return bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
    }

    private static func u64(_ v: UInt64, into out: inout [UInt8]) {
        withUnsafeBytes(of: v.bigEndian) { out.append(contentsOf: $0) }
    }

    /// Appends `bytes` with every 0x00 escaped as 0x00 0xFF, then the terminator 0x00 0x01; a
    /// run without a zero byte (nearly every string) is appended in one block.
    private static func escaped(_ bytes: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        var rest = bytes[...]
        while let zero = rest.firstIndex(of: 0) {
            out.append(contentsOf: rest[..<zero])
            out.append(0x00)
            out.append(0xFF)
            rest = rest[(zero + 1)...]
        }
        out.append(contentsOf: rest)
        out.append(0x00)
        out.append(0x01)
    }
}
