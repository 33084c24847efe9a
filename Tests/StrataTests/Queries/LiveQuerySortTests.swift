import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Live queries sorted through a to-one relationship: a change of the target's attribute can
/// reorder (and, with a limit, change) the results, so it re-evaluates them; it went unseen
/// until an object of the fetched entity changed.
@Suite struct LiveQuerySortTests {
    /// Albums "A" and "B" and a track on each; returns album A and the tracks on A and on B.
    private func twoAlbumsWithATrackEach(_ store: Store) async throws -> (Album, Track, Track) {
        let a = Album(mbid: UUID(), title: "A"), b = Album(mbid: UUID(), title: "B")
        let onA = makeTrack(title: "on A", duration: 1), onB = makeTrack(title: "on B", duration: 2)
        _ = try await store.save { c in
            c.insert(a); c.insert(b); c.insert(onA); c.insert(onB)
            c.set(Track.album, of: onA.id, to: a.id)
            c.set(Track.album, of: onB.id, to: b.id)
        }
        return (a, onA, onB)
    }

    /// On the main context: an album renamed reorders tracks sorted by album title.
    @Test(.timeLimit(.minutes(15))) func aLiveQuerySortedThroughAToOneFollowsTheTargetsAttribute() async throws {
        try await withLibraryStore { store in
            let (a, onA, onB) = try await twoAlbumsWithATrackEach(store)
            let request = FetchRequest<Track>(sortedBy: [Track.album.ascending(Album.title)], limit: 1)
            let live = Collector(store.mainContext.observe(request).map { $0.objects.map(\.id) })
            defer { live.cancel() }
            #expect(try await live.wait(for: 1) == [[onA.id]])
            _ = try await store.save { $0.set(Album.title, of: a.id, to: "Z") }
            #expect(try store.mainContext.fetch(request).map(\.id) == [onB.id], "a fetch sees the new first track")
            #expect(try await live.wait(for: 2) == [[onA.id], [onB.id]],
                    "the live query re-evaluates after a change of the album its sort reads")
        }
    }

    /// On a child of the main context: a store commit renaming the album re-evaluates it too.
    @Test(.timeLimit(.minutes(15))) func aChildsLiveQuerySortedThroughAToOneFollowsStoreCommits() async throws {
        try await withLibraryStore { store in
            let (a, onA, onB) = try await twoAlbumsWithATrackEach(store)
            let child = store.mainContext.newChild(label: "editor")
            let request = FetchRequest<Track>(sortedBy: [Track.album.ascending(Album.title)])
            let live = Collector(child.observe(request).map { $0.objects.map(\.id) })
            defer { live.cancel() }
            #expect(try await live.wait(for: 1) == [[onA.id, onB.id]])
            _ = try await store.save { $0.set(Album.title, of: a.id, to: "Z") }
            #expect(try child.fetch(request).map(\.id) == [onB.id, onA.id])
            #expect(try await live.wait(for: 2) == [[onA.id, onB.id], [onB.id, onA.id]])
        }
    }
}
