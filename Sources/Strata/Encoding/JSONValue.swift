import Foundation

/// A parsed JSON value that keeps integers exact and object keys in order.
///
/// Strata parses JSON itself (schema files, NDJSON import, CLI output checks) so that errors can
/// name the exact byte column, integers never pass through `Double`, and `true` is never `1`.
public enum JSONValue: Sendable, Equatable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number written without a fraction or exponent that fits 64 bits, kept exact.
    case int(Int64)
    /// Any other number (with a fraction or an exponent, or too large for ``int(_:)``); it must be finite.
    case double(Double)
    /// A number with a fraction or an exponent kept exact, as the parser gives it when asked for
    /// exact decimals (``parse(_:exactDecimals:)``; at most 38 significant digits, else it is a
    /// ``double(_:)``). Written back as plain decimal text.
    case decimal(Decimal)
    /// A string, with its escapes decoded.
    case string(String)
    /// An array, in order.
    case array([JSONValue])
    /// An object's members, in the order of the text.
    case object([(String, JSONValue)])

    /// Whether two values are equal: the same kind and value, and for objects the same members in the same order
    /// (``int(_:)`` `1` and ``double(_:)`` `1.0` differ).
    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.int(let x), .int(let y)): x == y
        case (.double(let x), .double(let y)): x == y
        case (.decimal(let x), .decimal(let y)): x == y
        case (.string(let x), .string(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)):
            x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: false
        }
    }

    /// The member named `key` of an object.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first(where: { $0.0 == key })?.1
    }

    /// A short name of the JSON type, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int: "integer"
        case .double, .decimal: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    /// Serializes compactly (object keys in their stored order).
    public var serialized: String {
        var out = ""
        write(to: &out)
        return out
    }

    func write(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .int(let i): out += String(i)
        case .double(let d):
            out += d.isFinite ? (d == d.rounded() && abs(d) < 1e15 ? String(format: "%.1f", d) : "\(d)") : "null"
        case .decimal(let d): out += DecimalNumber(d)?.text ?? "null"
        case .string(let s): JSONValue.escape(s, into: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                item.write(to: &out)
            }
            out += "]"
        case .object(let members):
            out += "{"
            for (i, (k, v)) in members.enumerated() {
                if i > 0 { out += "," }
                JSONValue.escape(k, into: &out)
                out += ":"
                v.write(to: &out)
            }
            out += "}"
        }
    }

    static func escape(_ s: String, into out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    /// Parses one JSON document from UTF-8 bytes.
    ///
    /// With `exactDecimals`, a number with a fraction or an exponent is a ``decimal(_:)`` when it
    /// has at most 38 significant digits (so `0.1` stays exactly one tenth); without, a
    /// ``double(_:)``.
    /// - Throws: ``JSONParseError`` with the 1-based line and column of the problem.
    public static func parse<C: Collection>(_ bytes: C, exactDecimals: Bool = false) throws -> JSONValue
        where C.Element == UInt8 {
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { buf in
            var p = JSONParser(buf)
            p.exactDecimals = exactDecimals
            return try p.parseDocument()
        }
    }

    /// ``parse(_:exactDecimals:)`` with exact decimals, and the text of each number that did
    /// not fit a decimal (and became a double), by the double's bits.
    static func parseKeepingInexactTexts(_ bytes: [UInt8]) throws -> (JSONValue, [UInt64: [String]]) {
        try bytes.withUnsafeBufferPointer { buf in
            var p = JSONParser(buf)
            p.exactDecimals = true
            let value = try p.parseDocument()
            return (value, p.inexactTexts)
        }
    }

    /// Parses one JSON document from a string.
    ///
    /// - Throws: ``JSONParseError`` with the 1-based line and column of the problem.
    public static func parse(_ text: String) throws -> JSONValue { try parse(Array(text.utf8)) }
}
