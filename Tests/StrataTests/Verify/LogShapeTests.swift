import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `verify` holds the log to its shape: every key a transaction id (8 bytes), none at or before the
/// compaction horizon, none missing up to the head, and a horizon no later than the head. Each
/// damage here is named as such; `verify` had passed the first four (a horizon past the head hid
/// every later commit; a stray entry was shown by `show`; a key of 9 bytes was read as a second
/// transaction 5), and named a gap after a compaction as a problem of the base state.
@Suite struct LogShapeTests {
    /// A store of six transactions, compacted at 3 when `compacted`, damaged by `damage`; the
    /// problems verify names.
    private func problems(compacted: Bool, _ damage: (LMDBEnvironment, Store) throws -> Void) async throws -> [String] {
        try await withLibraryStore { store in
            for i in 0..<6 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            if compacted { _ = try await store.compact(horizon: TransactionID(3)) }
            #expect(try store.verify().ok)
            try damage(store.env, store)
            let report = try store.verify()
            #expect(!report.ok)
            return report.method == .logShape || report.problems.first?.hasPrefix("counts:") == true
                ? report.problems : ["method \(report.method)"] + report.problems
        }
    }

    private func entry(_ env: LMDBEnvironment, _ tx: UInt64) throws -> [UInt8] {
        try #require(try env.read { txn in try txn.withValue(env[.log], key: TransactionID(tx).keyBytes) { Array($0) } })
    }

    @Test func aHorizonPastTheHeadIsNamed() async throws {
        let found = try await problems(compacted: true) { env, _ in
            try env.write { _ = try $0.put(env[.meta], key: MetaKey.horizon, value: TransactionID(25).keyBytes) }
        }
        #expect(found == ["meta: the compaction horizon 25 is past the log's last transaction, 6"], "\(found)")
    }

    /// A bulk import refuses a log without every transaction after the horizon, as compaction and
    /// migration do. With the horizon past the head it copied none of the log after the old
    /// horizon into its new generation and numbered its transactions after the damaged horizon:
    /// transactions 4–6 left history, and the damage `verify` would have named went with them.
    @Test(arguments: ["horizon past the head", "entry missing"])
    func aBulkImportRefusesALogWithoutEveryTransactionAfterTheHorizon(damage: String) async throws {
        try await withLibraryStore { store in
            for i in 0..<6 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            _ = try await store.compact(horizon: TransactionID(3))
            let env = store.env
            try env.write { txn in
                if damage == "entry missing" {
                    #expect(try txn.delete(env[.log], key: TransactionID(5).keyBytes))
                } else {
                    try txn.put(env[.meta], key: MetaKey.horizon, value: TransactionID(25).keyBytes)
                }
            }
            let dir = temporaryDirectory("bulk-log-shape")
            defer { try? FileManager.default.removeItem(at: dir) }
            let input = dir.appendingPathComponent("in.ndjson")
            try Data(#"{"entity":"Genre","name":"imported"}"#.utf8).write(to: input)
            var options = ImportOptions()
            options.mode = .bulk
            await #expect {
                _ = try await Importer(store: store, options: options).run(files: [input.path])
            } throws: { error in
                guard case StrataError.damagedStore(_, let reason) = error else { return false }
                return damage == "entry missing"
                    ? reason.contains("the log holds 2 entries for the 3 transactions after the horizon 3 up to 6")
                    : reason.contains("the compaction horizon 25 is past the log's last transaction, 6")
            }
            #expect(try store.mainContext.count(Genre.self) == 6)
            #expect(try env.read { try $0.entryCount(env[.log]) } == (damage == "entry missing" ? 2 : 3))
        }
    }

    @Test(arguments: [false, true])
    func anEntryAtOrBeforeTheHorizonIsNamed(compacted: Bool) async throws {
        let found = try await problems(compacted: compacted) { env, _ in
            let bytes = try entry(env, 5)
            try env.write { _ = try $0.put(env[.log], key: TransactionID(compacted ? 2 : 0).keyBytes, value: bytes) }
        }
        let expected = compacted
            ? "log: an entry under transaction 2, at or before the compaction horizon 3 (compaction folded those into the state)"
            : "log: an entry under transaction 0 (transactions start at 1)"
        #expect(found == [expected], "\(found)")
    }

    @Test func aKeyOfAnotherSizeIsNoTransaction() async throws {
        let found = try await problems(compacted: false) { env, _ in
            let bytes = try entry(env, 5)
            try env.write { _ = try $0.put(env[.log], key: TransactionID(5).keyBytes + [1], value: bytes) }
        }
        #expect(found == ["log: a key of 9 bytes, 000000000000000501, is no transaction id (8 bytes)"], "\(found)")
    }

    /// A last log key or a horizon shorter than 8 bytes is a damaged store named as such, where
    /// the head is read (every open and save) and by `verify` itself; it was a bare decoding
    /// error ("truncated: need 8 bytes"), an internal error to storectl.
    @Test(arguments: ["log key", "horizon"])
    func aShortLastLogKeyOrHorizonIsADamagedStore(place: String) async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "g")) }
            let env = store.env
            try env.write { txn in
                if place == "log key" {
                    try txn.put(env[.log], key: [0xFF], value: [0])
                } else {
                    try txn.put(env[.meta], key: MetaKey.horizon, value: [0, 0, 1])
                }
            }
            let expected = place == "log key" ? "log: the last key is 1 byte, not a transaction id's 8"
                                              : "meta: the compaction horizon is 3 bytes, not 8"
            func named(_ error: any Error) -> Bool {
                guard case StrataError.damagedStore(_, let reason) = error else { return false }
                return reason == expected
            }
            if place == "horizon" {
                #expect { _ = try store.verify() } throws: { named($0) }
            } else {
                #expect { _ = try store.lastTransactionID } throws: { named($0) }
                await #expect { _ = try await store.save { $0.insert(Genre(name: "after")) } } throws: { named($0) }
            }
        }
    }

    /// A key of another size among the log's keys is a damaged store named as such where the log
    /// is read (`transactions`, `storectl log`, exit 65): it was a bare decoding error (exit 70)
    /// for a shorter key, and a second transaction 3 for a longer one.
    @Test(arguments: [7, 9])
    func aKeyOfAnotherSizeAmongTheLogsIsADamagedStoreWhereTheLogIsRead(size: Int) async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            defer { store.close() }
            // A shorter key sorts among 8-byte ones only past 255 of them: 00…00 01 (7 bytes)
            // right before transaction 256 (00…00 01 00). A longer one: transaction 3's and a byte.
            for i in 0..<(size == 7 ? 260 : 6) { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            let env = store.env
            let key = size == 9 ? TransactionID(3).keyBytes + [1] : Array(TransactionID(256).keyBytes.prefix(7))
            try env.write { try $0.put(env[.log], key: key, value: [0]) }
            let reason = "log: a key of \(size) bytes, not a transaction id's 8"
            #expect { _ = try store.transactions() } throws: { error in
                guard case StrataError.damagedStore(_, let r) = error else { return false }
                return r == reason
            }
        }
        let r = try await storectl("log", dir.path)
        #expect(r.status == 65 && r.stderr.contains("a key of \(size) bytes"), "exit \(r.status): \(r.stderr)")
    }

    @Test func aGapAfterTheHorizonIsAMissingTransaction() async throws {
        let found = try await problems(compacted: true) { env, _ in
            try env.write { _ = try $0.delete(env[.log], key: TransactionID(5).keyBytes) }
        }
        #expect(found == ["log: transaction 5 is missing"], "\(found)")
    }

    /// A count that differs shows both numbers; a key too long to show whole says how long it is.
    @Test func aCountThatDiffersShowsBothNumbers() async throws {
        let found = try await problems(compacted: false) { env, store in
            let genre = try #require(store.schema.entity(named: "Genre"))
            try env.write { _ = try $0.put(env[.counts], key: MetaKey.count(genre.tag), value: MetaKey.countValue(99)) }
        }
        #expect(found.count == 1 && found[0].hasSuffix("differs from the log (stored 99, the log gives 6)"), "\(found)")
        #expect(Store.shownKey(Array(repeating: 0xAB, count: 30)) == String(repeating: "ab", count: 24) + "…(30 bytes)")
        #expect(Store.shownKey([1, 2]) == "0102")
    }
}
