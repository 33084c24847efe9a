/// A JSON syntax error at a byte column (1-based).
public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    /// The 1-based line where the problem was found (text of several lines, such as a schema
    /// file; 1 for one line of NDJSON).
    public var line = 1
    /// The 1-based byte column in that line where the problem was found.
    public let column: Int
    /// What is wrong.
    public let reason: String
    /// The error as `column N: reason`, or `line L, column N: reason` past the first line.
    public var description: String { (line > 1 ? "line \(line), " : "") + "column \(column): \(reason)" }
}

/// A recursive-descent parser over UTF-8 bytes, with a nesting limit so hostile input cannot
/// exhaust the stack.
struct JSONParser {
    static let maxDepth = 64
    /// Members of an object checked for a duplicate name by a scan; past them, by a set. A scan
    /// of short names is a few comparisons of words; the set hashes every name (built at eight
    /// members, it was a fiftieth of reading a generated library, whose tracks have nine or ten).
    static let namesScannedAtMost = 32

    /// One byte of input as a message shows it: a printable ASCII character quoted, any other
    /// byte (a control, a byte of a UTF-8 sequence) by its value, so that nothing read reaches a
    /// terminal or a rejects file raw.
    static func shown(byte: UInt8) -> String {
        (0x21...0x7E).contains(byte) ? "character '\(Character(Unicode.Scalar(byte)))'"
            : "byte 0x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16, uppercase: true)
    }
    let b: UnsafeBufferPointer<UInt8>
    var i = 0
    var depth = 0
    /// Numbers with a fraction or an exponent become exact decimals where they fit one.
    var exactDecimals = false
    /// With ``exactDecimals``: the text of each number that did not fit a decimal and became a
    /// double, by the double's bits (a message about it can then quote what was written).
    var inexactTexts: [UInt64: [String]] = [:]

    init(_ b: UnsafeBufferPointer<UInt8>) { self.b = b }

    func fail(_ reason: String, at: Int? = nil) -> JSONParseError {
        let offset = min(at ?? i, b.count)
        var line = 1, lineStart = 0
        for k in 0..<offset where b[k] == 0x0A {
            line += 1
            lineStart = k + 1
        }
        return JSONParseError(line: line, column: offset - lineStart + 1, reason: reason)
    }

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
        default: throw fail("unexpected \(Self.shown(byte: b[i]))")
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
        // Member names seen, once an object has more than a few: a line of a million members is
        // checked for duplicates in linear time, not quadratic.
        var names: Set<String>?
        skipSpace()
        if i < b.count, b[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
        while true {
            skipSpace()
            guard i < b.count, b[i] == UInt8(ascii: "\"") else { throw fail("expected a quoted member name") }
            let keyAt = i
            let key = try parseString()
            let duplicate: Bool
            if names != nil {
                duplicate = names?.insert(key).inserted == false
            } else {
                duplicate = members.contains { $0.0 == key }
                if members.count == Self.namesScannedAtMost { names = Set(members.map(\.0) + [key]) }
            }
            if duplicate { throw fail("duplicate member \(EchoedText.quoted(key, cut: true))", at: keyAt) }
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
        // Most strings have no escape: made straight from the input's bytes, with no array
        // in between (building and freeing one was a third of an NDJSON line's member parsing).
        let contentStart = i
        while i < b.count {
            let c = b[i]
            if c == UInt8(ascii: "\"") {
                let s = UTF8Text.string(UnsafeBufferPointer(rebasing: b[contentStart..<i]))
                i += 1
                guard let s else { throw fail("string is not valid UTF-8", at: start) }
                return s
            }
            if c < 0x20 { throw fail("control character in string") }
            if c == UInt8(ascii: "\\") { break }
            i += 1
        }
        guard i < b.count else { throw fail("unterminated string", at: start) }
        // An escape at `i`: the bytes before it, then the rest of the string, escapes decoded.
        var out = Array(b[contentStart..<i])
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
                guard b.count - i >= 6, b[i] == UInt8(ascii: "\\"),
                      b[i + 1] == UInt8(ascii: "u") else { throw fail("unpaired surrogate") }
                i += 2
                let low = try hex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw fail("invalid low surrogate") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw fail("unpaired surrogate")
            }
            guard let u = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape") }
            out.append(contentsOf: Array(String(Character(u)).utf8))
        default: throw fail("invalid escape: a backslash before \(Self.shown(byte: c))", at: i - 1)
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
        // Whether the text is whole as written: no exponent, and only zeros after a point.
        var wholeAsWritten = true
        if b[i] == UInt8(ascii: "-") { i += 1 }
        guard i < b.count, (48...57).contains(b[i]) else { throw fail("invalid number", at: start) }
        if b[i] == 48, i + 1 < b.count, (48...57).contains(b[i + 1]) { throw fail("leading zero in number", at: start) }
        while i < b.count, (48...57).contains(b[i]) { i += 1 }
        if i < b.count, b[i] == UInt8(ascii: ".") {
            isInteger = false
            i += 1
            guard i < b.count, (48...57).contains(b[i]) else { throw fail("invalid number", at: start) }
            while i < b.count, (48...57).contains(b[i]) {
                if b[i] != 48 { wholeAsWritten = false }
                i += 1
            }
        }
        if i < b.count, b[i] == UInt8(ascii: "e") || b[i] == UInt8(ascii: "E") {
            isInteger = false
            wholeAsWritten = false
            i += 1
            if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") { i += 1 }
            guard i < b.count, (48...57).contains(b[i]) else { throw fail("invalid exponent", at: start) }
            while i < b.count, (48...57).contains(b[i]) { i += 1 }
        }
        if isInteger {
            // Up to 18 digits never overflow: summed from the bytes, no text made (an import
            // reads a few integers a record).
            let negative = b[start] == UInt8(ascii: "-"), first = negative ? start + 1 : start
            if i - first <= 18 {
                var v: Int64 = 0
                for k in first..<i { v = v &* 10 &+ Int64(b[k] &- 48) }
                return .int(negative ? -v : v)
            }
        }
        let text = String(decoding: b[start..<i], as: UTF8.self)
        if isInteger, let v = Int64(text) { return .int(v) }
        if exactDecimals, let n = try? DecimalNumber.parse(bytes: UnsafeBufferPointer(rebasing: b[start..<i]), shown: text) {
            // A decimal has no negative zero: `-0.0` stays a double, so that a double attribute
            // keeps its sign (a decimal attribute takes it as 0).
            if n.decimal.isZero && b[start] == UInt8(ascii: "-") { return .double(-0.0) }
            return .decimal(n.decimal)
        }
        // A number so small that a double holds it only as 0 (`1e-400`) is out of range too.
        guard let d = Double(text), d.isFinite, !ValueConversion.underflowed(d, text) else {
            throw fail("number out of range", at: start)
        }
        if exactDecimals { inexactTexts[d.bitPattern, default: []].append(text) }
        // A number whose double is whole though its text is not (`196.00000000000001`, a
        // fraction below what a double holds): kept exact, so that an int attribute refuses it
        // as it refuses `196.5`, and as it does from CSV (it was stored as 196). Rare: only a
        // whole double written with a fraction or an exponent is parsed again, and not one whose
        // fraction is zeros (`4.0`: whole as written; a third of a generated library's records
        // have one, and the exact parse was a twentieth of their reading).
        if !isInteger, !wholeAsWritten, d == d.rounded(.towardZero),
           let n = try? DecimalNumber.parse(bytes: UnsafeBufferPointer(rebasing: b[start..<i]), shown: text),
           let exact = DecimalNumber(n.decimal), exact.exponent < 0 {
            return .decimal(n.decimal)
        }
        return .double(d)
    }
}
