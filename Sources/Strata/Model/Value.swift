import Foundation

/// One attribute value. `null` is the absence of a value (an optional attribute left unset).
///
/// Strings compare and sort by their UTF-8 bytes (binary collation, as SQLite's default), the
/// same order the indexes use, so a scan and an index range always agree.
public enum Value: Sendable, CustomStringConvertible {
    /// No value: an optional attribute left unset.
    case null
    /// A ``AttributeType/string`` value.
    case string(String)
    /// An ``AttributeType/int`` value.
    case int(Int64)
    /// A ``AttributeType/double`` value.
    case double(Double)
    /// A ``AttributeType/bool`` value.
    case bool(Bool)
    /// A ``AttributeType/date`` value.
    case date(Date)
    /// A ``AttributeType/bytes`` value.
    case bytes([UInt8])
    /// A ``AttributeType/uuid`` value.
    case uuid(UUID)
    /// A ``AttributeType/decimal`` value: exact, at most 38 significant digits (NaN is refused).
    case decimal(Decimal)

    /// The attribute type this value belongs to; nil for `null`.
    public var type: AttributeType? {
        switch self {
        case .null: nil
        case .string: .string
        case .int: .int
        case .double: .double
        case .bool: .bool
        case .date: .date
        case .bytes: .bytes
        case .uuid: .uuid
        case .decimal: .decimal
        }
    }

    /// Whether this is ``null`` (no value).
    @inlinable public var isNull: Bool { if case .null = self { true } else { false } }

    /// The value as `storectl` prints it: strings quoted (``EchoedText/quoted(_:cut:)``: control
    /// characters, `"` and `\` escaped), dates in ISO 8601, bytes as their count, UUIDs in lowercase.
    public var description: String {
        switch self {
        case .null: "null"
        case .string(let s): EchoedText.quoted(s)
        case .int(let v): String(v)
        case .double(let v): String(v)
        case .bool(let v): String(v)
        case .date(let d): ISO8601.string(from: d)
        case .bytes(let b): "<\(b.count) bytes>"
        case .uuid(let u): u.uuidString.lowercased()
        case .decimal(let d): DecimalNumber(d)?.text ?? "NaN"
        }
    }

    /// ``description`` as messages show it: a string longer than ``EchoedText/maxCharacters``
    /// cut as ``EchoedText/shown(_:)`` cuts input (`"abc…(500 bytes)"`, the count the string's
    /// own bytes), so that a refusal naming a long key does not echo it whole.
    package var shown: String {
        if case .string(let s) = self { return EchoedText.quoted(s, cut: true) }
        return description
    }

    var rank: Int { Int(type?.tag ?? 0) }
}

extension Value: Comparable, Hashable {
    /// Total order: null first, then by type, then by value (strings by UTF-8 bytes). Doubles,
    /// dates and decimals order as PostgreSQL orders its numbers: -0 equals +0, and every NaN
    /// equals every other NaN and comes after every number, +infinity included. (Saves, imports
    /// and migration steps refuse to write a NaN, and queries refuse one as a value; a store
    /// written by an earlier version may hold a NaN date, and the order is total for it too.)
    public static func < (a: Value, b: Value) -> Bool { compare(a, b) < 0 }

    /// Whether two values are equal in the total order: the same type and the same value (strings byte for byte).
    public static func == (a: Value, b: Value) -> Bool { compare(a, b) == 0 }

    /// Hashes the value consistently with `==`.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(rank)
        switch self {
        case .null: break
        case .string(var s): s.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        case .int(let v): hasher.combine(v)
        case .double(let v): hasher.combine(v.isNaN ? Double.nan : v)   // every NaN is equal
        case .bool(let v): hasher.combine(v)
        case .date(let d):
            let t = d.timeIntervalSinceReferenceDate
            hasher.combine(t.isNaN ? Double.nan : t)
        case .bytes(let b): hasher.combine(b)
        case .uuid(let u): hasher.combine(u)
        case .decimal(let d): hasher.combine(DecimalNumber(d))  // 2.50 and 2.5 are equal
        }
    }

    /// Three-way comparison: negative, zero or positive.
    public static func compare(_ a: Value, _ b: Value) -> Int {
        switch (a, b) {
        case (.null, .null): return 0
        case (.string(var x), .string(var y)):
            // Native strings hand out their UTF-8 without a copy; memcmp compares it.
            return x.withUTF8 { xb in y.withUTF8 { yb in compareBuffers(xb, yb) } }
        case (.int(let x), .int(let y)): return x < y ? -1 : (x == y ? 0 : 1)
        case (.double(let x), .double(let y)): return compareNumbers(x, y)
        case (.bool(let x), .bool(let y)): return x == y ? 0 : (x ? 1 : -1)
        case (.date(let x), .date(let y)):
            return compareNumbers(x.timeIntervalSinceReferenceDate, y.timeIntervalSinceReferenceDate)
        case (.bytes(let x), .bytes(let y)): return compareBytes(x, y)
        case (.uuid(let x), .uuid(let y)):
            return withUnsafeBytes(of: x.uuid) { xb in withUnsafeBytes(of: y.uuid) { yb in compareBytes(xb, yb) } }
        case (.decimal(let x), .decimal(let y)):
            if x.isNaN || y.isNaN { return x.isNaN ? (y.isNaN ? 0 : 1) : -1 }
            return x < y ? -1 : (x == y ? 0 : 1)
        default: return a.rank - b.rank
        }
    }

    /// Why this value cannot be stored or compared as a number (a double or date that is NaN or
    /// infinite, a NaN decimal), or nil. Saves, migrations and query values share it.
    var notFiniteReason: String? {
        switch self {
        case .double(let d) where !d.isFinite: return "doubles must be finite"
        case .date(let d) where !d.timeIntervalSinceReferenceDate.isFinite: return "dates must be finite"
        case .date(let d) where abs(d.timeIntervalSince1970) >= ISO8601.maxSecondsFrom1970:
            return "dates must lie within 3e13 seconds (about 950,000 years) of 1970, what ISO-8601 text holds"
        case .decimal(let d) where d.isNaN: return "a decimal cannot be NaN"
        default: return nil
        }
    }

    /// The bytes of a string's UTF-8 or of a bytes value (what ``StoreConfiguration/maxValueBytes``
    /// bounds); 0 for every other value.
    var sizeInBytes: Int {
        switch self {
        case .string(let s): s.utf8.count
        case .bytes(let b): b.count
        default: 0
        }
    }

    /// Why this value cannot be stored (``notFiniteReason``, or a decimal past what a stored
    /// decimal keeps: ``DecimalNumber/maxDigits`` significant digits, its powers of ten), or nil.
    /// Saves, migrations' custom steps, type conversions and schema defaults share it; a query
    /// value is only judged by ``notFiniteReason`` (comparing with a larger decimal is answerable).
    var unstorableReason: String? {
        if let reason = notFiniteReason { return reason }
        guard case .decimal(let d) = self else { return nil }
        guard let n = DecimalNumber(d) else { return "a decimal cannot be NaN" }
        do {
            _ = try n.checked("\(d)")
            return nil
        } catch let f as ValueConversion.Failure {
            return f.reason
        } catch {
            return "\(error)"
        }
    }

    /// Three-way comparison of two doubles in the total order: -0 equals +0; NaNs are equal to
    /// each other and greater than every number.
    @inline(__always)
    static func compareNumbers(_ x: Double, _ y: Double) -> Int {
        if x < y { return -1 }
        if x > y { return 1 }
        if x == y { return 0 }
        return x.isNaN ? (y.isNaN ? 0 : 1) : -1
    }

    /// Byte order of two buffers (a shorter prefix first).
    static func compareBuffers(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Int {
        let n = min(a.count, b.count)
        if n > 0, let pa = a.baseAddress, let pb = b.baseAddress {
            let c = memcmp(pa, pb, n)
            if c != 0 { return c < 0 ? -1 : 1 }
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    static func compareBytes<A: Sequence, B: Sequence>(_ a: A, _ b: B) -> Int
        where A.Element == UInt8, B.Element == UInt8 {
        var ia = a.makeIterator(), ib = b.makeIterator()
        while true {
            switch (ia.next(), ib.next()) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (let x?, let y?): if x != y { return x < y ? -1 : 1 }
            }
        }
    }
}
