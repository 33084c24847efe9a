import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `FastParse`, the import's date and UUID parsers, against Foundation's.
@Suite struct FastParseTests {
    @Test func datesAgreeWithFoundation() {
        var rng = SeededGenerator(seed: 99)
        let style = Date.ISO8601FormatStyle()
        for _ in 0..<2000 {
            let seconds = Double(Int64.random(in: -2_000_000_000...4_000_000_000, using: &rng))
            let text = style.format(Date(timeIntervalSince1970: seconds))
            #expect(FastParse.date(text) == Date(timeIntervalSince1970: seconds), "\(text)")
        }
        #expect(FastParse.date("2024-02-29T12:00:00Z") != nil)
        #expect(FastParse.date("2023-02-29T12:00:00Z") == nil)
        #expect(FastParse.date("2024-13-01T00:00:00Z") == nil)
        #expect(FastParse.date("2024-05-01T12:00:00.250Z") == Date(timeIntervalSince1970: 1_714_564_800.25))
        #expect(ISO8601.date(from: "2024-05-01T12:00:00+02:00") == Date(timeIntervalSince1970: 1_714_557_600))
    }

    /// A fraction finer than a millisecond is rounded to the millisecond, half up, as dates are
    /// written: it was stored as given, and an export (which writes milliseconds) lost it, so the
    /// store and its export answered a query differently.
    @Test func aFractionBelowAMillisecondIsRoundedToIt() {
        let base = 1_704_067_200.0   // 2024-01-01T00:00:00Z
        let cases: [(String, Double)] = [
            (".0004", 0), (".0005", 0.001), (".0006", 0.001), (".1234", 0.123), (".12350", 0.124),
            (".999499999", 0.999), (".9995", 1), (".999999999", 1), (".5", 0.5), (".25", 0.25), (".125", 0.125),
        ]
        for (fraction, expected) in cases {
            let text = "2024-01-01T00:00:00\(fraction)Z"
            #expect(FastParse.date(text) == Date(timeIntervalSince1970: base + expected), "\(text)")
            // What is read is what is written back.
            #expect(FastParse.date(text).map(ISO8601.string(from:)).flatMap(FastParse.date) == FastParse.date(text), "\(text)")
        }
        #expect(FastParse.date("2024-12-31T23:59:59.9996Z") == Date(timeIntervalSince1970: 1_735_689_600))
        #expect(FastParse.date("1969-12-31T23:59:59.9996Z") == Date(timeIntervalSince1970: 0))
    }

    @Test func uuidsAgreeWithFoundation() {
        for _ in 0..<1000 {
            let u = UUID()
            #expect(FastParse.uuid(u.uuidString) == u)
            #expect(FastParse.uuid(u.uuidString.lowercased()) == u)
        }
        #expect(FastParse.uuid("not-a-uuid") == nil)
        #expect(FastParse.uuid("7e66a91c-080f-5eea-aa6b-d2e7423e063g") == nil)
    }

    /// Every byte at every place of a UUID's text: read from the bytes exactly the canonical texts
    /// (a non-digit must not pass for one, whichever bits it shares with digits), as from the
    /// string, and what it reads is what Foundation reads. Foundation takes some texts the fast
    /// reading leaves to it, which the conversion then asks it for.
    @Test func aUUIDWithAnyByteAnywhereAgreesWithFoundation() {
        let text = Array("7e66a91c-080f-5eea-aa6b-d2e7423e063b".utf8)
        for at in text.indices {
            for byte in UInt8(0)...UInt8(255) {
                var t = text
                t[at] = byte
                let s = String(decoding: t, as: UTF8.self)
                let fast = t.withUnsafeBufferPointer(FastParse.uuid(utf8:))
                if fast != nil { #expect(fast == UUID(uuidString: s), "\(s)") }
                // A byte past ASCII makes no valid text alone: the string then differs from the bytes.
                if byte < 0x80 { #expect(fast == FastParse.uuid(s), "\(s)") }
                // Exactly the canonical texts: eight, four, four, four and twelve digits.
                let canonical = t.enumerated().allSatisfy { i, c in
                    [8, 13, 18, 23].contains(i) ? c == 45 : (48...57).contains(c) || (97...102).contains(c | 0x20)
                }
                #expect((fast != nil) == canonical, "\(s)")
            }
        }
    }
}
