import Foundation
import LibraryModel
import StrataLMDB
import StrataTestSupport
import Testing
@testable import Strata

/// A replica's footprint of a save (``FootprintRecorder``): every object and unique key the save
/// read or wrote, so that two saves that could decide differently in either order share a hash,
/// and saves about different objects share none.
@Suite struct FootprintTests {
    private struct Abort: Error {}

    /// The footprint of `changes` resolved at the store's head as a replica's writer resolves it
    /// (nothing is written).
    private func footprint(_ store: Store, _ changes: ChangeSet) throws -> Set<Int64> {
        let env = store.env, builder = FootprintBuilder()
        do {
            try env.write { txn in
                let applier = StateApplier(txn: txn, env: env, schema: store.schema, transactionID: TransactionID(1 << 40))
                var resolver = SaveResolver(applier: FootprintRecorder(base: applier, footprint: builder),
                                            limits: store.configuration)
                try resolver.run(changes)
                throw Abort()
            }
        } catch is Abort {}
        return Set(try #require(builder.footprint).keys)
    }

    private func hash(_ id: ObjectID) -> Int64 {
        let b = FootprintBuilder()
        b.add(id)
        return b.footprint!.keys[0]
    }

    @Test func insertsOfDifferentObjectsShareNothingAndOnesTakingOneKeyShareIt() async throws {
        try await withLibraryStore { store in
            func insert(_ name: String) throws -> (ObjectID, Set<Int64>) {
                let genre = Genre(name: name)
                var c = ChangeSet()
                c.insert(genre)
                return (genre.id, try footprint(store, c))
            }
            let (jazzID, jazz) = try insert("Jazz")
            let (_, blues) = try insert("Blues")
            let (_, otherJazz) = try insert("Jazz")
            #expect(jazz.contains(hash(jazzID)))
            #expect(jazz.count == 2, "the object and its one unique key")
            #expect(jazz.isDisjoint(with: blues))
            #expect(jazz.intersection(otherJazz).count == 1, "two objects taking the same name share its key")
        }
    }

    @Test func aLinkNamesBothEndsAndAnUpdateTheKeysItGivesUpAndTakes() async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "Kind of Blue")
            let artist = Artist(mbid: UUID(), name: "Miles")
            _ = try await store.save { $0.insert(album); $0.insert(artist) }
            let track = newTrackValues()
            var link = ChangeSet()
            link.insert(track)
            link.append(.link(relationship: Track.album.tag, from: .id(track.id), to: .id(album.id)))
            let linked = try footprint(store, link)
            #expect(linked.contains(hash(track.id)) && linked.contains(hash(album.id)))
            #expect(!linked.contains(hash(artist.id)))

            // Moving the artist's mbid: the old key and the new one are both in it, so a save
            // that takes either conflicts with it.
            let newMbid = UUID()
            var move = ChangeSet()
            move.update(artist.id, [ChangeSet.AttributeValue(attribute: Artist.mbid.index, value: .uuid(newMbid))])
            let moved = try footprint(store, move)
            var takeOld = ChangeSet()
            takeOld.insert(Artist(mbid: artist.mbid, name: "Other"))
            var takeNew = ChangeSet()
            takeNew.insert(Artist(mbid: newMbid, name: "Other"))
            #expect(!moved.isDisjoint(with: try footprint(store, takeNew)), "the key it takes")
            // Taking the old key is refused at this head (the artist holds it): its footprint
            // still names the key it looked at.
            let builder = FootprintBuilder()
            #expect {
                try store.env.write { txn in
                    let applier = StateApplier(txn: txn, env: store.env, schema: store.schema,
                                               transactionID: TransactionID(1 << 40))
                    var resolver = SaveResolver(applier: FootprintRecorder(base: applier, footprint: builder),
                                                limits: store.configuration)
                    try resolver.run(takeOld)
                }
            } throws: { error in
                guard case StrataError.validation(let f) = error else { return false }
                return f.kind == .uniqueConstraint
            }
            #expect(!moved.isDisjoint(with: Set(try #require(builder.footprint).keys)), "the key it gives up")
        }
    }

    /// Hashes go into a database shared by every machine of a cluster: they must not depend on
    /// the process (Swift's `Hasher` is seeded per process).
    @Test func hashesAreTheSameInEveryProcess() {
        let id = ObjectID(high: 0x0001_0000_0000_0001, low: 2)
        #expect(hash(id) == FootprintTests.pinnedHash)
        #expect(id.keyBytes.withUnsafeBytes { FootprintBuilder.hash(kind: 1, $0) } == FootprintTests.pinnedHash)
        #expect([UInt8]().withUnsafeBytes { FootprintBuilder.hash(kind: 2, $0) }
                != [UInt8]().withUnsafeBytes { FootprintBuilder.hash(kind: 1, $0) })
    }

    /// FNV-1a over 0x01 and the id's 16 bytes (big-endian high, then low), then splitmix64's
    /// finalizer, worked out apart from this code.
    static let pinnedHash: Int64 = -8_034_709_732_424_852_676

    /// An update or delete names its object's previous version: one written by the group itself
    /// names an id of the group, which moving the group would leave naming another transaction.
    @Test func aGroupThatChangesWhatItWroteIsNotMoved() {
        let id = ObjectID.make(entityTag: 4), head = TransactionID(10)
        func entry(_ tx: UInt64, _ changes: [LoggedChange]) -> LogEntry {
            LogEntry(transactionID: TransactionID(tx), schemaVersion: 1, timestampMs: 0, author: "a", metadata: [:],
                     changes: changes)
        }
        let insert = entry(11, [.insert(id: id, values: [.string("A")])])
        let updateOld = entry(12, [.update(id: id, changes: [], previousVersion: TransactionID(7))])
        let updateOwn = entry(12, [.update(id: id, changes: [], previousVersion: TransactionID(11))])
        let deleteOwn = entry(12, [.delete(id: id, values: [.string("A")], previousVersion: TransactionID(11))])
        #expect(Writer.mayMove([insert, updateOld], validatedAt: head))
        #expect(!Writer.mayMove([insert, updateOwn], validatedAt: head))
        #expect(!Writer.mayMove([insert, deleteOwn], validatedAt: head))
    }

    @Test func aGroupTouchingMoreThanTheLimitHasNoFootprint() {
        let b = FootprintBuilder()
        for i in 0...ReplicationFootprint.maxKeys { b.add(ObjectID(high: 1, low: UInt64(i))) }
        #expect(b.footprint == nil)
        b.add(ObjectID(high: 2, low: 0))
        #expect(b.overflowed)
    }

    private func newTrackValues() -> Track {
        Track(mbid: UUID(), title: "So What", durationSeconds: 545, addedAt: Date(timeIntervalSince1970: 0))
    }
}
