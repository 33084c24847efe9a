import Foundation
import Testing
@testable import Strata

/// Names and values read from input are echoed in messages at most 64 characters long, then
/// `…(N bytes)`, with control characters escaped: a megabyte schema name, NDJSON key, CSV
/// column or `--entity` is not printed whole on stderr.
@Suite struct InputEchoTests {
    static let huge = String(repeating: "N", count: 1_000_000)
    static let shortened = String(repeating: "N", count: 64) + "…(1000000 bytes)"

    @Test func shownTextIsCutAndEscaped() {
        #expect(EchoedText.shown("Track") == "Track")
        #expect(EchoedText.shown(Self.huge) == Self.shortened)
        #expect(EchoedText.shown("a\u{0}b\nc\u{1B}") == #"a\u{0}b\nc\u{1B}"#)
        #expect(EchoedText.shown(String(repeating: "é", count: 65)) == String(repeating: "é", count: 64) + "…(130 bytes)")
        #expect(EchoedText.escaped("crlf\r\n\t\u{7F}\u{85}") == #"crlf\r\n\t\u{7F}\u{85}"#)
        // One Character of a million scalars (a letter and its combining marks) is cut too.
        let marks = "a" + String(repeating: "\u{301}", count: 1_000_000)
        #expect(EchoedText.shown(marks).unicodeScalars.count < 100)
        #expect(EchoedText.quoted(marks, cut: true).unicodeScalars.count < 100)
        // Bidirectional overrides and line separators reorder or break what follows.
        #expect(EchoedText.escaped("a\u{202E}b\u{2066}c\u{2028}d") == #"a\u{202E}b\u{2066}c\u{2028}d"#)
        // A quote or backslash followed by a combining mark (one Character with it) is escaped
        // too: where the quoted string ends stays certain.
        #expect(EchoedText.quoted("a\"\u{301}b\\\u{308}c") == "\"a\\\"\u{301}b\\\\\u{308}c\"")
    }

    /// A JSON input's duplicate member name is echoed escaped and cut, and a byte the parser did
    /// not expect by its value: a name holding an escape sequence reached the terminal, and one
    /// holding a line break split the rejects file's comment, its second part read as a record
    /// by a re-import of that file.
    @Test func aDuplicateMemberNameIsEchoedEscaped() async throws {
        let dir = temporaryDirectory("echo-duplicate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let smuggled = #"\n{\"entity\":\"Genre\",\"name\":\"smuggled\"}\n\u001b]52;c;eA==\u0007"#
        let input = dir.appendingPathComponent("in.ndjson")
        try Data((#"{"entity":"Genre","name":"kept"}"# + "\n" +
                  #"{"entity":"Genre","name":"x","\#(smuggled)":1,"\#(smuggled)":2}"# + "\n" +
                  "{\"entity\":\"Genre\",\"name\":\u{7}}\n").utf8).write(to: input)
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let r = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", rejects, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let text = try String(contentsOfFile: rejects, encoding: .utf8)
        let reasons = text.split(separator: "\n").filter { $0.hasPrefix("# ") }
        #expect(reasons.count == 2 && text.split(separator: "\n").count == 4,
                "two reasons and the two lines: \(text.debugDescription)")
        #expect(reasons.allSatisfy { !$0.contains("\u{1B}") && !$0.contains("\u{7}") }, "\(reasons)")
        #expect(reasons.first?.contains(#"duplicate member "\n{\"entity\":"#) == true, "\(reasons)")
        #expect(reasons.last?.hasSuffix("unexpected byte 0x07") == true, "\(reasons)")
        // Importing the rejects file again brings in no record that was not in the input.
        let again = try await storectl("import", store, rejects, "--continue-on-error", "--rejects",
                                       dir.appendingPathComponent("again.ndjson").path, "--quiet")
        #expect(again.status == 0, "\(again.stderr)")
        let genres = try await storectl("query", store, "--entity", "Genre", "--json")
        #expect(genres.stdout.contains("kept") && !genres.stdout.contains("smuggled"), "\(genres.stdout)")
    }

    /// A line of many members is checked for duplicate names in linear time: it takes well
    /// under a second, and the quadratic check it replaced ran for more than ten minutes (no
    /// time limit here: under the whole suite's load a test waits minutes for a thread).
    @Test(.timeLimit(.minutes(5))) func anObjectOfManyMembersParsesInLinearTime() throws {
        var text = #"{"entity":"Genre""#
        for i in 0..<200_000 { text += ",\"k\(i)\":0" }
        guard case .object(let members) = try JSONValue.parse(Array((text + "}").utf8)) else {
            Issue.record("not an object")
            return
        }
        #expect(members.count == 200_001)
        #expect(throws: JSONParseError.self) { _ = try JSONValue.parse(Array((text + #","k199999":1}"#).utf8)) }
    }
}
