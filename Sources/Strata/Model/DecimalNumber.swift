import Foundation

/// The exact form of a ``Value/decimal(_:)``: a sign, the significant digits (no leading or
/// trailing zero; none for zero) and a power of ten, so that equal numbers have one form
/// (`2.50` and `2.5` are the same number). Parsing, the stored bytes and the index key all go
/// through it, never through binary floating point.
///
/// Limits: at most ``maxDigits`` significant digits, and a power of ten Foundation's `Decimal`
/// holds (``minExponent``…``maxExponent`` for the last digit).
struct DecimalNumber: Hashable, Sendable {
    /// Significant digits a decimal keeps (Foundation's `Decimal` holds 38).
    static let maxDigits = 38
    /// The least power of ten of the last significant digit.
    static let minExponent = -128
    /// The greatest power of ten of the last significant digit.
    static let maxExponent = 127

    var negative: Bool
    /// ASCII digits, the first and the last not `0`; empty for zero.
    var digits: [UInt8]
    /// The power of ten of the last digit: the number is `digits × 10^exponent`.
    var exponent: Int

    static let zero = DecimalNumber(negative: false, digits: [], exponent: 0)

    var isZero: Bool { digits.isEmpty }

    /// Why text or a number is not a decimal Strata can keep exactly.
    typealias Failure = ValueConversion.Failure

    /// The normal form of `digits × 10^exponent` (leading and trailing zeros dropped).
    init(negative: Bool, digits: [UInt8], exponent: Int) {
        var d = digits[...]
        while d.first == 0x30 { d = d.dropFirst() }
        var e = exponent
        while d.last == 0x30 { d = d.dropLast(); e += 1 }
        self.negative = d.isEmpty ? false : negative
        self.digits = Array(d)
        self.exponent = d.isEmpty ? 0 : e
    }

    /// Checks the limits, giving the power of ten room by trailing zeros where the digits allow.
    func checked(_ shown: @autoclosure () -> String) throws -> DecimalNumber {
        if isZero { return self }
        if digits.count > Self.maxDigits {
            throw Failure(reason: "'\(EchoedText.shown(shown()))' has \(digits.count) significant digits; " +
                                  "a decimal keeps at most \(Self.maxDigits)")
        }
        if exponent < Self.minExponent {
            throw Failure(reason: "'\(EchoedText.shown(shown()))' is too small for a decimal " +
                                  "(its last digit is below 10^\(Self.minExponent))")
        }
        if exponent > Self.maxExponent {
            let pad = exponent - Self.maxExponent
            guard digits.count + pad <= Self.maxDigits else {
                throw Failure(reason: "'\(EchoedText.shown(shown()))' is too large for a decimal")
            }
            var n = self
            n.digits += [UInt8](repeating: 0x30, count: pad)
            n.exponent = Self.maxExponent
            return n  // not in normal form: only for building the Decimal
        }
        return self
    }

    /// Parses decimal text exactly: `[+-]digits[.digits][e[+-]digits]` (`.5` and `5.` too); no
    /// spaces, no thousands separators, no `NaN` or infinity.
    static func parse(_ text: String) throws -> DecimalNumber {
        var bytes = text
        return try bytes.withUTF8 { try parse(bytes: $0, shown: text) }
    }

    static func parse(bytes b: UnsafeBufferPointer<UInt8>, shown: @autoclosure () -> String) throws -> DecimalNumber {
        func bad() -> Failure {
            Failure(reason: "'\(EchoedText.shown(shown()))' is not a decimal number (like 12.50, -3 or 1.5e3)")
        }
        var i = 0
        var negative = false
        if i < b.count, b[i] == 0x2D || b[i] == 0x2B { negative = b[i] == 0x2D; i += 1 }
        var digits: [UInt8] = []
        var fraction = 0, seen = false
        while i < b.count, (0x30...0x39).contains(b[i]) { digits.append(b[i]); i += 1; seen = true }
        if i < b.count, b[i] == 0x2E {
            i += 1
            while i < b.count, (0x30...0x39).contains(b[i]) { digits.append(b[i]); i += 1; fraction += 1; seen = true }
        }
        guard seen else { throw bad() }
        var power = 0
        if i < b.count, b[i] == 0x65 || b[i] == 0x45 {
            i += 1
            var minus = false
            if i < b.count, b[i] == 0x2D || b[i] == 0x2B { minus = b[i] == 0x2D; i += 1 }
            var any = false
            while i < b.count, (0x30...0x39).contains(b[i]) {
                power = power * 10 + Int(b[i] - 0x30)
                guard power < 100_000 else { throw Failure(reason: "'\(EchoedText.shown(shown()))' has an exponent out of range") }
                i += 1
                any = true
            }
            guard any else { throw bad() }
            if minus { power = -power }
        }
        guard i == b.count else { throw bad() }
        return try DecimalNumber(negative: negative, digits: digits, exponent: power - fraction).checked(shown())
    }

    /// The exact parts of a Foundation `Decimal`; nil for NaN.
    init?(_ d: Decimal) {
        guard !d.isNaN else { return nil }
        if d.isZero { self = .zero; return }
        // `significand` is a whole number; its text is its digits.
        let significand = d.significand.magnitude.description
        self.init(negative: d.sign == .minus, digits: Array(significand.utf8), exponent: Int(d.exponent))
    }

    /// This number divided by `divisor` (at least 1), rounded half away from zero to
    /// ``maxDigits`` significant digits, and to fewer where the last one would lie below
    /// 10^``minExponent`` (zero when every digit would): by long division on the digits, so the
    /// quotient is always within the limits (Foundation's division scaled a small quotient below
    /// them and gave NaN, and cut a long one to 39 digits without rounding).
    func divided(by divisor: Int) -> DecimalNumber {
        precondition(divisor >= 1, "a decimal is divided by a count of at least 1")
        if isZero || divisor == 1 { return self }
        // Quotient digits, one per dividend digit (the number's, then zeros: each appended zero
        // lowers the quotient's power of ten by one), until one past the kept digits, or an
        // exact end, or the last kept digit at 10^minExponent.
        var quotient: [UInt8] = []
        var remainder = 0
        var position = 0            // dividend digits used
        var power = exponent + digits.count  // power of ten of the next quotient digit, plus one
        var significant = 0
        while true {
            let next = position < digits.count ? Int(digits[position] - 0x30) : 0
            if position >= digits.count && remainder == 0 { break }
            position += 1
            power -= 1
            // remainder < divisor, so remainder * 10 + 9 fits while divisor < Int.max / 10.
            let (value, overflow) = remainder.multipliedReportingOverflow(by: 10)
            precondition(!overflow, "a count of objects is far below Int.max / 10")
            let current = value + next
            let digit = current / divisor
            remainder = current % divisor
            if significant > 0 || digit > 0 {
                quotient.append(UInt8(0x30 + digit))
                significant += 1
            }
            // One digit past what is kept decides the rounding (and the rest: half or more).
            if significant == Self.maxDigits + 1 || (significant > 0 && power < Self.minExponent) { break }
            // No digit at 10^(minExponent - 1) or above: below half of the least decimal.
            if significant == 0 && power < Self.minExponent { return .zero }
        }
        // The digit past the last kept one, if there is one: the one at `power` after the loop
        // ran past the limit; nothing past an exact quotient.
        var lastPower = power
        let keep: Int
        if significant == Self.maxDigits + 1 {
            keep = Self.maxDigits
            lastPower += 1
        } else if power < Self.minExponent {
            keep = quotient.count - 1
            lastPower += 1
        } else {
            return DecimalNumber(negative: negative, digits: quotient, exponent: power)
        }
        var kept = Array(quotient.prefix(max(0, keep)))
        let roundsUp = quotient.count > keep && quotient[keep] >= 0x35
        if roundsUp {
            var k = kept.count - 1
            while k >= 0 && kept[k] == 0x39 { kept[k] = 0x30; k -= 1 }
            if k >= 0 { kept[k] += 1 } else { kept.insert(0x31, at: 0) }
            if kept.count > Self.maxDigits { kept.removeLast(); lastPower += 1 }
        }
        return DecimalNumber(negative: negative, digits: kept, exponent: lastPower)
    }

    /// The Foundation `Decimal` (exact: the limits are checked where the number is made).
    var decimal: Decimal {
        guard let padded = try? checked("") else {
            assertionFailure("a decimal past the limits was made without checking them")
            return 0
        }
        if padded.isZero { return 0 }
        let text = (padded.negative ? "-" : "") + String(decoding: padded.digits, as: UTF8.self) + "e\(padded.exponent)"
        return Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) ?? 0
    }

    /// Plain decimal text without an exponent (`-0.0099`, `2328.6`, `1500`): how `storectl`,
    /// exports and JSON print a decimal.
    var text: String {
        if isZero { return "0" }
        var out = negative ? "-" : ""
        let n = digits.count
        if exponent >= 0 {
            out += String(decoding: digits, as: UTF8.self)
            out += String(repeating: "0", count: exponent)
        } else if -exponent < n {
            out += String(decoding: digits[..<(n + exponent)], as: UTF8.self)
            out += "."
            out += String(decoding: digits[(n + exponent)...], as: UTF8.self)
        } else {
            out += "0."
            out += String(repeating: "0", count: -exponent - n)
            out += String(decoding: digits, as: UTF8.self)
        }
        return out
    }

    /// Three-way comparison by value.
    static func compare(_ a: DecimalNumber, _ b: DecimalNumber) -> Int {
        let sa = a.isZero ? 0 : (a.negative ? -1 : 1), sb = b.isZero ? 0 : (b.negative ? -1 : 1)
        if sa != sb { return sa < sb ? -1 : 1 }
        if sa == 0 { return 0 }
        let m = compareMagnitude(a, b)
        return sa > 0 ? m : -m
    }

    /// The power of ten of the first digit, then the digits: the magnitude order.
    private static func compareMagnitude(_ a: DecimalNumber, _ b: DecimalNumber) -> Int {
        let ta = a.exponent + a.digits.count, tb = b.exponent + b.digits.count
        if ta != tb { return ta < tb ? -1 : 1 }
        return Value.compareBytes(a.digits, b.digits)
    }

    // MARK: Bytes

    /// The stored form: a byte (bit 0 the sign, bit 1 zero), the power of ten as a zig-zag
    /// varint, the digit count, then the digits two to a byte.
    func encode(into w: inout ByteWriter) {
        if isZero { w.u8(2); return }
        w.u8(negative ? 1 : 0)
        let e = Int64(exponent)
        w.varint(UInt64(bitPattern: (e << 1) ^ (e >> 63)))
        w.u8(UInt8(digits.count))
        var i = 0
        while i < digits.count {
            let hi = digits[i] - 0x30, lo = i + 1 < digits.count ? digits[i + 1] - 0x30 : 0
            w.u8(hi << 4 | lo)
            i += 2
        }
    }

    static func decode(from r: inout ByteReader) throws -> DecimalNumber {
        let at = r.offset
        let flags = try r.u8()
        if flags == 2 { return .zero }
        guard flags <= 1 else { throw DecodingError(offset: at, reason: "decimal flags \(flags)") }
        let z = try r.varint()
        let exponent = Int64(bitPattern: z >> 1) ^ -Int64(bitPattern: z & 1)
        let count = Int(try r.u8())
        // The limits ``checked(_:)`` enforces: a larger power of ten only as trailing zeros the
        // digits have room for.
        guard count >= 1, count <= maxDigits, exponent >= minExponent,
              count + max(0, Int(exponent) - maxExponent) <= maxDigits else {
            throw DecodingError(offset: at, reason: "decimal of \(count) digits at 10^\(exponent)")
        }
        let packed = try r.fixed((count + 1) / 2)
        var digits = [UInt8]()
        digits.reserveCapacity(count)
        for (k, byte) in packed.enumerated() {
            let hi = byte >> 4, lo = byte & 0x0F
            guard hi <= 9, lo <= 9 else { throw DecodingError(offset: at, reason: "decimal digit byte \(byte)") }
            digits.append(0x30 + hi)
            if 2 * k + 1 < count { digits.append(0x30 + lo) }
        }
        guard digits.first != 0x30, digits.last != 0x30 else {
            throw DecodingError(offset: at, reason: "decimal digits not in normal form")
        }
        return DecimalNumber(negative: flags == 1, digits: digits, exponent: Int(exponent))
    }

    /// Moves past one stored decimal with the checks of ``decode(from:)``.
    static func check(from r: inout ByteReader) throws { _ = try decode(from: &r) }

    /// Order-preserving bytes for index keys: a class byte (1 negative, 2 zero, 3 positive),
    /// then for a positive number the power of ten of its first digit (biased, two bytes big
    /// endian) and its digits ending in 0x00; a negative number has those bytes complemented,
    /// so a larger magnitude sorts first. No encoding is a prefix of another.
    func sortableBytes(into out: inout [UInt8]) {
        if isZero { out.append(2); return }
        out.append(negative ? 1 : 3)
        let top = UInt16(truncatingIfNeeded: exponent + digits.count + 0x8000)
        let flip: UInt8 = negative ? 0xFF : 0
        out.append(UInt8(top >> 8) ^ flip)
        out.append(UInt8(top & 0xFF) ^ flip)
        for d in digits { out.append((d - 0x2F) ^ flip) }  // 1…10, above the terminator
        out.append(flip)
    }
}
