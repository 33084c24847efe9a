import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Entries of the index databases carry no checksum: a damaged one must be an error naming the
/// database, never a trap: a `uniques` value of the wrong size (not a failed precondition), a
/// count of the wrong size (an error that says which count).
@Suite struct CorruptIndexEntryTests {
    func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    /// Puts `key` → `value` into database `name` of the store's live generation with `mdb_load`.
    func damage(_ store: URL, database name: String, key: [UInt8], value: [UInt8]) async throws {
        let generation = dataFile(ofStore: store).deletingLastPathComponent().path
        let dump = "VERSION=3\nformat=bytevalue\ndatabase=\(name)\ntype=btree\nHEADER=END\n \(hex(key))\n \(hex(value))\nDATA=END\n"
        let input = store.deletingLastPathComponent().appendingPathComponent("damage.txt")
        try Data(dump.utf8).write(to: input)
        let r = try await run("/usr/bin/env", ["mdb_load", "-f", input.path, "-s", name, generation])
        #expect(r.status == 0, "mdb_load: \(r.stderr)")
    }

    @Test
    func aUniqueValueOfTheWrongSizeIsAnErrorNotATrap() async throws {
        let dir = temporaryDirectory("corrupt-unique")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s")
        #expect(try await storectl("init", store.path, "--schema", librarySchemaDirectory.path).status == 0)
        let schema = try librarySchema()
        let genre = try #require(schema.entity(named: "Genre"))
        var values = [Value](repeating: .null, count: genre.attributes.count)
        values[try #require(genre.attribute(named: "name")).index] = .string("g1")
        let key = try #require(try Layout.uniqueKey(genre.uniques[0], record: values, entity: genre, id: ObjectID.make(entityTag: genre.tag)))
        try await damage(store, database: "uniques", key: key, value: [1, 2, 3])
        let input = dir.appendingPathComponent("g.ndjson")
        try Data("{\"entity\":\"Genre\",\"name\":\"g1\"}\n".utf8).write(to: input)
        let r = try await storectl("import", store.path, input.path, "--quiet")
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("uniques: 3 bytes where an object id's 16 are stored"), "\(r.stderr)")
        let q = try await storectl("query", store.path, "--entity", "Genre", "--where", "name == \"g1\"")
        #expect(q.status == 65, "\(q.status) \(q.stderr)")
        #expect(!q.stderr.contains("Fatal error") && !q.stderr.contains("crashed"), "\(q.stderr)")
    }

    @Test
    func aCountOfTheWrongSizeIsAnErrorNamingIt() async throws {
        let dir = temporaryDirectory("corrupt-count")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s")
        #expect(try await storectl("init", store.path, "--schema", librarySchemaDirectory.path).status == 0)
        let genre = try #require(try librarySchema().entity(named: "Genre"))
        // Format 2 keeps the counts in LMDB's main database, which mdb_load -s cannot name: the
        // damage goes in as a two-byte value through a raw environment instead.
        let generation = dataFile(ofStore: store).deletingLastPathComponent().path
        let options = LMDBOptions(mapSizeBytes: 64 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: false, noLock: false)
        let env = try LMDBEnvironment(path: generation, options: options)
        try env.write { txn in try txn.put(env[.counts], key: MetaKey.count(genre.tag), value: [0, 1]) }
        env.close()
        let r = try await storectl("query", store.path, "--entity", "Genre", "--count")
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("the object count of entity tag \(genre.tag) is 2 bytes, not 8"), "\(r.stderr)")
    }
}
