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
                for key in [GroupKey.by(Track.genre), .by(Track.album), .by(Track.durationSeconds), .by(Track.addedAt),
                            .by(Track.mbid), .by(Track.title), .by(Track.rating)] {
                    let fast = try context.aggregate(Query(entity: "Track"), groupedBy: key)
                    let read = try context.aggregate(Query(entity: "Track"), groupedBy: key, [.countValues(Track.title)])
                    #expect(fast.map(\.group) == read.map(\.group), "seed \(seed) \(key)")
                    #expect(fast.map(\.count) == read.map(\.count), "seed \(seed) \(key)")
                    #expect(fast.map(\.count).reduce(0, +) == (try context.count(Query(entity: "Track"))))
                }
            }
        }
    }

    @Test(arguments: 1...3)
    func sortingByNumberOfTargetsEqualsAPlainSort(seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        try await withLibraryStore { store in
            let playlists = (0..<12).map { Playlist(name: "p\($0)", createdAt: Date(timeIntervalSince1970: 0)) }
            let tracks = (0..<40).map { Track(mbid: UUID(), title: "t\($0 % 5)", durationSeconds: $0, addedAt: Date(timeIntervalSince1970: 0)) }
            _ = try await store.save { c in
                for p in playlists { c.insert(p) }
                for t in tracks { c.insert(t) }
                for p in playlists {
                    for t in tracks where Int.random(in: 0..<4, using: &rng) == 0 { c.add(t.id, to: Playlist.tracks, of: p.id) }
                }
            }
            let child = store.mainContext.newChild(label: "editor")
            try child.add(tracks[0].id, to: Playlist.tracks, of: playlists[3].id)
            try child.delete(playlists[5].id)
            for context in [store.mainContext as any ObjectReading, child] {
                let counts = try Dictionary(uniqueKeysWithValues: context.fetch(Query(entity: "Playlist")).map {
                    ($0.id, try context.relatedIDs($0.id, Playlist.tracks).count)
                })
                let byCount = counts.keys.sorted { counts[$0]! != counts[$1]! ? counts[$0]! > counts[$1]! : $0 < $1 }
                for limit in [nil, 1, 3, 7] {
                    let q = Query(entity: "Playlist", sort: [.count(of: Playlist.tracks, ascending: false)], limit: limit)
                    #expect(try context.fetch(q).map(\.id) == Array(byCount.prefix(limit ?? byCount.count)),
                            "seed \(seed) limit \(String(describing: limit))")
                }
                let window = Query(entity: "Playlist", sort: [.count(of: Playlist.tracks, ascending: false)], limit: 3, offset: 2)
                #expect(try context.fetch(window).map(\.id) == Array(byCount.dropFirst(2).prefix(3)), "seed \(seed)")
                let ascending = counts.keys.sorted { counts[$0]! != counts[$1]! ? counts[$0]! < counts[$1]! : $0 < $1 }
                #expect(try context.fetch(Query(entity: "Playlist", sort: [.count(of: Playlist.tracks)], limit: 4)).map(\.id)
                        == Array(ascending.prefix(4)), "seed \(seed)")
            }
        }
    }

    @Test func aCountSortKeyIsParsedAndRefusedWithAReason() throws {
        let schema = try librarySchema()
        let playlist = try #require(schema.entity(named: "Playlist")), track = try #require(schema.entity(named: "Track"))
        #expect(try PredicateParser.parseSort("-count(tracks),name", entity: playlist, schema: schema)
                == [SortKey(countOf: Playlist.tracks.tag, ascending: false), SortKey(attribute: 0)])
        #expect { try PredicateParser.parseSort("count(album)", entity: track, schema: schema) }
            throws: { "\($0)".contains("'album' is not a to-many relationship of Track") }
    }
}
