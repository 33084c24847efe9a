import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `ChangeSet` operations the import pipeline builds on, used directly: `upsert` (by any unique
/// constraint, with its id aliased for later operations), `put`, and links and unlinks naming
/// their ends by a unique key (`ObjectReference.unique`).
@Suite struct ChangeSetOperationTests {
    static let itemSchemaText = #"""
    {"model":"inventory","version":1,"entities":[
      {"name":"Item","attributes":[{"name":"sku","type":"string"},{"name":"code","type":"string","optional":true},{"name":"n","type":"int"}],
       "uniques":[["sku"],["code"]]}
    ]}
    """#

    func artistValues(_ mbid: UUID, _ name: String, sortName: String? = nil, country: String? = nil) -> [Value] {
        [.uuid(mbid), .string(name), sortName.map { .string($0) } ?? .null, country.map { .string($0) } ?? .null, .null]
    }

    func expectRefused(_ store: Store, _ changes: ChangeSet, sourceLocation: SourceLocation = #_sourceLocation) async throws -> ValidationFailure? {
        let before = try store.lastTransactionID
        defer { #expect((try? store.lastTransactionID) == before, "a refused save wrote something", sourceLocation: sourceLocation) }
        do {
            _ = try await store.save(changes)
            Issue.record("save was accepted", sourceLocation: sourceLocation)
            return nil
        } catch StrataError.validation(let f) {
            return f
        }
    }

    @Test func upsertInsertsThenUpdatesTheKeysOwnerAndLaterOperationsUseTheAlias() async throws {
        try await withLibraryStore { store in
            let view = store.mainContext
            let mbid = UUID()
            let first = ObjectID.make(entityTag: Artist.entityTag)
            var insert = ChangeSet()
            insert.append(.upsert(id: first, values: artistValues(mbid, "Ása", country: "IS"), constraint: 0))
            #expect(try await store.save(insert) == TransactionID(1))
            #expect(try view.object(Artist.self, id: first)?.name == "Ása")

            // Same key, new id: the existing object is updated (every attribute: country is
            // cleared) and the new id names it in the operations that follow.
            let second = ObjectID.make(entityTag: Artist.entityTag)
            let album = Album(mbid: UUID(), title: "Hvítt")
            var update = ChangeSet()
            update.insert(album)
            update.append(.upsert(id: second, values: artistValues(mbid, "Ása B"), constraint: 0))
            update.update(second, [ChangeSet.AttributeValue(attribute: Artist.sortName.index, value: .string("B, Ása"))])
            update.set(Album.artist, of: album.id, to: second)
            #expect(try await store.save(update) == TransactionID(2))
            #expect(try view.count(Artist.self) == 1)
            #expect(try view.record(second) == nil)
            let artist = try #require(try view.object(Artist.self, id: first))
            #expect(artist.name == "Ása B" && artist.country == nil && artist.sortName == "B, Ása" && artist.mbid == mbid)
            #expect(try view.related(album.id, Album.artist)?.id == first)
            #expect(try view.related(first, Artist.albums).map(\.id) == [album.id])

            // An upsert that changes nothing writes nothing; a delete through its alias deletes
            // the owner (and cascades to its albums).
            var same = ChangeSet()
            same.append(.upsert(id: ObjectID.make(entityTag: Artist.entityTag), values: artistValues(mbid, "Ása B", sortName: "B, Ása"), constraint: 0))
            #expect(try await store.save(same) == TransactionID(2))
            let third = ObjectID.make(entityTag: Artist.entityTag)
            var delete = ChangeSet()
            delete.append(.upsert(id: third, values: artistValues(mbid, "Ása B", sortName: "B, Ása"), constraint: 0))
            delete.delete(third)
            #expect(try await store.save(delete) == TransactionID(3))
            #expect(try view.count(Artist.self) == 0)
            #expect(try view.count(Album.self) == 0)
        }
    }

    /// An upsert repeated with the same id updates the object (it was inserted again and refused
    /// as a duplicate id), twice in one save too, and one whose object holds another key that is
    /// free moves the object to it.
    @Test func anUpsertRepeatedWithItsOwnIDUpdatesTheObject() async throws {
        try await withLibraryStore { store in
            let view = store.mainContext
            let id = ObjectID.make(entityTag: Artist.entityTag)
            let mbid = UUID()
            var first = ChangeSet()
            first.append(.upsert(id: id, values: artistValues(mbid, "One"), constraint: 0))
            _ = try await store.save(first)
            var again = ChangeSet()
            again.append(.upsert(id: id, values: artistValues(mbid, "Two"), constraint: 0))
            again.append(.upsert(id: id, values: artistValues(mbid, "Three"), constraint: 0))
            _ = try await store.save(again)
            #expect(try view.count(Artist.self) == 1)
            #expect(try view.object(Artist.self, id: id)?.name == "Three")
            let other = UUID()
            var moved = ChangeSet()
            moved.append(.upsert(id: id, values: artistValues(other, "Moved"), constraint: 0))
            _ = try await store.save(moved)
            let artist = try #require(try view.object(Artist.self, id: id))
            #expect(artist.mbid == other && artist.name == "Moved")
            #expect(try view.count(Artist.self) == 1)
            #expect(try store.verify().ok)
        }
    }

    @Test func upsertFindsTheOwnerThroughTheConstraintItNames() async throws {
        let schema = try Schema.parse(Array(Self.itemSchemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let view = store.mainContext
        let original = ObjectID.make(entityTag: 1)
        _ = try await store.save { $0.append(.upsert(id: original, values: [.string("a"), .string("X"), .int(1)], constraint: 0)) }

        // By `code` (constraint 1): the object with code X gets the new sku and n.
        _ = try await store.save { $0.append(.upsert(id: ObjectID.make(entityTag: 1), values: [.string("b"), .string("X"), .int(2)], constraint: 1)) }
        #expect(try view.count(Query(entity: "Item")) == 1)
        let r = try #require(try view.record(original))
        #expect(r.values == [.string("b"), .string("X"), .int(2)])

        // By `sku` (constraint 0): found by the new sku, code cleared.
        _ = try await store.save { $0.append(.upsert(id: ObjectID.make(entityTag: 1), values: [.string("b"), .null, .int(3)], constraint: 0)) }
        #expect(try view.record(original)?.values == [.string("b"), .null, .int(3)])

        // A key with no value cannot find anything: refused, naming the attribute.
        var nullKey = ChangeSet()
        let fresh = ObjectID.make(entityTag: 1)
        nullKey.append(.upsert(id: fresh, values: [.string("c"), .null, .int(4)], constraint: 1))
        let f = try await expectRefused(store, nullKey)
        #expect(f?.kind == .requiredAttribute && f?.field == "code" && f?.objectID == fresh, "\(String(describing: f))")

        var noSuchConstraint = ChangeSet()
        noSuchConstraint.append(.upsert(id: fresh, values: [.string("c"), .null, .int(4)], constraint: 2))
        #expect(try await expectRefused(store, noSuchConstraint)?.kind == .unknownAttribute)
        #expect(try view.count(Query(entity: "Item")) == 1)
    }

    @Test func putInsertsOrReplacesEveryAttribute() async throws {
        try await withLibraryStore { store in
            let view = store.mainContext
            let track = store.schema.entity(named: "Track")!
            let id = ObjectID.make(entityTag: Track.entityTag)
            let mbid = UUID(), added = Date(timeIntervalSince1970: 1_700_000_000)
            func values(title: String, discNumber: Value, rating: Value) -> [Value] {
                var r = Record(entity: track)
                r["mbid"] = .uuid(mbid)
                r["title"] = .string(title)
                r["durationSeconds"] = .int(100)
                r["discNumber"] = discNumber
                r["rating"] = rating
                r["addedAt"] = .date(added)
                return r.values
            }
            // Absent: inserted with that id, defaults filled.
            let tx1 = try await store.save { $0.append(.put(id: id, values: values(title: "a", discNumber: .int(3), rating: .double(4)))) }
            var r = try #require(try view.record(id))
            #expect(r["title"] == .string("a") && r["discNumber"] == .int(3) && r["rating"] == .double(4) && r["explicit"] == .bool(false))
            #expect(r.version == tx1)

            // Present: every attribute replaced; an attribute given no value takes its default
            // or has none. Only the differences are logged.
            let tx2 = try await store.save { $0.append(.put(id: id, values: values(title: "b", discNumber: .null, rating: .null))) }
            r = try #require(try view.record(id))
            #expect(r["title"] == .string("b") && r["discNumber"] == .int(1) && r["rating"] == .null)
            #expect(r.version == tx2)
            #expect(try view.count(Track.self) == 1)
            let logged = try store.changes(in: tx2).changes
            guard logged.count == 1, case .update(let changedID, let changes, let previous) = logged[0] else {
                Issue.record("expected one update, logged \(logged)")
                return
            }
            #expect(changedID == id && previous == tx1)
            #expect(Set(changes.map(\.attribute)) == [Track.title.index, Track.discNumber.index, Track.rating.index])

            // The same values again: nothing written.
            #expect(try await store.save { $0.append(.put(id: id, values: values(title: "b", discNumber: .int(1), rating: .null))) } == tx2)
        }
    }

    @Test func linksAndUnlinksByUniqueKey() async throws {
        try await withLibraryStore { store in
            let view = store.mainContext
            let jazz = Genre(name: "Jazz")
            let track = makeTrack(title: "t", duration: 1)
            let road = Playlist(name: "Road", createdAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(jazz); $0.insert(track); $0.insert(road) }
            let trackRef = ObjectReference.unique(entityTag: Track.entityTag, constraint: 0, values: [.uuid(track.mbid)])
            let roadRef = ObjectReference.unique(entityTag: Playlist.entityTag, constraint: 0, values: [.string("Road")])
            func genreRef(_ name: String) -> ObjectReference { .unique(entityTag: Genre.entityTag, constraint: 0, values: [.string(name)]) }

            _ = try await store.save { c in
                c.append(.link(relationship: Track.genre.tag, from: trackRef, to: genreRef("Jazz")))
                c.append(.link(relationship: Playlist.tracks.tag, from: roadRef, to: trackRef))
            }
            #expect(try view.related(track.id, Track.genre)?.id == jazz.id)
            #expect(try view.related(road.id, Playlist.tracks).map(\.id) == [track.id])

            // A key inserted earlier in the same change set is found; the to-one is replaced.
            let blues = Genre(name: "Blues")
            _ = try await store.save { c in
                c.insert(blues)
                c.append(.link(relationship: Track.genre.tag, from: trackRef, to: genreRef("Blues")))
            }
            #expect(try view.related(track.id, Track.genre)?.id == blues.id)
            #expect(try view.related(jazz.id, Genre.tracks).isEmpty)

            _ = try await store.save { c in
                c.append(.unlink(relationship: Playlist.tracks.tag, from: roadRef, to: trackRef))
                c.append(.unlink(relationship: Track.genre.tag, from: trackRef, to: nil))
            }
            #expect(try view.related(road.id, Playlist.tracks).isEmpty)
            #expect(try view.related(track.id, Track.genre) == nil)
            #expect(try view.related(track.id, Track.playlists).isEmpty)

            // A key nobody has: refused, naming the relationship.
            var missing = ChangeSet()
            missing.append(.link(relationship: Track.genre.tag, from: trackRef, to: genreRef("Nope")))
            let f = try await expectRefused(store, missing)
            #expect(f?.kind == .objectNotFound && f?.entity == "Track" && f?.field == "genre", "\(String(describing: f))")
            var missingSource = ChangeSet()
            missingSource.append(.link(relationship: Playlist.tracks.tag,
                                       from: .unique(entityTag: Playlist.entityTag, constraint: 0, values: [.string("Nope")]), to: trackRef))
            #expect(try await expectRefused(store, missingSource)?.kind == .objectNotFound)
        }
    }

    /// The writer remembers, for the rest of a save, the objects and unique keys it found: an
    /// object deleted later in the same save, or a key it gave up, is not found again by the
    /// operations after that (by id or by key), and a key taken over is found at its new owner.
    @Test func whatASaveDeletesOrRenamesIsNotFoundByItsLaterOperations() async throws {
        try await withLibraryStore { store in
            let view = store.mainContext
            let jazz = Genre(name: "Jazz")
            let track = makeTrack(title: "t", duration: 1)
            _ = try await store.save { $0.insert(jazz); $0.insert(track) }
            func genre(_ name: String) -> ObjectReference {
                .unique(entityTag: Genre.entityTag, constraint: 0, values: [.string(name)])
            }
            let trackRef = ObjectReference.id(track.id)

            // Found by key, unlinked, deleted, then named by its key again.
            var byKey = ChangeSet()
            byKey.append(.link(relationship: Track.genre.tag, from: trackRef, to: genre("Jazz")))
            byKey.append(.unlink(relationship: Track.genre.tag, from: trackRef, to: nil))
            byKey.append(.delete(id: jazz.id))
            byKey.append(.link(relationship: Track.genre.tag, from: trackRef, to: genre("Jazz")))
            let f1 = try await expectRefused(store, byKey)
            #expect(f1?.kind == .objectNotFound && f1?.field == "genre", "\(String(describing: f1))")

            // The same by id.
            var byID = ChangeSet()
            byID.append(.link(relationship: Track.genre.tag, from: trackRef, to: .id(jazz.id)))
            byID.append(.unlink(relationship: Track.genre.tag, from: trackRef, to: nil))
            byID.append(.delete(id: jazz.id))
            byID.append(.link(relationship: Track.genre.tag, from: trackRef, to: .id(jazz.id)))
            let f2 = try await expectRefused(store, byID)
            #expect(f2?.kind == .objectNotFound && f2?.field == "genre", "\(String(describing: f2))")

            // Found by key, renamed: the old key names nothing, the new one names it.
            var renamed = ChangeSet()
            renamed.append(.link(relationship: Track.genre.tag, from: trackRef, to: genre("Jazz")))
            renamed.update(jazz.id, [ChangeSet.AttributeValue(attribute: Genre.name.index, value: .string("Swing"))])
            renamed.append(.link(relationship: Track.genre.tag, from: trackRef, to: genre("Jazz")))
            let f3 = try await expectRefused(store, renamed)
            #expect(f3?.kind == .objectNotFound && f3?.field == "genre", "\(String(describing: f3))")

            // The key given up and taken by another object in the same save: found at the new owner.
            let blues = Genre(name: "Blues")
            _ = try await store.save { c in
                c.insert(blues)
                c.append(.link(relationship: Track.genre.tag, from: trackRef, to: genre("Jazz")))
                c.update(jazz.id, [ChangeSet.AttributeValue(attribute: Genre.name.index, value: .string("Swing"))])
                c.update(blues.id, [ChangeSet.AttributeValue(attribute: Genre.name.index, value: .string("Jazz"))])
                c.append(.link(relationship: Track.genre.tag, from: trackRef, to: genre("Jazz")))
            }
            #expect(try view.related(track.id, Track.genre)?.id == blues.id)
            #expect(try view.object(Genre.self, id: jazz.id)?.name == "Swing")
            #expect(try view.related(jazz.id, Genre.tracks).isEmpty)
            #expect(try store.verify().ok)
        }
    }

    @Test func relinkingAnExistingEdgeWritesNothing() async throws {
        try await withLibraryStore { store in
            let track = makeTrack(title: "t", duration: 1)
            let road = Playlist(name: "Road", createdAt: Date(timeIntervalSince1970: 0))
            let tx = try await store.save { c in
                c.insert(track); c.insert(road)
                c.add(track.id, to: Playlist.tracks, of: road.id)
            }
            #expect(try await store.save { $0.add(track.id, to: Playlist.tracks, of: road.id) } == tx)
            #expect(try await store.save { $0.append(.link(relationship: Track.playlists.tag, from: .id(track.id), to: .id(road.id))) } == tx)
            #expect(try store.lastTransactionID == tx)
            #expect(try store.mainContext.related(road.id, Playlist.tracks).map(\.id) == [track.id])
        }
    }

    /// A deny is judged on the whole delete: a target the same delete removes through a cascade
    /// does not refuse it, whichever of the two relationships the schema declares first; a
    /// target it leaves does, in both orders, with nothing written.
    @Test(arguments: [false, true])
    func aDenyIsJudgedOnTheWholeDeleteWhateverOrderTheRelationshipsAreDeclaredIn(denyFirst: Bool) async throws {
        let deny = #"{"name": "favorite", "destination": "Pet", "inverse": "favoriteOf", "deleteRule": "deny", "optional": true}"#
        let cascade = #"{"name": "pets", "destination": "Pet", "toMany": true, "inverse": "owner", "deleteRule": "cascade"}"#
        let json = """
        {"model": "pets", "version": 1, "entities": [
          {"name": "Owner", "attributes": [{"name": "name", "type": "string"}],
           "relationships": [\(denyFirst ? deny : cascade), \(denyFirst ? cascade : deny)]},
          {"name": "Pet", "attributes": [{"name": "name", "type": "string"}],
           "relationships": [
             {"name": "owner", "destination": "Owner", "inverse": "pets", "optional": true},
             {"name": "favoriteOf", "destination": "Owner", "toMany": true, "inverse": "favorite"}]}]}
        """
        let schema = try Schema.parse(Array(json.utf8), source: "v1.json")
        let dir = temporaryDirectory("deny-and-cascade")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        let owner = try #require(schema.entity(named: "Owner")), pet = try #require(schema.entity(named: "Pet"))
        let pets = try #require(owner.relationships.first { $0.name == "pets" })
        let favorite = try #require(owner.relationships.first { $0.name == "favorite" })
        func named(_ e: EntityDescription, _ name: String) -> Record {
            var r = Record(entity: e)
            r["name"] = .string(name)
            return r
        }
        // o owns p and has it as its favorite; q owns p2 and has as its favorite a pet it does not own.
        let o = named(owner, "o"), p = named(pet, "p"), q = named(owner, "q"), p2 = named(pet, "p2"), stray = named(pet, "stray")
        var build = ChangeSet()
        for r in [o, p, q, p2, stray] { build.insert(r) }
        build.append(.link(relationship: pets.tag, from: .id(o.id), to: .id(p.id)))
        build.append(.link(relationship: favorite.tag, from: .id(o.id), to: .id(p.id)))
        build.append(.link(relationship: pets.tag, from: .id(q.id), to: .id(p2.id)))
        build.append(.link(relationship: favorite.tag, from: .id(q.id), to: .id(stray.id)))
        _ = try await store.save(build)
        await #expect {
            _ = try await store.save { $0.delete(q.id) }
        } throws: { error in
            guard case StrataError.validation(let f) = error else { return false }
            return f.kind == .deleteDenied && f.objectID == q.id && f.field == "favorite"
        }
        #expect(try store.mainContext.count(Query(entity: "Pet")) == 3, "nothing of the refused delete is written")
        _ = try await store.save { $0.delete(o.id) }
        #expect(try store.mainContext.record(o.id) == nil && store.mainContext.record(p.id) == nil)
        #expect(try store.mainContext.count(Query(entity: "Owner")) == 1)
        #expect(try store.verify().ok)
    }

    /// A delete whose cascade runs 100,000 objects deep (a list whose every node cascades to the
    /// next) deletes them all: the cascade was a recursion, and a chain that deep overflowed the
    /// writer thread's stack and ended the process. A deny at the end of the chain still refuses
    /// the whole delete, with nothing written.
    @Test func aCascadeTenThousandsOfObjectsDeepDeletesThemAll() async throws {
        let json = #"""
        {"model": "chain", "version": 1, "entities": [
          {"name": "Node", "attributes": [{"name": "n", "type": "int"}],
           "relationships": [
             {"name": "next", "destination": "Node", "inverse": "previous", "deleteRule": "cascade", "optional": true},
             {"name": "previous", "destination": "Node", "inverse": "next", "deleteRule": "nullify", "optional": true},
             {"name": "pinned", "destination": "Pin", "inverse": "node", "deleteRule": "deny", "optional": true}]},
          {"name": "Pin", "attributes": [],
           "relationships": [{"name": "node", "destination": "Node", "inverse": "pinned", "optional": true}]}]}
        """#
        let schema = try Schema.parse(Array(json.utf8), source: "v1.json")
        let dir = temporaryDirectory("deep-cascade")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        let node = try #require(schema.entity(named: "Node")), pin = try #require(schema.entity(named: "Pin"))
        let next = try #require(node.relationships.first { $0.name == "next" })
        let pinned = try #require(node.relationships.first { $0.name == "pinned" })
        let depth = 100_000
        let nodes = (0..<depth).map { i -> Record in
            var r = Record(entity: node)
            r["n"] = .int(Int64(i))
            return r
        }
        var build = ChangeSet()
        for r in nodes { build.insert(r) }
        for i in 1..<depth {
            build.append(.link(relationship: next.tag, from: .id(nodes[i - 1].id), to: .id(nodes[i].id)))
        }
        let p = Record(entity: pin)
        build.insert(p)
        build.append(.link(relationship: pinned.tag, from: .id(nodes[depth - 1].id), to: .id(p.id)))
        _ = try await store.save(build)
        // The last node is pinned (deny): the whole delete is refused, nothing written.
        await #expect {
            _ = try await store.save { $0.delete(nodes[0].id) }
        } throws: { error in
            guard case StrataError.validation(let f) = error else { return false }
            return f.kind == .deleteDenied && f.objectID == nodes[depth - 1].id
        }
        #expect(try store.mainContext.count(Query(entity: "Node")) == depth)
        _ = try await store.save { $0.delete(p.id) }
        _ = try await store.save { $0.delete(nodes[0].id) }
        #expect(try store.mainContext.count(Query(entity: "Node")) == 0)
        #expect(try store.verify().ok)
    }
}
