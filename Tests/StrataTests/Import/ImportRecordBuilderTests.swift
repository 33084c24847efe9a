import Foundation
import Testing
@testable import Strata

/// How one NDJSON line becomes a record: the UTF-8 check and references by unique key.
@Suite struct ImportRecordBuilderTests {
    private func builder() throws -> RecordBuilder {
        RecordBuilder(schema: try librarySchema(), file: "in.ndjson", maxValueBytes: 1 << 20)
    }

    /// The reference model: the standard library's UTF-8 decoder over the whole line.
    private func modelFirstInvalid(_ bytes: [UInt8]) -> Int? {
        var iterator = bytes.makeIterator(), decoder = UTF8(), offset = 0
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue(let s): offset += UTF8.width(s)
            case .emptyInput: return nil
            case .error: return offset
            }
        }
    }

    /// Random lines of ASCII, valid multi-byte sequences and stray bytes, of lengths around the
    /// eight-byte steps of the ASCII check: the same answer as decoding them.
    @Test func theUTF8CheckAgreesWithDecoding() {
        var rng = SeededGenerator(seed: 42)
        // Well-formed sequences at the edges of each byte range, then ill-formed ones: stray and
        // truncated bytes, overlong forms, surrogates, scalars past U+10FFFF, bytes never used.
        let pieces: [[UInt8]] = [[0x61], [0x7B], [0xC3, 0xA9], [0xE2, 0x82, 0xAC], [0xF0, 0x9F, 0x8E, 0xB5],
                                 [0xC2, 0x80], [0xDF, 0xBF], [0xE0, 0xA0, 0x80], [0xED, 0x9F, 0xBF],
                                 [0xEF, 0xBF, 0xBF], [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF],
                                 [0x80], [0xC3], [0xFF], [0xED, 0xA0, 0x80], [0xC0, 0x80], [0xC1, 0xBF],
                                 [0xE0, 0x80, 0x80], [0xE2, 0x82], [0xF0, 0x80, 0x80, 0x80], [0xF0, 0x9F, 0x8E],
                                 [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xFE]]
        for _ in 0..<20_000 {
            var line: [UInt8] = []
            let count = Int.random(in: 0...24, using: &rng)
            for _ in 0..<count {
                // Mostly ASCII, as import lines are.
                let piece = Int.random(in: 0..<10, using: &rng) < 8 ? pieces[Int.random(in: 0...1, using: &rng)]
                    : pieces.randomElement(using: &rng)!
                line += piece
            }
            #expect(RecordBuilder.firstInvalidUTF8(line) == modelFirstInvalid(line), "\(line)")
        }
    }

    /// A reference object must name exactly the attributes of one of the target's uniques: the
    /// key itself resolves, a key with another member or a member of another name is refused.
    @Test func aReferenceNamesExactlyOneUniqueKey() throws {
        let b = try builder()
        let mbid = "00000000-0000-4000-8000-000000000001"
        let track = #""entity":"Track","mbid":"00000000-0000-4000-8000-000000000002","title":"T","#
            + #""durationSeconds":60,"addedAt":"2024-01-01T00:00:00Z""#
        let good = try b.fromJSON(Array("{\(track),\"album\":{\"mbid\":\"\(mbid)\"}}".utf8), line: 1)
        let album = try #require(good.links.first { $0.relationship.name == "album" }?.targets?.first)
        guard case .unique(_, let constraint, let values) = album else {
            Issue.record("expected a reference by unique key, got \(album)")
            return
        }
        #expect(constraint == 0)
        #expect(values == [.uuid(try #require(UUID(uuidString: mbid)))])
        for bad in [#"{"mbid":"\#(mbid)","title":"x"}"#, #"{"title":"x"}"#, "{}"] {
            #expect {
                _ = try b.fromJSON(Array("{\(track),\"album\":\(bad)}".utf8), line: 7)
            } throws: { error in
                guard let issue = error as? ImportIssue else { return false }
                return issue.line == 7 && issue.field == "album" && issue.reason.contains("names a unique key of Album")
            }
        }
    }

    /// A bad value of a reference's key is named by the relationship, with the key: `album:
    /// reference key mbid: …`. It was named `mbid`, which reads as the track's own attribute.
    @Test func aBadReferenceKeyIsNamedByItsRelationship() throws {
        let b = try builder()
        let track = #""entity":"Track","mbid":"00000000-0000-4000-8000-000000000002","title":"T","#
            + #""durationSeconds":60,"addedAt":"2024-01-01T00:00:00Z""#
        #expect {
            _ = try b.fromJSON(Array("{\(track),\"album\":{\"mbid\":123}}".utf8), line: 4)
        } throws: { error in
            guard let issue = error as? ImportIssue else { return false }
            return issue.line == 4 && issue.field == "album" && issue.reason.hasPrefix("reference key mbid: expected uuid")
        }
    }

    /// A CSV to-one cell with a `|` is a list, refused as the README says, also when its parts
    /// are empty: `|` cleared the relationship and `ID|` was taken as the one id.
    @Test func aToOneCellWithABarIsAList() throws {
        let b = try builder()
        let schema = try librarySchema()
        let track = try #require(schema.entity(named: "Track")), album = try #require(schema.entity(named: "Album"))
        let id = ObjectID(high: UInt64(album.tag) << 48 | 1, low: 2).description
        let header = try b.csvColumns(["mbid", "title", "durationSeconds", "addedAt", "album"]
                                        .map { CSVSplitter.Field(text: $0, quoted: false) }, entity: track, line: 1)
        func row(_ cell: String) -> [CSVSplitter.Field] {
            ["00000000-0000-4000-8000-000000000002", "t", "60", "2024-01-01T00:00:00Z", cell]
                .map { CSVSplitter.Field(text: $0, quoted: false) }
        }
        // The row is good with one id, or with none.
        #expect(try b.fromCSV(row(id), columns: header, entity: track, line: 2).links.count == 1)
        _ = try b.fromCSV(row(""), columns: header, entity: track, line: 2)
        for (cell, count) in [("|", 2), ("\(id)|", 2), ("\(id)|\(id)", 2), ("||", 3)] {
            #expect {
                try b.fromCSV(row(cell), columns: header, entity: track, line: 2)
            } throws: { error in
                guard let issue = error as? ImportIssue else { return false }
                return issue.field == "album" && issue.reason == "a to-one relationship takes one id, found \(count)"
            }
        }
    }

    /// An integer just below the int range (`-9223372036854775809`, a double that rounds to
    /// -2^63) is told the range, as one above it is.
    @Test func anIntegerJustBelowTheIntRangeIsToldTheRange() throws {
        #expect {
            _ = try ValueConversion.value(from: .double(-9_223_372_036_854_775_808.0), type: .int)
        } throws: { error in
            guard let f = error as? ValueConversion.Failure else { return false }
            return f.reason.contains("write the integer's digits, within -9223372036854775808…9223372036854775807")
        }
    }

    /// The bound a record's unique keys are measured by before one is built: wherever it says
    /// a key cannot be over LMDB's limit, the key built is within it (strings of zero bytes,
    /// whose every byte the encoding escapes, and of several-byte characters; keys of one to
    /// three values of every kind), and it lets none past that is over.
    @Test func theUniqueKeyBoundIsAnUpperBound() {
        var rng = SeededGenerator(seed: 7)
        let pieces = ["a", "\u{0}", "é", "光", "🎵"]
        func randomValue() -> Value {
            switch Int.random(in: 0..<8, using: &rng) {
            case 0: return .null
            case 1: return .int(Int64.random(in: .min ... .max, using: &rng))
            case 2: return .double(Double.random(in: -1e9...1e9, using: &rng))
            case 3: return .date(Date(timeIntervalSince1970: Double.random(in: 0...2e9, using: &rng)))
            case 4: return .bool(Bool.random(using: &rng))
            case 5: return .uuid(UUID())
            case 6: return .bytes((0..<Int.random(in: 0...300, using: &rng)).map { _ in UInt8.random(in: 0...2, using: &rng) })
            default:
                return .string((0..<Int.random(in: 0...300, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined())
            }
        }
        var measuredOnly = 0
        for _ in 0..<5_000 {
            let count = Int.random(in: 1...3, using: &rng)
            let values = (0..<count).map { _ in randomValue() }
            let u = IndexDescription(attributes: Array(0..<count), isUnique: true, tag: 0x0101)
            let key = u.uniqueKeyBytes(values)
            if u.uniqueKeyMayBeLonger(than: LMDBLimits.maxKeyBytes, values) {
                measuredOnly += 1
            } else {
                #expect((key?.count ?? 0) <= LMDBLimits.maxKeyBytes, "\(values)")
            }
            if let key, key.count > LMDBLimits.maxKeyBytes {
                #expect(u.uniqueKeyMayBeLonger(than: LMDBLimits.maxKeyBytes, values), "\(values)")
            }
        }
        // Both answers were given.
        #expect(measuredOnly > 100 && measuredOnly < 4_900, "\(measuredOnly)")
    }

    /// Objects of 1 to 70 members, below and past the count after which the parser looks names
    /// up in a set instead of scanning them: every member kept in order, and a name given twice
    /// refused, wherever its two places are, at the second.
    @Test func aDuplicateMemberNameIsFoundAtAnyCountOfMembers() throws {
        for count in 1...70 {
            let names = (0..<count).map { "m\($0)" }
            let plain = "{" + names.map { "\"\($0)\":1" }.joined(separator: ",") + "}"
            guard case .object(let members) = try JSONValue.parse(plain) else {
                Issue.record("not an object: \(plain)")
                continue
            }
            #expect(members.map(\.0) == names)
            for (first, second) in [(0, count), (count / 2, count), (count - 1, count)] where first < count {
                var given = names
                given.insert(names[first], at: second)
                let text = "{" + given.map { "\"\($0)\":1" }.joined(separator: ",") + "}"
                #expect {
                    _ = try JSONValue.parse(text)
                } throws: { error in
                    (error as? JSONParseError)?.reason == "duplicate member \"\(names[first])\""
                }
            }
        }
    }
}
