import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Typed conveniences: related ids without reading the targets, a temporary store checked against
/// generated types, a child's pending objects, `ResultsDiff.Move` values, and the closure form of
/// `save` from main-actor code.
@Suite struct TypedConvenienceTests {
    @Test func relatedIDsWithoutReadingTheTargets() async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "A")
            let t1 = makeTrack(title: "1", duration: 1), t2 = makeTrack(title: "2", duration: 2)
            _ = try await store.save { c in
                c.insert(album); c.insert(t1); c.insert(t2)
                c.set(Track.album, of: t1.id, to: album.id)
                c.set(Track.album, of: t2.id, to: album.id)
            }
            let view = store.mainContext
            #expect(try view.relatedID(t1.id, Track.album) == album.id)
            #expect(try view.relatedIDs(album.id, Album.tracks) == [t1.id, t2.id].sorted())
            let child = view.newChild(label: "edit")
            try child.set(Track.album, of: t2.id, to: nil)
            #expect(try child.relatedIDs(album.id, Album.tracks) == [t1.id])
            #expect(try child.relatedID(t2.id, Track.album) == nil)
        }
    }

    /// A typed key names its attribute by position: on an object of another entity it would set
    /// or sort by whatever attribute sits there (`Album.year` is position 2, a track's duration).
    /// A save, a child's change and a fetch refuse it instead.
    @Test func aTypedKeyOfAnotherEntityIsRefused() async throws {
        try await withLibraryStore { store in
            let track = makeTrack(title: "t", duration: 100)
            _ = try await store.save { $0.insert(track) }
            await #expect {
                _ = try await store.save { $0.set(Album.year, of: track.id, to: 1999) }
            } throws: { error in
                guard case StrataError.validation(let f) = error else { return false }
                return f.kind == .objectNotFound && f.entity == "Album" && f.field == "year" && f.objectID == track.id
            }
            let child = store.mainContext.newChild(label: "edit")
            #expect(throws: StrataError.self) { try child.set(Album.year, of: track.id, to: 1999) }
            var album = Album(mbid: UUID(), title: "A")
            album.id = track.id
            await #expect(throws: StrataError.self) { _ = try await store.save { $0.update(album) } }
            #expect(try store.mainContext.object(Track.self, id: track.id)?.durationSeconds == 100)
            // An insert under an id of another entity (it stored an object of that entity with
            // the album's values), in a save and in a child.
            var stray = Album(mbid: UUID(), title: "stray")
            stray.id = makeTrack(title: "never saved", duration: 1).id
            await #expect {
                _ = try await store.save { $0.insert(stray) }
            } throws: { error in
                guard case StrataError.validation(let f) = error else { return false }
                return f.kind == .objectNotFound && f.entity == "Album" && f.objectID == stray.id
            }
            #expect(throws: StrataError.self) { try child.insert(stray) }
            #expect(try store.mainContext.count(Track.self) == 1 && store.mainContext.count(Album.self) == 0)
            #expect {
                _ = try store.mainContext.fetch(Track.self, sortedBy: [Album.year.descending])
            } throws: { error in
                guard case StrataError.invalidQuery(_, let reason) = error else { return false }
                return reason.contains("an attribute of Album, not of Track")
            }
            #expect(try store.mainContext.fetch(Track.self, sortedBy: [Track.durationSeconds.descending]).count == 1)
            #expect(Album.year.ascending == SortKey(attribute: 2), "keys that sort alike are equal")
        }
    }

    @Test func aTemporaryStoreChecksTheGeneratedTypes() throws {
        let store = try Store.temporary(schema: try librarySchema(), entities: [Track.self, Album.self])
        store.close()
        let other = try Schema.parse(Array(#"{"model":"library","version":1,"entities":[{"name":"Track","attributes":[{"name":"title","type":"string"}]}]}"#.utf8),
                                     source: "v1.json")
        #expect(throws: StrataError.self) { _ = try Store.temporary(schema: other, entities: [Track.self]) }
    }

    @Test func aChildListsItsPendingObjects() async throws {
        try await withLibraryStore { store in
            let kept = Genre(name: "kept"), renamed = Genre(name: "old"), gone = Genre(name: "gone")
            let t = makeTrack(title: "t", duration: 1)
            _ = try await store.save { c in for x in [kept, renamed, gone] { c.insert(x) }; c.insert(t) }
            let child = store.mainContext.newChild(label: "edit")
            #expect(child.pendingObjects.isEmpty)
            let new = Genre(name: "new"), dropped = Genre(name: "dropped")
            try child.insert(new)
            try child.insert(dropped)
            try child.delete(dropped.id)
            try child.set(Genre.name, of: renamed.id, to: "renamed")
            try child.set(Genre.name, of: kept.id, to: "x")
            try child.set(Genre.name, of: kept.id, to: "kept")   // set back: no change
            try child.set(Track.genre, of: t.id, to: new.id)    // a relationship edit
            try child.delete(gone.id)
            let p = child.pendingObjects
            #expect(p.inserted == [new.id])
            #expect(p.updated == [renamed.id, t.id].sorted())
            #expect(p.deleted == [gone.id])
            try await child.commit()
            #expect(child.pendingObjects.isEmpty)
        }
    }

    @Test func aMoveCanBeBuilt() {
        let move = ResultsDiff.Move(from: 3, to: 0)
        #expect(move.from == 3 && move.to == 0)
        var diff = ResultsDiff()
        diff.moved = [move]
        #expect(!diff.isEmpty)
    }

    @MainActor @Test func theClosureFormOfSaveWorksFromTheMainActor() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        defer { store.close() }
        let g = Genre(name: "main")
        let tx = try await store.save { $0.insert(g) }
        #expect(tx == TransactionID(1))
        #expect(try store.mainContext.object(Genre.self, id: g.id)?.name == "main")
    }

    @Test func theLastTransactionIsReadableWithoutTry() async throws {
        let store = try Store.temporary(schema: librarySchema())
        #expect(store.currentTransactionID == .zero)
        let tx = try await store.save { $0.insert(Genre(name: "g")) }
        #expect(store.currentTransactionID == tx)
        #expect(try store.lastTransactionID == tx)
        store.close()
        #expect(store.currentTransactionID == nil)
        #expect(throws: StrataError.self) { try store.lastTransactionID }
    }
}
