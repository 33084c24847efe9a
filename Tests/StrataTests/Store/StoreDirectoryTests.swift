import Foundation
import Testing
@testable import Strata

/// Defects found by the session-17 reviews of bad input and of C results, each pinned here:
/// a broken `current` link no longer deletes the store, `export --output` never replaces a
/// directory, a rejects file naming an input is refused, a pipe is refused as input, a huge
/// `--limit` or a deeply nested `--where` no longer traps, dates are read strictly and written
/// back exactly (milliseconds, dates before 1582), CSV quotes a CRLF, a failed write to stdout
/// exits 74.
@Suite struct StoreDirectoryTests {
    /// A store made by `storectl init` holding the sample library's genres.
    func storeWithGenres() throws -> (dir: URL, store: String) {
        let dir = temporaryDirectory("review")
        let store = dir.appendingPathComponent("store").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("genres.ndjson")
        try Data((0..<5).map { "{\"entity\":\"Genre\",\"name\":\"g\($0)\"}\n" }.joined().utf8).write(to: input)
        let r = try storectl("import", store, input.path, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        return (dir, store)
    }

    func genreCount(_ store: String) throws -> String {
        try storectl("query", store, "--entity", "Genre", "--count").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func generations(_ store: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: store)) ?? []).filter { $0.hasPrefix("gen-") }.sorted()
    }

    /// `current` pointing at a generation that does not exist: every opener refuses the store
    /// (exit 66, naming `current`) and removes nothing; with the link restored, the data is there.
    /// Before, a read-write open removed every generation but the missing one: the data.
    @Test func aDanglingCurrentLinkIsRefusedAndNothingIsRemoved() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let live = generations(store)
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: "gen-00000000000000ff")
        let input = dir.appendingPathComponent("genres.ndjson").path
        let initAgain = try storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(initAgain.status == 73, "\(initAgain.status) \(initAgain.stderr)")
        #expect(initAgain.stderr.contains("a store already exists here"), "\(initAgain.stderr)")
        for args in [["import", store, input, "--quiet"], ["compact", store], ["info", store]] {
            let r = try storectl(args)
            #expect(r.status == 66, "\(args[0]): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("`current` points at gen-00000000000000ff"), "\(r.stderr)")
            #expect(generations(store) == live, "\(args[0]) removed a generation")
        }
        #expect(throws: StrataError.self) { try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema()) }
        #expect(generations(store) == live)
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try genreCount(store) == "5")
    }

    /// No `current` while a generation holds data (the link was removed): refused, never a new
    /// empty store created over it (`init` used to adopt or re-create it).
    @Test func aMissingCurrentBesideDataIsRefused() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        let r = try storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(r.status == 66, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("`current` is missing but \(target) holds a store's data"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: current))
        #expect(throws: StrataError.self) { try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema()) }
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try genreCount(store) == "5")
    }

    /// `current` that is a regular file, not a link: refused, not taken for a missing one.
    @Test func aCurrentThatIsNotALinkIsRefused() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        #expect(FileManager.default.createFile(atPath: current, contents: Data("x".utf8)))
        let r = try storectl("info", store)
        #expect(r.status == 66, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("`current` is not a symbolic link"), "\(r.stderr)")
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try genreCount(store) == "5")
    }

    /// `export --output` naming a directory leaves it as it was (exit 73; the store directory
    /// itself is refused as an output inside the store, exit 64): it is never removed to write
    /// the export in its place. A file is replaced whole, with no `.partial-` file left.
    @Test func exportNeverReplacesADirectory() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let before = generations(store)
        let r = try storectl("export", store, "--entity", "Genre", "--output", store)
        #expect(r.status == 64, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("is the store directory"), "\(r.stderr)")
        #expect(generations(store) == before)
        #expect(try genreCount(store) == "5")
        let other = dir.appendingPathComponent("out/sub")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: other.appendingPathComponent("keep").path, contents: Data("k".utf8)))
        #expect(try storectl("export", store, "--entity", "Genre", "--output", dir.appendingPathComponent("out").path).status == 73)
        #expect(FileManager.default.fileExists(atPath: other.appendingPathComponent("keep").path))
        let file = dir.appendingPathComponent("g.ndjson").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("old\n".utf8)))
        #expect(try storectl("export", store, "--entity", "Genre", "--output", file).status == 0)
        #expect(try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").count == 5)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).allSatisfy { !$0.contains(".partial-") })
    }

    /// `--rejects` naming one of the inputs is a usage error (64) and leaves the input whole;
    /// the rejects file is created only once the input is validated, so a failed import leaves
    /// none behind.
    @Test func aRejectsFileNamingAnInputIsRefused() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("genres.ndjson").path
        let original = try String(contentsOfFile: input, encoding: .utf8)
        let r = try storectl("import", store, input, "--continue-on-error", "--rejects", input, "--quiet")
        #expect(r.status == 64, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("one of the inputs"), "\(r.stderr)")
        #expect(try String(contentsOfFile: input, encoding: .utf8) == original)
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let missing = try storectl("import", dir.appendingPathComponent("no-store").path, input, "--continue-on-error", "--rejects", rejects)
        #expect(missing.status == 66, "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: rejects))
    }

    /// A pipe (or a directory) as input: exit 66 with the reason, nothing written. The import
    /// reads its input twice, so a pipe used to be read empty the second time: exit 0, "imported
    /// 0 records".
    @Test func aPipeOrADirectoryAsInputIsRefused() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try storectl("import", store, "/dev/stdin", "--format", "ndjson", "--quiet", stdin: "{\"entity\":\"Genre\",\"name\":\"piped\"}\n")
        #expect(r.status == 66, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("not a regular file"), "\(r.stderr)")
        let d = try storectl("import", store, dir.path, "--quiet")
        #expect(d.status == 66, "\(d.status) \(d.stderr)")
        #expect(d.stderr.contains("is a directory"), "\(d.stderr)")
        #expect(try genreCount(store) == "5")
    }

    /// A limit near `Int.max` with an offset, with or without a sort: the window, not an
    /// arithmetic-overflow trap.
    @Test func aHugeLimitWithAnOffsetIsAWindow() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        for sort in [[], ["--sort", "name"]] {
            let r = try storectl(["query", store, "--entity", "Genre", "--offset", "2", "--limit", "\(Int.max)", "--json"] + sort)
            #expect(r.status == 0, "\(r.status) \(r.stderr)")
            #expect(r.stdout.components(separatedBy: "\"entity\"").count - 1 == 3, "\(r.stdout)")
        }
    }

    /// `--where` nested deeper than ``PredicateParser/maxNesting`` is a usage error (it overflowed
    /// the stack: SIGSEGV); up to the limit it parses.
    @Test func aDeeplyNestedFilterIsRefused() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let deep = String(repeating: "not ", count: 3_000) + "name == \"g1\""
        let r = try storectl("query", store, "--entity", "Genre", "--where", deep)
        #expect(r.status == 64, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("nested more than \(PredicateParser.maxNesting) levels"), "\(r.stderr)")
        let parens = String(repeating: "(", count: 100) + "name == \"g1\"" + String(repeating: ")", count: 100)
        #expect(try storectl("query", store, "--entity", "Genre", "--where", parens).status == 64)
        let ok = String(repeating: "not ", count: PredicateParser.maxNesting) + "name == \"g1\""
        let fine = try storectl("query", store, "--entity", "Genre", "--where", ok, "--count")
        #expect(fine.status == 0, "\(fine.stderr)")
        #expect(fine.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1")
    }

    /// A command whose output cannot be written (`> /dev/full`) exits 74 with the reason; it
    /// exited 0.
    @Test func aFailedWriteToStandardOutputExits74() throws {
        let (dir, store) = try storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        for command in ["info", "query"] {
            let extra = command == "query" ? " --entity Genre --json" : ""
            let r = try run("/bin/sh", ["-c", "'\(storectlPath)' \(command) '\(store)'\(extra) > /dev/full"])
            #expect(r.status == 74, "\(command): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("cannot write to standard output"), "\(r.stderr)")
        }
    }

    /// CSV: a value holding CRLF is quoted on export (a `"\r\n"` pair is one Swift `Character`
    /// and was missed) and read back with its CRLF.
    @Test func csvKeepsACarriageReturnLineFeedInAValue() throws {
        let dir = temporaryDirectory("review-csv")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let csv = dir.appendingPathComponent("Genre.csv")
        try Data("name\r\n\"cr\r\nlf\"\r\nplain\r\n".utf8).write(to: csv)
        #expect(try storectl("import", store, csv.path, "--quiet").status == 0)
        let names = try storectl("query", store, "--entity", "Genre", "--json").stdout
        #expect(names.contains("cr\\r\\nlf"), "\(names)")
        let exported = try storectl("export", store, "--entity", "Genre", "--format", "csv").stdout
        #expect(exported.contains("\"cr\r\nlf\""), "\(exported.debugDescription)")
        // The header and two records' lines: four line feeds, one of them inside the quoted value.
        #expect(exported.utf8.filter { $0 == 0x0A }.count == 4, "\(exported.debugDescription)")
    }

    /// Impossible dates are refused (they used to roll over: February 29th 2023 read as March
    /// 1st), and every date is written back as it was read: milliseconds exactly (`.001` was
    /// written `.000`), dates before 1582 (they shifted by the Julian calendar's days), years
    /// outside 0000–9999 with a sign.
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

/// The smaller contract mismatches of the same review: where a failure is reported, with which
/// exit code and in whose words.
@Suite struct ReviewFindingsMessageTests {
    /// A unique key longer than LMDB's key limit is a bad record found by validation, at its
    /// line, with nothing written; it used to fail the save after the batches before it had been
    /// committed, with no line.
    @Test func aUniqueKeyOverTheKeyLimitIsFoundAtValidation() throws {
        let dir = temporaryDirectory("review-unique")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        let long = String(repeating: "x", count: 600)
        try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\n{\"entity\":\"Genre\",\"name\":\"b\"}\n{\"entity\":\"Genre\",\"name\":\"\(long)\"}\n".utf8).write(to: input)
        let r = try storectl("import", store, input.path, "--batch", "1", "--quiet")
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("in.ndjson:3: name: unique key of 605 bytes exceeds LMDB's 511-byte key limit"), "\(r.stderr)")
        #expect(try storectl("query", store, "--entity", "Genre", "--count").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    /// `init` where the directory cannot be made exits 73 (it exited 66, "not a store") and says
    /// why in `strerror`'s words; an unreadable schema says why too (it printed "NSCocoaErrorDomain
    /// error 256").
    @Test func unmakeableDirectoriesAndUnreadableSchemasSayWhy() throws {
        let dir = temporaryDirectory("review-init")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("a-file").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
        let r = try storectl("init", file + "/store", "--schema", librarySchemaDirectory.path)
        #expect(r.status == 73, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("\(file) is not a directory"), "\(r.stderr)")
        let schemas = dir.appendingPathComponent("schemas/v1.json")
        try FileManager.default.createDirectory(at: schemas, withIntermediateDirectories: true)
        let s = try storectl("init", dir.appendingPathComponent("s").path, "--schema", schemas.deletingLastPathComponent().path)
        #expect(s.status == 65, "\(s.status) \(s.stderr)")
        #expect(s.stderr.contains("v1.json: cannot read file (is a directory)"), "\(s.stderr)")
        let notDir = try storectl("init", dir.appendingPathComponent("t").path, "--schema", file)
        #expect(notDir.stderr.contains("cannot read schema directory (not a directory)"), "\(notDir.stderr)")
        #expect(!notDir.stderr.contains("NSCocoaErrorDomain"))
    }
}

/// Entries of the index databases carry no checksum: a damaged one must be an error naming the
/// database, never a trap (a `uniques` value of the wrong size reached a precondition, and a
/// count of the wrong size decoded as an error without saying which).
@Suite struct CorruptIndexEntryTests {
    func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    /// Puts `key` → `value` into database `name` of the store's live generation with `mdb_load`.
    func damage(_ store: URL, database name: String, key: [UInt8], value: [UInt8]) throws {
        let generation = dataFile(ofStore: store).deletingLastPathComponent().path
        let dump = "VERSION=3\nformat=bytevalue\ndatabase=\(name)\ntype=btree\nHEADER=END\n \(hex(key))\n \(hex(value))\nDATA=END\n"
        let input = store.deletingLastPathComponent().appendingPathComponent("damage.txt")
        try Data(dump.utf8).write(to: input)
        let r = try run("/usr/bin/env", ["mdb_load", "-f", input.path, "-s", name, generation])
        #expect(r.status == 0, "mdb_load: \(r.stderr)")
    }

    @Test
    func aUniqueValueOfTheWrongSizeIsAnErrorNotATrap() throws {
        let dir = temporaryDirectory("corrupt-unique")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s")
        #expect(try storectl("init", store.path, "--schema", librarySchemaDirectory.path).status == 0)
        let schema = try librarySchema()
        let genre = try #require(schema.entity(named: "Genre"))
        var values = [Value](repeating: .null, count: genre.attributes.count)
        values[try #require(genre.attribute(named: "name")).index] = .string("g1")
        let key = try #require(try Layout.uniqueKey(genre.uniques[0], record: values, entity: genre, id: ObjectID.make(entityTag: genre.tag)))
        try damage(store, database: "uniques", key: key, value: [1, 2, 3])
        let input = dir.appendingPathComponent("g.ndjson")
        try Data("{\"entity\":\"Genre\",\"name\":\"g1\"}\n".utf8).write(to: input)
        let r = try storectl("import", store.path, input.path, "--quiet")
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("uniques: 3 bytes where an object id's 16 are stored"), "\(r.stderr)")
        let q = try storectl("query", store.path, "--entity", "Genre", "--where", "name == \"g1\"")
        #expect(q.status == 65, "\(q.status) \(q.stderr)")
        #expect(!q.stderr.contains("Fatal error") && !q.stderr.contains("crashed"), "\(q.stderr)")
    }

    @Test
    func aCountOfTheWrongSizeIsAnErrorNamingIt() throws {
        let dir = temporaryDirectory("corrupt-count")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s")
        #expect(try storectl("init", store.path, "--schema", librarySchemaDirectory.path).status == 0)
        let genre = try #require(try librarySchema().entity(named: "Genre"))
        // Format 2 keeps the counts in LMDB's main database, which mdb_load -s cannot name: the
        // damage goes in as a two-byte value through a raw environment instead.
        let generation = dataFile(ofStore: store).deletingLastPathComponent().path
        let options = LMDBOptions(mapSizeBytes: 64 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: false, noLock: false)
        let env = try LMDBEnvironment(path: generation, options: options)
        try env.write { txn in try txn.put(env[.counts], key: MetaKey.count(genre.tag), value: [0, 1]) }
        env.close()
        let r = try storectl("query", store.path, "--entity", "Genre", "--count")
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("the object count of entity tag \(genre.tag) is 2 bytes, not 8"), "\(r.stderr)")
    }
}

/// A compaction of a store whose unique-key B-tree yields keys out of order (a flipped key byte:
/// LMDB keys carry no checksum) reports a corrupt store (exit 65) and leaves the store as it
/// was; it reported an internal error, `mdb_cursor_put(indexes, MDB_APPEND) failed: MDB_KEYEXIST`
/// (exit 70).
@Suite struct CompactingADamagedStoreTests {
    @Test func keysOutOfOrderAreReportedAsCorruption() throws {
        let dir = temporaryDirectory("compact-damaged")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s")
        #expect(try storectl("init", store.path, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("g.ndjson")
        try Data((0..<50).map { "{\"entity\":\"Genre\",\"name\":\"genre \(String(format: "%03d", $0))\"}\n" }.joined().utf8).write(to: input)
        #expect(try storectl("import", store.path, input.path, "--quiet").status == 0)
        // The `name` unique key of "genre 025": tag, non-null marker, the text. Its 'g' becomes
        // 0x01, so it sorts before the keys in front of it.
        let file = dataFile(ofStore: store)
        var bytes = [UInt8](try Data(contentsOf: file))
        let text = Array("genre 025".utf8)
        let schema = try librarySchema()
        let genre = try #require(schema.entity(named: "Genre"))
        let name = try #require(genre.attribute(named: "name")).index
        let nameIndex = try #require(genre.uniques.first { $0.attributes == [name] })
        let needle: [UInt8] = Layout.u16(nameIndex.tag) + [0x01] + text
        let last = bytes.count - needle.count
        var found: Int?
        for i in 0..<last where bytes[i] == needle[0] && Array(bytes[i..<i + needle.count]) == needle {
            found = i
            break
        }
        let at = try #require(found, "the index key was not found in the file")
        let prefixCount = needle.count - text.count
        bytes[at + prefixCount] = 0x01
        try Data(bytes).write(to: file)
        let before = try FileManager.default.contentsOfDirectory(atPath: store.path).sorted()
        let r = try storectl("compact", store.path)
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        // The page check every storectl command runs finds it before the copy starts.
        #expect(r.stderr.contains("the store is damaged: database 'uniques'") && r.stderr.contains("keys out of order"), "\(r.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.path).sorted() == before)
        #expect(try storectl("verify", store.path).status == 65)
    }
}

/// Output paths that are not plain files, and inputs with small oddities, from the same review.
@Suite struct ReviewFindingsOutputTests {
    func store(_ dir: URL) throws -> String {
        let store = dir.appendingPathComponent("s").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("g.ndjson")
        try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\n{\"entity\":\"Genre\",\"name\":\"b\"}\n".utf8).write(to: input)
        #expect(try storectl("import", store, input.path, "--quiet").status == 0)
        return store
    }

    func isSymbolicLink(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK
    }

    /// `export --output`, `import --rejects` and `generate --output` naming a symbolic link write
    /// through it (a device such as `/dev/stdout` likewise); they used to rename a new file over
    /// the link (FileManager's atomic writes), and over `/dev/full` as root.
    @Test func outputsWriteThroughLinksAndDevices() throws {
        let dir = temporaryDirectory("review-links")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try store(dir)
        for (i, command) in ["export", "rejects", "generate"].enumerated() {
            let target = dir.appendingPathComponent("target-\(i)").path
            let link = dir.appendingPathComponent("link-\(i)").path
            #expect(FileManager.default.createFile(atPath: target, contents: nil))
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
            let r: ProcessResult
            switch command {
            case "export": r = try storectl("export", store, "--entity", "Genre", "--output", link)
            case "rejects":
                let input = dir.appendingPathComponent("bad.ndjson")
                try Data("{\"entity\":\"Genre\",\"name\":\"c\"}\nnot json\n".utf8).write(to: input)
                r = try storectl("import", store, input.path, "--continue-on-error", "--rejects", link, "--quiet")
            default: r = try storectl("generate", "--schema", librarySchemaDirectory.path, "--output", link)
            }
            #expect(r.status == 0, "\(command): \(r.status) \(r.stderr)")
            #expect(isSymbolicLink(link), "\(command) replaced the link")
            #expect(try String(contentsOfFile: target, encoding: .utf8).isEmpty == false, "\(command) wrote nothing through the link")
        }
        let devnull = try storectl("export", store, "--entity", "Genre", "--output", "/dev/null")
        #expect(devnull.status == 0, "\(devnull.stderr)")
        var st = stat()
        #expect(stat("/dev/null", &st) == 0 && (st.st_mode & S_IFMT) == S_IFCHR, "/dev/null is no longer a device")
        let full = try storectl("export", store, "--entity", "Genre", "--output", "/dev/full")
        #expect(full.status == 74, "\(full.status) \(full.stderr)")
        #expect(full.stderr.contains("No space left on device"), "\(full.stderr)")
        #expect(stat("/dev/full", &st) == 0 && (st.st_mode & S_IFMT) == S_IFCHR, "/dev/full is no longer a device")
        let generate = try storectl("generate", "--schema", librarySchemaDirectory.path, "--output", "/dev/full")
        #expect(generate.status == 74, "\(generate.status) \(generate.stderr)")
        #expect(generate.stderr.contains("No space left on device") && !generate.stderr.contains("NSCocoaErrorDomain"), "\(generate.stderr)")
    }

    /// A UTF-8 byte order mark at the start of an NDJSON or CSV file or a schema file is skipped
    /// ("unexpected character 'ï'" before); duplicate schema versions (`v1.json` and `v01.json`)
    /// are named; an integer beyond 64 bits says so; an empty `--sort` or `--fields` name is a
    /// usage error.
    @Test func smallInputOdditiesAreHandled() throws {
        let dir = temporaryDirectory("review-oddities")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try store(dir)
        let bom: [UInt8] = [0xEF, 0xBB, 0xBF]
        let ndjson = dir.appendingPathComponent("bom.ndjson")
        try Data(bom + Array("{\"entity\":\"Genre\",\"name\":\"bom\"}\n".utf8)).write(to: ndjson)
        #expect(try storectl("import", store, ndjson.path, "--quiet").status == 0)
        let csv = dir.appendingPathComponent("Genre.csv")
        try Data(bom + Array("name\ncsv-bom\n".utf8)).write(to: csv)
        let c = try storectl("import", store, csv.path, "--quiet")
        #expect(c.status == 0, "\(c.stderr)")
        #expect(try storectl("query", store, "--entity", "Genre", "--count").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "4")

        let schemas = dir.appendingPathComponent("schemas")
        try FileManager.default.createDirectory(at: schemas, withIntermediateDirectories: true)
        let v1 = try Data(contentsOf: librarySchemaDirectory.appendingPathComponent("v1.json"))
        try Data(bom + [UInt8](v1)).write(to: schemas.appendingPathComponent("v1.json"))
        #expect(try storectl("init", dir.appendingPathComponent("s2").path, "--schema", schemas.path).status == 0)
        try v1.write(to: schemas.appendingPathComponent("v01.json"))
        let dup = try storectl("init", dir.appendingPathComponent("s3").path, "--schema", schemas.path)
        #expect(dup.status == 65, "\(dup.status) \(dup.stderr)")
        #expect(dup.stderr.contains("version 1 is also"), "\(dup.stderr)")

        let big = dir.appendingPathComponent("big.ndjson")
        try Data("{\"entity\":\"Album\",\"mbid\":\"11111111-1111-1111-1111-111111111111\",\"title\":\"x\",\"year\":99999999999999999999}\n".utf8).write(to: big)
        let b = try storectl("import", store, big.path, "--quiet")
        #expect(b.status == 65 && b.stderr.contains("is outside the int range"), "\(b.status) \(b.stderr)")

        #expect(try storectl("query", store, "--entity", "Genre", "--sort", "").status == 64)
        #expect(try storectl("query", store, "--entity", "Genre", "--sort", "name,,").status == 64)
        #expect(try storectl("query", store, "--entity", "Genre", "--fields", "").status == 64)
        // A negative number reaches the option's own check ("Missing value" before).
        let negative = try storectl("import", store, ndjson.path, "--batch", "-5")
        #expect(negative.status == 64 && negative.stderr.contains("--batch must be between 1 and"), "\(negative.stderr)")
        let limit = try storectl("query", store, "--entity", "Genre", "--limit", "-1")
        #expect(limit.status == 64 && limit.stderr.contains("--limit must be at least 0"), "\(limit.stderr)")
    }
}

/// `storectl generate` for names that collide with Swift or Strata: entities called `Value`
/// and `Date`, attributes called `init`, `Type` and `default`. The generated file is
/// type-checked against the built Strata module (it failed: `struct Value: Entity` with
/// `[Value]` meaning itself, `self.init = init`); `self` is now a reserved name.
@Suite struct GeneratedCodeNameTests {
    static let modulemap: String? = {
        let build = repositoryRoot.appendingPathComponent(".build")
        let triples = (try? FileManager.default.contentsOfDirectory(atPath: build.path)) ?? []
        return triples.map { build.appendingPathComponent("\($0)/debug/CStrataCRC.build/module.modulemap").path }
            .first { FileManager.default.fileExists(atPath: $0) }
    }()
    static let canTypeCheck = modulemap != nil && FileManager.default.fileExists(atPath: repositoryRoot.appendingPathComponent(".build/debug/Modules/Strata.swiftmodule").path)

    @Test(.enabled(if: canTypeCheck, "needs the debug build's Strata module"))
    func collidingNamesGenerateCodeThatCompiles() throws {
        let json = #"""
        {"model":"tricky","version":1,"entities":[
         {"name":"Value","attributes":[{"name":"init","type":"int","optional":true},{"name":"Type","type":"date"},{"name":"String","type":"string"}],
          "relationships":[{"name":"dates","destination":"Date","toMany":true,"inverse":"value"}]},
         {"name":"Date","attributes":[{"name":"default","type":"bytes","optional":true},{"name":"when","type":"uuid"}],
          "relationships":[{"name":"value","destination":"Value","inverse":"dates"}]}]}
        """#
        let source = ModelGenerator.swiftSource(for: try Schema.parse(Array(json.utf8), source: "v1.json"))
        let dir = temporaryDirectory("generated-names")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("Tricky.swift")
        try Data(source.utf8).write(to: file)
        let r = try run("/usr/bin/env", ["swiftc", "-typecheck", "-I", repositoryRoot.appendingPathComponent(".build/debug/Modules").path,
                                         "-I", repositoryRoot.appendingPathComponent("Sources/CLMDB").path,
                                         "-Xcc", "-fmodule-map-file=\(Self.modulemap ?? "")", file.path])
        #expect(r.status == 0, "\(r.stderr.prefix(2_000))")
        let reserved = #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"self","type":"int"}]}]}"#
        #expect(throws: SchemaError.self) { try Schema.parse(Array(reserved.utf8), source: "v1.json") }
    }
}
