import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Saves that break a rule are refused whole, with the object, attribute and rule named.
@Suite struct ValidationTests {
    func expectFailure(_ kind: ValidationFailure.Kind, _ store: Store, _ changes: ChangeSet,
                       sourceLocation: SourceLocation = #_sourceLocation) async throws -> ValidationFailure? {
        let before = try store.lastTransactionID
        do {
            _ = try await store.save(changes)
            Issue.record("save was accepted", sourceLocation: sourceLocation)
            return nil
        } catch StrataError.validation(let f) {
            #expect(f.kind == kind, "\(f)", sourceLocation: sourceLocation)
            #expect(try store.lastTransactionID == before, sourceLocation: sourceLocation)
            return f
        }
    }

    /// A link under a relationship tag the schema does not have is refused as an unknown
    /// relationship before anything about its ends is looked at: also when an end is named by
    /// a unique key too long to be one (it was refused as a value too large once the writer read
    /// the relationship only for its errors), and when both ends are found.
    @Test func aLinkUnderAnUnknownRelationshipIsRefusedFirst() async throws {
        try await withLibraryStore { store in
            let genre = try #require(store.schema.entity(named: "Genre"))
            var g = Record(entity: genre)
            g["name"] = .string("Folk")
            var insert = ChangeSet()
            insert.insert(g)
            _ = try await store.save(insert)
            let unknown = UInt16(genre.tag) << 8 | 0xFF
            let found = ObjectReference.unique(entityTag: genre.tag, constraint: 0, values: [.string("Folk")])
            let tooLong = ObjectReference.unique(entityTag: genre.tag, constraint: 0,
                                                 values: [.string(String(repeating: "x", count: 600))])
            for (from, to) in [(found, found), (tooLong, ObjectReference.id(g.id)), (found, tooLong)] {
                var c = ChangeSet()
                c.append(.link(relationship: unknown, from: from, to: to))
                let f = try await expectFailure(.unknownRelationship, store, c)
                #expect(f?.reason == "no relationship with tag \(unknown)", "\(String(describing: f))")
            }
        }
    }

    @Test func requiredAttribute() async throws {
        try await withLibraryStore { store in
            var r = Record(entity: store.schema.entity(named: "Genre")!)
            r["name"] = .null
            var c = ChangeSet()
            c.insert(r)
            let f = try await expectFailure(.requiredAttribute, store, c)
            #expect(f?.field == "name" && f?.objectID == r.id)
        }
    }

    @Test func wrongType() async throws {
        try await withLibraryStore { store in
            var r = Record(entity: store.schema.entity(named: "Genre")!)
            r["name"] = .int(3)
            var c = ChangeSet()
            c.insert(r)
            let f = try await expectFailure(.wrongType, store, c)
            #expect(f?.description.contains("expected string, got int") == true)
        }
    }

    @Test func uniqueConstraintNamesTheOwner() async throws {
        try await withLibraryStore { store in
            let jazz = Genre(name: "Jazz")
            _ = try await store.save { $0.insert(jazz) }
            var c = ChangeSet()
            c.insert(Genre(name: "Rock"))
            c.insert(Genre(name: "Jazz"))
            let f = try await expectFailure(.uniqueConstraint, store, c)
            #expect(f?.description.contains(jazz.id.description) == true)
            // Nothing of the refused save was written, including the valid first insert.
            #expect(try store.mainContext.count(Genre.self) == 1)
        }
    }

    @Test func updateToAnotherObjectsUniqueValue() async throws {
        try await withLibraryStore { store in
            let a = Genre(name: "A"), b = Genre(name: "B")
            _ = try await store.save { $0.insert(a); $0.insert(b) }
            var c = ChangeSet()
            c.set(Genre.name, of: b.id, to: "A")
            _ = try await expectFailure(.uniqueConstraint, store, c)
            // Swapping through a free value works, and frees the old key.
            _ = try await store.save { $0.set(Genre.name, of: a.id, to: "C") }
            _ = try await store.save { $0.set(Genre.name, of: b.id, to: "A") }
            #expect(try store.mainContext.fetch(Genre.self, sortedBy: [Genre.name.ascending]).map(\.name) == ["A", "C"])
        }
    }

    @Test func deleteRules() async throws {
        try await withLibraryStore { store in
            let artist = Artist(mbid: UUID(), name: "Ása")
            let album = Album(mbid: UUID(), title: "Hvítt")
            let track = makeTrack(title: "t1", duration: 100)
            let genre = Genre(name: "Folk")
            let list = Playlist(name: "Road", createdAt: Date())
            _ = try await store.save { c in
                c.insert(artist); c.insert(album); c.insert(track); c.insert(genre); c.insert(list)
                c.set(Album.artist, of: album.id, to: artist.id)
                c.set(Track.album, of: track.id, to: album.id)
                c.set(Track.genre, of: track.id, to: genre.id)
                c.add(track.id, to: Playlist.tracks, of: list.id)
            }
            // deny: a genre with tracks cannot go.
            var deny = ChangeSet()
            deny.delete(genre.id)
            let f = try await expectFailure(.deleteDenied, store, deny)
            #expect(f?.field == "tracks")
            // cascade: artist → albums → tracks; nullify: the playlist loses the track.
            _ = try await store.save { $0.delete(artist.id) }
            let view = store.mainContext
            #expect(try view.object(Album.self, id: album.id) == nil)
            #expect(try view.object(Track.self, id: track.id) == nil)
            #expect(try view.related(list.id, Playlist.tracks).isEmpty)
            #expect(try view.related(genre.id, Genre.tracks).isEmpty)
            // Now the genre can be deleted.
            _ = try await store.save { $0.delete(genre.id) }
            #expect(try view.count(Genre.self) == 0)
        }
    }

    @Test func relationshipTargetsMustExistAndMatch() async throws {
        try await withLibraryStore { store in
            let track = makeTrack(title: "t", duration: 1)
            let genre = Genre(name: "g")
            _ = try await store.save { $0.insert(track); $0.insert(genre) }
            var missing = ChangeSet()
            missing.set(Track.album, of: track.id, to: ObjectID.make(entityTag: Album.entityTag))
            _ = try await expectFailure(.objectNotFound, store, missing)
            var wrong = ChangeSet()
            wrong.append(.link(relationship: Track.album.tag, from: .id(track.id), to: .id(genre.id)))
            _ = try await expectFailure(.wrongDestination, store, wrong)
        }
    }

    @Test func updateOfMissingObject() async throws {
        try await withLibraryStore { store in
            var c = ChangeSet()
            c.set(Genre.name, of: ObjectID.make(entityTag: Genre.entityTag), to: "x")
            _ = try await expectFailure(.objectNotFound, store, c)
        }
    }

    @Test func toOneReplacementKeepsInverseConsistent() async throws {
        try await withLibraryStore { store in
            let a1 = Album(mbid: UUID(), title: "one"), a2 = Album(mbid: UUID(), title: "two")
            let t = makeTrack(title: "t", duration: 1)
            _ = try await store.save { c in
                c.insert(a1); c.insert(a2); c.insert(t)
                c.set(Track.album, of: t.id, to: a1.id)
            }
            _ = try await store.save { $0.set(Track.album, of: t.id, to: a2.id) }
            let view = store.mainContext
            #expect(try view.related(t.id, Track.album)?.id == a2.id)
            #expect(try view.related(a1.id, Album.tracks).isEmpty)
            #expect(try view.related(a2.id, Album.tracks).map(\.id) == [t.id])
            _ = try await store.save { $0.set(Track.album, of: t.id, to: nil) }
            #expect(try view.related(t.id, Track.album) == nil)
            #expect(try view.related(a2.id, Album.tracks).isEmpty)
        }
    }

    @Test func oversizedValueIsRefused() async throws {
        var config = StoreConfiguration()
        config.maxValueBytes = 100
        try await withLibraryStore(config) { store in
            var c = ChangeSet()
            c.insert(Genre(name: String(repeating: "x", count: 101)))
            _ = try await expectFailure(.valueTooLarge, store, c)
        }
    }
}

/// Required to-one relationships (`"optional": false`): checked at the end of every save, and at
/// the root commit of a child context (not while the child is edited). Entities without one are
/// not looked up for it.
@Suite struct RequiredRelationshipTests {
    static let schemaText = #"""
    {"model":"pets","version":1,"entities":[
      {"name":"Owner","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"pets","destination":"Pet","toMany":true,"inverse":"owner","deleteRule":"nullify"}]},
      {"name":"Pet","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"owner","destination":"Owner","inverse":"pets","optional":false}]}
    ]}
    """#

    struct Fixture {
        let store: Store
        let owner: EntityDescription, pet: EntityDescription
        let petOwner: RelationshipDescription
        func record(_ e: EntityDescription, _ name: String) -> Record {
            var r = Record(entity: e)
            r["name"] = .string(name)
            return r
        }
    }

    func withFixture(_ body: (Fixture) async throws -> Void) async throws {
        let schema = try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let owner = try #require(schema.entity(named: "Owner")), pet = try #require(schema.entity(named: "Pet"))
        #expect(pet.hasRequiredToOne && !owner.hasRequiredToOne)
        try await body(Fixture(store: store, owner: owner, pet: pet, petOwner: try #require(pet.relationship(named: "owner"))))
    }

    func expectRefused(_ store: Store, _ changes: ChangeSet, object: ObjectID, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let before = try store.lastTransactionID
        do {
            _ = try await store.save(changes)
            Issue.record("save was accepted", sourceLocation: sourceLocation)
        } catch StrataError.validation(let f) {
            #expect(f.kind == .requiredRelationship && f.field == "owner" && f.objectID == object && f.entity == "Pet", "\(f)",
                    sourceLocation: sourceLocation)
        }
        #expect(try store.lastTransactionID == before, sourceLocation: sourceLocation)
    }

    @Test func anInsertWithoutItIsRefusedAndOneWithItAccepted() async throws {
        try await withFixture { f in
            let rex = f.record(f.pet, "Rex")
            var alone = ChangeSet()
            alone.insert(rex)
            try await expectRefused(f.store, alone, object: rex.id)
            #expect(try f.store.mainContext.count(Query(entity: "Pet")) == 0)

            let ann = f.record(f.owner, "Ann")
            _ = try await f.store.save { c in
                c.insert(ann)
                c.insert(rex)
                c.link(f.petOwner, from: rex.id, to: ann.id)
            }
            #expect(try f.store.mainContext.relatedIDs(f.petOwner, of: rex.id) == [ann.id])
            // An owner alone needs nothing.
            _ = try await f.store.save { $0.insert(f.record(f.owner, "Bo")) }
        }
    }

    @Test func unlinkingOrNullifyingItIsRefused() async throws {
        try await withFixture { f in
            let ann = f.record(f.owner, "Ann"), bo = f.record(f.owner, "Bo"), rex = f.record(f.pet, "Rex")
            _ = try await f.store.save { c in
                c.insert(ann); c.insert(bo); c.insert(rex)
                c.link(f.petOwner, from: rex.id, to: ann.id)
            }
            var unlink = ChangeSet()
            unlink.unlink(f.petOwner, from: rex.id, to: nil)
            try await expectRefused(f.store, unlink, object: rex.id)
            // Deleting the owner nullifies the pet's owner: refused while the pet stays.
            var deleteOwner = ChangeSet()
            deleteOwner.delete(ann.id)
            try await expectRefused(f.store, deleteOwner, object: rex.id)
            // Moving the pet to another owner replaces the to-one: accepted, and then Ann can go.
            _ = try await f.store.save { $0.link(f.petOwner, from: rex.id, to: bo.id) }
            _ = try await f.store.save { $0.delete(ann.id) }
            // Deleting the pet with its owner in one save is accepted.
            _ = try await f.store.save { c in c.delete(bo.id); c.delete(rex.id) }
            #expect(try f.store.mainContext.count(Query(entity: "Pet")) == 0)
        }
    }

    @Test func aChildChecksItAtTheRootCommit() async throws {
        try await withFixture { f in
            let ann = f.record(f.owner, "Ann"), rex = f.record(f.pet, "Rex")
            _ = try await f.store.save { $0.insert(ann) }
            let child = f.store.mainContext.newChild(label: "editor")
            let grandchild = child.newChild(label: "nested")
            // Allowed while editing, at every level: the link may come later.
            try grandchild.insert(rex)
            try await grandchild.commit()
            #expect(try child.record(rex.id) != nil)
            let before = try f.store.lastTransactionID
            do {
                try await child.commit()
                Issue.record("commit was accepted")
            } catch StrataError.validation(let failure) {
                #expect(failure.kind == .requiredRelationship && failure.objectID == rex.id && failure.field == "owner", "\(failure)")
            }
            #expect(try f.store.lastTransactionID == before)
            #expect(child.hasChanges)
            try child.change { $0.link(f.petOwner, from: rex.id, to: ann.id) }
            try await child.commit()
            #expect(try f.store.mainContext.relatedIDs(f.petOwner, of: rex.id) == [ann.id])
        }
    }
}
