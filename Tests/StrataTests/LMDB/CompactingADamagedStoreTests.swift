import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A compaction of a store whose unique-key B-tree yields keys out of order (a flipped key byte:
/// LMDB keys carry no checksum) reports a corrupt store (exit 65) and leaves the store as it
/// was, not an internal error such as `mdb_cursor_put(indexes, MDB_APPEND) failed: MDB_KEYEXIST`
/// (exit 70).
@Suite struct CompactingADamagedStoreTests {
    @Test func keysOutOfOrderAreReportedAsCorruption() async throws {
        let dir = temporaryDirectory("compact-damaged")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s")
        #expect(try await storectl("init", store.path, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("g.ndjson")
        try Data((0..<50).map { "{\"entity\":\"Genre\",\"name\":\"genre \(String(format: "%03d", $0))\"}\n" }.joined().utf8).write(to: input)
        #expect(try await storectl("import", store.path, input.path, "--quiet").status == 0)
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
        let r = try await storectl("compact", store.path)
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        // The page check every storectl command runs finds it before the copy starts.
        #expect(r.stderr.contains("the store is damaged: database 'uniques'") && r.stderr.contains("keys out of order"), "\(r.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.path).sorted() == before)
        #expect(try await storectl("verify", store.path).status == 65)
    }
}
