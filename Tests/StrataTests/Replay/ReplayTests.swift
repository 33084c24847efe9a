import Foundation
import LibraryModel
import Testing
@testable import Strata

@Suite struct ReplayTests {
    typealias Model = TrackStates

    func observed(_ context: some ObjectReading) throws -> Model {
        var m: Model = [:]
        for t in try context.fetch(Track.self) { m[t.id] = (t.title, t.durationSeconds, try context.related(t.id, Track.album)?.id) }
        return m
    }

    func same(_ a: Model, _ b: Model) -> Bool {
        a.count == b.count && a.allSatisfy { k, v in b[k].map { $0.title == v.title && $0.duration == v.duration && $0.album == v.album } ?? false }
    }

    @Test(arguments: [UInt64(5), 6])
    func asOfEqualsTheModelAtRandomTransactions(seed: UInt64) async throws {
        try await withLibraryStore { store in
            let states = try await randomTrackHistory(store, seed: seed, saves: 60)
            var rng = SeededGenerator(seed: seed + 100)
            let ids = states.keys.sorted()
            for _ in 0..<15 {
                let tx = ids.randomElement(using: &rng)!
                let asOf = try store.snapshot(asOf: tx)
                #expect(same(try observed(asOf), states[tx]!), "as of \(tx)")
                // Predicates and counts work on the past too.
                let long = states[tx]!.filter { $0.value.duration > 450 }.count
                #expect(try asOf.count(Track.self, where: Track.durationSeconds > 450) == long)
                #expect(try asOf.count(Track.self) == states[tx]!.count)
                asOf.close()
            }
            #expect(throws: StrataError.self) { try store.snapshot(asOf: TransactionID(10_000)) }
        }
    }

    @Test func asOfRestoresVersions() async throws {
        try await withLibraryStore { store in
            let t = makeTrack(title: "a", duration: 1)
            let t1 = try await store.save { $0.insert(t) }
            let t2 = try await store.save { $0.set(Track.title, of: t.id, to: "b") }
            _ = try await store.save { $0.delete(t.id) }
            #expect(try store.snapshot(asOf: t1).record(t.id)?.version == t1)
            let second = try #require(try store.snapshot(asOf: t2).record(t.id))
            #expect(second.version == t2 && second["title"] == .string("b"))
            #expect(try store.snapshot(asOf: .zero).record(t.id) == nil)
        }
    }

    @Test func historyListsExactlyTheTransactionsThatTouchedTheObject() async throws {
        try await withLibraryStore { store in
            let t = makeTrack(title: "a", duration: 1)
            let album = Album(mbid: UUID(), title: "x")
            var touching: [TransactionID] = []
            touching.append(try await store.save(author: "creator") { $0.insert(t) })
            _ = try await store.save { $0.insert(Genre(name: "unrelated")) }
            touching.append(try await store.save(author: "editor") { $0.set(Track.title, of: t.id, to: "b") })
            _ = try await store.save { $0.insert(album) }
            touching.append(try await store.save { $0.set(Track.album, of: t.id, to: album.id) })
            touching.append(try await store.save { $0.delete(album.id) })   // nullify unlinks the track
            let history = try store.history(of: t.id)
            #expect(history.map(\.transactionID) == touching)
            #expect(history[0].author == "creator" && history[1].author == "editor")
            guard case .update(_, let changes, let previous) = history[1].changes.first else {
                Issue.record("expected an update")
                return
            }
            #expect(changes == [AttributeChange(attribute: 1, old: .string("a"), new: .string("b"))])
            #expect(previous == touching[0])
        }
    }

    @Test func transactionsFilterByAuthorAndEntity() async throws {
        try await withLibraryStore { store in
            _ = try await store.save(author: "import", metadata: ["importID": "i1"]) { $0.insert(Genre(name: "g")) }
            _ = try await store.save(author: "ui") { $0.insert(makeTrack(title: "t", duration: 1)) }
            _ = try await store.save(author: "import") { $0.insert(makeTrack(title: "u", duration: 1)) }
            #expect(try store.transactions(author: "import").map(\.transactionID.rawValue) == [1, 3])
            #expect(try store.transactions(entity: "Track").map(\.transactionID.rawValue) == [2, 3])
            #expect(try store.transactions(from: TransactionID(2), to: TransactionID(2)).count == 1)
            #expect(try store.changes(in: TransactionID(1)).metadata["importID"] == "i1")
            #expect(throws: StrataError.self) { try store.changes(in: TransactionID(9)) }
            // A limit of 0 lists none, a negative one is refused (both listed the first).
            #expect(try store.transactions(limit: 0).isEmpty)
            #expect(try store.transactions(limit: 2).map(\.transactionID.rawValue) == [1, 2])
            #expect { try store.transactions(limit: -1) } throws: { error in
                guard case StrataError.invalidQuery(_, let reason) = error else { return false }
                return reason == "negative limit -1"
            }
        }
    }

    func populated(_ store: Store) async throws {
        _ = try await randomTrackHistory(store, seed: 77, saves: 40)
        _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
    }

    @Test func verifyPassesOnAHealthyStore() async throws {
        try await withLibraryStore { store in
            try await populated(store)
            let report = try store.verify()
            #expect(report.ok, "\(report.problems)")
            #expect(report.method == .inMemory)
            #expect(report.transactions == 41 && report.head == TransactionID(41))
            #expect(report.changes > 40 && report.entriesCompared > 0)
        }
    }

    @Test func verifyDetectsACorruptedStateRecord() async throws {
        try await withLibraryStore { store in
            try await populated(store)
            let victim = try #require(try store.mainContext.fetch(Track.self, limit: 1).first)
            try store.env.write { txn in
                var bytes = try #require(try txn.withValue(store.env[.objects], key: victim.id.keyBytes) { Array($0) })
                bytes[bytes.count / 2] ^= 0x40
                try txn.put(store.env[.objects], key: victim.id.keyBytes, value: bytes)
            }
            let report = try store.verify()
            #expect(!report.ok && report.method == .rebuild)
            #expect(report.problems.first?.contains("objects: Track \(victim.id) differs from the log") == true, "\(report.problems)")
            #expect(report.problems.first?.contains("checksum mismatch") == true)
            // Reading it is an error naming the record, never a wrong value.
            #expect(throws: StrataError.self) { try store.mainContext.record(victim.id) }
        }
    }

    @Test func verifyDetectsACorruptedLogEntry() async throws {
        try await withLibraryStore { store in
            try await populated(store)
            try store.env.write { txn in
                let key = TransactionID(7).keyBytes
                var bytes = try #require(try txn.withValue(store.env[.log], key: key) { Array($0) })
                bytes[bytes.count - 6] ^= 0x01
                try txn.put(store.env[.log], key: key, value: bytes)
            }
            let report = try store.verify()
            #expect(report.problems == ["log: corrupt log entry for transaction 7: checksum mismatch"], "\(report.problems)")
            #expect(throws: StrataError.self) { try store.changes(in: TransactionID(7)) }
        }
    }

    /// On a compacted store, an entry after the horizon that fails its checksum is named as the
    /// log's damage (`log:`), also when it is met reading the state at the horizon back through
    /// it, where it was named `base:`.
    @Test func aCorruptLogEntryOfACompactedStoreIsTheLogsDamage() async throws {
        try await withLibraryStore { store in
            try await populated(store)
            _ = try await store.compact(horizon: TransactionID(30))
            try store.env.write { txn in
                let key = TransactionID(38).keyBytes
                var bytes = try #require(try txn.withValue(store.env[.log], key: key) { Array($0) })
                bytes[bytes.count - 6] ^= 0x01
                try txn.put(store.env[.log], key: key, value: bytes)
            }
            for rebuild in [false, true] {
                let report = try store.verify(rebuild: rebuild)
                #expect(report.problems == ["log: corrupt log entry for transaction 38: checksum mismatch"],
                        "rebuild \(rebuild): \(report.problems)")
            }
        }
    }

    @Test func verifyDetectsAMissingLogEntry() async throws {
        try await withLibraryStore { store in
            try await populated(store)
            try store.env.write { txn in _ = try txn.delete(store.env[.log], key: TransactionID(12).keyBytes) }
            let report = try store.verify()
            #expect(report.problems == ["log: transaction 12 is missing"], "\(report.problems)")
            // Found by the check of the log's keys, before anything is replayed through the gap.
            #expect(report.method == .logShape)
        }
    }

    /// A log entry missing after the horizon is damage to every reader of the log, as it is to
    /// `verify` and a replay: the log's visit stops at it (it skipped it), `changes(in:)` says it is
    /// missing (it said "not in the log", as for an id past the head), and `history(of:)` of an
    /// object it touched fails (it answered without the entry).
    @Test func aMissingLogEntryIsDamageToEveryReaderOfTheLog() async throws {
        try await withLibraryStore { store in
            try await populated(store)
            let touched = try #require(try store.changes(in: TransactionID(12)).changes.first?.objectIDs.first)
            try store.env.write { txn in _ = try txn.delete(store.env[.log], key: TransactionID(12).keyBytes) }
            func isMissing12(_ error: any Error) -> Bool {
                guard case StrataError.corruptLogEntry(let tx, let reason) = error else { return false }
                return tx == TransactionID(12) && reason.contains("missing from the log")
            }
            var seen: [TransactionID] = []
            #expect(performing: {
                try store.forEachTransaction(from: TransactionID(10), to: TransactionID(14)) { seen.append($0.transactionID); return true }
            }, throws: isMissing12)
            #expect(seen == [TransactionID(10), TransactionID(11)], "\(seen)")
            #expect(performing: { try store.changes(in: TransactionID(12)) }, throws: isMissing12)
            #expect(performing: { try store.history(of: touched) }, throws: isMissing12)
            // Past the head is still "not in the log"; around the gap, entries read as before.
            #expect(performing: { try store.changes(in: TransactionID(42)) }, throws: { error in
                if case StrataError.noSuchTransaction = error { return true } else { return false }
            })
            #expect(try store.changes(in: TransactionID(13)).transactionID == TransactionID(13))
            #expect(try store.transactions(from: TransactionID(13)).count == 29)
        }
    }

    @Test func verifyDetectsAMissingIndexEntryAndAnExtraLink() async throws {
        try await withLibraryStore { store in
            try await populated(store)
            try store.env.write { txn in
                var first: [UInt8]?
                try txn.scan(store.env[.indexes]) { k, _ in first = Array(k); return false }
                _ = try txn.delete(store.env[.indexes], key: try #require(first))
                let a = ObjectID.make(entityTag: 3), b = ObjectID.make(entityTag: 2)
                try txn.put(store.env[.links], key: Layout.linkKey(Track.album.tag, a, b), value: [])
            }
            let report = try store.verify()
            #expect(report.problemCount == 2 && report.method == .rebuild, "\(report.problems)")
            #expect(report.problems.contains { $0.hasPrefix("links: extra entry Track.album") })
            #expect(report.problems.contains { $0.hasPrefix("indexes: missing entry") })
        }
    }
}
