import Foundation
import Testing
@testable import Strata

/// storectl as a user runs it: a real process; stdout, stderr and exit codes checked.
@Suite struct StorectlTests {
    let sample = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path
    let schemaDir = librarySchemaDirectory.path

    func newStore() async throws -> (URL, String) {
        let dir = temporaryDirectory("storectl")
        let store = dir.appendingPathComponent("store").path
        let r = try await storectl("init", store, "--schema", schemaDir)
        #expect(r.status == 0, "\(r.stderr)")
        return (dir, store)
    }

    func write(_ text: String, to dir: URL, name: String) throws -> String {
        let path = dir.appendingPathComponent(name).path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    func infoJSON(_ store: String) async throws -> JSONValue {
        let r = try await storectl("info", store, "--json")
        #expect(r.status == 0, "\(r.stderr)")
        return try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test func initImportInfoJSON() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await storectl("import", store, sample, "--json")
        #expect(r.status == 0, "\(r.stderr)")
        let summary = try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(summary["records"] == .int(406))
        let info = try await infoJSON(store)
        #expect(info["schema"]?["model"] == .string("library"))
        #expect(info["schema"]?["version"] == .int(2))
        #expect(info["format"] == .int(3))
        #expect(info["entities"]?["Track"] == .int(306))
        #expect(info["entities"]?["Playlist"] == .int(9))
        #expect(info["lastTransaction"] == .int(1))
        #expect(info["logEntries"] == .int(1))
        if case .int(let bytes)? = info["fileBytes"] { #expect(bytes > 0) } else { Issue.record("fileBytes missing") }
    }

    @Test func reimportIsIdempotent() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try await storectl("import", store, sample, "--quiet").status == 0)
        let before = try await storectl("export", store, "--entity", "Track").stdout
        let again = try await storectl("import", store, sample, "--json")
        #expect(again.status == 0)
        #expect(try JSONValue.parse(again.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["transactions"] == .int(0))
        #expect(try await storectl("export", store, "--entity", "Track").stdout == before)
        #expect(try await infoJSON(store)["lastTransaction"] == .int(1))
    }

    func expectBadInput(_ lines: String, _ fragments: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = try write(lines, to: dir, name: "in.ndjson")
        let r = try await storectl("import", store, file, "--quiet")
        #expect(r.status == 65, "exit \(r.status): \(r.stderr)", sourceLocation: sourceLocation)
        for f in fragments { #expect(r.stderr.contains(f), "stderr lacks \(f):\n\(r.stderr)", sourceLocation: sourceLocation) }
        #expect(r.stderr.contains("nothing was written"), sourceLocation: sourceLocation)
        #expect(try await infoJSON(store)["lastTransaction"] == .int(0), "something was written", sourceLocation: sourceLocation)
    }

    static let good = #"{"entity":"Genre","name":"Jazz"}"# + "\n"

    @Test func malformedJSON() async throws { try await expectBadInput(Self.good + "{\"entity\": \n", ["in.ndjson:2: malformed JSON"]) }
    @Test func wrongType() async throws {
        try await expectBadInput(Self.good + #"{"entity":"Artist","mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e063a","name":"X","foundedYear":1990}"#,
                           ["in.ndjson:2: foundedYear: expected string, found integer"])
    }
    @Test func unknownEntity() async throws { try await expectBadInput(Self.good + #"{"entity":"Song"}"#, ["in.ndjson:2: entity: unknown entity 'Song'"]) }
    @Test func unknownField() async throws { try await expectBadInput(#"{"entity":"Genre","name":"A","color":"red"}"#, ["in.ndjson:1: color: unknown field of Genre"]) }
    @Test func missingRequired() async throws { try await expectBadInput(#"{"entity":"Playlist","name":"A"}"#, ["in.ndjson:1: createdAt: required attribute is missing"]) }
    @Test func danglingReference() async throws {
        try await expectBadInput(#"{"entity":"Album","mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e063a","title":"T","artist":{"mbid":"8e66a91c-080f-5eea-aa6b-d2e7423e063a"}}"#,
                           ["in.ndjson:1: artist: dangling reference"])
    }
    @Test func duplicateUniqueKey() async throws { try await expectBadInput(Self.good + Self.good, ["in.ndjson:2: name: duplicate key", "first at"]) }
    @Test func invalidUTF8() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("in.ndjson").path
        try Data(Array(Self.good.utf8) + [0x7B, 0x22, 0xC3, 0x28, 0x22, 0x7D, 0x0A]).write(to: URL(fileURLWithPath: path))
        let r = try await storectl("import", store, path, "--quiet")
        #expect(r.status == 65)
        #expect(r.stderr.contains("in.ndjson:2: not valid UTF-8"))
    }

    @Test func veryLongLine() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        // Longer than the 16 MiB line limit.
        let long = #"{"entity":"Genre","name":""# + String(repeating: "x", count: 17 << 20) + "\"}\n"
        let file = try write(Self.good + long + #"{"entity":"Genre","name":"B"}"# + "\n", to: dir, name: "in.ndjson")
        let r = try await storectl("import", store, file, "--quiet")
        #expect(r.status == 65)
        #expect(r.stderr.contains("in.ndjson:2: line of"), "\(r.stderr)")
    }

    @Test func continueOnErrorWritesGoodRecordsAndRejects() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = try write(Self.good + "not json\n" + #"{"entity":"Genre","name":"Rock"}"# + "\n", to: dir, name: "in.ndjson")
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let r = try await storectl("import", store, file, "--continue-on-error", "--rejects", rejects, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try await infoJSON(store)["entities"]?["Genre"] == .int(2))
        let text = try String(contentsOfFile: rejects, encoding: .utf8)
        #expect(text.contains("# ") && text.contains("in.ndjson:2") && text.contains("not json"))
    }

    @Test func csvImportAndExportRoundTrip() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let genres = try write("name\nJazz\n\"Rock, \"\"Hard\"\"\"\n\"Multi\nLine\"\n", to: dir, name: "Genre.csv")
        let r = try await storectl("import", store, genres, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let exported = dir.appendingPathComponent("out/Genre.csv").path
        try FileManager.default.createDirectory(atPath: dir.appendingPathComponent("out").path, withIntermediateDirectories: true)
        #expect(try await storectl("export", store, "--entity", "Genre", "--format", "csv", "--output", exported).status == 0)
        let text = try String(contentsOfFile: exported, encoding: .utf8)
        #expect(text.contains("\"Rock, \"\"Hard\"\"\""))
        #expect(text.contains("\"Multi\nLine\""))
        // Into a new store, the export reproduces the same ids and values.
        let (dir2, store2) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir2) }
        #expect(try await storectl("import", store2, exported, "--quiet").status == 0)
        let again = dir.appendingPathComponent("again.csv").path
        #expect(try await storectl("export", store2, "--entity", "Genre", "--format", "csv", "--output", again).status == 0)
        #expect(try String(contentsOfFile: again, encoding: .utf8) == text)
    }

    @Test func exportThenImportReproducesTheLibrary() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try await storectl("import", store, sample, "--quiet").status == 0)
        let entities = ["Genre", "Artist", "Album", "Track", "Playlist"]
        var files: [String] = []
        var originals: [String: String] = [:]
        for e in entities {
            let path = dir.appendingPathComponent("\(e).ndjson").path
            #expect(try await storectl("export", store, "--entity", e, "--output", path).status == 0)
            files.append(path)
            originals[e] = try String(contentsOfFile: path, encoding: .utf8)
        }
        let (dir2, store2) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir2) }
        // Reverse order: every relationship is a forward reference now.
        let r = try await storectl(["import", store2] + files.reversed() + ["--quiet"])
        #expect(r.status == 0, "\(r.stderr)")
        for e in entities {
            #expect(try await storectl("export", store2, "--entity", e).stdout == originals[e], "\(e) differs after export → import")
        }
    }

    @Test func queryCountAndJSON() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try await storectl("import", store, sample, "--quiet").status == 0)
        let c = try await storectl("query", store, "--entity", "Track", "--where", "genre == null", "--count")
        #expect(c.status == 0 && c.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "16")
        let j = try await storectl("query", store, "--entity", "Track", "--sort=-durationSeconds", "--limit", "2", "--json")
        let lines = j.stdout.split(separator: "\n")
        #expect(lines.count == 2)
        #expect(try JSONValue.parse(String(lines[0]))["durationSeconds"] == .int(870))
    }

    @Test func usageErrorsExit64() async throws {
        #expect(try await storectl("import").status == 64)
        #expect(try await storectl("query", "/nonexistent", "--entity").status == 64)
        #expect(try await storectl("import", "/x", "y.ndjson", "--batch", "0").status == 64)
        #expect(try await storectl("import", "/x", "y.ndjson", "--continue-on-error").status == 64)
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let bad = try await storectl("query", store, "--entity", "Track", "--where", "durationSeconds >> 3")
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("at character"))
    }

    @Test func missingStoreAndFilesExit66() async throws {
        let r = try await storectl("info", "/nonexistent/store")
        #expect(r.status == 66)
        #expect(r.stderr.hasPrefix("storectl: error: ") && r.stderr.contains("no store here"))
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try await storectl("import", store, "/nonexistent.ndjson").status == 66)
    }

    @Test func initTwiceExits73AndBadSchemaExits65() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let again = try await storectl("init", store, "--schema", schemaDir)
        #expect(again.status == 73)
        let badSchema = dir.appendingPathComponent("schema")
        try FileManager.default.createDirectory(at: badSchema, withIntermediateDirectories: true)
        _ = try write(#"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"float"}]}]}"#, to: badSchema, name: "v1.json")
        let r = try await storectl("init", dir.appendingPathComponent("s2").path, "--schema", badSchema.path)
        #expect(r.status == 65)
        #expect(r.stderr.contains("v1.json: entity 'A', attribute 'x': unknown type 'float'"))
    }

    /// `init` on a symbolic link that points at nothing: exit 73 with one line naming the link's
    /// target (no Foundation error dump); nothing is created where it points.
    @Test func initOnADanglingSymbolicLinkSaysSo() async throws {
        let dir = temporaryDirectory("storectl")
        defer { try? FileManager.default.removeItem(at: dir) }
        let link = dir.appendingPathComponent("store").path
        let target = dir.appendingPathComponent("missing/store").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        let r = try await storectl("init", link, "--schema", schemaDir)
        #expect(r.status == 73, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("cannot create directory: \(link) is a symbolic link to \(target), which does not exist"), "\(r.stderr)")
        #expect(!r.stderr.contains("NSCocoaErrorDomain") && !r.stderr.contains("Error Domain"), "\(r.stderr)")
        #expect(r.stderr.split(separator: "\n").count == 1, "\(r.stderr)")
        #expect(r.stderr.contains("cannot create the store") && !r.stderr.contains("not a Strata store"),
                "nothing was there to be a store or not: \(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("missing").path))
    }

    /// `migrate --schema` naming an empty directory: refused in the words of `init` and
    /// `generate` (it said "migration: no schema versions given").
    @Test func migrateWithAnEmptySchemaDirectorySaysWhatIsExpected() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let empty = dir.appendingPathComponent("schemas")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: false)
        let r = try await storectl("migrate", store, "--schema", empty.path)
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("no schema files (expected v1.json, v2.json, …)"), "\(r.stderr)")
    }

    /// An int attribute takes a whole number written with an exponent or a fraction (`1e2`,
    /// `2.5E1`, `100.0`, `-3e0`); a number with a fractional part is refused saying it is not
    /// an integer.
    @Test func integralNumbersWithAnExponentAreAcceptedForInts() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let lines = [("1e2", 100), ("2.5E1", 25), ("100.0", 100), ("-3e0", -3)].enumerated().map { i, c in
            #"{"entity":"Track","mbid":"00000000-0000-4000-8000-00000000000\#(i)","title":"t\#(i)","durationSeconds":\#(c.0),"addedAt":"2025-01-01T00:00:00Z"}"#
        }
        let file = try write(lines.joined(separator: "\n") + "\n", to: dir, name: "in.ndjson")
        let r = try await storectl("import", store, file, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let q = try await storectl("query", store, "--entity", "Track", "--json")
        let durations = try q.stdout.split(separator: "\n").map { try JSONValue.parse(String($0))["durationSeconds"] }
        #expect(durations == [.int(100), .int(25), .int(100), .int(-3)], "\(q.stdout)")
    }
    @Test func aFractionalNumberForAnIntSaysItIsNotAnInteger() async throws {
        try await expectBadInput(#"{"entity":"Track","mbid":"00000000-0000-4000-8000-000000000001","title":"t","durationSeconds":1.5e0,"addedAt":"2025-01-01T00:00:00Z"}"#,
                           ["in.ndjson:1: durationSeconds: 1.5 is not an integer"])
    }

    /// `init` with a schema whose relationship is its own inverse exits 65 naming the entity and
    /// the relationship; no store is made.
    @Test func initRefusesARelationshipThatIsItsOwnInverse() async throws {
        let dir = temporaryDirectory("storectl")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schemas = dir.appendingPathComponent("schemas")
        try FileManager.default.createDirectory(at: schemas, withIntermediateDirectories: true)
        _ = try write(#"{"model":"m","version":1,"entities":[{"name":"Person","attributes":[{"name":"name","type":"string"}],"uniques":[["name"]],"relationships":[{"name":"spouse","destination":"Person","inverse":"spouse"}]}]}"#,
                      to: schemas, name: "v1.json")
        let store = dir.appendingPathComponent("s").path
        let r = try await storectl("init", store, "--schema", schemas.path)
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("v1.json: entity 'Person', relationship 'spouse': is declared as its own inverse"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store))
    }

    /// Every subcommand's `--help`, the cluster's included, shows at least one example (the
    /// cluster's five did not, though the README says every subcommand does).
    @Test func helpHasExamplesForEverySubcommand() async throws {
        let top = try await storectl("--help")
        let listed = top.stdout.split(separator: "\n").compactMap { line -> String? in
            let words = line.split(separator: " ")
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let first = words.first,
                  first.allSatisfy({ $0.isLowercase }) else { return nil }
            return String(first)
        }
        #expect(listed.count >= 10 && listed.contains("cluster"), "\(listed)")
        var all = listed.filter { $0 != "help" && $0 != "cluster" }.map { [$0] }
        let cluster = try await storectl("cluster", "--help")
        let clusterSubs = cluster.stdout.split(separator: "\n").compactMap { line -> String? in
            let words = line.split(separator: " ")
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let first = words.first,
                  first.allSatisfy({ $0.isLowercase }) else { return nil }
            return String(first)
        }
        #expect(clusterSubs.contains("join") && clusterSubs.contains("reset"), "\(clusterSubs)")
        all += clusterSubs.map { ["cluster", $0] }
        for sub in all {
            let r = try await storectl(sub + ["--help"])
            #expect(r.status == 0)
            #expect(r.stdout.contains("Example:") || r.stdout.contains("Examples:"), "\(sub) --help has no examples")
        }
    }

    /// `init` where the directory cannot be made exits 73 (not 66, "not a store") and says why in
    /// `strerror`'s words; an unreadable schema says why too (not "NSCocoaErrorDomain error
    /// 256").
    @Test func unmakeableDirectoriesAndUnreadableSchemasSayWhy() async throws {
        let dir = temporaryDirectory("init-errors")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("a-file").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
        let r = try await storectl("init", file + "/store", "--schema", librarySchemaDirectory.path)
        #expect(r.status == 73, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("\(file) is not a directory"), "\(r.stderr)")
        let schemas = dir.appendingPathComponent("schemas/v1.json")
        try FileManager.default.createDirectory(at: schemas, withIntermediateDirectories: true)
        let s = try await storectl("init", dir.appendingPathComponent("s").path, "--schema", schemas.deletingLastPathComponent().path)
        #expect(s.status == 65, "\(s.status) \(s.stderr)")
        #expect(s.stderr.contains("v1.json: cannot read file (is a directory)"), "\(s.stderr)")
        let notDir = try await storectl("init", dir.appendingPathComponent("t").path, "--schema", file)
        #expect(notDir.stderr.contains("cannot read schema directory (not a directory)"), "\(notDir.stderr)")
        #expect(!notDir.stderr.contains("NSCocoaErrorDomain"))
    }
}
