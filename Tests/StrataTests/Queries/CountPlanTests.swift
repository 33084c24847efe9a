import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Counts answered from an access path without reading the objects (edges back from a target,
/// a path through a relationship served from the other side, a closed range of an index) and
/// counts per to-one target from the targets' edges: on random data with replayable seeds they
/// equal the objects a fetch returns, on the main context and in a child with pending changes
/// (which reads the objects).
@Suite struct CountPlanTests {
    @Test(arguments: 1...3)
    func countsFromPlansEqualTheObjectsAFetchReturns(seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        try await withLibraryStore { store in
            let genres = (0..<4).map { Genre(name: "g\($0)") }
            let albums = (0..<6).map { Album(mbid: UUID(), title: "a\($0)", year: [1990, 2000, nil][$0 % 3]) }
            let playlists = (0..<3).map { Playlist(name: "p\($0)", createdAt: Date(timeIntervalSince1970: 0)) }
            var tracks: [Track] = []
            _ = try await store.save { c in
                for x in genres { c.insert(x) }
                for x in albums { c.insert(x) }
                for x in playlists { c.insert(x) }
                for i in 0..<300 {
                    let t = Track(mbid: UUID(), title: "t\(i % 50)", durationSeconds: Int.random(in: 1...20, using: &rng),
                                  rating: Bool.random(using: &rng) ? Double(Int.random(in: 0...4, using: &rng)) : nil,
                                  addedAt: Date(timeIntervalSince1970: Double(Int.random(in: 0...5, using: &rng))))
                    tracks.append(t)
                    c.insert(t)
                    if Int.random(in: 0..<5, using: &rng) > 0 {
                        c.set(Track.genre, of: t.id, to: genres.randomElement(using: &rng)!.id)
                    }
                    if Bool.random(using: &rng) { c.set(Track.album, of: t.id, to: albums.randomElement(using: &rng)!.id) }
                    for p in playlists where Int.random(in: 0..<3, using: &rng) == 0 { c.add(t.id, to: Playlist.tracks, of: p.id) }
                }
            }
            let filters: [EntityPredicate<Track>] = [
                Track.genre == genres[1].id, Track.album == albums[2].id, Track.album == albums[5].id,
                Track.album.matches(Album.year == 1990), Track.album.matches(Album.mbid == albums[0].mbid),
                Track.genre.matches(Genre.name == "g3"), Track.playlists.any(Playlist.name == "p1"), Track.playlists.contains(playlists[2].id),
                Track.durationSeconds == 7, Track.durationSeconds >= 15, Track.durationSeconds <= 3,
                Track.durationSeconds.between(5, 9),
                Track.addedAt == Date(timeIntervalSince1970: 2), Track.addedAt <= Date(timeIntervalSince1970: 1),
                Track.title == "t7",
            ]
            let child = store.mainContext.newChild(label: "editor")
            // Pending changes that move counts: a deleted track, a moved one, a new one.
            try child.delete(tracks[0].id)
            try child.set(Track.genre, of: tracks[1].id, to: genres[1].id)
            try child.set(Track.durationSeconds, of: tracks[2].id, to: 7)
            try child.insert(Track(mbid: UUID(), title: "new", durationSeconds: 15, addedAt: Date(timeIntervalSince1970: 2)))
            for context in [store.mainContext as any ObjectReading, child] {
                for (k, f) in filters.enumerated() {
                    let query = Query(entity: "Track", predicate: f.predicate)
                    #expect(try context.count(query) == context.fetch(query).count, "seed \(seed) filter \(k)")
                }
                // Per to-one target, with and without a function (the second reads the objects).
                for key in [GroupKey.by(Track.genre), .by(Track.album)] {
                    let fast = try context.aggregate(Query(entity: "Track"), groupedBy: key)
                    let read = try context.aggregate(Query(entity: "Track"), groupedBy: key, [.countValues(Track.title)])
                    #expect(fast.map(\.group) == read.map(\.group), "seed \(seed) \(key)")
                    #expect(fast.map(\.count) == read.map(\.count), "seed \(seed) \(key)")
                    #expect(fast.map(\.count).reduce(0, +) == (try context.count(Query(entity: "Track"))))
                }
            }
        }
    }
}
