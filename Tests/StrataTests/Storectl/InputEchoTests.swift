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
    }

    func expectShort(_ r: ProcessResult, status: Int32, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(r.status == status, "exit \(r.status): \(r.stderr.prefix(300))", sourceLocation: sourceLocation)
        #expect(r.stderr.utf8.count < 2_000, "stderr is \(r.stderr.utf8.count) bytes", sourceLocation: sourceLocation)
    }

    /// A store path holding a control character is printed escaped by the commands that say
    /// where they worked, as errors print it: `init`'s `created`, `info`'s `store:` and
    /// `generate`'s `wrote` printed it raw (an escape sequence reached the terminal).
    @Test func aPathWithAControlCharacterIsPrintedEscapedOnSuccessToo() async throws {
        let dir = temporaryDirectory("echo-path")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("esc\u{1B}[7mdir").path
        let created = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(created.status == 0 && created.stdout.contains("esc\\u{1B}[7mdir") && !created.stdout.contains("\u{1B}"),
                "\(created.stdout.debugDescription)")
        let info = try await storectl("info", store)
        #expect(info.status == 0 && info.stdout.contains("esc\\u{1B}[7mdir") && !info.stdout.contains("\u{1B}"),
                "\(info.stdout.debugDescription)")
        let output = dir.appendingPathComponent("model\u{1B}[7m.swift").path
        let generated = try await storectl("generate", "--schema", librarySchemaDirectory.path, "--output", output)
        let both = generated.stdout + generated.stderr
        #expect(generated.status == 0 && both.contains("model\\u{1B}[7m.swift") && !both.contains("\u{1B}"),
                "\(both.debugDescription)")
    }

    @Test func aHugeSchemaNameIsShortenedInTheMessage() async throws {
        let dir = temporaryDirectory("echo")
        defer { try? FileManager.default.removeItem(at: dir) }
        for (i, json) in [#"{"model":"m","version":1,"entities":[{"name":"\#(Self.huge)","attributes":[]}]}"#,
                          #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"\#(Self.huge)"}]}]}"#,
                          #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[],"\#(Self.huge)":1}]}"#].enumerated() {
            let schemas = dir.appendingPathComponent("schemas-\(i)")
            try FileManager.default.createDirectory(at: schemas, withIntermediateDirectories: true)
            try Data(json.utf8).write(to: schemas.appendingPathComponent("v1.json"))
            let r = try await storectl("init", dir.appendingPathComponent("s-\(i)").path, "--schema", schemas.path)
            expectShort(r, status: 65)
            #expect(r.stderr.contains(Self.shortened), "\(r.stderr.prefix(300))")
        }
    }

    @Test func hugeNamesInImportsAndOptionsAreShortened() async throws {
        let dir = temporaryDirectory("echo")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let inputs = [
            ("entity.ndjson", #"{"entity":"\#(Self.huge)"}"# + "\n"),
            ("key.ndjson", #"{"entity":"Genre","name":"a","\#(Self.huge)":1}"# + "\n"),
            ("Genre.csv", "name,\(Self.huge)\na,b\n"),
            ("value.ndjson", #"{"entity":"Artist","mbid":"\#(Self.huge)","name":"x"}"# + "\n"),
        ]
        for (name, text) in inputs {
            let file = dir.appendingPathComponent(name)
            try Data(text.utf8).write(to: file)
            let r = try await storectl("import", store, file.path, "--quiet")
            expectShort(r, status: 65)
            #expect(r.stderr.contains(Self.shortened), "\(name): \(r.stderr.prefix(300))")
        }
        // A command-line argument is at most 128 KiB on Linux.
        let long = String(repeating: "E", count: 100_000)
        for args in [["query", store, "--entity", long], ["export", store, "--entity", long], ["query", store, "--entity", "Genre", "--fields", long],
                     ["query", store, "--entity", "Genre", "--where", "\(long) == 1"], ["history", store, long],
                     ["import", store, "in.ndjson", "--mode", long]] {
            let r = try await storectl(args)
            expectShort(r, status: 64)
            #expect(r.stderr.contains(String(repeating: "E", count: 64) + "…(100000 bytes)"), "\(args[0]): \(r.stderr.prefix(300))")
        }
    }
}
