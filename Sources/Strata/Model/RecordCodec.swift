/// The stored form of a record: `[format u8][entity tag u16][version u64][count varint]
/// ([attribute index varint][value])* [crc32c u32]`. Only non-null attributes are written.
enum RecordCodec {
    static let format: UInt8 = 1

    static func encode(_ record: Record) -> [UInt8] {
        // Room for a typical record (a library track is ~150 bytes) without growing the buffer.
        var w = ByteWriter(capacity: 256)
        encode(record, into: &w)
        return w.bytes
    }

    /// Appends the stored form of `record` to `w` (a caller encoding many records reuses one
    /// buffer: `w.bytes.removeAll(keepingCapacity: true)` between them).
    static func encode(_ record: Record, into w: inout ByteWriter) {
        let start = w.bytes.count
        w.u8(format)
        w.u16(record.entity.tag)
        w.u64(record.version.rawValue)
        var present = 0
        for v in record.values where !v.isNull { present += 1 }
        w.varint(UInt64(present))
        for (i, v) in record.values.enumerated() where !v.isNull {
            w.varint(UInt64(i))
            ValueCodec.encode(v, into: &w)
        }
        let crc = w.bytes.withUnsafeBytes {
            checksum(id: record.id, body: UnsafeRawBufferPointer(rebasing: $0[start...]))
        }
        w.u32(crc)
    }

    /// CRC-32C over the id (the LMDB key) and the body: a flipped bit in either is detected.
    static func checksum(id: ObjectID, body: [UInt8]) -> UInt32 {
        body.withUnsafeBytes { checksum(id: id, body: $0) }
    }

    static func checksum(id: ObjectID, body: UnsafeRawBufferPointer) -> UInt32 {
        // The id's 16 key bytes, then the body, without concatenating them.
        let key = (id.high.bigEndian, id.low.bigEndian)
        let running = withUnsafeBytes(of: key) { CRC32C.update(0xFFFF_FFFF, $0) }
        return ~CRC32C.update(running, body)
    }

    /// The body of stored record `bytes` (without its checksum), once its size and checksum are
    /// checked (it is not decoded). Throws ``StrataError/corruptRecord(id:reason:)``.
    static func checkedBody(_ bytes: UnsafeRawBufferPointer, id: ObjectID) throws -> UnsafeRawBufferPointer {
        guard bytes.count >= 4 + 1 + 2 + 8 + 1 else {
            throw StrataError.corruptRecord(id: id, reason: "record of \(bytes.count) bytes is too short")
        }
        let body = UnsafeRawBufferPointer(rebasing: bytes[0..<bytes.count - 4])
        var tail = ByteReader(UnsafeRawBufferPointer(rebasing: bytes[bytes.count - 4..<bytes.count]))
        let stored = try tail.u32()
        guard checksum(id: id, body: body) == stored else {
            throw StrataError.corruptRecord(id: id, reason: "checksum mismatch")
        }
        return body
    }

    /// Decodes a stored record, checking its checksum, format and that it belongs to `id`. With
    /// `only`, just the attributes it marks get their values (the others read as no value, their
    /// bytes checked but not decoded): for a scan that needs a few attributes of each record.
    static func decode(_ bytes: UnsafeRawBufferPointer, id: ObjectID, schema: Schema,
                       only: [Bool]? = nil) throws -> Record {
        var r = ByteReader(try checkedBody(bytes, id: id))
        do {
            let f = try r.u8()
            guard f == format else {
                throw StrataError.corruptRecord(
                    id: id, reason: "record format \(f) is not \(format) (written by a newer Strata?)")
            }
            let tag = try r.u16()
            guard tag == id.entityTag, let entity = schema.entity(tag: tag) else {
                throw StrataError.corruptRecord(id: id, reason: "entity tag \(tag) does not match the id")
            }
            let version = TransactionID(try r.u64())
            var values = [Value](repeating: .null, count: entity.attributes.count)
            let n = try r.varint()
            guard n <= UInt64(entity.attributes.count) else {
                throw StrataError.corruptRecord(id: id,
                                                reason: "\(n) attributes, entity has \(entity.attributes.count)")
            }
            // The encoder writes the attributes in ascending order: an index at or below the one
            // before (the same attribute twice, the last value silently winning) is damage.
            var previous: UInt64?
            for _ in 0..<n {
                // Checked before Int(_:), which traps on a corrupt varint ≥ 2^63 (found by fuzz-record).
                let i = try r.varint()
                guard i < UInt64(values.count) else {
                    throw StrataError.corruptRecord(id: id, reason: "attribute index \(i) out of range")
                }
                if let previous, i <= previous {
                    throw StrataError.corruptRecord(id: id, reason: "attribute index \(i) after \(previous): "
                                                                  + "a record lists its attributes once each, in order")
                }
                previous = i
                if let only, !only[Int(i)] {
                    try ValueCodec.check(from: &r)
                } else {
                    values[Int(i)] = try ValueCodec.decode(from: &r)
                }
            }
            guard r.isAtEnd else { throw StrataError.corruptRecord(id: id, reason: "\(r.remaining) trailing bytes") }
            return Record(entity: entity, id: id, values: values, version: version)
        } catch let e as DecodingError {
            throw StrataError.corruptRecord(id: id, reason: e.description)
        }
    }
}
