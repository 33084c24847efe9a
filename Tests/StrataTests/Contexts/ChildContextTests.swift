import Foundation
import LibraryModel
import Testing
@testable import Strata

@Suite struct ChildContextTests {
    @Test func childSeesItsChangesAndParentDoesNotUntilCommit() async throws {
        try await withLibraryStore { store in
            let main = store.mainContext
            let child = main.newChild(label: "editor")
            let jazz = Genre(name: "Jazz")
            try child.insert(jazz)
            #expect(try child.object(Genre.self, id: jazz.id) == jazz)
            #expect(try child.count(Genre.self) == 1)
            #expect(try main.count(Genre.self) == 0)
            let tx = try await child.commit()
            #expect(tx == TransactionID(1))
            #expect(try main.object(Genre.self, id: jazz.id) == jazz)
            #expect(!child.hasChanges)
            #expect(try child.count(Genre.self) == 1)
        }
    }

    /// A child's counts are kept against the state they were computed at, named by its
    /// environment and LMDB transaction id. A compaction's new generation numbers its LMDB
    /// transactions from the start again, so the same id can name another state: here the object
    /// the child deleted is deleted below it too, in the new generation, at the very id the
    /// child's counts were made at. (With the id alone, the child kept its -1 and counted 0.)
    @Test func aChildsCountsAreRecomputedInACompactionsNewGenerationAtTheSameLMDBId() async throws {
        try await withLibraryStore { store in
            let a = Genre(name: "A"), b = Genre(name: "B")
            _ = try await store.save { $0.insert(a); $0.insert(b) }
            // Enough commits that the old generation's LMDB id is ahead of a new one's.
            for i in 0..<20 { _ = try await store.save { $0.set(Genre.name, of: a.id, to: "A-\(i)") } }
            let child = store.mainContext.newChild(label: "counts")
            try child.delete(b.id)
            #expect(try child.count(Genre.self) == 1)
            func lmdbID() throws -> UInt64 { try store.env.read { LMDBEnvironment.lmdbTransactionID($0.handle) } }
            let basis = try lmdbID()
            let before = store.env.serial
            _ = try await store.compact()
            #expect(store.env.serial != before)
            _ = try await store.save { $0.delete(b.id) }
            var step = 0
            while try lmdbID() < basis {
                step += 1
                _ = try await store.save { $0.set(Genre.name, of: a.id, to: "A\(step)") }
            }
            try #require(try lmdbID() == basis, "the new generation's LMDB ids passed the old one (\(basis))")
            #expect(try child.count(Genre.self) == 1)
        }
    }

    @Test func discardDropsEverything() async throws {
        try await withLibraryStore { store in
            let g = Genre(name: "A")
            _ = try await store.save { $0.insert(g) }
            let child = store.mainContext.newChild(label: "scratch")
            try child.set(Genre.name, of: g.id, to: "B")
            try child.insert(Genre(name: "C"))
            try child.delete(g.id)
            #expect(try child.count(Genre.self) == 1)
            child.discard()
            #expect(try child.fetch(Genre.self).map(\.name) == ["A"])
            #expect(try await child.commit() == nil)
            #expect(try store.lastTransactionID == TransactionID(1))
        }
    }

    /// Edges added and removed again (or removed and added again) are no change: the commit
    /// saves nothing and returns nil, like values set and set back, and leaves alone what another
    /// writer did to those edges meanwhile.
    @Test func edgesChangedAndChangedBackCommitNothing() async throws {
        try await withLibraryStore { store in
            func track(_ title: String) -> Track {
                Track(mbid: UUID(), title: title, durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
            }
            let list = Playlist(name: "Road", createdAt: Date(timeIntervalSince1970: 0)), a = track("a"), b = track("b")
            _ = try await store.save { c in
                c.insert(list)
                c.insert(a)
                c.insert(b)
                c.add(a.id, to: Playlist.tracks, of: list.id)
            }
            let head = try store.lastTransactionID
            let child = store.mainContext.newChild(label: "scratch")
            try child.add(b.id, to: Playlist.tracks, of: list.id)
            try child.remove(b.id, from: Playlist.tracks, of: list.id)
            try child.remove(a.id, from: Playlist.tracks, of: list.id)
            try child.add(a.id, to: Playlist.tracks, of: list.id)
            // Another writer changes both edges meanwhile.
            _ = try await store.save { c in
                c.add(b.id, to: Playlist.tracks, of: list.id)
                c.remove(a.id, from: Playlist.tracks, of: list.id)
            }
            #expect(try await child.commit() == nil)
            #expect(try store.lastTransactionID == head.next)
            #expect(try store.mainContext.relatedIDs(list.id, Playlist.tracks) == [b.id])
        }
    }

    /// The same through a chain: a grandchild links an edge and commits it into its parent,
    /// another writer links that edge too, the grandchild unlinks it and commits again. The
    /// parent's layer then holds "absent" for an edge that was absent when it first changed it:
    /// its commit saves nothing and the other writer's link stays.
    @Test func anEdgeAddedAndRemovedThroughAChildIsNoChangeForItsParent() async throws {
        try await withLibraryStore { store in
            let list = Playlist(name: "Road", createdAt: Date(timeIntervalSince1970: 0))
            let t = Track(mbid: UUID(), title: "t", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { c in
                c.insert(list)
                c.insert(t)
            }
            let parent = store.mainContext.newChild(label: "parent")
            let child = parent.newChild(label: "child")
            try child.add(t.id, to: Playlist.tracks, of: list.id)
            #expect(try await child.commit() == nil)
            let theirs = try await store.save { $0.add(t.id, to: Playlist.tracks, of: list.id) }
            try child.remove(t.id, from: Playlist.tracks, of: list.id)
            #expect(try await child.commit() == nil)
            #expect(try parent.relatedIDs(list.id, Playlist.tracks) == [])
            #expect(try await parent.commit() == nil)
            #expect(try store.lastTransactionID == theirs)
            #expect(try store.mainContext.relatedIDs(list.id, Playlist.tracks) == [t.id])
        }
    }

    @Test func nestedChildrenCommitOneLevelUp() async throws {
        try await withLibraryStore { store in
            let main = store.mainContext
            let a = main.newChild(label: "a")
            let b = a.newChild(label: "b")
            let c = b.newChild(label: "c")
            #expect(c.depth == 3)
            let g = Genre(name: "deep")
            try c.insert(g)
            #expect(try b.object(Genre.self, id: g.id) == nil)
            #expect(try await c.commit() == nil)
            #expect(try b.object(Genre.self, id: g.id) == g)
            #expect(try a.object(Genre.self, id: g.id) == nil)
            try await b.commit()
            #expect(try a.object(Genre.self, id: g.id) == g)
            #expect(try main.count(Genre.self) == 0)
            #expect(try await a.commit() == TransactionID(1))
            #expect(try main.object(Genre.self, id: g.id) == g)
        }
    }

    @Test func commitIsOneTransactionAllOrNothing() async throws {
        try await withLibraryStore { store in
            let taken = Genre(name: "taken")
            _ = try await store.save { $0.insert(taken) }
            let child = store.mainContext.newChild(label: "bulk")
            for i in 0..<100 { try child.insert(Genre(name: "g\(i)")) }
            // A concurrent save takes a name the child also uses: the root commit must fail whole.
            try child.insert(Genre(name: "race"))
            _ = try await store.save { $0.insert(Genre(name: "race")) }
            await #expect(throws: StrataError.self) { try await child.commit() }
            #expect(try store.mainContext.count(Genre.self) == 2)
            #expect(child.hasChanges)
        }
    }

    /// `hasChanges` says whether the child would commit anything, as `pendingObjects` does: a
    /// value set and set back, or an object inserted and deleted again, is no change (`commit()`
    /// returns nil). It said there were changes.
    @Test func changesThatCancelOutAreNoPendingChanges() async throws {
        try await withLibraryStore { store in
            let t = Track(mbid: UUID(), title: "A", durationSeconds: 200, addedAt: Date())
            _ = try await store.save { $0.insert(t) }
            let back = store.mainContext.newChild(label: "back")
            try back.set(Track.title, of: t.id, to: "x")
            #expect(back.hasChanges)
            try back.set(Track.title, of: t.id, to: "A")
            #expect(!back.hasChanges && back.pendingObjects.isEmpty)
            #expect(try await back.commit() == nil)
            let gone = store.mainContext.newChild(label: "gone")
            let n = Track(mbid: UUID(), title: "tmp", durationSeconds: 1, addedAt: Date())
            try gone.insert(n)
            #expect(gone.hasChanges)
            try gone.delete(n.id)
            #expect(!gone.hasChanges && gone.pendingObjects.isEmpty)
            #expect(try await gone.commit() == nil)
            let deleting = store.mainContext.newChild(label: "deleting")
            try deleting.delete(t.id)
            #expect(deleting.hasChanges && deleting.pendingObjects.deleted == [t.id])
        }
    }

    /// An object deleted and inserted again with the same values starts without its edges: the
    /// commit unlinks them, so the child has changes and lists the object as updated (the model
    /// found `hasChanges` false with such a commit pending).
    @Test func anObjectInsertedAgainUnderItsIdIsAPendingChange() async throws {
        try await withLibraryStore { store in
            let p = Playlist(name: "p", createdAt: Date())
            let t = Track(mbid: UUID(), title: "A", durationSeconds: 200, addedAt: Date())
            _ = try await store.save { $0.insert(p); $0.insert(t); $0.add(t.id, to: Playlist.tracks, of: p.id) }
            let child = store.mainContext.newChild(label: "again")
            try child.delete(p.id)
            try child.insert(p)
            #expect(child.hasChanges && child.pendingObjects.updated.contains(p.id))
            #expect(try await child.commit() != nil)
            let tracks = try #require(store.schema.entity(named: "Playlist")?.relationship(named: "tracks"))
            #expect(try store.mainContext.relatedIDs(tracks, of: p.id).isEmpty)
            // Without an edge to remove, the layer holds no edge fact, only the relationship it
            // defines whole: still a change its commit sends.
            let again = store.mainContext.newChild(label: "again, no edges")
            try again.delete(p.id)
            try again.insert(p)
            #expect(again.hasChanges && again.pendingObjects.updated == [p.id])
            _ = try await again.commit()
            #expect(!again.hasChanges)
        }
    }

    @Test func validationHappensWhenTheChangeIsMade() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let child = store.mainContext.newChild(label: "v")
            #expect(throws: StrataError.self) { try child.insert(Genre(name: "Jazz")) }
            // The failed change left nothing behind.
            #expect(try child.count(Genre.self) == 1)
            #expect(!child.hasChanges)
        }
    }

    @Test func deleteRulesApplyInsideTheChild() async throws {
        try await withLibraryStore { store in
            let artist = Artist(mbid: UUID(), name: "A")
            let album = Album(mbid: UUID(), title: "B")
            let track = makeTrack(title: "t", duration: 10)
            _ = try await store.save { c in
                c.insert(artist); c.insert(album); c.insert(track)
                c.set(Album.artist, of: album.id, to: artist.id)
                c.set(Track.album, of: track.id, to: album.id)
            }
            let child = store.mainContext.newChild(label: "d")
            try child.delete(artist.id)
            #expect(try child.object(Album.self, id: album.id) == nil)
            #expect(try child.object(Track.self, id: track.id) == nil)
            #expect(try child.count(Track.self) == 0)
            #expect(try store.mainContext.count(Track.self) == 1)
            try await child.commit()
            #expect(try store.mainContext.count(Track.self) == 0)
        }
    }
}
