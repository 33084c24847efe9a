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
        case .decimal(let d):
            // NaN never reaches a record: the writer refuses it.
            w.u8(AttributeType.decimal.tag); (DecimalNumber(d) ?? .zero).encode(into: &w)
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
        case AttributeType.decimal.tag: return .decimal(try DecimalNumber.decode(from: &r).decimal)
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
        case AttributeType.decimal.tag: try DecimalNumber.check(from: &r)
        case let tag: throw DecodingError(offset: at, reason: "unknown value type tag \(tag)")
        }
    }
}
