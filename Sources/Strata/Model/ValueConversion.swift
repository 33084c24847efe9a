import Foundation

/// Parsers for the two formats import sees most, without Foundation's scanner (a profile of
/// `storectl import` showed `UUID(uuidString:)`'s sscanf and the ISO-8601 format style near the
/// top); anything they do not recognise goes to Foundation.
enum FastParse {
    @inline(__always) private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: c - 48
        case 97...102: c - 87
        case 65...70: c - 55
        default: nil
        }
    }

    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    static func uuid(_ s: String) -> UUID? {
        var s = s
        return s.withUTF8 { b -> UUID? in
            guard b.count == 36, b[8] == 45, b[13] == 45, b[18] == 45, b[23] == 45 else { return nil }
            var bytes = [UInt8](repeating: 0, count: 16)
            var i = 0, o = 0
            while i < 36 {
                if i == 8 || i == 13 || i == 18 || i == 23 { i += 1; continue }
                guard let h = hex(b[i]), let l = hex(b[i + 1]) else { return nil }
                bytes[o] = h << 4 | l
                o += 1
                i += 2
            }
            return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                               bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS[.f…]` followed by `Z` or an offset `±HH:MM` (or `±HHMM`), with up to
    /// nine fraction digits; a year outside 0000–9999 is written with a sign and more digits
    /// (`+10000-01-01T00:00:00Z`, `-0001-12-31T00:00:00Z`, ISO 8601's expanded years). The
    /// calendar is the proleptic Gregorian one throughout (as ``ISO8601/string(from:)`` writes).
    /// Nil for anything else, and for impossible dates and times (February 30th, hour 24, minute
    /// or second 60): nothing is rolled over into the next day or minute.
    static func date(_ s: String) -> Date? {
        var s = s
        return s.withUTF8 { b -> Date? in
            var i = 0
            func digits(_ n: Int) -> Int? {
                guard i + n <= b.count else { return nil }
                var v = 0
                for k in i..<i + n {
                    guard b[k] >= 48, b[k] <= 57 else { return nil }
                    v = v * 10 + Int(b[k] - 48)
                }
                i += n
                return v
            }
            func expect(_ c: UInt8) -> Bool {
                guard i < b.count, b[i] == c else { return false }
                i += 1
                return true
            }
            // The year: four digits, or a sign and four to six.
            var sign = 1, yearDigits = 4
            if i < b.count, b[i] == 43 || b[i] == 45 {
                sign = b[i] == 45 ? -1 : 1
                i += 1
                var n = 0
                while i + n < b.count, b[i + n] >= 48, b[i + n] <= 57 { n += 1 }
                guard (4...6).contains(n) else { return nil }
                yearDigits = n
            }
            guard let yearValue = digits(yearDigits), expect(45), let mo = digits(2), expect(45), let d = digits(2),
                  expect(84), let h = digits(2), expect(58), let mi = digits(2), expect(58), let sec = digits(2) else { return nil }
            let y = sign * yearValue
            var fraction = 0.0
            if expect(46) {
                var n = 0, f = 0
                while i < b.count, b[i] >= 48, b[i] <= 57 {
                    guard n < 9 else { return nil }
                    f = f * 10 + Int(b[i] - 48)
                    n += 1
                    i += 1
                }
                guard n > 0 else { return nil }
                fraction = Double(f) / pow(10, Double(n))
            }
            var offsetSeconds = 0
            if expect(90) {
                // Z: UTC.
            } else if i < b.count, b[i] == 43 || b[i] == 45 {
                let east = b[i] == 43
                i += 1
                guard let oh = digits(2) else { return nil }
                _ = expect(58)
                guard let om = digits(2), oh < 24, om < 60 else { return nil }
                offsetSeconds = (east ? 1 : -1) * (oh * 3600 + om * 60)
            } else {
                return nil
            }
            guard i == b.count, (1...12).contains(mo), h < 24, mi < 60, sec < 60 else { return nil }
            let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
            let daysInMonth = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
            guard d >= 1, d <= daysInMonth[mo - 1] else { return nil }
            let days = ISO8601.days(year: y, month: mo, day: d)
            return Date(timeIntervalSince1970: Double(days * 86400 + h * 3600 + mi * 60 + sec - offsetSeconds) + fraction)
        }
    }
}

/// Converts between JSON (import, export, schema defaults, CLI) and typed ``Value``s.
///
/// JSON forms: string → string; int → integer; double → number; bool → true/false;
/// date → ISO-8601 string (`"2024-05-01T12:00:00Z"`); bytes → base64 string; uuid → UUID string.
public enum ValueConversion {
    /// Why a JSON value does not fit an attribute type.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What does not fit, naming the value.
        public let reason: String
        /// The reason.
        public var description: String { reason }
    }

    /// The ``Value`` of `json` for an attribute of `type`; `null` maps to ``Value/null``.
    public static func value(from json: JSONValue, type: AttributeType) throws -> Value {
        if case .null = json { return .null }
        switch (type, json) {
        case (.string, .string(let s)): return .string(s)
        case (.int, .int(let i)): return .int(i)
        case (.double, .double(let d)): return .double(d)
        case (.double, .int(let i)): return .double(Double(i))
        case (.bool, .bool(let b)): return .bool(b)
        case (.date, .string(let s)):
            guard let d = ISO8601.date(from: s) else { throw Failure(reason: "'\(EchoedText.shown(s))' is not an ISO-8601 date like 2024-05-01T12:00:00Z") }
            return .date(d)
        case (.bytes, .string(let s)):
            guard let d = Data(base64Encoded: s) else { throw Failure(reason: "not valid base64") }
            return .bytes(Array(d))
        case (.uuid, .string(let s)):
            guard let u = FastParse.uuid(s) ?? UUID(uuidString: s) else { throw Failure(reason: "'\(EchoedText.shown(s))' is not a UUID") }
            return .uuid(u)
        case (.int, .double(let d)):
            // A number with a fraction or an exponent (`1e2`, `100.0`), or an integer beyond 64
            // bits, arrives as a double. A whole number is an int when the double holds it
            // exactly: below 2^53 every decimal integer is a double of its own.
            guard d == d.rounded(.towardZero) else { throw Failure(reason: "\(d) is not an integer (an int attribute takes a whole number)") }
            if abs(d) < 9_007_199_254_740_992 { return .int(Int64(d)) }
            if d >= -9_223_372_036_854_775_808.0 && d < 9_223_372_036_854_775_808.0 {
                throw Failure(reason: "\(d) is beyond 2^53, where a number with a fraction or an exponent is not exact; write the integer's digits")
            }
            throw Failure(reason: "\(d) is outside the int range (-9223372036854775808…9223372036854775807)")
        default:
            throw Failure(reason: "expected \(type.rawValue), found \(json.typeName)")
        }
    }

    /// The ``Value`` of CSV/CLI text for an attribute of `type`; the empty string is `null`.
    public static func value(fromText text: String, type: AttributeType) throws -> Value {
        if text.isEmpty { return .null }
        switch type {
        case .string: return .string(text)
        case .int:
            guard let i = Int64(text) else { throw Failure(reason: "'\(EchoedText.shown(text))' is not an integer") }
            return .int(i)
        case .double:
            guard let d = Double(text), d.isFinite else { throw Failure(reason: "'\(EchoedText.shown(text))' is not a number") }
            return .double(d)
        case .bool:
            switch text.lowercased() {
            case "true", "1", "yes": return .bool(true)
            case "false", "0", "no": return .bool(false)
            default: throw Failure(reason: "'\(EchoedText.shown(text))' is not true or false")
            }
        case .date, .bytes, .uuid:
            return try value(from: .string(text), type: type)
        }
    }

    /// The JSON form of `value`.
    public static func json(_ value: Value) -> JSONValue {
        switch value {
        case .null: .null
        case .string(let s): .string(s)
        case .int(let i): .int(i)
        case .double(let d): .double(d)
        case .bool(let b): .bool(b)
        case .date(let d): .string(ISO8601.string(from: d))
        case .bytes(let b): .string(Data(b).base64EncodedString())
        case .uuid(let u): .string(u.uuidString.lowercased())
        }
    }

    /// The CSV/CLI text of `value` (`null` is empty).
    public static func text(_ value: Value) -> String {
        switch value {
        case .null: ""
        case .string(let s): s
        default:
            if case .string(let s) = json(value) { s } else { json(value).serialized }
        }
    }
}
