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

    /// `YYYY-MM-DDTHH:MM:SS[.fff]Z` (UTC).
    static func date(_ s: String) -> Date? {
        var s = s
        return s.withUTF8 { b -> Date? in
            guard b.count >= 20, b.last == 90, b[4] == 45, b[7] == 45, b[10] == 84, b[13] == 58, b[16] == 58 else { return nil }
            func num(_ from: Int, _ n: Int) -> Int? {
                var v = 0
                for k in from..<from + n {
                    guard b[k] >= 48, b[k] <= 57 else { return nil }
                    v = v * 10 + Int(b[k] - 48)
                }
                return v
            }
            guard let y = num(0, 4), let mo = num(5, 2), let d = num(8, 2), let h = num(11, 2), let mi = num(14, 2), let sec = num(17, 2),
                  (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, sec < 60 else { return nil }
            var fraction = 0.0
            if b.count > 20 {
                guard b[19] == 46, b.count <= 30, b.count > 21 else { return nil }
                let digits = b.count - 21
                guard let f = num(20, digits) else { return nil }
                fraction = Double(f) / pow(10, Double(digits))
            } else if b[19] != 90 {
                return nil
            }
            // Days from the civil date (proleptic Gregorian), Howard Hinnant's algorithm.
            let yy = mo <= 2 ? y - 1 : y
            let era = (yy >= 0 ? yy : yy - 399) / 400
            let yoe = yy - era * 400
            let doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1
            let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
            let days = era * 146097 + doe - 719468
            // Reject dates like February 30th that the arithmetic would roll over.
            let daysInMonth = [31, (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
            guard d <= daysInMonth[mo - 1] else { return nil }
            return Date(timeIntervalSince1970: Double(days * 86400 + h * 3600 + mi * 60 + sec) + fraction)
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
        public let reason: String
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
            guard let d = ISO8601.date(from: s) else { throw Failure(reason: "'\(s)' is not an ISO-8601 date like 2024-05-01T12:00:00Z") }
            return .date(d)
        case (.bytes, .string(let s)):
            guard let d = Data(base64Encoded: s) else { throw Failure(reason: "not valid base64") }
            return .bytes(Array(d))
        case (.uuid, .string(let s)):
            guard let u = FastParse.uuid(s) ?? UUID(uuidString: s) else { throw Failure(reason: "'\(s)' is not a UUID") }
            return .uuid(u)
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
            guard let i = Int64(text) else { throw Failure(reason: "'\(text)' is not an integer") }
            return .int(i)
        case .double:
            guard let d = Double(text), d.isFinite else { throw Failure(reason: "'\(text)' is not a number") }
            return .double(d)
        case .bool:
            switch text.lowercased() {
            case "true", "1", "yes": return .bool(true)
            case "false", "0", "no": return .bool(false)
            default: throw Failure(reason: "'\(text)' is not true or false")
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
