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

    @Test func uuidsAgreeWithFoundation() {
        for _ in 0..<1000 {
            let u = UUID()
            #expect(FastParse.uuid(u.uuidString) == u)
            #expect(FastParse.uuid(u.uuidString.lowercased()) == u)
        }
        #expect(FastParse.uuid("not-a-uuid") == nil)
        #expect(FastParse.uuid("7e66a91c-080f-5eea-aa6b-d2e7423e063g") == nil)
    }
}
