import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Import and export options as the README documents them: CSV `rel.attr` columns
/// with `|`-separated to-many values; `--entity`/`--format` overrides and the `.jsonl`/`.json`
/// extensions; NDJSON `null` clearing a to-one; to-many links added while existing ones are
/// kept; `--import-id` in every transaction's metadata; `--max-errors`; the "skipped N
/// relationship(s)" line; CSV quoting of values with leading or trailing spaces.
@Suite struct ImportExportTests {
    /// An empty library store in its own directory.
    func emptyStore(_ name: String = "import-export") async throws -> (dir: URL, store: String) {
        let dir = temporaryDirectory(name)
        let store = dir.appendingPathComponent("store").path
        let r = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(r.status == 0, "\(r.stderr)")
        return (dir, store)
    }

    func write(_ text: String, to dir: URL, _ name: String) throws -> String {
        let url = dir.appendingPathComponent(name)
        try Data(text.utf8).write(to: url)
        return url.path
    }

    func lines(_ text: String) throws -> [JSONValue] {
        try text.split(separator: "\n").map { try JSONValue.parse(String($0)) }
    }

    /// `export --entity E` as JSON records.
    func exported(_ store: String, _ entity: String) async throws -> [JSONValue] {
        let r = try await storectl("export", store, "--entity", entity)
        #expect(r.status == 0, "\(r.stderr)")
        return try lines(r.stdout)
    }

    func string(_ v: JSONValue?) -> String? { if case .string(let s)? = v { s } else { nil } }
    func strings(_ v: JSONValue?) -> Set<String>? {
        guard case .array(let a)? = v else { return nil }
        return Set(a.compactMap { string($0) })
    }

    /// `id` of the record of `entity` whose `key` is `value`.
    func id(_ records: [JSONValue], _ key: String, _ value: String) -> String? {
        records.first { string($0[key]) == value }.flatMap { string($0["id"]) }
    }

    func lastTransaction(_ store: String) async throws -> JSONValue? {
        let r = try await storectl("info", store, "--json")
        #expect(r.status == 0, "\(r.stderr)")
        return try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["lastTransaction"]
    }

    static let album = "34f72da7-1d56-5543-8e29-d56263048fd9"
    static let setup = """
    {"entity":"Genre","name":"Jazz"}
    {"entity":"Playlist","name":"Late Night Jazz 🎷","createdAt":"2021-11-02T22:15:00Z"}
    {"entity":"Playlist","name":"Five Stars","createdAt":"2021-11-02T22:15:00Z"}
    {"entity":"Playlist","name":"Unused","createdAt":"2021-11-02T22:15:00Z"}
    {"entity":"Album","mbid":"\(album)","title":"Trains"}

    """

    /// An export of records of large values reads its snapshot a chunk of about 8 MiB of lines at
    /// a time (it held 512 lines whatever their size), and still writes every record once, in
    /// order, by each way it reads: a scan, candidates from an index, a sorted fetch.
    @Test func anExportOfLargeRecordsWritesEachOnceInChunksOfBytes() async throws {
        try await withLibraryStore { store in
            let big = String(repeating: "v", count: 600_000)
            let titles = (0..<30).map { String(format: "t%02d ", $0) + big }
            _ = try await store.save { c in for t in titles { c.insert(makeTrack(title: t, duration: 1)) } }
            func exported(_ query: Query) throws -> [String] {
                var out: [String] = []
                _ = try Exporter(store: store).export(query, format: .ndjson) { line in
                    out.append(try JSONValue.parse(line)["title"].flatMap { if case .string(let s) = $0 { s } else { nil } } ?? "")
                }
                return out
            }
            #expect(try exported(Query(entity: "Track")).sorted() == titles)
            let track = try #require(store.schema.entity(named: "Track"))
            #expect(try exported(Query(entity: "Track", sort: try PredicateParser.parseSort("title", entity: track))) == titles)
            let prefix = try exported(Query(entity: "Track", predicate: try PredicateParser.parse("title prefix 't1'", entity: track,
                                                                                                  schema: store.schema)))
            #expect(prefix.sorted() == titles.filter { $0.hasPrefix("t1") })
        }
    }

    /// CSV export doubles every quote, also one followed by a combining mark (one Character
    /// with it, which is not `"`): such a quote went out single and ended the field, so the line
    /// was refused on import, or, with a line break after it, the rest of the value was read as
    /// a record of its own (a crafted value imported an object that never existed).
    @Test func csvDoublesAQuoteFollowedByACombiningMark() async throws {
        let (dir, store) = try await emptyStore("csv-combining-quote")
        defer { try? FileManager.default.removeItem(at: dir) }
        let forged = "00040000000000000000000000000099"
        let names = ["x\"\u{301}", "q\"\u{308}x\"\u{FE0F}y", "x\"\u{301}\n\(forged),\"\u{301}"]
        let input = names.map { #"{"entity":"Genre","name":"# + JSONValue.string($0).serialized + "}" }.joined(separator: "\n")
        let r = try await storectl("import", store, try write(input + "\n", to: dir, "genres.ndjson"), "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let csv = try await storectl("export", store, "--entity", "Genre", "--format", "csv")
        #expect(csv.status == 0, "\(csv.stderr)")
        let (dir2, copy) = try await emptyStore("csv-combining-quote-copy")
        defer { try? FileManager.default.removeItem(at: dir2) }
        let again = try await storectl("import", copy, try write(csv.stdout, to: dir2, "Genre.csv"), "--quiet")
        #expect(again.status == 0, "\(again.stderr)")
        let back = try await exported(copy, "Genre")
        #expect(Set(back.compactMap { string($0["name"]) }) == Set(names), "\(back)")
        #expect(back.count == 3)
        #expect(id(back, "name", "\"\u{301}") == nil && !back.contains { string($0["id"]) == forged })
    }

    /// The README's CSV example: `album.mbid` and `genre.name` name one target, `playlists.name`
    /// several, separated by `|`; a quoted title keeps its comma.
    @Test func csvRelationshipAttributeColumnsWithPipeSeparatedToMany() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let setup = try write(Self.setup, to: dir, "setup.ndjson")
        let csv = try write("""
        mbid,title,durationSeconds,addedAt,album.mbid,genre.name,playlists.name
        6f1c2a34-5b6d-4e7f-8a9b-0c1d2e3f4a5b,"Night Train, Part 2",412,2024-05-01T12:00:00Z,\(Self.album),Jazz,Late Night Jazz 🎷|Five Stars
        7f1c2a34-5b6d-4e7f-8a9b-0c1d2e3f4a5b,Day Train,200,2024-05-01T12:00:00Z,,,Five Stars

        """, to: dir, "Track.csv")
        // The CSV comes first: its references point forward to the NDJSON records.
        let r = try await storectl("import", store, csv, setup, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let playlists = try await exported(store, "Playlist"), genres = try await exported(store, "Genre"), albums = try await exported(store, "Album")
        let tracks = try await exported(store, "Track")
        #expect(tracks.count == 2)
        let night = try #require(tracks.first { string($0["title"]) == "Night Train, Part 2" })
        #expect(string(night["mbid"]) == "6f1c2a34-5b6d-4e7f-8a9b-0c1d2e3f4a5b")
        #expect(string(night["album"]) == id(albums, "mbid", Self.album))
        #expect(string(night["genre"]) == id(genres, "name", "Jazz"))
        let late = try #require(id(playlists, "name", "Late Night Jazz 🎷")), five = try #require(id(playlists, "name", "Five Stars"))
        #expect(strings(night["playlists"]) == [late, five])
        let day = try #require(tracks.first { string($0["title"]) == "Day Train" })
        #expect(strings(day["playlists"]) == [five])
        #expect(day["album"] == nil && day["genre"] == nil)
        // Seen from the other side too.
        let fivePlaylist = try #require(playlists.first { string($0["name"]) == "Five Stars" })
        #expect(strings(fivePlaylist["tracks"]) == Set(tracks.compactMap { string($0["id"]) }))

        // A `|` list in a to-one `rel.attr` column is the whole value, so it names no genre.
        let bad = try write("""
        mbid,title,durationSeconds,addedAt,genre.name
        8f1c2a34-5b6d-4e7f-8a9b-0c1d2e3f4a5b,X,1,2024-05-01T12:00:00Z,Jazz|Jazz

        """, to: dir, "Track.csv")
        let refused = try await storectl("import", store, bad, "--quiet")
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("Track.csv:2: genre"), "\(refused.stderr)")
        #expect(try await exported(store, "Track").count == 2)
    }

    /// `.jsonl` and `.json` are NDJSON; another extension needs `--format`; `--entity` names the
    /// entity of a CSV file whatever its name; `--format` applies to every file, whatever its
    /// extension.
    @Test func formatAndEntityOverridesAndJSONExtensions() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let jsonl = try write("{\"entity\":\"Genre\",\"name\":\"A\"}\n", to: dir, "a.jsonl")
        let json = try write("{\"entity\":\"Genre\",\"name\":\"B\"}\n", to: dir, "b.JSON")
        let ok = try await storectl("import", store, jsonl, json, "--quiet")
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(ok.stdout.hasPrefix("imported 2 records in 1 transaction(s)"), "\(ok.stdout)")

        // No format from the name: the whole import is refused, naming the file.
        let txt = try write("name\nC\n", to: dir, "genres.txt")
        let unknown = try await storectl("import", store, txt, "--quiet")
        #expect(unknown.status == 65, "\(unknown.stderr)")
        #expect(unknown.stderr.contains("\(txt): unknown format"), "\(unknown.stderr)")
        #expect(unknown.stderr.contains("nothing was written"), "\(unknown.stderr)")
        // CSV named after no entity: a problem of the whole file, named without a line, and the
        // advice fits how the entity was chosen (given with --entity, or the file's name).
        let noEntity = try await storectl("import", store, txt, "--format", "csv", "--quiet")
        #expect(noEntity.status == 65, "\(noEntity.stderr)")
        #expect(noEntity.stderr.contains("\(txt): the CSV entity 'genres', the file's name, is not in the schema " +
                                         "(known: Artist, "), "\(noEntity.stderr)")
        #expect(noEntity.stderr.contains("name the file after its entity (Track.csv), or give the entity with --entity"),
                "\(noEntity.stderr)")
        let given = try await storectl("import", store, txt, "--format", "csv", "--entity", "Nope", "--quiet")
        #expect(given.status == 65 && given.stderr.contains("\(txt): the CSV entity given ('Nope', --entity) is not " +
                                                            "in the schema (known: "), "\(given.stderr)")
        #expect(!given.stderr.contains("--entity)\n") && !given.stderr.contains(":0:"), "\(given.stderr)")
        #expect(try await exported(store, "Genre").compactMap { string($0["name"]) } .sorted() == ["A", "B"])

        // --format csv --entity Genre: read as CSV of Genre.
        let both = try await storectl("import", store, txt, "--format", "csv", "--entity", "Genre", "--quiet")
        #expect(both.status == 0, "\(both.stderr)")
        // --entity wins over the file name.
        let named = try write("name,createdAt\nP,2021-11-02T22:15:00Z\n", to: dir, "Genre.csv")
        let asPlaylist = try await storectl("import", store, named, "--entity", "Playlist", "--quiet")
        #expect(asPlaylist.status == 0, "\(asPlaylist.stderr)")
        // --format ndjson applies to a .csv name too.
        let ndjsonInCSV = try write("{\"entity\":\"Genre\",\"name\":\"D\"}\n", to: dir, "d.csv")
        let forced = try await storectl("import", store, ndjsonInCSV, "--format", "ndjson", "--quiet")
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(try await exported(store, "Genre").compactMap { string($0["name"]) }.sorted() == ["A", "B", "C", "D"])
        #expect(try await exported(store, "Playlist").compactMap { string($0["name"]) } == ["P"])
    }

    /// A to-one given as `null` is cleared (attributes all set again, other relationships left
    /// alone); a to-many lists links to add, existing links stay.
    @Test func ndjsonNullClearsAToOneAndToManyLinksAreAdded() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let t1 = "a57b4577-d494-5d87-a3b4-ed585e362765", t2 = "82d6edf7-3c84-5d05-811b-3b924c91ddff"
        let first = try write(Self.setup + """
        {"entity":"Track","mbid":"\(t1)","title":"One","durationSeconds":1,"addedAt":"2022-08-01T08:45:23Z","album":{"mbid":"\(Self.album)"},"genre":{"name":"Jazz"},"playlists":[{"name":"Five Stars"}]}
        {"entity":"Track","mbid":"\(t2)","title":"Two","durationSeconds":2,"addedAt":"2022-08-01T08:45:23Z"}

        """, to: dir, "first.ndjson")
        #expect(try await storectl("import", store, first, "--quiet").status == 0)
        let second = try write("""
        {"entity":"Track","mbid":"\(t1)","title":"One again","durationSeconds":1,"addedAt":"2022-08-01T08:45:23Z","genre":null,"playlists":[{"name":"Late Night Jazz 🎷"}]}
        {"entity":"Playlist","name":"Five Stars","createdAt":"2021-11-02T22:15:00Z","tracks":[{"mbid":"\(t2)"}]}

        """, to: dir, "second.ndjson")
        let r = try await storectl("import", store, second, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let tracks = try await exported(store, "Track"), playlists = try await exported(store, "Playlist")
        let albums = try await exported(store, "Album")
        let one = try #require(tracks.first { string($0["mbid"]) == t1 })
        let two = try #require(tracks.first { string($0["mbid"]) == t2 })
        #expect(string(one["title"]) == "One again")
        #expect(one["genre"] == nil, "genre not cleared: \(one)")
        #expect(string(one["album"]) == id(albums, "mbid", Self.album), "album, not mentioned, was changed")
        let five = try #require(id(playlists, "name", "Five Stars")), late = try #require(id(playlists, "name", "Late Night Jazz 🎷"))
        #expect(strings(one["playlists"]) == [five, late])
        #expect(strings(two["playlists"]) == [five])
        let fivePlaylist = try #require(playlists.first { string($0["name"]) == "Five Stars" })
        #expect(strings(fivePlaylist["tracks"]) == [string(one["id"])!, string(two["id"])!])
        // The genre itself is untouched, only unlinked.
        let genre = try #require(try await exported(store, "Genre").first)
        #expect(string(genre["name"]) == "Jazz")
        let q = try await storectl("query", store, "--entity", "Track", "--where", "genre == '\(string(genre["id"])!)'", "--count")
        #expect(q.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    /// `--import-id` is stored as `importID` in every transaction of the import: the batches
    /// (`batch` 1, 2, …) and the deferred links (`phase: links`); without it a UUID is generated
    /// and reported.
    @Test func importIDIsInEveryTransactionsMetadata() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        // The track points forward at the genre: its link is written in the links phase.
        let input = try write("""
        {"entity":"Track","mbid":"a57b4577-d494-5d87-a3b4-ed585e362765","title":"One","durationSeconds":1,"addedAt":"2022-08-01T08:45:23Z","genre":{"name":"Folk"}}
        {"entity":"Genre","name":"Folk"}
        {"entity":"Genre","name":"Rock"}

        """, to: dir, "in.ndjson")
        let r = try await storectl("import", store, input, "--batch", "2", "--import-id", "nightly-42", "--json", "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let summary = try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(summary["importID"] == .string("nightly-42"))
        #expect(summary["transactions"] == .int(3) && summary["firstTransaction"] == .int(1) && summary["lastTransaction"] == .int(3), "\(summary)")
        let log = try await storectl("log", store, "--json")
        #expect(log.status == 0, "\(log.stderr)")
        let entries = try lines(log.stdout)
        #expect(entries.count == 3)
        let metadata = entries.map { $0["metadata"] }
        #expect(metadata == [
            .object([("batch", .string("1")), ("importID", .string("nightly-42"))]),
            .object([("batch", .string("2")), ("importID", .string("nightly-42"))]),
            .object([("importID", .string("nightly-42")), ("phase", .string("links"))]),
        ])
        #expect(entries.allSatisfy { $0["author"] == .string("import") })

        // Without --import-id: a generated UUID, the same in the output line and in the log.
        let more = try write("{\"entity\":\"Genre\",\"name\":\"Pop\"}\n", to: dir, "more.ndjson")
        let plain = try await storectl("import", store, more, "--quiet")
        #expect(plain.status == 0, "\(plain.stderr)")
        let generated = try #require(plain.stdout.trimmingCharacters(in: .whitespacesAndNewlines).components(separatedBy: "import id ").last)
        #expect(UUID(uuidString: generated) != nil, "\(plain.stdout)")
        let last = try lines(try await storectl("log", store, "--from", "4", "--json").stdout)
        #expect(last.map { $0["metadata"] } == [.object([("batch", .string("1")), ("importID", .string(generated))])])
    }

    /// `--max-errors N` lists the first N issues in line order and counts the rest; nothing is written.
    @Test func maxErrorsListsTheFirstIssuesAndCountsTheRest() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        var text = "{\"entity\":\"Genre\",\"name\":\"ok\"}\n"
        for i in 0..<5 { text += "{\"entity\":\"Genre\",\"name\":\(i)}\n" }     // lines 2…6: not a string
        let input = try write(text, to: dir, "in.ndjson")
        let r = try await storectl("import", store, input, "--max-errors", "2", "--quiet")
        #expect(r.status == 65)
        let reported = r.stderr.split(separator: "\n").map(String.init)
        #expect(reported == [
            "\(input):2: name: expected string, found integer",
            "\(input):3: name: expected string, found integer",
            "… and 3 more issue(s)",
            "storectl: error: 5 bad record(s); nothing was written",
        ], "\(r.stderr)")
        #expect(try await lastTransaction(store) == .int(0))
        // The default lists 20: all five here.
        let all = try await storectl("import", store, input, "--quiet")
        #expect(all.status == 65)
        #expect(all.stderr.split(separator: "\n").count == 6, "\(all.stderr)")
        #expect(!all.stderr.contains("more issue"))
    }

    /// A link to a record that came later in the input and was refused at write time (its
    /// unique key clashes with an object of the store) is skipped, counted and reported.
    @Test func skippedLinksAreReported() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let existing = try write("{\"entity\":\"Genre\",\"name\":\"Rock\"}\n", to: dir, "existing.ndjson")
        #expect(try await storectl("import", store, existing, "--quiet").status == 0)
        // A new genre id whose name clashes with the stored "Rock": accepted by validation
        // (matched by id), refused by the unique constraint when written.
        let clash = ObjectID.make(entityTag: Genre.entityTag).description
        let input = try write("""
        {"entity":"Track","mbid":"a57b4577-d494-5d87-a3b4-ed585e362765","title":"One","durationSeconds":1,"addedAt":"2022-08-01T08:45:23Z","genre":"\(clash)"}
        {"entity":"Genre","id":"\(clash)","name":"Rock"}

        """, to: dir, "in.ndjson")
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let r = try await storectl("import", store, input, "--batch", "1", "--continue-on-error", "--rejects", rejects, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let out = r.stdout.split(separator: "\n").map(String.init)
        #expect(out.count == 3, "\(r.stdout)")
        #expect(out.first?.hasPrefix("imported 1 records in 1 transaction(s)") == true, "\(r.stdout)")
        #expect(out.dropFirst().first == "rejected 1 record(s), see \(rejects)")
        #expect(out.last?.hasPrefix("skipped 1 relationship(s) the store refused") == true, "\(out)")
        let rejected = try String(contentsOfFile: rejects, encoding: .utf8)
        #expect(rejected.hasPrefix("# \(input):2: name"), "\(rejected)")
        #expect(rejected.contains("\"id\":\"\(clash)\""))
        // The track is there, without a genre; the stored genre is unchanged and unlinked.
        let tracks = try await exported(store, "Track")
        #expect(tracks.count == 1 && tracks.first?["genre"] == nil)
        #expect(try await exported(store, "Genre").compactMap { string($0["id"]) } != [clash])

        // --json counts it.
        let again = try write("""
        {"entity":"Track","mbid":"b57b4577-d494-5d87-a3b4-ed585e362765","title":"Two","durationSeconds":1,"addedAt":"2022-08-01T08:45:23Z","genre":"\(clash)"}
        {"entity":"Genre","id":"\(clash)","name":"Rock"}

        """, to: dir, "again.ndjson")
        let j = try await storectl("import", store, again, "--batch", "1", "--continue-on-error", "--rejects", rejects, "--json", "--quiet")
        #expect(j.status == 0, "\(j.stderr)")
        let summary = try JSONValue.parse(j.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(summary["skippedLinks"] == .int(1) && summary["rejected"] == .int(1) && summary["records"] == .int(1), "\(summary)")
    }

    /// Control characters (NUL, ESC, TAB, CR, LF, CRLF, DEL, a C1 character) in a value: CSV
    /// export writes them as they are, in a quoted field, and importing that CSV into an empty
    /// store gives back the same bytes (its export is identical, CSV and NDJSON alike).
    @Test func csvExportKeepsControlCharactersAndReimportsByteForByte() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let value = "nul\u{0}esc\u{1B}[31mred tab\tcr\rlf\ncrlf\r\ndel\u{7F}c1\u{85}bell\u{7}"
        let line = "{\"entity\":\"Genre\",\"name\":\(JSONValue.string(value).serialized)}\n{\"entity\":\"Genre\",\"name\":\"tab\\tonly\"}\n"
        #expect(try await storectl("import", store, try write(line, to: dir, "in.ndjson"), "--quiet").status == 0)
        let csv = dir.appendingPathComponent("Genre.csv").path
        #expect(try await storectl("export", store, "--entity", "Genre", "--format", "csv", "--output", csv).status == 0)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: csv))
        #expect(bytes.contains(0x00) && bytes.contains(0x1B), "control characters are not written as they are")
        #expect(String(decoding: bytes, as: UTF8.self).contains(",\"tab\tonly\"\n"), "a field with a tab is not quoted")
        let (dir2, store2) = try await emptyStore("import-export-2")
        defer { try? FileManager.default.removeItem(at: dir2) }
        let i = try await storectl("import", store2, csv, "--quiet")
        #expect(i.status == 0, "\(i.stderr)")
        let again = try await storectl("export", store2, "--entity", "Genre", "--format", "csv")
        #expect(Data(again.stdout.utf8) == bytes)
        #expect(try await storectl("export", store2, "--entity", "Genre").stdout == (try await storectl("export", store, "--entity", "Genre").stdout))
        #expect(try await exported(store2, "Genre").contains { string($0["name"]) == value })
    }

    /// CSV export quotes values with a leading or trailing space (and the other special cases),
    /// and importing the export reproduces them exactly.
    @Test func csvExportQuotesLeadingAndTrailingSpacesAndRoundTrips() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let names = [" lead", "trail ", " both ", "in side", "", "a,b", "q\"q", "plain"]
        var text = ""
        for (i, n) in names.enumerated() {
            let notes = JSONValue.string(n).serialized
            text += "{\"entity\":\"Playlist\",\"name\":\"p\(i)\",\"createdAt\":\"2021-11-02T22:15:00Z\",\"notes\":\(notes)}\n"
        }
        text += "{\"entity\":\"Playlist\",\"name\":\"none\",\"createdAt\":\"2021-11-02T22:15:00Z\"}\n"
        let input = try write(text, to: dir, "in.ndjson")
        #expect(try await storectl("import", store, input, "--quiet").status == 0)
        let csvPath = dir.appendingPathComponent("Playlist.csv").path
        let e = try await storectl("export", store, "--entity", "Playlist", "--format", "csv", "--output", csvPath)
        #expect(e.status == 0, "\(e.stderr)")
        let csv = try String(contentsOfFile: csvPath, encoding: .utf8)
        let rows = csv.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(rows.first == "id,name,createdAt,notes,tracks")
        func row(_ name: String) -> String? { rows.first { $0.contains(",\(name),") } }
        #expect(row("p0")?.hasSuffix(",\" lead\",") == true, "\(csv)")
        #expect(row("p1")?.hasSuffix(",\"trail \",") == true, "\(csv)")
        #expect(row("p2")?.hasSuffix(",\" both \",") == true, "\(csv)")
        #expect(row("p3")?.hasSuffix(",in side,") == true, "\(csv)")
        #expect(row("p4")?.hasSuffix(",\"\",") == true, "\(csv)")
        #expect(row("p5")?.hasSuffix(",\"a,b\",") == true, "\(csv)")
        #expect(row("p6")?.hasSuffix(",\"q\"\"q\",") == true, "\(csv)")
        #expect(row("none")?.hasSuffix("Z,,") == true, "\(csv)")

        // Import the CSV into an empty store: the same records, spaces kept.
        let (dir2, store2) = try await emptyStore("import-export-2")
        defer { try? FileManager.default.removeItem(at: dir2) }
        let i = try await storectl("import", store2, csvPath, "--quiet")
        #expect(i.status == 0, "\(i.stderr)")
        let before = try await storectl("export", store, "--entity", "Playlist").stdout
        #expect(!before.isEmpty)
        #expect(try await storectl("export", store2, "--entity", "Playlist").stdout == before)
        let notes = try await exported(store2, "Playlist").map { string($0["notes"]) }
        #expect(notes == names.map { Optional($0) } + [nil])
    }
}
