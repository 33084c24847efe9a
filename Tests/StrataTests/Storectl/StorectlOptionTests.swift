import Foundation
import Testing
@testable import Strata

/// storectl options as the README documents them: `query` with a sort on several
/// keys and a window, `--fields`, `--count --json`; `export --where --output` (the stderr line,
/// the filtered records, no partial file left); the option checks of `compact` and `migrate`
/// (exit 64); `migrate --check` on a store newer than the schemas (exit 11); `log --entity`
/// with an unknown name.
@Suite struct StorectlOptionTests {
    let sample = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path

    /// A store holding the sample library, in its own directory.
    func sampleStore() async throws -> (URL, String) {
        let dir = temporaryDirectory("storectl-options")
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let r = try await storectl("import", store, sample, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        return (dir, store)
    }

    func lines(_ text: String) throws -> [JSONValue] {
        try text.split(separator: "\n").map { try JSONValue.parse(String($0)) }
    }

    /// `--sort year,-title`: no year first, then by year; title descending by UTF-8 bytes; ties by
    /// id. The window applies after sorting. The reference is computed here from `export`.
    @Test func querySortsOnSeveralKeysAndWindows() async throws {
        let (dir, store) = try await sampleStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try lines(try await storectl("export", store, "--entity", "Album").stdout)
        #expect(all.count == 54)
        func year(_ r: JSONValue) -> Int64? { if case .int(let y)? = r["year"] { y } else { nil } }
        func text(_ r: JSONValue, _ key: String) -> [UInt8] { if case .string(let s)? = r[key] { Array(s.utf8) } else { [] } }
        let expected = all.sorted { a, b in
            if year(a) != year(b) {
                guard let ya = year(a) else { return true }
                guard let yb = year(b) else { return false }
                return ya < yb
            }
            if text(a, "title") != text(b, "title") { return text(b, "title").lexicographicallyPrecedes(text(a, "title")) }
            return text(a, "id").lexicographicallyPrecedes(text(b, "id"))
        }.map { text($0, "id") }
        #expect(year(all.first { year($0) == nil } ?? .null) == nil)

        let r = try await storectl("query", store, "--entity", "Album", "--sort", "year,-title", "--offset", "3", "--limit", "5", "--json")
        #expect(r.status == 0, "\(r.stderr)")
        let got = try lines(r.stdout).map { text($0, "id") }
        #expect(got == Array(expected[3..<8]))
        let everything = try lines(try await storectl("query", store, "--entity", "Album", "--sort", "year,-title", "--json").stdout).map { text($0, "id") }
        #expect(everything == expected)
        #expect(try await storectl("query", store, "--entity", "Album", "--offset", "60", "--json").stdout.isEmpty)
    }

    @Test func queryFieldsAndCountJSON() async throws {
        let (dir, store) = try await sampleStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let table = try await storectl("query", store, "--entity", "Album", "--sort", "-year", "--limit", "2", "--fields", "title,year")
        #expect(table.status == 0, "\(table.stderr)")
        let rows = table.stdout.split(separator: "\n").map(String.init)
        #expect(rows.count == 4)
        #expect(rows.first?.split(separator: " ", omittingEmptySubsequences: true) == ["id", "title", "year"])
        #expect(rows.last == "(2 records)")
        let c = try await storectl("query", store, "--entity", "Track", "--where", "durationSeconds > 600", "--count", "--json")
        #expect(c.status == 0)
        let n = try await storectl("query", store, "--entity", "Track", "--where", "durationSeconds > 600", "--json").stdout.split(separator: "\n").count
        #expect(n > 0)
        #expect(try JSONValue.parse(c.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) == .object([("count", .int(Int64(n)))]))
        // Spaces after the commas of `--fields`, a line break after a `--sort` name (a script
        // written on Windows): the same table. They were refused as unknown attributes.
        let spaced = try await storectl("query", store, "--entity", "Album", "--sort", "-year\r\n", "--limit", "2",
                                        "--fields", "title, year")
        #expect(spaced.status == 0 && spaced.stdout == table.stdout, "\(spaced.stderr)")
        let one = try await storectl("query", store, "--entity", "Track", "--limit", "1", "--fields", "title")
        #expect(one.stdout.hasSuffix("(1 record)\n"), "\(one.stdout)")
        // Columns line up on a terminal (a wide CJK character takes two columns), and no line
        // ends in padding, also where its last cells are empty (a track without a rating).
        let longest = try await storectl("query", store, "--entity", "Track", "--sort=-durationSeconds", "--limit", "5",
                                         "--fields", "title,durationSeconds,rating")
        let tableLines = longest.stdout.split(separator: "\n").map(String.init).dropLast()
        #expect(tableLines.allSatisfy { !$0.hasSuffix(" ") }, "\(longest.stdout)")
        let header = try #require(tableLines.first)
        let durationColumn = try #require(header.range(of: "durationSeconds")).lowerBound.utf16Offset(in: header)
        for row in tableLines.dropFirst() {
            // The screen column of the duration: every character before it counted by its width.
            let cells = row.split(separator: " ", omittingEmptySubsequences: true)
            let duration = try #require(cells.last { Int($0) != nil && $0.count == 3 })
            let before = row[..<duration.startIndex]
            let width = before.unicodeScalars.reduce(0) { $0 + ((0x2E80...0xA4CF).contains($1.value) ? 2 : 1) }
            #expect(width == durationColumn, "\(row)")
        }
        // A count is of every match: a window given with it is refused, not ignored (`--offset 0`
        // too: it was accepted, as the default could not be told from it).
        for window in [["--limit", "1"], ["--offset", "5"], ["--offset", "0"], ["--sort", "title"]] {
            let w = try await storectl(["query", store, "--entity", "Track", "--count"] + window)
            #expect(w.status == 64 && w.stderr.contains("do not apply to --count"), "\(window): \(w.status) \(w.stderr)")
        }
        // `--fields` with a count or an aggregate is refused too (it was dropped in silence).
        for other in [["--count"], ["--group-by", "year"], ["--max", "year"]] {
            let f = try await storectl(["query", store, "--entity", "Album", "--fields", "title"] + other)
            #expect(f.status == 64 && f.stderr.contains("--fields chooses the columns"), "\(other): \(f.status) \(f.stderr)")
        }
    }

    /// `--group-by` and `--sort` paths are held to 8 relationships, as `--where` paths are (they
    /// were followed however long): on a schema whose to-one chain allows any length.
    @Test func sortAndGroupPathsAreHeldToEightRelationships() async throws {
        let dir = temporaryDirectory("storectl-chain")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await storeOfSchema(#"""
            {"model": "chain", "version": 1, "entities": [
              {"name": "N", "attributes": [{"name": "name", "type": "string"}], "uniques": [["name"]],
               "relationships": [
                 {"name": "next", "destination": "N", "inverse": "prev", "optional": true},
                 {"name": "prev", "destination": "N", "inverse": "next", "optional": true}]}]}
            """#, in: dir)
        let eight = String(repeating: "next.", count: 8) + "name", nine = String(repeating: "next.", count: 9) + "name"
        for option in ["--group-by", "--sort"] {
            let ok = try await storectl("query", store, "--entity", "N", option, eight)
            #expect(ok.status == 0, "\(option) 8: \(ok.status) \(ok.stderr)")
            let deep = try await storectl("query", store, "--entity", "N", option, nine)
            #expect(deep.status == 64 && deep.stderr.contains("a path of 9 relationships: at most 8"),
                    "\(option) 9: \(deep.status) \(deep.stderr)")
        }
    }

    /// `--where` given twice narrows: both must hold (the second replaced the first, silently
    /// widening the result); a mistake in one says which; `--sort` and `--group-by` given twice
    /// are usage errors (the last one won, silently).
    @Test func repeatedWhereFiltersAllHoldAndOtherRepeatsAreRefused() async throws {
        let (dir, store) = try await sampleStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        func count(_ filters: [String], _ command: String = "query") async throws -> Int {
            let r = try await storectl([command, store, "--entity", "Track"] + filters.flatMap { ["--where", $0] } +
                                       (command == "query" ? ["--json"] : []))
            #expect(r.status == 0, "\(filters): \(r.stderr)")
            return r.stdout.split(separator: "\n").count
        }
        let long = try await count(["durationSeconds > 300"])
        let rated = try await count(["rating != null"])
        let both = try await count(["durationSeconds > 300 and rating != null"])
        #expect(both < long && both < rated, "\(both) \(long) \(rated)")
        #expect(try await count(["durationSeconds > 300", "rating != null"]) == both)
        #expect(try await count(["durationSeconds > 300", "rating != null"], "export") == both)
        let bad = try await storectl("query", store, "--entity", "Track", "--where", "rating != null", "--where", "nope > 1")
        #expect(bad.status == 64 && bad.stderr.contains("--where 2 of 2:") && bad.stderr.contains("nope"), "\(bad.stderr)")
        let badExport = try await storectl("export", store, "--entity", "Track", "--where", "nope > 1", "--where", "rating != null")
        #expect(badExport.status == 64 && badExport.stderr.contains("--where 1 of 2:"), "\(badExport.stderr)")
        for repeated in [["--sort", "title", "--sort", "-durationSeconds"], ["--group-by", "rating", "--group-by", "album"]] {
            let r = try await storectl(["query", store, "--entity", "Track"] + repeated)
            #expect(r.status == 64 && r.stderr.contains("\(repeated[0]) given 2 times"), "\(repeated): \(r.stderr)")
        }
    }

    @Test func exportWhereToAFile() async throws {
        let (dir, store) = try await sampleStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try await storectl("export", store, "--entity", "Track").stdout.split(separator: "\n").map(String.init)
        let expected = try all.filter { line in
            if case .int(let d)? = try JSONValue.parse(line)["durationSeconds"] { return d > 600 }
            return false
        }
        #expect(!expected.isEmpty && expected.count < all.count)
        let out = dir.appendingPathComponent("long.ndjson").path
        let r = try await storectl("export", store, "--entity", "Track", "--where", "durationSeconds > 600", "--output", out)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.stderr == "exported \(expected.count) Track record(s) as of transaction 1\n", "\(r.stderr)")
        #expect(try String(contentsOfFile: out, encoding: .utf8) == expected.joined(separator: "\n") + "\n")
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".partial-") }
        #expect(left.isEmpty, "\(left)")
    }

    @Test(arguments: [
        (["compact", "STORE", "--horizon", "1", "--keep-last", "2"], "give at most one of --horizon, --keep-last, --keep-since"),
        (["compact", "STORE", "--keep-last", "1", "--keep-since", "2026-01-01T00:00:00Z"], "give at most one of"),
        (["compact", "STORE", "--keep-since", "yesterday"], "--keep-since needs an ISO-8601 time"),
        (["migrate", "STORE", "--schema", "SCHEMA", "--check", "--dry-run"], "--check and --dry-run exclude each other"),
        (["migrate", "STORE", "--schema", "SCHEMA", "--to", "9"], "--to 9: no v9.json"),
    ] as [([String], String)])
    func maintenanceOptionChecksAreUsageErrors(arguments: [String], message: String) async throws {
        let dir = temporaryDirectory("storectl-options")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        _ = try await storectl("import", store, sample, "--quiet")
        let before = try FileManager.default.destinationOfSymbolicLink(atPath: store + "/current")
        let r = try await storectl(arguments.map { $0 == "STORE" ? store : $0 == "SCHEMA" ? librarySchemaDirectory.path : $0 })
        #expect(r.status == 64, "\(arguments): exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains(message), "\(r.stderr)")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: store + "/current") == before, "a new generation was switched in")
        #expect(try await storectl("migrate", store, "--schema", librarySchemaDirectory.path, "--check").status == 0, "the store was migrated or damaged")
    }

    @Test func migrateCheckOnAStoreNewerThanTheSchemasExits11() async throws {
        let dir = temporaryDirectory("storectl-options")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let old = dir.appendingPathComponent("old-schemas")
        try FileManager.default.createDirectory(at: old, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: librarySchemaDirectory.appendingPathComponent("v1.json"), to: old.appendingPathComponent("v1.json"))
        let r = try await storectl("migrate", store, "--schema", old.path, "--check")
        #expect(r.status == 11, "exit \(r.status): \(r.stderr)")
        #expect(r.stdout.contains("the store is at v2, newer than the schemas (v1)"), "\(r.stdout)")
        let j = try await storectl("migrate", store, "--schema", old.path, "--check", "--json")
        #expect(j.status == 11)
        #expect(try JSONValue.parse(j.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["status"] == .string("tooNew"))
    }

    /// Table output escapes control characters (`\u{0}`, `\u{1B}`, `\n`, `\t`) instead of
    /// printing them raw, also where a value is cut at 40 characters (never inside an escape);
    /// `show` and `log` likewise escape values, authors and metadata.
    @Test func textOutputEscapesControlCharacters() async throws {
        let dir = temporaryDirectory("storectl-options")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        let lines = [#"{"entity":"Genre","name":"a\u0000b\u001b[2Jc\nd\te"}"#,
                     #"{"entity":"Genre","name":"\u001b\u001b\u001b\u001b\u001b\u001b\u001b\u001b\u001b\u001b"}"#]
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: input)
        #expect(try await storectl("import", store, input.path, "--quiet", "--import-id", "id\u{1B}[2J").status == 0)
        let table = try await storectl("query", store, "--entity", "Genre", "--fields", "name")
        #expect(table.status == 0, "\(table.stderr)")
        #expect(table.stdout.contains(#"a\u{0}b\u{1B}[2Jc\nd\te"#), "\(table.stdout)")
        // Ten escapes of 6 characters do not fit in 39: six are shown whole, then the cut.
        #expect(table.stdout.contains(String(repeating: #"\u{1B}"#, count: 6) + "…"), "\(table.stdout)")
        for output in [table.stdout, try await storectl("show", store, "1").stdout, try await storectl("log", store).stdout] {
            // Lines and log's tab-separated columns aside.
            #expect(!output.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" && $0 != "\t" }, "raw control characters in \(output.debugDescription)")
        }
        #expect(try await storectl("log", store).stdout.contains(#"importID=id\u{1B}[2J"#))
        // `diff` prints changed values as `show` does (it printed them as JSON, C1 characters and
        // DEL raw), and `import` its summary's import id escaped (it was printed raw).
        let rename = dir.appendingPathComponent("rename.ndjson")
        try Data(#"{"entity":"Genre","name":"p\u009b31mq\u007fr\u0085s"}"#.utf8 + Data("\n".utf8)).write(to: rename)
        let imported = try await storectl("import", store, rename.path, "--import-id", "again\u{1B}[2J\u{9B}")
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.stdout.contains(#"import id again\u{1B}[2J\u{9B}"#), "\(imported.stdout)")
        let renamed = try await storectl("query", store, "--entity", "Genre", "--json")
        let ids = renamed.stdout.split(separator: "\n").compactMap { line -> String? in
            guard let v = try? JSONValue.parse(String(line)), case .string(let name)? = v["name"],
                  name.hasPrefix("p"), case .string(let id)? = v["id"] else { return nil }
            return id
        }
        let renamedID = try #require(ids.first)
        let move = dir.appendingPathComponent("move.ndjson")
        try Data((#"{"entity":"Genre","id":"\#(renamedID)","name":"plain\u0085"}"# + "\n").utf8).write(to: move)
        #expect(try await storectl("import", store, move.path, "--quiet").status == 0)
        let diff = try await storectl("diff", store, "--from", "2", "--to", "3")
        #expect(diff.status == 0, "\(diff.stderr)")
        #expect(!diff.stdout.unicodeScalars.contains { ($0.value < 0x20 && $0 != "\n" && $0 != "\t")
                    || (0x7F...0x9F).contains($0.value) }, "raw control characters in \(diff.stdout.debugDescription)")
        #expect(diff.stdout.contains(#"\u{9B}31mq\u{7F}r\u{85}s"#) && diff.stdout.contains(#"plain\u{85}"#),
                "\(diff.stdout)")
        let show = try await storectl("show", store, "3")
        #expect(show.stdout.contains(#"plain\u{85}"#), "diff and show print the value alike: \(show.stdout)")
    }

    /// An unknown `log --entity` is a usage error (64), as in `query`, `export` and `replay`.
    @Test func logWithAnUnknownEntityIsAUsageError() async throws {
        let dir = temporaryDirectory("storectl-options")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let r = try await storectl("log", store, "--entity", "Nope")
        #expect(r.status == 64, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("unknown entity 'Nope'"))
    }

    /// A limit near `Int.max` with an offset, with or without a sort: the window, not an
    /// arithmetic-overflow trap.
    @Test func aHugeLimitWithAnOffsetIsAWindow() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        for sort in [[], ["--sort", "name"]] {
            let r = try await storectl(["query", store, "--entity", "Genre", "--offset", "2", "--limit", "\(Int.max)", "--json"] + sort)
            #expect(r.status == 0, "\(r.status) \(r.stderr)")
            #expect(r.stdout.components(separatedBy: "\"entity\"").count - 1 == 3, "\(r.stdout)")
        }
    }

    /// `import --keep-pages-mapped` (a bulk import that keeps the store's pages mapped) gives the
    /// state the same import gives without it, and `--help` lists the option.
    @Test func importKeepingPagesMappedGivesTheSameState() async throws {
        let (dir, store) = try await sampleStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let other = dir.appendingPathComponent("kept").path
        #expect(try await storectl("init", other, "--schema", librarySchemaDirectory.path).status == 0)
        let r = try await storectl("import", other, sample, "--quiet", "--mode", "bulk", "--keep-pages-mapped")
        #expect(r.status == 0, "\(r.stderr)")
        for entity in ["Artist", "Album", "Track", "Genre", "Playlist"] {
            let a = try await storectl("query", store, "--entity", entity, "--count").stdout
            let b = try await storectl("query", other, "--entity", entity, "--count").stdout
            #expect(a == b && !a.isEmpty, "\(entity): \(a) against \(b)")
        }
        #expect(try await storectl("verify", other).status == 0)
        #expect(try await storectl("import", "--help").stdout.contains("--keep-pages-mapped"))
    }
}
