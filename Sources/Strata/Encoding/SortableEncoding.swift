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
        case .decimal(let d): out.append(0x01); (DecimalNumber(d) ?? .zero).sortableBytes(into: &out)
        }
    }

    /// The most bytes ``encode(_:into:truncateBytes:)`` appends for `value`: a string's or bytes'
    /// every byte escaped, with the marker and the terminator; nil for a decimal, whose length
    /// is known only by encoding it.
    static func sizeBound(_ value: Value) -> Int? {
        switch value {
        case .null: 1
        case .string(let s): 3 + 2 * s.utf8.count
        case .bytes(let b): 3 + 2 * b.count
        case .int, .double, .date: 9
        case .bool: 2
        case .uuid: 17
        case .decimal: nil
        }
    }

    /// The bits of `d` whose unsigned order is ``Value/compareNumbers(_:_:)``'s: -0 as +0, and
    /// every NaN as one NaN above +infinity.
    static func orderedBits(_ d: Double) -> UInt64 {
        let bits = (d == 0 ? 0.0 : d.isNaN ? Double.nan : d).bitPattern
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
