import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Delete rules inside child contexts: `deny` refuses the change and leaves the child exactly as
/// it was (also after earlier operations of the same change set were applied), `nullify` removes
/// both directions of every edge, and `cascade` follows edges that exist only in a parent's
/// pending changes.
@Suite struct ChildContextDeleteRuleTests {
    func ids(_ context: some ObjectReading, _ relationship: String, of id: ObjectID) throws -> [ObjectID] {
        let e = try #require(context.schema.entity(tag: id.entityTag))
        return try context.relatedIDs(try #require(e.relationship(named: relationship)), of: id)
    }

    @Test func denyIsRefusedAndTheChildIsAsBefore() async throws {
        try await withLibraryStore { store in
            let genre = Genre(name: "Folk")
            let t1 = makeTrack(title: "t1", duration: 1), t2 = makeTrack(title: "t2", duration: 2)
            _ = try await store.save { c in
                c.insert(genre); c.insert(t1); c.insert(t2)
                c.set(Track.genre, of: t1.id, to: genre.id)
                c.set(Track.genre, of: t2.id, to: genre.id)
            }
            let child = store.mainContext.newChild(label: "editor")
            // The first delete is applied, then the genre's delete is denied: nothing of the
            // change set stays.
            do {
                try child.change { c in
                    c.delete(t1.id)
                    c.delete(genre.id)
                }
                Issue.record("deleting a genre with tracks was accepted")
            } catch StrataError.validation(let f) {
                #expect(f.kind == .deleteDenied && f.objectID == genre.id && f.field == "tracks", "\(f)")
            }
            #expect(!child.hasChanges && child.pendingOperationCount == 0)
            #expect(try child.object(Track.self, id: t1.id) == t1)
            #expect(try child.count(Track.self) == 2)
            #expect(try ids(child, "tracks", of: genre.id) == [t1.id, t2.id].sorted())
            #expect(try child.related(t1.id, Track.genre)?.id == genre.id)

            // Once its tracks are gone (here, in the child), the genre can go.
            try child.delete(t1.id)
            try child.delete(t2.id)
            try child.delete(genre.id)
            #expect(try child.count(Genre.self) == 0)
            #expect(try store.mainContext.count(Genre.self) == 1)
            try await child.commit()
            #expect(try store.mainContext.count(Genre.self) == 0)
            #expect(try store.mainContext.count(Track.self) == 0)
        }
    }

    @Test func nullifyAndCascadeFollowEdgesPendingInAParent() async throws {
        try await withLibraryStore { store in
            let playlist = Playlist(name: "Road", createdAt: Date(timeIntervalSince1970: 0))
            let genre = Genre(name: "Folk")
            _ = try await store.save { $0.insert(playlist); $0.insert(genre) }
            // The parent inserts an artist, two albums and three tracks, all linked, unsaved.
            let parent = store.mainContext.newChild(label: "parent")
            let artist = Artist(mbid: UUID(), name: "Ása")
            let kept = Album(mbid: UUID(), title: "kept"), gone = Album(mbid: UUID(), title: "gone")
            let t1 = makeTrack(title: "t1", duration: 1), t2 = makeTrack(title: "t2", duration: 2), t3 = makeTrack(title: "t3", duration: 3)
            try parent.change { c in
                c.insert(artist); c.insert(kept); c.insert(gone); c.insert(t1); c.insert(t2); c.insert(t3)
                c.set(Album.artist, of: kept.id, to: artist.id)
                c.set(Album.artist, of: gone.id, to: artist.id)
                c.set(Track.album, of: t1.id, to: gone.id)
                c.set(Track.album, of: t2.id, to: gone.id)
                c.set(Track.album, of: t3.id, to: kept.id)
                for t in [t1, t2, t3] {
                    c.add(t.id, to: Playlist.tracks, of: playlist.id)
                    c.set(Track.genre, of: t.id, to: genre.id)
                }
            }
            let child = parent.newChild(label: "child")
            // Album.tracks cascades; Album.artist, Track.genre and Track.playlists nullify.
            try child.delete(gone.id)
            #expect(try child.object(Album.self, id: gone.id) == nil)
            #expect(try child.object(Track.self, id: t1.id) == nil && child.object(Track.self, id: t2.id) == nil)
            #expect(try ids(child, "albums", of: artist.id) == [kept.id])
            #expect(try ids(child, "tracks", of: playlist.id) == [t3.id])
            #expect(try ids(child, "tracks", of: genre.id) == [t3.id])
            #expect(try child.count(Track.self) == 1 && child.count(Album.self) == 1)
            #expect(try child.fetch(Playlist.self, where: Playlist.tracks.contains(t1.id)).isEmpty)
            // The parent still has everything.
            #expect(try ids(parent, "tracks", of: playlist.id) == [t1.id, t2.id, t3.id].sorted())
            #expect(try parent.count(Track.self) == 3)

            try await child.commit()
            #expect(try ids(parent, "tracks", of: playlist.id) == [t3.id])
            try await parent.commit()
            let main = store.mainContext
            #expect(try main.count(Track.self) == 1 && main.count(Album.self) == 1)
            #expect(try ids(main, "albums", of: artist.id) == [kept.id])
            #expect(try ids(main, "tracks", of: playlist.id) == [t3.id])
            #expect(try ids(main, "tracks", of: genre.id) == [t3.id])
            #expect(try main.related(t3.id, Track.album)?.id == kept.id)
        }
    }

    /// A child of a pinned view keeps its commit as a layer until the view shows it, with what
    /// the writer did beyond what the child sent: here the unlink of a track linked to the album
    /// after the view was pinned (the child sees the track, not the link, so the commit keeps the
    /// track, unlinked, as the child showed it). A compaction that squashed the commit's log
    /// entry between the save and the layer's making must not lose that effect: the layer is built
    /// from the entry the writer wrote, not read back from the log.
    @Test func aCompactionBetweenAPinnedChildsSaveAndItsLayerKeepsWhatTheWriterDid() async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "gone")
            let t1 = makeTrack(title: "t1", duration: 1), late = makeTrack(title: "late", duration: 2)
            _ = try await store.save { c in
                c.insert(album); c.insert(t1); c.insert(late)
                c.set(Track.album, of: t1.id, to: album.id)
            }
            let view = try store.newViewContext(label: "pinned")
            _ = try await store.save { $0.set(Track.album, of: late.id, to: album.id) }
            let child = view.newChild(label: "editor")
            try child.delete(album.id)
            #expect(try child.count(Track.self) == 1, "the child sees the late track, not its link")
            let compacted = Locked<CompactionReport?>(nil)
            child.afterRootSaveForTesting.withLock { hook in
                hook = {
                    let report = try? await store.compact()
                    compacted.withLock { $0 = report }
                }
            }
            let tx = try #require(try await child.commit())
            let report = try #require(compacted.withLock { $0 }, "the compaction ran")
            #expect(report.horizon >= tx, "the compaction squashed the save's entry")
            #expect(try view.count(Track.self) == 2, "the view is still pinned")
            #expect(try store.mainContext.count(Track.self) == 1, "the late track, which the child showed, is kept")
            #expect(try store.mainContext.relatedID(late.id, Track.album) == nil)
            #expect(try child.object(Track.self, id: late.id) != nil && child.relatedID(late.id, Track.album) == nil)
            #expect(try child.count(Track.self) == 1 && child.count(Album.self) == 0)
        }
    }

    /// A child deletes an album (no tracks in its view); another writer then adds a track to it.
    /// The commit keeps the track, unlinked, as the child showed it: the album's cascade took it,
    /// silently, under the default `.fail` policy. So does a child deleting an artist while
    /// another writer moves an album (and its tracks) to that artist.
    @Test func aCommitsCascadeDoesNotTakeWhatAnotherWriterLinkedSince() async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "A")
            let artist = Artist(mbid: UUID(), name: "R")
            let moved = Album(mbid: UUID(), title: "M")
            let inMoved = makeTrack(title: "in M", duration: 1)
            _ = try await store.save { c in
                c.insert(album); c.insert(artist); c.insert(moved); c.insert(inMoved)
                c.set(Track.album, of: inMoved.id, to: moved.id)
            }
            let editor = store.mainContext.newChild(label: "editor")
            try editor.delete(album.id)
            try editor.delete(artist.id)
            let x = makeTrack(title: "X", duration: 60)
            _ = try await store.save { c in
                c.insert(x)
                c.set(Track.album, of: x.id, to: album.id)
                c.set(Album.artist, of: moved.id, to: artist.id)
            }
            #expect(try editor.object(Track.self, id: x.id) != nil && editor.relatedID(x.id, Track.album) == nil)
            #expect(try await editor.commit() != nil)
            let main = store.mainContext
            #expect(try main.object(Album.self, id: album.id) == nil && main.object(Artist.self, id: artist.id) == nil)
            #expect(try main.object(Track.self, id: x.id) != nil && main.relatedID(x.id, Track.album) == nil)
            #expect(try main.object(Album.self, id: moved.id) != nil && main.relatedID(moved.id, Album.artist) == nil)
            #expect(try main.object(Track.self, id: inMoved.id) != nil)
            #expect(try store.verify().ok)
        }
    }

    /// A merge policy that keeps the store's version of an object the child deleted by a cascade
    /// keeps it: the cascade of the object the child deleted by name no longer takes it (it did,
    /// and the other writer's edit went with it, under `.storeWins` and `.custom { .keepStore }`
    /// alike). Under `.fail` the conflict is reported.
    @Test(arguments: ["storeWins", "keepStore"])
    func aPolicyThatKeepsTheStoresObjectKeepsItFromTheCascade(policy: String) async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "A")
            let t = makeTrack(title: "T", duration: 1)
            _ = try await store.save { c in c.insert(album); c.insert(t); c.set(Track.album, of: t.id, to: album.id) }
            let merge: MergePolicy = policy == "storeWins" ? .storeWins : .custom { _ in .keepStore }
            let editor = store.mainContext.newChild(label: "editor", mergePolicy: merge)
            try editor.delete(album.id)
            #expect(try editor.object(Track.self, id: t.id) == nil, "the child cascaded to the track")
            _ = try await store.save { $0.set(Track.title, of: t.id, to: "T (edited elsewhere)") }
            _ = try await editor.commit()
            #expect(try store.mainContext.object(Album.self, id: album.id) == nil)
            #expect(try store.mainContext.object(Track.self, id: t.id)?.title == "T (edited elsewhere)")
            #expect(try store.mainContext.relatedID(t.id, Track.album) == nil)
        }
    }

    /// A resolver giving `.values` of the wrong length is refused, naming the count (an empty
    /// array committed the set without the object's attribute changes, keeping its edge edits).
    @Test func aResolverGivingTheWrongNumberOfValuesIsRefused() async throws {
        try await withLibraryStore { store in
            let t = makeTrack(title: "T", duration: 1)
            _ = try await store.save { $0.insert(t) }
            for count in [0, 1, 12] {
                let editor = store.mainContext.newChild(label: "editor", mergePolicy: .custom { _ in
                    .values(Array(repeating: .null, count: count))
                })
                try editor.set(Track.title, of: t.id, to: "mine \(count)")
                _ = try await store.save { $0.set(Track.durationSeconds, of: t.id, to: 100 + count) }
                await #expect {
                    _ = try await editor.commit()
                } throws: { error in
                    guard case StrataError.validation(let f) = error else { return false }
                    return f.reason.contains("gave \(count) value(s)") && f.reason.contains("one per attribute")
                }
                #expect(try store.mainContext.object(Track.self, id: t.id)?.title == "T")
            }
        }
    }

    /// A deny rule on the inverse of a cascade (an order's items cascade, an item's order denies)
    /// does not refuse deleting the order, in a save or in a child: the order is what the delete
    /// removes. It refused it. (A save deleting the item first, before its order, is refused: a
    /// save applies its changes in order; a child's commit is judged whole.)
    @Test func aDenyRuleOnTheInverseOfACascadeLetsTheOwnerGo() async throws {
        let text = #"""
        {"model":"shop","version":1,"entities":[
         {"name":"Order","attributes":[{"name":"n","type":"int"}],
          "relationships":[{"name":"items","destination":"Item","toMany":true,"inverse":"order","deleteRule":"cascade"}],
          "uniques":[["n"]]},
         {"name":"Item","attributes":[{"name":"n","type":"int"}],
          "relationships":[{"name":"order","destination":"Order","inverse":"items","deleteRule":"deny"}],
          "uniques":[["n"]]}]}
        """#
        let schema = try Schema.parse(Array(text.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let order = try #require(schema.entity(named: "Order")), item = try #require(schema.entity(named: "Item"))
        let itemOrder = try #require(item.relationship(named: "order"))
        for (round, way) in ["order", "child", "child, item then order"].enumerated() {
            var o = Record(entity: order), i = Record(entity: item)
            o["n"] = .int(Int64(round))
            i["n"] = .int(Int64(round))
            _ = try await store.save { c in c.insert(o); c.insert(i); c.link(itemOrder, from: i.id, to: o.id) }
            switch way {
            case "order": _ = try await store.save { $0.delete(o.id) }
            case "child":
                let child = store.mainContext.newChild(label: "editor")
                try child.delete(o.id)
                #expect(try child.record(i.id) == nil)
                _ = try await child.commit()
            default:
                let child = store.mainContext.newChild(label: "editor")
                #expect(throws: StrataError.self) { try child.delete(i.id) }
                try child.delete(o.id)
                _ = try await child.commit()
            }
            #expect(try store.mainContext.record(o.id) == nil && store.mainContext.record(i.id) == nil, "\(way)")
        }
    }
}
