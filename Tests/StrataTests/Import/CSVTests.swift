import Foundation
import LibraryModel
import Testing
@testable import Strata

/// CSV values as storectl imports and exports them: an empty string is not null, a byte order
/// mark is skipped, a CRLF inside a value is quoted and read back.
@Suite struct CSVTests {
    @Test func csvKeepsEmptyStringsApartFromNullAndIgnoresABOM() async throws {
        let dir = temporaryDirectory("csv")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let csv = dir.appendingPathComponent("Playlist.csv")
        try Data(("\u{FEFF}name , createdAt,notes\n" + "a,2024-01-01T00:00:00Z,\"\"\n" + "b,2024-01-01T00:00:00Z,\n").utf8).write(to: csv)
        let r = try await storectl("import", store, csv.path, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let out = try await storectl("query", store, "--entity", "Playlist", "--sort", "name", "--json").stdout.split(separator: "\n")
        #expect(try JSONValue.parse(String(out[0]))["notes"] == .string(""))
        #expect(try JSONValue.parse(String(out[1]))["notes"] == nil)
    }

    /// A CSV row of spaces is a record (its one field holds them), reported when it is not one
    /// the header allows; only an empty row is skipped. It was dropped without a word, as an
    /// NDJSON blank line is.
    @Test func aCSVRowOfSpacesIsARecordAndAnEmptyRowIsSkipped() async throws {
        let dir = temporaryDirectory("csv-spaces")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let genres = dir.appendingPathComponent("Genre.csv")
        try Data("name\n   \n\nb\n".utf8).write(to: genres)
        let r = try await storectl("import", store, genres.path, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let names = try await storectl("query", store, "--entity", "Genre", "--sort", "name", "--json").stdout
            .split(separator: "\n").map { try JSONValue.parse(String($0))["name"] }
        #expect(names == [.string("   "), .string("b")], "\(names)")
        // With two columns, a row of spaces has one field: an issue at its line.
        let playlists = dir.appendingPathComponent("Playlist.csv")
        try Data("name,notes\na,x\n  \n".utf8).write(to: playlists)
        let bad = try await storectl("import", store, playlists.path, "--quiet")
        #expect(bad.status == 65, "\(bad.stderr)")
        #expect(bad.stderr.contains("Playlist.csv:3"), "\(bad.stderr)")
    }

    /// CSV: a value holding CRLF is quoted on export (a `"\r\n"` pair is one Swift `Character`,
    /// neither `"\r"` nor `"\n"`) and read back with its CRLF.
    @Test func csvKeepsACarriageReturnLineFeedInAValue() async throws {
        let dir = temporaryDirectory("csv-crlf")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let csv = dir.appendingPathComponent("Genre.csv")
        try Data("name\r\n\"cr\r\nlf\"\r\nplain\r\n".utf8).write(to: csv)
        #expect(try await storectl("import", store, csv.path, "--quiet").status == 0)
        let names = try await storectl("query", store, "--entity", "Genre", "--json").stdout
        #expect(names.contains("cr\\r\\nlf"), "\(names)")
        let exported = try await storectl("export", store, "--entity", "Genre", "--format", "csv").stdout
        #expect(exported.contains("\"cr\r\nlf\""), "\(exported.debugDescription)")
        // The header and two records' lines: four line feeds, one of them inside the quoted value.
        #expect(exported.utf8.filter { $0 == 0x0A }.count == 4, "\(exported.debugDescription)")
    }

    /// A line over the limit inside a quoted field, or one that opens a quoted field going on over
    /// the next lines, makes its whole record one bad record, reported at its first line; the
    /// lines up to the closing quote are skipped with it (the reader counts the quotes of the
    /// line it skips), and the records after it are read. They were taken for records of their
    /// own: text from inside a field was imported as values. (Before that, an overlong line
    /// inside a field stopped the import, where the field closed being unknown.)
    @Test func anOverlongLineInsideAQuotedFieldIsPartOfOneBadRecord() async throws {
        let dir = temporaryDirectory("csv-overlong-in-quotes")
        defer { try? FileManager.default.removeItem(at: dir) }
        let long = String(repeating: "x", count: 5_000)
        for (text, line, reason) in [
            // The long line inside the field.
            ("name\n\"open\n\(long)\nphantom\n\"\nafter\n", 2, "a record of more than 4096 bytes"),
            // The long line opening the field (its quote is in the skipped bytes).
            ("name\n\"open \(long)\nphantom,row\nend\"\nafter\n", 2, "(a quoted field that goes on over the next lines"),
            // A doubled quote in the long line does not close the field.
            ("name\n\"open \"\" \(long)\nphantom\n\"\nafter\n", 2, "(a quoted field that goes on over the next lines"),
        ] {
            try await withLibraryStore { store in
                let csv = dir.appendingPathComponent("Genre.csv")
                try Data(text.utf8).write(to: csv)
                var options = ImportOptions()
                options.maxLineBytes = 4_096
                do {
                    _ = try await Importer(store: store, options: options).run(files: [csv.path])
                    Issue.record("the import was accepted")
                } catch let failed as ImportFailed {
                    #expect(failed.issues.count == 1, "\(failed.issues)")
                    let issue = try #require(failed.issues.first)
                    #expect(issue.line == line && issue.reason.contains(reason), "\(issue)")
                }
                #expect(try store.mainContext.count(Genre.self) == 0)
                options.continueOnError = true
                let summary = try await Importer(store: store, options: options).run(files: [csv.path])
                #expect(summary.rejected == 1, "\(summary)")
                #expect(Set(try store.mainContext.fetch(Genre.self).map(\.name)) == ["after"])
            }
        }
    }

    /// A line over the limit that leaves no field open is one bad record, and the next line is
    /// read as the next record.
    @Test func anOverlongLineWithItsQuotesClosedIsOneBadRecord() async throws {
        let dir = temporaryDirectory("csv-overlong-closed")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let csv = dir.appendingPathComponent("Genre.csv")
            try Data("name\n\"\(String(repeating: "y", count: 5_000))\"\nnext\n".utf8).write(to: csv)
            var options = ImportOptions()
            options.maxLineBytes = 4_096
            options.continueOnError = true
            let summary = try await Importer(store: store, options: options).run(files: [csv.path])
            #expect(summary.rejected == 1, "\(summary)")
            #expect(Set(try store.mainContext.fetch(Genre.self).map(\.name)) == ["next"])
        }
    }

    /// A quoted field may run over several lines, but the whole record is held to
    /// `maxLineBytes`, as one line is: a missing closing quote cannot gather the rest of a large
    /// file into one record (it was unbounded, and split again from its start at every line).
    /// A quoted field over a few lines, with doubled quotes in it, still reads.
    @Test func aRecordRunningOverManyLinesIsHeldToTheLineLimit() async throws {
        let dir = temporaryDirectory("csv-long-record")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let csv = dir.appendingPathComponent("Genre.csv")
            let rows = (0..<2_000).map { "genre \($0)" }.joined(separator: "\n")
            try Data(("name\n\"Night Train\n" + rows + "\n").utf8).write(to: csv)
            var options = ImportOptions()
            options.maxLineBytes = 4_096
            do {
                _ = try await Importer(store: store, options: options).run(files: [csv.path])
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.count == 1, "\(failed.issues)")
                let issue = try #require(failed.issues.first)
                #expect(issue.line == 2 && issue.reason.contains("a record of more than 4096 bytes"), "\(issue)")
            }
            #expect(try store.lastTransactionID == TransactionID(0))
            // Going on after errors, the rest of the open field belongs to the bad record: its
            // lines are not imported as records of their own (the quote never closes here).
            options.continueOnError = true
            let summary = try await Importer(store: store, options: options).run(files: [csv.path])
            #expect(summary.rejected == 1, "\(summary)")
            #expect(try store.mainContext.count(Genre.self) == 0)

            let ok = dir.appendingPathComponent("ok").appendingPathComponent("Genre.csv")
            try FileManager.default.createDirectory(at: ok.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data("name\n\"a \"\"quoted\"\"\nword\non three lines\"\nplain\n".utf8).write(to: ok)
            _ = try await Importer(store: store, options: options).run(files: [ok.path])
            let names = Set(try store.mainContext.fetch(Genre.self).map(\.name))
            #expect(names == ["a \"quoted\"\nword\non three lines", "plain"], "\(names)")
        }
    }

    /// A stray quote on a continuation line of a quoted field (`5'11" tall"`) ends that record
    /// there, rejected as text after a closing quote; the records after it are read as records.
    /// Counting quote characters, the record took in the next line (`Rock`) and was rejected
    /// with it, and a later quoted field's inner line (`plain`) was imported as a genre.
    @Test func aStrayQuoteOnAContinuationLineEndsThatRecordOnly() async throws {
        let dir = temporaryDirectory("csv-stray-quote")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let csv = dir.appendingPathComponent("Genre.csv")
            try Data("name\n\"Height:\n5'11\" tall\"\nRock\n\"Multi\nplain\nend\"\nJazz\n".utf8).write(to: csv)
            do {
                _ = try await Importer(store: store, options: ImportOptions()).run(files: [csv.path])
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.count == 1, "\(failed.issues)")
                let issue = try #require(failed.issues.first)
                #expect(issue.line == 2 && issue.reason.contains("after the closing quote"), "\(issue)")
            }
            var options = ImportOptions()
            options.continueOnError = true
            let summary = try await Importer(store: store, options: options).run(files: [csv.path])
            #expect(summary.rejected == 1, "\(summary)")
            let names = Set(try store.mainContext.fetch(Genre.self).map(\.name))
            #expect(names == ["Rock", "Multi\nplain\nend", "Jazz"], "\(names)")
        }
    }
}
