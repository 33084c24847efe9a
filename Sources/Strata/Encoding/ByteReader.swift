/// Reads what ``ByteWriter`` wrote, with a bounds check on every read (it decodes bytes that may
/// be corrupt or hostile, so it never traps on bad input).
struct ByteReader {
    let buffer: UnsafeRawBufferPointer
    private(set) var offset: Int = 0

    init(_ buffer: UnsafeRawBufferPointer) { self.buffer = buffer }

    var remaining: Int { buffer.count - offset }
    var isAtEnd: Bool { offset == buffer.count }

    private mutating func need(_ n: Int) throws {
        if n < 0 || remaining < n {
            throw DecodingError(offset: offset, reason: "truncated: need \(n) bytes, have \(remaining)")
        }
    }

    mutating func u8() throws -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return buffer[offset]
    }

    mutating func u16() throws -> UInt16 {
        try need(2)
        defer { offset += 2 }
        return UInt16(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
    }

    mutating func u32() throws -> UInt32 {
        try need(4)
        defer { offset += 4 }
        return UInt32(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    mutating func u64() throws -> UInt64 {
        try need(8)
        defer { offset += 8 }
        return UInt64(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    mutating func varint() throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try u8()
            if shift == 63 && byte > 1 { throw DecodingError(offset: offset - 1, reason: "varint overflows 64 bits") }
            result |= UInt64(byte & 0x7f) << shift
            if byte & 0x80 == 0 { return result }
            shift += 7
            if shift > 63 { throw DecodingError(offset: offset, reason: "varint longer than 10 bytes") }
        }
    }

    /// A varint length, then that many bytes (checked against what is left before allocating).
    mutating func lengthPrefixed() throws -> UnsafeRawBufferPointer {
        let start = offset
        let n = try varint()
        guard n <= UInt64(remaining) else {
            throw DecodingError(offset: start, reason: "length \(n) exceeds remaining \(remaining) bytes")
        }
        let slice = UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + Int(n)])
        offset += Int(n)
        return slice
    }

    mutating func bytes() throws -> [UInt8] { Array(try lengthPrefixed()) }

    mutating func string() throws -> String {
        let start = offset
        let raw = try lengthPrefixed()
        guard let s = UTF8Text.string(raw.bindMemory(to: UInt8.self)) else {
            throw DecodingError(offset: start, reason: "string is not valid UTF-8")
        }
        return s
    }

    /// Moves past what ``string()`` reads, with the same checks, without making the string
    /// (`UTF8Span` validates UTF-8 as the standard library's strings do, allocating nothing).
    mutating func checkString() throws {
        let start = offset
        let raw = try lengthPrefixed().bindMemory(to: UInt8.self)
        do {
            _ = try UTF8Span(validating: raw.span)
        } catch {
            throw DecodingError(offset: start, reason: "string is not valid UTF-8")
        }
    }

    mutating func fixed(_ n: Int) throws -> UnsafeRawBufferPointer {
        try need(n)
        defer { offset += n }
        return UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + n])
    }
}
