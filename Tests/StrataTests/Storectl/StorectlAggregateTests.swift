import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `storectl query --group-by … --count --sum/--min/--max/--avg`: the rows `aggregate` gives, as a
/// table and as NDJSON; bad keys and options are usage errors.
@Suite struct StorectlAggregateTests {
    let sample = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path

    @Test func groupsAsTheLibraryComputesThem() async throws {
        let dir = temporaryDirectory("storectl-aggregate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        #expect(try await storectl("import", store, sample, "--quiet").status == 0)

        let r = try await storectl("query", store, "--entity", "Track", "--group-by", "genre.name", "--count",
                             "--sum", "durationSeconds", "--max", "rating", "--json")
        #expect(r.status == 0, "\(r.stderr)")
        let lines = try r.stdout.split(separator: "\n").map { try JSONValue.parse(String($0)) }
        let opened = try Store.openReadOnly(at: URL(fileURLWithPath: store))
        defer { opened.close() }
        let rows = try opened.mainContext.aggregate(Track.self, groupedBy: .by(Track.genre, Genre.name),
                                                    [.sum(Track.durationSeconds), .max(Track.rating)])
        #expect(lines.count == rows.count && rows.count > 5)
        for (line, row) in zip(lines, rows) {
            #expect(line["genre.name"] == ValueConversion.json(row.group), "\(line)")
            #expect(line["count"] == .int(Int64(row.count)), "\(line)")
            #expect(line["sum(durationSeconds)"] == ValueConversion.json(row.values[0]), "\(line)")
            #expect(line["max(rating)"] == ValueConversion.json(row.values[1]), "\(line)")
        }
        let table = try await storectl("query", store, "--entity", "Playlist", "--group-by", "count(tracks)")
        #expect(table.status == 0 && table.stdout.hasPrefix("count(tracks)  count"), "\(table.stdout)")
        #expect(table.stdout.contains("group"), "\(table.stdout)")

        for (args, message) in [(["--group-by", "playlists"], "count(playlists)"),
                                (["--group-by", "count(album)"], "is not a to-many relationship"),
                                (["--sum", "nope"], "--sum: unknown attribute 'nope'"),
                                (["--group-by", "genre", "--limit", "2"], "do not apply to --group-by"),
                                (["--group-by", "genre", "--offset", "0"], "do not apply to --group-by"),
                                (["--sum", "title"], "--sum: 'title' is a string attribute of Track"),
                                (["--avg", "title"], "need an int, double or decimal attribute"),
                                (["--group-by", "playlists.name"],
                                 "--group-by: 'playlists' is not a to-one relationship of Track (a group-by path"),
                                (["--group-by", "genre.nope"], "--group-by: unknown group-by attribute 'nope' of Genre")] {
            let bad = try await storectl(["query", store, "--entity", "Track"] + args)
            #expect(bad.status == 64 && bad.stderr.contains(message), "\(args): \(bad.status) \(bad.stderr)")
        }
    }

    /// Each JSON key once: grouped by an attribute named `count`, the group's value is keyed
    /// `group(count)`; an aggregate asked twice is given once. Both repeated a key, and a parser
    /// kept the last (the group's value was lost).
    @Test func everyKeyOfAGroupsObjectIsItsOwn() async throws {
        let dir = temporaryDirectory("storectl-aggregate-keys")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = dir.appendingPathComponent("schema")
        try FileManager.default.createDirectory(at: schema, withIntermediateDirectories: true)
        try Data(#"""
            {"model":"m","version":1,"entities":[{"name":"Item","attributes":[{"name":"k","type":"string"},
             {"name":"count","type":"int"},{"name":"rating","type":"double"}],"uniques":[["k"]]}]}
            """#.utf8).write(to: schema.appendingPathComponent("v1.json"))
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", schema.path).status == 0)
        let input = try writeInput([#"{"entity":"Item","k":"a","count":5,"rating":1}"#,
                                    #"{"entity":"Item","k":"b","count":5,"rating":2}"#,
                                    #"{"entity":"Item","k":"c","count":7,"rating":4}"#], in: dir)
        #expect(try await storectl("import", store, input, "--quiet").status == 0)
        let r = try await storectl("query", store, "--entity", "Item", "--group-by", "count", "--sum", "rating",
                                   "--sum", "rating", "--json")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == #"""
            {"group(count)":5,"count":2,"sum(rating)":3.0}
            {"group(count)":7,"count":1,"sum(rating)":4.0}

            """#, "\(r.stdout)")
    }

    /// The table shows numbers whole: a decimal mean of 38 digits and a group key of 38 digits
    /// (cut at 40 characters, two keys differing in their last digit printed alike, and a mean
    /// showed a wrong last digit); strings are still cut.
    @Test func theTableShowsNumbersWhole() async throws {
        let dir = temporaryDirectory("storectl-aggregate-numbers")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = dir.appendingPathComponent("schema")
        try FileManager.default.createDirectory(at: schema, withIntermediateDirectories: true)
        try Data(#"""
            {"model":"m","version":1,"entities":[{"name":"Item","attributes":[{"name":"k","type":"string"},
             {"name":"g","type":"decimal"},{"name":"m","type":"decimal"}],"uniques":[["k"]]}]}
            """#.utf8).write(to: schema.appendingPathComponent("v1.json"))
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", schema.path).status == 0)
        let g1 = "0.0001234567890123456789012345678901234571", g2 = "0.0001234567890123456789012345678901234572"
        let long = String(repeating: "x", count: 60)
        let input = try writeInput([#"{"entity":"Item","k":"\#(long)","g":"\#(g1)","m":"0.01"}"#,
                                    #"{"entity":"Item","k":"b","g":"\#(g2)","m":"0.02"}"#,
                                    #"{"entity":"Item","k":"c","g":"\#(g2)","m":"0.02"}"#], in: dir)
        let imported = try await storectl("import", store, input, "--quiet")
        #expect(imported.status == 0, "\(imported.stderr)")
        let grouped = try await storectl("query", store, "--entity", "Item", "--group-by", "g", "--avg", "m")
        #expect(grouped.status == 0, "\(grouped.stderr)")
        #expect(grouped.stdout.contains(g1) && grouped.stdout.contains(g2), "\(grouped.stdout)")
        let mean = try await storectl("query", store, "--entity", "Item", "--avg", "m")
        #expect(mean.stdout.contains("0.0" + "1" + String(repeating: "6", count: 36) + "7"), "\(mean.stdout)")
        let listed = try await storectl("query", store, "--entity", "Item", "--fields", "k,g")
        #expect(listed.stdout.contains(g1) && !listed.stdout.contains(long)
                && listed.stdout.contains(String(repeating: "x", count: 39) + "…"), "\(listed.stdout)")
    }
}
