import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `ISO8601`, the date format of imports, exports and the filter language.
@Suite struct ISO8601Tests {
    /// Impossible dates are refused (never rolled over: February 29th 2023 is not March 1st), and
    /// every date is written back as it was read: milliseconds exactly (`.001`, not `.000`), dates
    /// before 1582 (proleptic Gregorian, no shift by the Julian calendar's days), years outside
    /// 0000–9999 with a sign.
    @Test func datesAreReadStrictlyAndWrittenBackExactly() {
        for bad in ["2023-02-29T00:00:00Z", "2024-04-31T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:60:00Z",
                    "2024-01-01T00:00:60Z", "2024-00-01T00:00:00Z", "2024-01-00T00:00:00Z", "2024-01-01T00:00:00",
                    "2024-01-01T00:00:00.Z", "2024-01-01T00:00:00.1234567890Z", "2024-01-01T00:00:00+24:00", "2024-01-01",
                    "+999-01-01T00:00:00Z", "2024-01-01T00:00:00Zjunk", ""] {
            #expect(ISO8601.date(from: bad) == nil, "\(bad)")
        }
        for text in ["2024-02-29T12:00:00Z", "1500-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "0000-03-01T00:00:00Z",
                     "2024-01-01T00:00:00.001Z", "2024-01-01T00:00:00.007Z", "1969-12-31T23:59:59.999Z",
                     "9999-12-31T23:59:59.999Z", "+10000-01-01T00:00:00Z", "-0001-12-31T00:00:00Z", "1582-10-04T00:00:00Z"] {
            guard let d = ISO8601.date(from: text) else {
                Issue.record("\(text) not read")
                continue
            }
            #expect(ISO8601.string(from: d) == text)
        }
        #expect(ISO8601.date(from: "2024-05-01T14:00:00+02:00") == Date(timeIntervalSince1970: 1_714_564_800))
        #expect(ISO8601.date(from: "2024-05-01T10:30:00-0130") == Date(timeIntervalSince1970: 1_714_564_800))
        #expect(ISO8601.string(from: Date(timeIntervalSince1970: 0.0004)) == "1970-01-01T00:00:00Z")
        #expect(ISO8601.string(from: Date(timeIntervalSince1970: 59.9996)) == "1970-01-01T00:01:00Z")
        // The day arithmetic against Foundation's Gregorian calendar, where both agree (after 1582).
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var rng = SeededGenerator(seed: 17)
        for _ in 0..<2_000 {
            let seconds = Double(Int64.random(in: -12_000_000_000...250_000_000_000, using: &rng))
            let date = Date(timeIntervalSince1970: seconds)
            let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
            let expected = String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!)
            #expect(ISO8601.string(from: date) == expected)
            #expect(ISO8601.date(from: expected) == date)
        }
    }
}
