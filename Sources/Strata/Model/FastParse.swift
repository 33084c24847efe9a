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
        return s.withUTF8 { uuid(utf8: $0) }
    }

    /// ``uuid(_:)`` of a string given as its UTF-8 bytes.
    static func uuid(utf8 b: UnsafeBufferPointer<UInt8>) -> UUID? {
        guard b.count == 36, b[8] == 45, b[13] == 45, b[18] == 45, b[23] == 45 else { return nil }
        return hexDigits.withUnsafeBufferPointer { digit -> UUID? in
            var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            // A digit's value is 0–15, anything else 0xFF: the bits above the low four of all
            // of them together say whether one was not a digit (no branch a digit).
            var seen: UInt8 = 0
            withUnsafeMutableBytes(of: &bytes) { out in
                var i = 0, o = 0
                while i < 36 {
                    if i == 8 || i == 13 || i == 18 || i == 23 { i += 1; continue }
                    let h = digit[Int(b[i])], l = digit[Int(b[i + 1])]
                    seen |= h | l
                    out[o] = h << 4 | l
                    o += 1
                    i += 2
                }
            }
            return seen & 0xF0 == 0 ? UUID(uuid: bytes) : nil
        }
    }

    /// Each byte's value as a hexadecimal digit (either case), 0xFF for a byte that is not one.
    private static let hexDigits: [UInt8] = (0...255).map { hex(UInt8($0)) ?? 0xFF }

    /// `YYYY-MM-DDTHH:MM:SS[.f…]` followed by `Z` or an offset `±HH:MM` (or `±HHMM`), with up to
    /// nine fraction digits (rounded to the millisecond, half up); a year outside 0000–9999 is written with a sign and more digits
    /// (`+10000-01-01T00:00:00Z`, `-0001-12-31T00:00:00Z`, ISO 8601's expanded years). The
    /// calendar is the proleptic Gregorian one throughout (as ``ISO8601/string(from:)`` writes).
    /// Nil for anything else, and for impossible dates and times (February 30th, hour 24, minute
    /// or second 60): nothing is rolled over into the next day or minute.
    static func date(_ s: String) -> Date? {
        var s = s
        return s.withUTF8 { date(utf8: $0) }
    }

    /// ``date(_:)`` of a string given as its UTF-8 bytes.
    static func date(utf8 b: UnsafeBufferPointer<UInt8>) -> Date? {
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
              expect(84), let h = digits(2), expect(58), let mi = digits(2), expect(58), let sec = digits(2) else {
                  return nil
              }
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
            // To the millisecond, as dates are written: a finer fraction is not kept (it
            // would be stored, and lost by the next export).
            let scale = n > 3 ? Int(pow(10, Double(n - 3))) : 1
            let millis = n > 3 ? (f + scale / 2) / scale : f * Int(pow(10, Double(3 - n)))
            fraction = Double(millis) / 1000
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
        let daysInMonth = switch mo {
        case 2: leap ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
        guard d >= 1, d <= daysInMonth else { return nil }
        let days = ISO8601.days(year: y, month: mo, day: d)
        return Date(
            timeIntervalSince1970: Double(days * 86400 + h * 3600 + mi * 60 + sec - offsetSeconds) + fraction)
    }
}
