import Foundation

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
        // The exact text rounds once, to the nearest double.
        case (.double, .decimal(let d)): return .double(Double(DecimalNumber(d)?.text ?? "") ?? .nan)
        case (.decimal, .decimal(let d)): return try decimal(DecimalNumber(d), shown: "\(d)")
        case (.decimal, .int(let i)): return .decimal(Decimal(i))
        case (.decimal, .string(let s)): return try decimal(DecimalNumber.parse(s), shown: s)
        case (.decimal, .double(let d)) where d == 0:
            // `-0.0`, which the parser keeps as a double (a decimal has no negative zero).
            return .decimal(0)
        case (.decimal, .double(let d)):
            // A number the parser could not keep exact (more than 38 significant digits, a digit
            // below 10^-128, a magnitude past the largest decimal, or read without exact
            // decimals): taking its double would round it silently. Which one it was is lost
            // with the text: the same number as a string says.
            throw Failure(reason: "\(d) is not exact as a decimal (a decimal keeps at most " +
                                  "\(DecimalNumber.maxDigits) significant digits, none below " +
                                  "10^\(DecimalNumber.minExponent), read from the number's text; written as a " +
                                  "string, the value is refused saying which)")
        case (.bool, .bool(let b)): return .bool(b)
        case (.date, .string(let s)):
            guard let d = ISO8601.date(from: s) else {
                throw Failure(reason: "'\(EchoedText.shown(s))' is not an ISO-8601 date like 2024-05-01T12:00:00Z")
            }
            return .date(d)
        case (.bytes, .string(let s)):
            guard let d = Base64.decode(s) else {
                throw Failure(reason: "not valid base64 (the standard alphabet, padded with '=' to a multiple of " +
                                      "4 characters, as an export writes it)")
            }
            return .bytes(d)
        case (.uuid, .string(let s)):
            guard let u = FastParse.uuid(s) ?? UUID(uuidString: s) else {
                throw Failure(reason: "'\(EchoedText.shown(s))' is not a UUID")
            }
            return .uuid(u)
        case (.int, .decimal(let d)):
            guard let n = DecimalNumber(d), n.exponent >= 0, let i = Int64(n.text) else {
                throw Failure(reason: "\(d) is not an integer in the int range (an int attribute takes a whole number)")
            }
            return .int(i)
        case (.int, .double(let d)):
            // A number with a fraction or an exponent (`1e2`, `100.0`), or an integer beyond 64
            // bits, arrives as a double. A whole number is an int when the double holds it
            // exactly: below 2^53 every decimal integer is a double of its own.
            guard d == d.rounded(.towardZero) else {
                throw Failure(reason: "\(d) is not an integer (an int attribute takes a whole number)")
            }
            if abs(d) < 9_007_199_254_740_992 { return .int(Int64(d)) }
            if d >= -9_223_372_036_854_775_808.0 && d < 9_223_372_036_854_775_808.0 {
                // Also a literal just past the range: -9223372036854775809 rounds to -2^63.
                throw Failure(reason: "\(d) is beyond 2^53, where a number with a fraction, an exponent or more " +
                                      "digits than an int holds is not exact; write the integer's digits, within " +
                                      "-9223372036854775808…9223372036854775807")
            }
            throw Failure(reason: "\(d) is outside the int range (-9223372036854775808…9223372036854775807)")
        default:
            throw Failure(reason: "expected \(type.rawValue), found \(json.typeName)")
        }
    }

    /// The double of decimal text (`-2.5`, `1e3`). Refused, with the reason: anything else
    /// (`Double(_:)` also reads hexadecimal such as `0x1p3`, `nan` and `inf`), and a number a
    /// double cannot hold (past its range, or so small that it would become 0).
    static func double(decimalText text: String) throws -> Double {
        let decimal = text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E
                                             || $0 == 0x45 || $0 == 0x65 }
        guard decimal, let d = Double(text) else {
            throw Failure(reason: "'\(EchoedText.shown(text))' is not a number")
        }
        guard d.isFinite else {
            throw Failure(reason: "\(EchoedText.shown(text)) is beyond the range of a double (about ±1.8e308)")
        }
        guard !underflowed(d, text) else {
            throw Failure(reason: "\(EchoedText.shown(text)) is too small for a double: it would read as 0 " +
                                  "(the smallest is about 4.9e-324)")
        }
        return d
    }

    /// Whether `d`, read from the decimal text `text`, is 0 where the text is not (`1e-400`: a
    /// number too small for a double). JSON numbers and text values share it.
    static func underflowed(_ d: Double, _ text: String) -> Bool {
        d == 0 && text.utf8.prefix(while: { $0 != 0x45 && $0 != 0x65 }).contains(where: { $0 >= 0x31 && $0 <= 0x39 })
    }

    /// The ``Value`` of CSV/CLI text for an attribute of `type`; the empty string is `null`.
    public static func value(fromText text: String, type: AttributeType) throws -> Value {
        if text.isEmpty { return .null }
        switch type {
        case .string: return .string(text)
        case .int:
            if let i = Int64(text) { return .int(i) }
            // A whole number written with an exponent or a fraction (`1E+6`, `2.5e1`, `100.0`),
            // read exactly, as an NDJSON number is taken for an int attribute.
            guard let n = try? DecimalNumber.parse(text), n.exponent >= 0 else {
                throw Failure(reason: "'\(EchoedText.shown(text))' is not an integer")
            }
            guard let i = Int64(n.text) else {
                throw Failure(reason: "'\(EchoedText.shown(text))' is outside the int range " +
                                      "(-9223372036854775808…9223372036854775807)")
            }
            return .int(i)
        case .double:
            return .double(try double(decimalText: text))
        case .bool:
            switch text.lowercased() {
            case "true", "1", "yes": return .bool(true)
            case "false", "0", "no": return .bool(false)
            default: throw Failure(reason: "'\(EchoedText.shown(text))' is not true or false")
            }
        case .decimal:
            return try decimal(DecimalNumber.parse(text), shown: text)
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
        case .decimal(let d): .decimal(d)
        }
    }

    /// A decimal value within the limits (at most 38 significant digits; NaN refused).
    static func decimal(_ n: DecimalNumber?, shown: @autoclosure () -> String) throws -> Value {
        guard let n else { throw Failure(reason: "NaN is not a decimal number") }
        _ = try n.checked(shown())
        return .decimal(n.decimal)
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
