import Foundation

/// The type of an attribute, as declared in a schema file.
public enum AttributeType: String, Sendable, CaseIterable, Codable {
    /// Text (``Value/string(_:)``, `String` in Swift).
    case string
    /// A 64-bit signed integer (``Value/int(_:)``, `Int`).
    case int
    /// A 64-bit floating-point number (``Value/double(_:)``, `Double`).
    case double
    /// A Boolean (``Value/bool(_:)``, `Bool`).
    case bool
    /// A point in time, to the millisecond in text forms (``Value/date(_:)``, `Date`).
    case date
    /// Raw bytes (``Value/bytes(_:)``, `Data`).
    case bytes
    /// A UUID (``Value/uuid(_:)``, `UUID`).
    case uuid

    var tag: UInt8 {
        switch self {
        case .string: 1
        case .int: 2
        case .double: 3
        case .bool: 4
        case .date: 5
        case .bytes: 6
        case .uuid: 7
        }
    }
}

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
        }
    }

    /// Whether this is ``null`` (no value).
    @inlinable public var isNull: Bool { if case .null = self { true } else { false } }

    /// The value as `storectl` prints it: strings quoted (control characters escaped), dates in ISO 8601, bytes as
    /// their count, UUIDs in lowercase.
    public var description: String {
        switch self {
        case .null: "null"
        case .string(let s): "\"\(EchoedText.escaped(s))\""
        case .int(let v): String(v)
        case .double(let v): String(v)
        case .bool(let v): String(v)
        case .date(let d): ISO8601.string(from: d)
        case .bytes(let b): "<\(b.count) bytes>"
        case .uuid(let u): u.uuidString.lowercased()
        }
    }

    var rank: Int { Int(type?.tag ?? 0) }
}

extension Value: Comparable, Hashable {
    /// Total order: null first, then by type, then by value (strings by UTF-8 bytes).
    public static func < (a: Value, b: Value) -> Bool { compare(a, b) < 0 }

    /// Whether two values are equal in the total order: the same type and the same value (strings byte for byte).
    public static func == (a: Value, b: Value) -> Bool { compare(a, b) == 0 }

    /// Hashes the value consistently with `==`.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(rank)
        switch self {
        case .null: break
        case .string(let s): for b in s.utf8 { hasher.combine(b) }
        case .int(let v): hasher.combine(v)
        case .double(let v): hasher.combine(v)
        case .bool(let v): hasher.combine(v)
        case .date(let d): hasher.combine(d.timeIntervalSinceReferenceDate)
        case .bytes(let b): hasher.combine(b)
        case .uuid(let u): hasher.combine(u)
        }
    }

    /// Three-way comparison: negative, zero or positive.
    public static func compare(_ a: Value, _ b: Value) -> Int {
        switch (a, b) {
        case (.null, .null): return 0
        case (.string(let x), .string(let y)): return compareBytes(x.utf8, y.utf8)
        case (.int(let x), .int(let y)): return x < y ? -1 : (x == y ? 0 : 1)
        case (.double(let x), .double(let y)): return x < y ? -1 : (x == y ? 0 : 1)
        case (.bool(let x), .bool(let y)): return x == y ? 0 : (x ? 1 : -1)
        case (.date(let x), .date(let y)): return x < y ? -1 : (x == y ? 0 : 1)
        case (.bytes(let x), .bytes(let y)): return compareBytes(x, y)
        case (.uuid(let x), .uuid(let y)):
            return withUnsafeBytes(of: x.uuid) { xb in withUnsafeBytes(of: y.uuid) { yb in compareBytes(xb, yb) } }
        default: return a.rank - b.rank
        }
    }

    static func compareBytes<A: Sequence, B: Sequence>(_ a: A, _ b: B) -> Int where A.Element == UInt8, B.Element == UInt8 {
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

/// ISO-8601 text for dates (UTC), used by import, export and the CLI: written and read in the
/// proleptic Gregorian calendar, to the millisecond.
public enum ISO8601 {
    /// `2024-05-01T12:00:00Z`, or `2024-05-01T12:00:00.250Z` when the date, rounded to the
    /// nearest millisecond, has a fraction of a second. Years outside 0000–9999 get a sign
    /// (`+10000-…`, `-0001-…`), as ``date(from:)`` reads them.
    public static func string(from date: Date) -> String {
        let t = date.timeIntervalSince1970
        // Beyond about ±1,000,000 years (or not a number) milliseconds no longer fit: seconds.
        guard t.isFinite, abs(t) < 3e13 else { return "\(t)s" }
        let ms = Int64((t * 1000).rounded())
        let days = Int(ms >= 0 ? ms / 86_400_000 : (ms - 86_399_999) / 86_400_000)
        let inDay = Int(ms - Int64(days) * 86_400_000)
        let (y, m, d) = civil(days: days)
        func two(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
        var year = String(abs(y))
        if year.count < 4 { year = String(repeating: "0", count: 4 - year.count) + year }
        if y < 0 { year = "-" + year } else if y > 9999 { year = "+" + year }
        var text = "\(year)-\(two(m))-\(two(d))T\(two(inDay / 3_600_000)):\(two(inDay / 60_000 % 60)):\(two(inDay / 1000 % 60))"
        let millis = inDay % 1000
        if millis != 0 { text += "." + (millis < 10 ? "00" : millis < 100 ? "0" : "") + "\(millis)" }
        return text + "Z"
    }

    /// Parses `2024-05-01T12:00:00Z`, `2024-05-01T12:00:00.250Z` or `2024-05-01T14:00:00+02:00`
    /// (see `FastParse.date`); nil for anything else and for impossible dates such as
    /// February 30th.
    public static func date(from text: String) -> Date? {
        FastParse.date(text)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func days(year y: Int, month m: Int, day d: Int) -> Int {
        let yy = m <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    /// The proleptic Gregorian date of a day number (Howard Hinnant's `civil_from_days`).
    static func civil(days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}
