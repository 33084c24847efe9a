import Foundation

/// ISO-8601 text for dates (UTC), used by import, export and the CLI: written and read in the
/// proleptic Gregorian calendar, to the millisecond.
public enum ISO8601 {
    /// The farthest a date may lie from 1970, in seconds (about 950,000 years): what this text
    /// writes and reads back (years of up to six digits). Saves and imports refuse dates beyond
    /// it, so an export always imports again. Exactly to the millisecond within 2^42 seconds
    /// (about 139,000 years); farther out a `Date` holds steps of 1 to 4 ms, and the text
    /// read back may be one step off.
    public static let maxSecondsFrom1970: Double = 3e13

    /// `2024-05-01T12:00:00Z`, or `2024-05-01T12:00:00.250Z` when the date, rounded to the
    /// nearest millisecond, has a fraction of a second. Years outside 0000–9999 get a sign
    /// (`+10000-…`, `-0001-…`), as ``date(from:)`` reads them.
    public static func string(from date: Date) -> String {
        let t = date.timeIntervalSince1970
        // Beyond about ±950,000 years (or not a number) milliseconds no longer fit: seconds.
        // (The store holds no such date: see ``maxSecondsFrom1970``.)
        guard t.isFinite, abs(t) < maxSecondsFrom1970 else { return "\(t)s" }
        let ms = Int64((t * 1000).rounded())
        let days = Int(ms >= 0 ? ms / 86_400_000 : (ms - 86_399_999) / 86_400_000)
        let inDay = Int(ms - Int64(days) * 86_400_000)
        let (y, m, d) = civil(days: days)
        func two(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
        var year = String(abs(y))
        if year.count < 4 { year = String(repeating: "0", count: 4 - year.count) + year }
        if y < 0 { year = "-" + year } else if y > 9999 { year = "+" + year }
        var text = "\(year)-\(two(m))-\(two(d))T"
            + "\(two(inDay / 3_600_000)):\(two(inDay / 60_000 % 60)):\(two(inDay / 1000 % 60))"
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
