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
        case (.string(let x), .string(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)): x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
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
        case .double: "number"
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
        case .double(let d): out += d.isFinite ? (d == d.rounded() && abs(d) < 1e15 ? String(format: "%.1f", d) : "\(d)") : "null"
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
    /// - Throws: ``JSONParseError`` with the 1-based column of the problem.
    public static func parse<C: Collection>(_ bytes: C) throws -> JSONValue where C.Element == UInt8 {
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { buf in
            var p = JSONParser(buf)
            return try p.parseDocument()
        }
    }

    /// Parses one JSON document from a string.
    ///
    /// - Throws: ``JSONParseError`` with the 1-based column of the problem.
    public static func parse(_ text: String) throws -> JSONValue { try parse(Array(text.utf8)) }
}

import Foundation

/// A JSON syntax error at a byte column (1-based).
public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    /// The 1-based byte column where the problem was found.
    public let column: Int
    /// What is wrong.
    public let reason: String
    /// The error as `column N: reason`.
    public var description: String { "column \(column): \(reason)" }
}

/// A recursive-descent parser over UTF-8 bytes, with a nesting limit so hostile input cannot
/// exhaust the stack.
struct JSONParser {
    static let maxDepth = 64
    let b: UnsafeBufferPointer<UInt8>
    var i = 0
    var depth = 0

    init(_ b: UnsafeBufferPointer<UInt8>) { self.b = b }

    func fail(_ reason: String, at: Int? = nil) -> JSONParseError { JSONParseError(column: (at ?? i) + 1, reason: reason) }

    mutating func parseDocument() throws -> JSONValue {
        skipSpace()
        let v = try parseValue()
        skipSpace()
        if i != b.count { throw fail("unexpected text after the JSON value") }
        return v
    }

    mutating func skipSpace() {
        while i < b.count, b[i] == 0x20 || b[i] == 0x09 || b[i] == 0x0A || b[i] == 0x0D { i += 1 }
    }

    mutating func parseValue() throws -> JSONValue {
        guard i < b.count else { throw fail("unexpected end of input") }
        switch b[i] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected character '\(Character(Unicode.Scalar(b[i])))'")
        }
    }

    mutating func literal(_ word: String) throws {
        let bytes = Array(word.utf8)
        guard b.count - i >= bytes.count else { throw fail("invalid literal") }
        for k in 0..<bytes.count where b[i + k] != bytes[k] { throw fail("invalid literal") }
        i += bytes.count
    }

    mutating func enter() throws {
        depth += 1
        if depth > Self.maxDepth { throw fail("nesting deeper than \(Self.maxDepth) levels") }
    }

    mutating func parseObject() throws -> JSONValue {
        try enter()
        defer { depth -= 1 }
        i += 1
        var members: [(String, JSONValue)] = []
        skipSpace()
        if i < b.count, b[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
        while true {
            skipSpace()
            guard i < b.count, b[i] == UInt8(ascii: "\"") else { throw fail("expected a quoted member name") }
            let keyAt = i
            let key = try parseString()
            if members.contains(where: { $0.0 == key }) { throw fail("duplicate member \"\(key)\"", at: keyAt) }
            skipSpace()
            guard i < b.count, b[i] == UInt8(ascii: ":") else { throw fail("expected ':' after member name") }
            i += 1
            skipSpace()
            members.append((key, try parseValue()))
            skipSpace()
            guard i < b.count else { throw fail("unterminated object") }
            if b[i] == UInt8(ascii: ",") { i += 1; continue }
            if b[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
            throw fail("expected ',' or '}' in object")
        }
    }

    mutating func parseArray() throws -> JSONValue {
        try enter()
        defer { depth -= 1 }
        i += 1
        var items: [JSONValue] = []
        skipSpace()
        if i < b.count, b[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
        while true {
            skipSpace()
            items.append(try parseValue())
            skipSpace()
            guard i < b.count else { throw fail("unterminated array") }
            if b[i] == UInt8(ascii: ",") { i += 1; continue }
            if b[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
            throw fail("expected ',' or ']' in array")
        }
    }

    mutating func parseString() throws -> String {
        let start = i
        i += 1
        var out = [UInt8]()
        var runStart = i
        while true {
            guard i < b.count else { throw fail("unterminated string", at: start) }
            let c = b[i]
            if c == UInt8(ascii: "\"") {
                out.append(contentsOf: b[runStart..<i])
                i += 1
                break
            }
            if c < 0x20 { throw fail("control character in string") }
            if c == UInt8(ascii: "\\") {
                out.append(contentsOf: b[runStart..<i])
                try parseEscape(into: &out)
                runStart = i
                continue
            }
            i += 1
        }
        guard let s = UTF8Text.string(out) else { throw fail("string is not valid UTF-8", at: start) }
        return s
    }

    mutating func parseEscape(into out: inout [UInt8]) throws {
        i += 1
        guard i < b.count else { throw fail("unterminated escape") }
        let c = b[i]
        i += 1
        switch c {
        case UInt8(ascii: "\""): out.append(0x22)
        case UInt8(ascii: "\\"): out.append(0x5C)
        case UInt8(ascii: "/"): out.append(0x2F)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4()
            if (0xD800...0xDBFF).contains(scalar) {
                guard b.count - i >= 6, b[i] == UInt8(ascii: "\\"), b[i + 1] == UInt8(ascii: "u") else { throw fail("unpaired surrogate") }
                i += 2
                let low = try hex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw fail("invalid low surrogate") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw fail("unpaired surrogate")
            }
            guard let u = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape") }
            out.append(contentsOf: Array(String(Character(u)).utf8))
        default: throw fail("invalid escape '\\\(Character(Unicode.Scalar(c)))'", at: i - 1)
        }
    }

    mutating func hex4() throws -> UInt32 {
        guard b.count - i >= 4 else { throw fail("truncated \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = b[i]
            let d: UInt32
            switch c {
            case 48...57: d = UInt32(c - 48)
            case 97...102: d = UInt32(c - 87)
            case 65...70: d = UInt32(c - 55)
            default: throw fail("invalid hex digit in \\u escape")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }

    mutating func parseNumber() throws -> JSONValue {
        let start = i
        var isInteger = true
        if b[i] == UInt8(ascii: "-") { i += 1 }
        guard i < b.count, (48...57).contains(b[i]) else { throw fail("invalid number", at: start) }
        if b[i] == 48, i + 1 < b.count, (48...57).contains(b[i + 1]) { throw fail("leading zero in number", at: start) }
        while i < b.count, (48...57).contains(b[i]) { i += 1 }
        if i < b.count, b[i] == UInt8(ascii: ".") {
            isInteger = false
            i += 1
            guard i < b.count, (48...57).contains(b[i]) else { throw fail("invalid number", at: start) }
            while i < b.count, (48...57).contains(b[i]) { i += 1 }
        }
        if i < b.count, b[i] == UInt8(ascii: "e") || b[i] == UInt8(ascii: "E") {
            isInteger = false
            i += 1
            if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") { i += 1 }
            guard i < b.count, (48...57).contains(b[i]) else { throw fail("invalid exponent", at: start) }
            while i < b.count, (48...57).contains(b[i]) { i += 1 }
        }
        let text = String(decoding: b[start..<i], as: UTF8.self)
        if isInteger, let v = Int64(text) { return .int(v) }
        guard let d = Double(text), d.isFinite else { throw fail("number out of range", at: start) }
        return .double(d)
    }
}
