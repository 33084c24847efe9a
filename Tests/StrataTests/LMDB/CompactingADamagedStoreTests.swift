import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A compaction of a store whose unique-key B-tree yields keys out of order (a flipped key byte:
/// LMDB keys carry no checksum) reports a corrupt store (exit 65) and leaves the store as it
/// was, not an internal error such as `mdb_cursor_put(indexes, MDB_APPEND) failed: MDB_KEYEXIST`
/// (exit 70). One whose log lacks a transaction is refused, not squashed out of sight.
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

    /// A log with a transaction missing: `compact` refuses (exit 65, the store as it was), where
    /// it compacted the gap away and `verify` then passed; reading back across the gap names the
    /// missing transaction (it named the one read back to).
    @Test func aLogWithATransactionMissingIsNotCompactedAway() async throws {
        let dir = temporaryDirectory("compact-gap")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            for i in 0..<3 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            try store.env.write { txn in _ = try txn.delete(store.env[.log], key: TransactionID(2).keyBytes) }
            store.close()
        }
        let before = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        for args in [["compact", dir.path, "--keep-last", "1"], ["compact", dir.path], ["compact", dir.path, "--dry-run"]] {
            let r = try await storectl(args)
            #expect(r.status == 65, "\(args): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("the log holds 2 entries for the 3 transactions after the horizon 0 up to 3: some are missing"), "\(r.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == before)
        }
        let verify = try await storectl("verify", dir.path)
        #expect(verify.status == 65, "\(verify.stderr)")
        let replay = try await storectl("replay", dir.path, "--to", "1")
        #expect(replay.status == 65 && replay.stderr.contains("transaction 2: missing from the log"), "\(replay.stderr)")
    }

    /// A log entry moved under another key by damage, the count of entries unchanged (under
    /// transaction 0 on a store never compacted, at or before the horizon on a compacted one):
    /// `compact` refuses, naming it, and the store stays as it was. It compacted, reading only the
    /// count, and `verify` passed afterwards with the damage gone from its sight.
    @Test(arguments: [false, true])
    func anEntryMovedUnderAnotherKeyIsNotCompactedAway(compacted: Bool) async throws {
        let dir = temporaryDirectory("compact-moved")
        defer { try? FileManager.default.removeItem(at: dir) }
        let horizon: UInt64 = compacted ? 3 : 0
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            for i in 0..<6 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            if compacted { _ = try await store.compact(horizon: TransactionID(horizon)) }
            let env = store.env
            try env.write { txn in
                let moved = TransactionID(horizon + 1).keyBytes
                let bytes = try #require(try txn.withValue(env[.log], key: moved) { Array($0) })
                #expect(try txn.delete(env[.log], key: moved))
                try txn.put(env[.log], key: TransactionID(compacted ? 2 : 0).keyBytes, value: bytes)
            }
            store.close()
        }
        let before = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        for args in [["compact", dir.path], ["compact", dir.path, "--keep-last", "1"]] {
            let r = try await storectl(args)
            #expect(r.status == 65, "\(args): \(r.status) \(r.stderr)")
            let named = compacted ? "log: an entry under transaction 2, at or before the compaction horizon 3"
                                  : "log: an entry under transaction 0 (transactions start at 1)"
            #expect(r.stderr.contains(named) && r.stderr.contains("a compaction would drop them unnoticed"), "\(r.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == before)
        }
        let verify = try await storectl("verify", dir.path)
        #expect(verify.status == 65, "\(verify.stderr)")
    }
}
