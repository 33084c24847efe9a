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
}
