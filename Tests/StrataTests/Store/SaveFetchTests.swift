import Foundation
import LibraryModel
import Testing
@testable import Strata

@Suite struct SaveFetchTests {
    @Test func roundTripOfEveryAttributeType() async throws {
        try await withLibraryStore { store in
            let added = Date(timeIntervalSince1970: 1_712_345_678.25)
            let hash = Data([0, 1, 2, 250, 251, 0, 9])
            let mbid = UUID()
            let track = Track(mbid: mbid, title: "Jóga — 夜の散歩 🎧", durationSeconds: -5, trackNumber: Int(Int64.max), discNumber: 2,
                              explicit: true, rating: 4.75, isrc: nil, addedAt: added, artworkHash: hash)
            var changes = ChangeSet()
            changes.insert(track)
            let tx = try await store.save(changes)
            #expect(tx == TransactionID(1))
            let back = try #require(try store.mainContext.object(Track.self, id: track.id))
            #expect(back == track)
            #expect(back.addedAt == added && back.artworkHash == hash && back.mbid == mbid && back.isrc == nil)
            let minimal = Track(mbid: UUID(), title: "", durationSeconds: Int(Int64.min), addedAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(minimal) }
            #expect(try store.mainContext.object(Track.self, id: minimal.id) == minimal)
            let mini = try #require(try store.mainContext.object(Track.self, id: minimal.id))
            #expect(mini.discNumber == 1 && mini.explicit == false && mini.rating == nil)
        }
    }

    @Test func defaultsApplyToDynamicInserts() async throws {
        try await withLibraryStore { store in
            var r = Record(entity: store.schema.entity(named: "Track")!)
            r["mbid"] = .uuid(UUID())
            r["title"] = .string("t")
            r["durationSeconds"] = .int(10)
            r["addedAt"] = .date(Date())
            _ = try await store.save { $0.insert(r) }
            let back = try #require(try store.mainContext.record(r.id))
            #expect(back["discNumber"] == .int(1))
            #expect(back["explicit"] == .bool(false))
            #expect(back["rating"] == .null)
            #expect(back.version == TransactionID(1))
        }
    }

    @Test func reopenAfterCloseSeesEverything() async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        var ids: [ObjectID] = []
        do {
            let store = try Store.open(at: dir, schema: schema)
            for i in 0..<20 {
                let g = Genre(name: "genre \(i)")
                ids.append(g.id)
                _ = try await store.save { $0.insert(g) }
            }
            store.close()
        }
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        #expect(try store.lastTransactionID == TransactionID(20))
        #expect(try store.mainContext.count(Genre.self) == 20)
        for (i, id) in ids.enumerated() { #expect(try store.mainContext.object(Genre.self, id: id)?.name == "genre \(i)") }
        // New saves continue the sequence.
        #expect(try await store.save { $0.insert(Genre(name: "after")) } == TransactionID(21))
    }

    @Test func updatesLogOnlyDifferencesAndBumpVersion() async throws {
        try await withLibraryStore { store in
            var t = makeTrack(title: "a", duration: 100)
            _ = try await store.save { $0.insert(t) }
            t.title = "b"
            let tx = try await store.save { $0.update(t) }
            #expect(tx == TransactionID(2))
            let r = try #require(try store.mainContext.record(t.id))
            #expect(r.version == tx && r["title"] == .string("b"))
            // Saving the same values again changes nothing and writes no transaction.
            let same = try await store.save { $0.update(t) }
            #expect(same == TransactionID(2))
            #expect(try store.lastTransactionID == TransactionID(2))
            let log = try store.read { try $0.txn.entryCount(store.env[.log]) }
            #expect(log == 2)
        }
    }

    @Test func objectIDsAreTimeOrderedAndParse() {
        let a = ObjectID.make(entityTag: 3)
        let b = ObjectID.make(entityTag: 3)
        #expect(a < b)
        #expect(a.entityTag == 3)
        #expect(ObjectID(string: a.description) == a)
        #expect(ObjectID(string: "xyz") == nil)
        #expect(abs(a.createdAt.timeIntervalSinceNow) < 5)
    }
}
