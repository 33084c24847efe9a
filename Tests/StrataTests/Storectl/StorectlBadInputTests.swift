import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Bad input everywhere, as a user types it: every subcommand misused (exit 64), bad schema
/// directories (65, naming the file), CSV mistakes (65, naming FILE:LINE), nothing written.
/// Complements StorectlTests and SchemaTests.
@Suite struct StorectlBadInputTests {
    static let schemaDir = librarySchemaDirectory.path

    /// The subcommands storectl lists in its help, so a new one is covered without editing this file.
    static let subcommands: [String] = {
        guard let r = try? runBlocking(storectlPath, ["--help"]) else { return [] }
        let text = r.stdout
        guard let start = text.range(of: "SUBCOMMANDS:") else { return [] }
        return text[start.upperBound...].split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("  "), !line.hasPrefix("   ") else { return nil }
            return line.split(separator: " ").first.map(String.init)
        }.filter { $0 != "See" && $0 != "help" }
    }()

    func newStore() async throws -> (URL, String) {
        let dir = temporaryDirectory("cli-misuse")
        let store = dir.appendingPathComponent("store").path
        let r = try await storectl("init", store, "--schema", Self.schemaDir)
        #expect(r.status == 0, "\(r.stderr)")
        return (dir, store)
    }

    @Test func helpListsTheSubcommands() {
        #expect(Self.subcommands.count >= 12, "\(Self.subcommands)")
        #expect(Self.subcommands.contains("import") && Self.subcommands.contains("verify"))
    }

    @Test func everySubcommandWithoutArgumentsIsAUsageError() async throws {
        for sub in Self.subcommands {
            let r = try await storectl([sub])
            #expect(r.status == 64, "storectl \(sub): exit \(r.status)")
            #expect(r.stderr.contains("Usage:") || r.stderr.contains("Missing"), "storectl \(sub): \(r.stderr.prefix(200))")
        }
    }

    @Test func everySubcommandRefusesAnUnknownOption() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        for sub in Self.subcommands {
            let r = try await storectl([sub, store, "--no-such-option"])
            #expect(r.status == 64, "storectl \(sub) --no-such-option: exit \(r.status): \(r.stderr.prefix(200))")
        }
    }

    /// A value ArgumentParser cannot read, and a store path, are echoed as every other value
    /// is: control characters escaped (a terminal escape reached the terminal), and a long value
    /// cut to 64 characters with its size (100,000 bytes were printed whole).
    @Test func valuesTheParserRefusesAreEchoedEscapedAndCut() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let escape = try await storectl("show", store, "1\u{1B}[2J")
        #expect(escape.status == 64 && escape.stderr.contains("'1\\u{1B}[2J'"), "\(escape.stderr)")
        #expect(!escape.stderr.contains("\u{1B}"), "a raw ESC: \(escape.stderr)")
        let long = try await storectl("log", store, "--from", String(repeating: "x", count: 100_000))
        #expect(long.status == 64 && long.stderr.contains("…(100000 bytes)") && long.stderr.utf8.count < 2_000,
                "\(long.stderr.prefix(300))")
        let path = try await storectl("log", dir.appendingPathComponent("bad\u{1B}[31mname").path)
        #expect(path.status == 66 && path.stderr.contains("bad\\u{1B}[31mname") && !path.stderr.contains("\u{1B}"),
                "\(path.status) \(path.stderr)")
        // A line break in a value, or in a path, cannot print a line of its own; a quote in a
        // value does not keep it from being cut.
        let forged = "storectl: error: forged"
        for args in [["show", store, "1\n" + forged], ["log", "/nonexistent\n" + forged]] {
            let r = try await storectl(args)
            #expect(r.status == 64 || r.status == 66, "\(r.status) \(r.stderr)")
            #expect(!r.stderr.split(separator: "\n").contains { $0.hasPrefix(forged) }, "\(r.stderr)")
        }
        let quoted = try await storectl("log", store, "--from", "a'" + String(repeating: "x", count: 3_000))
        #expect(quoted.status == 64 && quoted.stderr.utf8.count < 2_000, "\(quoted.stderr.prefix(300))")
    }

    /// Bad numbers and bad values of every numeric or enumerated option: 64, nothing done.
    @Test(arguments: [
        ["log", "STORE", "--from", "abc"],
        ["log", "STORE", "--from", "-1"],
        ["log", "STORE", "--to", "99999999999999999999999"],
        ["show", "STORE", "abc"],
        ["show", "STORE", "-5"],
        ["show", "STORE", "1.5"],
        ["query", "STORE", "--entity", "Track", "--limit", "x"],
        ["query", "STORE", "--entity", "Track", "--limit", "-1"],
        ["query", "STORE", "--entity", "Track", "--offset", "-3"],
        ["query", "STORE", "--entity", "Song"],
        ["query", "STORE", "--entity", "Track", "--fields", "nope"],
        ["query", "STORE", "--entity", "Track", "--where", "title ==="],
        ["import", "STORE", "x.ndjson", "--batch", "abc"],
        ["import", "STORE", "x.ndjson", "--batch", "0"],
        ["import", "STORE", "x.ndjson", "--batch", "2000000"],
        ["import", "STORE", "x.ndjson", "--max-errors", "0"],
        ["import", "STORE", "x.ndjson", "--in-memory-max-mb", "-1"],
        ["import", "STORE", "x.ndjson", "--in-memory-max-mb", "lots"],
        ["import", "STORE", "x.ndjson", "--keep-records-max-mb", "-1"],
        ["import", "STORE", "x.ndjson", "--keep-records-max-mb", "lots"],
        ["import", "STORE", "x.ndjson", "--one-transaction-max-mb", "-1"],
        ["import", "STORE", "x.ndjson", "--one-transaction-max-mb", "lots"],
        ["import", "STORE", "x.ndjson", "--format", "xml"],
        ["import", "STORE", "x.ndjson", "--rejects", "r.ndjson"],
        ["export", "STORE", "--entity", "Track", "--format", "xml"],
        ["export", "STORE", "--entity", "Song"],
        ["export", "STORE", "--entity", "Track", "--where", "durationSeconds >> 1"],
        ["replay", "STORE", "--to", "x"],
        ["replay", "STORE", "--to", "1", "--id", "zz"],
        ["diff", "STORE", "--from", "5", "--to", "1"],
        ["diff", "STORE", "--from", "x", "--to", "1"],
        ["history", "STORE", "nothex"],
        ["history", "STORE", "0123456789abcdef0123456789abcdeg"],
    ])
    func badValuesAreUsageErrors(arguments: [String]) async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let args = arguments.map { $0 == "STORE" ? store : $0 }
        let r = try await storectl(args)
        #expect(r.status == 64, "storectl \(arguments.joined(separator: " ")): exit \(r.status): \(r.stderr.prefix(300))")
        #expect(!r.stderr.isEmpty)
    }

    // MARK: Bad schema directories

    func schemaDirectory(_ files: [String: String]) throws -> URL {
        let dir = temporaryDirectory("bad-schema")
        for (name, text) in files { try Data(text.utf8).write(to: dir.appendingPathComponent(name)) }
        return dir
    }

    static let minimal = #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"int"}]}]}"#

    @Test(arguments: [
        ("empty directory", [:], "no schema files"),
        ("gap in versions", ["v2.json": minimal.replacingOccurrences(of: #""version":1"#, with: #""version":2"#)], "v1.json is missing"),
        ("not JSON", ["v1.json": "{\"model\": "], "not valid JSON"),
        ("version differs from the name", ["v1.json": minimal.replacingOccurrences(of: #""version":1"#, with: #""version":3"#)], "declares version 3"),
        ("bad file name", ["v1.json": minimal, "vX.json": minimal], "v<N>.json"),
        ("models differ", ["v1.json": minimal, "v2.json": minimal.replacingOccurrences(of: #""version":1"#, with: #""version":2"#).replacingOccurrences(of: #""model":"m""#, with: #""model":"n""#)], "differs"),
        ("unknown destination", ["v1.json": #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[],"relationships":[{"name":"r","destination":"Nope"}]}]}"#], "Nope"),
        ("no entities", ["v1.json": #"{"model":"m","version":1,"entities":[]}"#], "at least one entity"),
        ("bad attribute name", ["v1.json": #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"1x","type":"int"}]}]}"#], "ASCII identifier"),
        ("type not text", ["v1.json": #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":3}]}]}"#], "'type' must be a string, found integer"),
        ("description not text", ["v1.json": #"{"model":"m","version":1,"description":5,"entities":[{"name":"A","attributes":[]}]}"#], "'description' must be a string"),
        ("version out of range", ["v1.json": minimal, "v99999999999999999999.json": minimal], "version 99999999999999999999 is out of range"),
    ] as [(String, [String: String], String)])
    func badSchemaDirectoriesAreDataErrors(name: String, files: [String: String], fragment: String) async throws {
        let schema = try schemaDirectory(files)
        defer { try? FileManager.default.removeItem(at: schema) }
        let parent = temporaryDirectory("bad-schema-store")
        defer { try? FileManager.default.removeItem(at: parent) }
        let target = parent.appendingPathComponent("s").path
        for command in [["init", target, "--schema", schema.path], ["generate", "--schema", schema.path]] {
            let r = try await storectl(command)
            #expect(r.status == 65, "\(name): storectl \(command[0]): exit \(r.status): \(r.stderr)")
            #expect(r.stderr.contains(fragment), "\(name): storectl \(command[0]): stderr lacks '\(fragment)': \(r.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: target + "/current"), "\(name): a store was created from a bad schema")
    }

    /// A named pipe among the schema files is refused at once (it held every command reading
    /// the schemas until some other process wrote to it). The limit catches a wait on the pipe,
    /// which never ends; a minute was exceeded by two storectl runs in the loaded parallel suite.
    @Test(.timeLimit(.minutes(15))) func aNamedPipeAmongTheSchemaFilesIsRefusedNotWaitedOn() async throws {
        let schema = try schemaDirectory(["v1.json": #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[]}]}"#])
        defer { try? FileManager.default.removeItem(at: schema) }
        #expect(mkfifo(schema.appendingPathComponent("v2.json").path, 0o600) == 0)
        let parent = temporaryDirectory("fifo-schema-store")
        defer { try? FileManager.default.removeItem(at: parent) }
        let target = parent.appendingPathComponent("s").path
        for command in [["init", target, "--schema", schema.path], ["generate", "--schema", schema.path]] {
            let r = try await storectl(command)
            #expect(r.status == 65, "storectl \(command[0]): exit \(r.status): \(r.stderr)")
            #expect(r.stderr.contains("v2.json") && r.stderr.contains("a named pipe, not a regular file"), "\(r.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: target + "/current"))
    }

    /// A schema file over `SchemaLimits.maxFileBytes` is refused by its size before it is read.
    @Test func aSchemaFileOverTheSizeLimitIsRefusedUnread() async throws {
        let schema = try schemaDirectory(["v1.json": #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[]}]}"#])
        defer { try? FileManager.default.removeItem(at: schema) }
        // Sparse: no disk is written.
        #expect(truncate(schema.appendingPathComponent("v1.json").path, off_t(SchemaLimits.maxFileBytes + 1)) == 0)
        let parent = temporaryDirectory("big-schema-store")
        defer { try? FileManager.default.removeItem(at: parent) }
        let r = try await storectl("init", parent.appendingPathComponent("s").path, "--schema", schema.path)
        #expect(r.status == 65, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("\(SchemaLimits.maxFileBytes + 1) bytes, over the \(SchemaLimits.maxFileBytes)"), "\(r.stderr)")
    }

    /// A schema a store takes, whose names the generated Swift type declares itself: `generate`
    /// refuses it naming the member (exit 65) instead of writing code that does not compile.
    @Test func generateRefusesANameTheGeneratedTypeDeclaresItself() async throws {
        let schema = try schemaDirectory(["v1.json": #"{"model":"m","version":1,"entities":[{"name":"Item","attributes":[{"name":"storedValues","type":"string","optional":true}]}]}"#])
        defer { try? FileManager.default.removeItem(at: schema) }
        let parent = temporaryDirectory("generated-clash-store")
        defer { try? FileManager.default.removeItem(at: parent) }
        #expect(try await storectl("init", parent.appendingPathComponent("s").path, "--schema", schema.path).status == 0)
        let r = try await storectl("generate", "--schema", schema.path)
        #expect(r.status == 65, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("entity 'Item'") && r.stderr.contains("attribute 'storedValues'")
                && r.stderr.contains("declares 'storedValues' itself"), "\(r.stderr)")
        #expect(r.stdout.isEmpty)
    }

    @Test func missingSchemaDirectoryIsAnError() async throws {
        let parent = temporaryDirectory("s")
        defer { try? FileManager.default.removeItem(at: parent) }
        let r = try await storectl("init", parent.appendingPathComponent("s").path, "--schema", "/nonexistent/schema")
        #expect(r.status == 65 || r.status == 66, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("/nonexistent/schema"))
    }

    // MARK: CSV mistakes

    @Test(arguments: [
        ("Genre.csv", "name\nJazz\n\"unterminated\n", "Genre.csv:3: unterminated quoted field"),
        ("Genre.csv", "name\nJazz\na,b\n", "Genre.csv:3: 2 fields, the header has 1"),
        ("Genre.csv", "name\nab\"c\n", "Genre.csv:2: quote inside an unquoted field"),
        ("Genre.csv", "name\n\"a\"b\n", "Genre.csv:2: text after the closing quote"),
        ("Genre.csv", "name,color\nx,red\n", "Genre.csv:1: color: unknown column for Genre"),
        ("Genre.csv", "name,name\nx,y\n", "Genre.csv:1: name: column appears twice"),
        // An empty name (a trailing comma) said `: unknown column`; two columns for one to-one
        // were both read, the last one deciding the target.
        ("Genre.csv", "name,\nx,\n", "Genre.csv:1: column 2 of the header has no name"),
        ("Track.csv", "mbid,title,durationSeconds,addedAt,album,album.mbid\n", "Track.csv:1: album.mbid: sets the to-one relationship album, which column album sets too"),
        ("Track.csv", "mbid,title,durationSeconds,addedAt,genre.name,genre\n", "Track.csv:1: genre: sets the to-one relationship genre, which column genre.name sets too"),
        ("Genre.csv", "name\nJazz\nJazz\n", "Genre.csv:3: name: duplicate key"),
        ("Track.csv", "mbid,title,durationSeconds,addedAt\nnot-a-uuid,t,1,2024-01-01T00:00:00Z\n", "Track.csv:2: mbid:"),
        ("Track.csv", "mbid,title,durationSeconds,addedAt\n82d6edf7-3c84-5d05-811b-3b924c91ddff,t,abc,2024-01-01T00:00:00Z\n", "Track.csv:2: durationSeconds:"),
        ("Track.csv", "mbid,title,durationSeconds,addedAt\n82d6edf7-3c84-5d05-811b-3b924c91ddff,t,1,yesterday\n", "Track.csv:2: addedAt:"),
        ("Track.csv", "mbid,title,addedAt\n82d6edf7-3c84-5d05-811b-3b924c91ddff,t,2024-01-01T00:00:00Z\n", "Track.csv:2: durationSeconds: required attribute is missing"),
        ("Track.csv", "mbid,title,durationSeconds,addedAt,album.mbid\n82d6edf7-3c84-5d05-811b-3b924c91ddff,t,1,2024-01-01T00:00:00Z,9e66a91c-080f-5eea-aa6b-d2e7423e063a\n", "Track.csv:2: album: dangling reference"),
        ("Track.csv", "mbid,title,durationSeconds,addedAt,album.title\n82d6edf7-3c84-5d05-811b-3b924c91ddff,t,1,2024-01-01T00:00:00Z,x\n", "Track.csv:1: album.title"),
    ] as [(String, String, String)])
    func csvMistakesNameFileAndLine(file: String, text: String, fragment: String) async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent(file).path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        let r = try await storectl("import", store, path, "--quiet")
        #expect(r.status == 65, "\(file) \(fragment): exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains(fragment), "stderr lacks '\(fragment)':\n\(r.stderr)")
        let info = try await storectl("info", store, "--json")
        #expect(try JSONValue.parse(info.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["lastTransaction"] == .int(0), "something was written")
    }

    /// A CSV header that cannot be read, or a JSON array that breaks, stops its file: the summary
    /// counts a file that cannot be read, not a bad record; a bad record after a good header is one.
    @Test(arguments: [
        ("Genre.csv", "nam,bogus\nx,y\n", "1 input file(s) that cannot be read as records; nothing was written"),
        ("Genre.csv", "\"name\nx\n", "1 input file(s) that cannot be read as records; nothing was written"),
        ("g.json", "[{\"entity\":\"Genre\",\"name\":\"A\"},]\n", "1 input file(s) that cannot be read as records; nothing was written"),
        ("Genre.csv", "name\n\"x\n", "1 bad record(s); nothing was written"),
    ] as [(String, String, String)])
    func aFileThatCannotBeReadIsNotCountedAsABadRecord(file: String, text: String, summary: String) async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent(file).path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        let r = try await storectl("import", store, path, "--quiet")
        #expect(r.status == 65, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("storectl: error: \(summary)"), "\(r.stderr)")
    }

    @Test func csvWithInvalidUTF8NamesFileAndLine() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("Genre.csv").path
        try Data(Array("name\nok\n".utf8) + [0x61, 0xC3, 0x28, 0x0A]).write(to: URL(fileURLWithPath: path))
        let r = try await storectl("import", store, path, "--quiet")
        #expect(r.status == 65, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("Genre.csv:3:"), "\(r.stderr)")
    }

    /// A CSV file named after no entity is bad input (65), not a missing file (66).
    @Test func csvNamedAfterNoEntityIsADataError() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("Song.csv").path
        try Data("name\nx\n".utf8).write(to: URL(fileURLWithPath: path))
        let r = try await storectl("import", store, path, "--quiet")
        #expect(r.stderr.contains("Song.csv") && r.stderr.contains("Song"), "\(r.stderr)")
        #expect(r.status == 65, "exit \(r.status): \(r.stderr)")
    }

    // MARK: Small oddities

    /// A UTF-8 byte order mark at the start of an NDJSON or CSV file or a schema file is skipped
    /// (not "unexpected character 'ï'"); duplicate schema versions (`v1.json` and `v01.json`)
    /// are named; an integer beyond 64 bits says so; an empty `--sort` or `--fields` name is a
    /// usage error.
    @Test func smallInputOdditiesAreHandled() async throws {
        let dir = temporaryDirectory("input-oddities")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await libraryStoreWithTwoGenres(in: dir)
        let bom: [UInt8] = [0xEF, 0xBB, 0xBF]
        let ndjson = dir.appendingPathComponent("bom.ndjson")
        try Data(bom + Array("{\"entity\":\"Genre\",\"name\":\"bom\"}\n".utf8)).write(to: ndjson)
        #expect(try await storectl("import", store, ndjson.path, "--quiet").status == 0)
        let csv = dir.appendingPathComponent("Genre.csv")
        try Data(bom + Array("name\ncsv-bom\n".utf8)).write(to: csv)
        let c = try await storectl("import", store, csv.path, "--quiet")
        #expect(c.status == 0, "\(c.stderr)")
        #expect(try await storectl("query", store, "--entity", "Genre", "--count").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "4")

        let schemas = dir.appendingPathComponent("schemas")
        try FileManager.default.createDirectory(at: schemas, withIntermediateDirectories: true)
        let v1 = try Data(contentsOf: librarySchemaDirectory.appendingPathComponent("v1.json"))
        try Data(bom + [UInt8](v1)).write(to: schemas.appendingPathComponent("v1.json"))
        #expect(try await storectl("init", dir.appendingPathComponent("s2").path, "--schema", schemas.path).status == 0)
        try v1.write(to: schemas.appendingPathComponent("v01.json"))
        let dup = try await storectl("init", dir.appendingPathComponent("s3").path, "--schema", schemas.path)
        #expect(dup.status == 65, "\(dup.status) \(dup.stderr)")
        #expect(dup.stderr.contains("v01.json: schema files must be named v<N>.json"), "\(dup.stderr)")

        let big = dir.appendingPathComponent("big.ndjson")
        try Data("{\"entity\":\"Album\",\"mbid\":\"11111111-1111-1111-1111-111111111111\",\"title\":\"x\",\"year\":99999999999999999999}\n".utf8).write(to: big)
        let b = try await storectl("import", store, big.path, "--quiet")
        #expect(b.status == 65 && b.stderr.contains("is outside the int range"), "\(b.status) \(b.stderr)")

        #expect(try await storectl("query", store, "--entity", "Genre", "--sort", "").status == 64)
        #expect(try await storectl("query", store, "--entity", "Genre", "--sort", "name,,").status == 64)
        #expect(try await storectl("query", store, "--entity", "Genre", "--fields", "").status == 64)
        // A negative number reaches the option's own check ("Missing value" before).
        let negative = try await storectl("import", store, ndjson.path, "--batch", "-5")
        #expect(negative.status == 64 && negative.stderr.contains("--batch must be between 1 and"), "\(negative.stderr)")
        let limit = try await storectl("query", store, "--entity", "Genre", "--limit", "-1")
        #expect(limit.status == 64 && limit.stderr.contains("--limit must be at least 0"), "\(limit.stderr)")
    }

    /// Under a file-size limit (`ulimit -f`), a write past it fails with EFBIG, which storectl
    /// reports (exit 74, "File too large", with the data file's size and the limit) with nothing
    /// half written.
    @Test func anImportPastTheFileSizeLimitExitsWithAnIOError() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("genres.ndjson")
        let lines = (0..<20_000).map { #"{"entity": "Genre", "name": "genre number \#($0) of many"}"# }
        try Data(lines.joined(separator: "\n").utf8).write(to: input)
        // 512 KiB (in the 1024-byte blocks of bash's ulimit, 512-byte ones of dash's: either is
        // below what 20,000 records take).
        let r = try await run("/bin/sh", ["-c", "ulimit -f 512 && exec \"$0\" import \"$1\" \"$2\" --quiet",
                                          storectlPath, store, input.path])
        #expect(r.status == 74, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("File too large") && r.stderr.contains("RLIMIT_FSIZE"), "\(r.stderr)")
        let count = try await storectl("query", store, "--entity", "Genre", "--count")
        #expect(count.status == 0, "\(count.stderr)")
        #expect(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "the import was half written")
        #expect(try await storectl("verify", store, "--quiet").status == 0)
    }

    /// A rejects file is written aside and put in place when the import succeeds: an import that
    /// fails after the input was checked (here past a file-size limit) leaves the file that was
    /// there as it was, and nothing of its own. (It was emptied at the start.)
    @Test func aFailedImportLeavesTheRejectsFileThatWasThere() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("genres.ndjson")
        var lines = (0..<20_000).map { #"{"entity": "Genre", "name": "genre number \#($0) of many"}"# }
        lines.append(#"{"entity": "Genre"}"#)   // rejected: no name
        try Data(lines.joined(separator: "\n").utf8).write(to: input)
        let rejects = dir.appendingPathComponent("rejects.ndjson")
        try Data("from the last run\n".utf8).write(to: rejects)
        let r = try await run("/bin/sh", ["-c", "ulimit -f 512 && exec \"$0\" import \"$1\" \"$2\" --quiet --continue-on-error --rejects \"$3\"",
                                          storectlPath, store, input.path, rejects.path])
        #expect(r.status == 74, "exit \(r.status): \(r.stderr)")
        #expect(try String(contentsOf: rejects, encoding: .utf8) == "from the last run\n")
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".partial-") }
        #expect(left.isEmpty, "\(left)")
        // Without the limit: the rejects file is replaced, whole.
        let ok = try await storectl("import", store, input.path, "--quiet", "--continue-on-error", "--rejects", rejects.path)
        #expect(ok.status == 0, "\(ok.stderr)")
        let text = try String(contentsOf: rejects, encoding: .utf8)
        #expect(text.hasPrefix("# ") && text.contains(#"{"entity": "Genre"}"#) && !text.contains("from the last run"), "\(text)")
    }

    /// A rejects file that cannot be written (a full device) fails the import with exit 74 and
    /// the errno's words, not a Foundation error and exit 70.
    @Test func aRejectsFileOnAFullDeviceIsAnIOError() async throws {
        let (dir, store) = try await newStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("bad.ndjson")
        try Data((#"{"entity": "Genre", "name": "kept"}"# + "\n" + #"{"entity": "Genre"}"#).utf8).write(to: input)
        let r = try await storectl("import", store, input.path, "--quiet", "--continue-on-error", "--rejects", "/dev/full")
        #expect(r.status == 74, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("/dev/full") && r.stderr.contains("No space left on device"), "\(r.stderr)")
    }

    /// An export's line can be longer than the import's default line limit (16 MiB): a 3 MiB
    /// string of control characters is written as `\u0001` escapes, 18 MiB. Such an export
    /// imports again with `--max-line-mb`, and without it is refused with the limit named.
    @Test func anExportWithLongLinesImportsWithALargerLineLimit() async throws {
        let dir = temporaryDirectory("long-lines")
        defer { try? FileManager.default.removeItem(at: dir) }
        let source = dir.appendingPathComponent("source")
        do {
            let store = try Store.open(at: source, schema: librarySchema())
            defer { store.close() }
            let notes = String(repeating: "\u{01}", count: 3 << 20)
            _ = try await store.save {
                $0.insert(Playlist(name: "long", createdAt: Date(timeIntervalSince1970: 0), notes: notes))
            }
        }
        let file = dir.appendingPathComponent("Playlist.ndjson").path
        let exported = try await storectl("export", source.path, "--entity", "Playlist", "--output", file)
        #expect(exported.status == 0, "\(exported.stderr)")
        let target = dir.appendingPathComponent("target").path
        #expect(try await storectl("init", target, "--schema", Self.schemaDir).status == 0)
        let refused = try await storectl("import", target, file, "--quiet")
        #expect(refused.status == 65, "exit \(refused.status): \(refused.stderr)")
        #expect(refused.stderr.contains("exceeds the 16777216-byte limit"), "\(refused.stderr)")
        let imported = try await storectl("import", target, file, "--quiet", "--max-line-mb", "32")
        #expect(imported.status == 0, "\(imported.stderr)")
        let copy = try Store.open(at: URL(fileURLWithPath: target), schema: librarySchema())
        defer { copy.close() }
        #expect(try copy.mainContext.fetch(Playlist.self).first?.notes?.unicodeScalars.count == 3 << 20)
        #expect(try await storectl("import", target, file, "--max-line-mb", "0").status == 64)
    }
}
