import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Filters through relationships (`album.title == 'x'`, `playlists.name == 'p'`) served from the
/// other side when it is selective (its index or unique key, then the edges back): on random
/// data and random filters, with replayable seeds, a fetch and a count give exactly what checking
/// every object gives; and a child's pending change to the other side is seen.
@Suite struct RelationshipPlanTests {
    @Test(arguments: 1...3)
    func plannedFiltersThroughRelationshipsMatchAFullCheck(seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        try await withLibraryStore { store in
            let artists = (0..<6).map { Artist(mbid: UUID(), name: "ar\($0 % 4)") }
            let albums = (0..<15).map { Album(mbid: UUID(), title: "al\($0 % 7)") }
            let genres = (0..<5).map { Genre(name: "g\($0)") }
            let playlists = (0..<6).map { Playlist(name: "p\($0)", createdAt: Date(timeIntervalSince1970: 0)) }
            let tracks = (0..<120).map { makeTrack(title: "t\($0 % 30)", duration: $0) }
            _ = try await store.save { c in
                for x in artists { c.insert(x) }
                for x in genres { c.insert(x) }
                for x in playlists { c.insert(x) }
                for x in albums {
                    c.insert(x)
                    if Int.random(in: 0..<5, using: &rng) > 0 {
                        c.set(Album.artist, of: x.id, to: artists.randomElement(using: &rng)!.id)
                    }
                }
                for t in tracks {
                    c.insert(t)
                    if Bool.random(using: &rng) { c.set(Track.album, of: t.id, to: albums.randomElement(using: &rng)!.id) }
                    if Bool.random(using: &rng) { c.set(Track.genre, of: t.id, to: genres.randomElement(using: &rng)!.id) }
                    for p in playlists where Int.random(in: 0..<4, using: &rng) == 0 { c.add(t.id, to: Playlist.tracks, of: p.id) }
                }
            }
            func randomFilter(depth: Int) -> Filter {
                let leaves: [Filter] = [
                    Track.album.matches(Album.title == "al\(Int.random(in: 0..<8, using: &rng))").predicate,
                    Track.album.matches(Album.mbid == albums.randomElement(using: &rng)!.mbid).predicate,
                    Track.album.matches(Album.artist.matches(Artist.name == "ar\(Int.random(in: 0..<5, using: &rng))")).predicate,
                    Track.genre.matches(Genre.name == "g\(Int.random(in: 0..<6, using: &rng))").predicate,
                    Track.playlists.any(Playlist.name == "p\(Int.random(in: 0..<7, using: &rng))").predicate,
                    Track.playlists.any(Playlist.name.hasPrefix("p")).predicate,
                    (Track.title == "t\(Int.random(in: 0..<30, using: &rng))").predicate,
                    (Track.durationSeconds > Int.random(in: 0..<120, using: &rng)).predicate,
                ]
                let leaf = leaves.randomElement(using: &rng)!
                guard depth > 0 else { return leaf }
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: return .and([leaf, randomFilter(depth: depth - 1)])
                case 1: return .or([leaf, randomFilter(depth: depth - 1)])
                case 2: return .not(leaf)
                default: return leaf
                }
            }
            var planned = 0
            for _ in 0..<150 {
                let filter = randomFilter(depth: 2)
                let query = Query(entity: "Track", predicate: filter)
                try store.read { view in
                    let got = try view.fetch(query).map(\.id)
                    let all = try view.fetch(Query(entity: "Track"))
                    let expected = try all.filter { try view.matches(filter, $0) }.map(\.id)
                    #expect(got == expected, "seed \(seed): \(filter)")
                    #expect(try view.count(query) == expected.count, "seed \(seed): \(filter)")
                    if try view.candidateIDs(try #require(store.schema.entity(named: "Track")), filter) != nil { planned += 1 }
                }
            }
            #expect(planned > 20, "few filters were served by a plan: \(planned)")
            // These are served from the other side only (no index of Track helps).
            let track = try #require(store.schema.entity(named: "Track"))
            for filter in [Track.album.matches(Album.title == "al1").predicate,
                           Track.playlists.any(Playlist.name == "p2").predicate,
                           Track.album.matches(Album.artist.matches(Artist.name == "ar1")).predicate] {
                let planned = try store.read { view in try view.candidateIDs(track, filter) != nil }
                #expect(planned, "\(filter) scanned every track")
            }
        }
    }

    /// In a child that renamed an album, a filter on the album's title finds the album's tracks
    /// under the new title, not under the old one (the store's index still has the old).
    /// A path of six relationships over a dense graph (tracks in playlists, back and forth) on
    /// random memberships with replayable seeds, in the store and in a child context: the tracks
    /// it matches are those from which a plain search over sets reaches the track titled
    /// `needle`. Each object met on the way is judged once for a record; judged once per path to
    /// it, the query took minutes (paths multiply by each step's fan-out).
    @Test(arguments: 1...2)
    func aLongPathOverADenseGraphMatchesWhatASearchReaches(seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        try await withLibraryStore { store in
            let tracks = (0..<40).map { makeTrack(title: $0 == 3 ? "needle" : "t\($0)", duration: $0 + 1) }
            let playlists = (0..<10).map { Playlist(name: "p\($0)", createdAt: Date(timeIntervalSince1970: 0)) }
            var members = Array(repeating: Set<Int>(), count: 10)
            // Two halves that never meet; a few tracks in no playlist.
            for (t, _) in tracks.enumerated() where t % 13 != 5 {
                let half = t < 20 ? 0..<5 : 5..<10
                for p in half where Int.random(in: 0..<5, using: &rng) < 3 { members[p].insert(t) }
            }
            _ = try await store.save { c in
                for t in tracks { c.insert(t) }
                for p in playlists { c.insert(p) }
                for (p, ts) in members.enumerated() { for t in ts { c.add(tracks[t].id, to: Playlist.tracks, of: playlists[p].id) } }
            }
            // The tracks from which three rounds of (track -> its playlists -> their tracks) reach 3.
            func step(_ from: Set<Int>) -> Set<Int> {
                Set(members.filter { !$0.isDisjoint(with: from) }.flatMap { $0 })
            }
            let expected = Set((0..<40).filter { step(step(step([$0]))).contains(3) }.map { tracks[$0].id })
            let track = try #require(store.schema.entity(named: "Track"))
            let filter = try PredicateParser.parse("playlists.tracks.playlists.tracks.playlists.tracks.title == 'needle'",
                                                   entity: track, schema: store.schema)
            #expect(Set(try store.mainContext.fetch(Query(entity: "Track", predicate: filter)).map(\.id)) == expected)
            let child = store.mainContext.newChild(label: "paths")
            #expect(Set(try child.fetch(Query(entity: "Track", predicate: filter)).map(\.id)) == expected)
            #expect(!expected.isEmpty && expected.count < 40)
        }
    }

    @Test func aChildSeesItsOwnChangeToTheOtherSide() async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "old")
            let t = makeTrack(title: "t", duration: 1)
            _ = try await store.save { c in
                c.insert(album); c.insert(t)
                c.set(Track.album, of: t.id, to: album.id)
            }
            let child = store.mainContext.newChild(label: "edit")
            try child.set(Album.title, of: album.id, to: "new")
            #expect(try child.fetch(Track.self, where: Track.album.matches(Album.title == "new")).map(\.id) == [t.id])
            #expect(try child.fetch(Track.self, where: Track.album.matches(Album.title == "old")).isEmpty)
            #expect(try child.count(Track.self, where: Track.album.matches(Album.title == "new")) == 1)
            #expect(try store.mainContext.fetch(Track.self, where: Track.album.matches(Album.title == "old")).map(\.id) == [t.id])
        }
    }

    /// A conjunct inside a nested `and` (two `--where` options, one of them an `and`) is planned
    /// onto its index as at the top: it was left to a scan of every track. The answer is the
    /// scan's either way.
    @Test func aConjunctOfANestedAndIsPlannedOntoItsIndex() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { c in
                for i in 0..<50 { c.insert(Track(mbid: UUID(), title: "t\(i % 5)", durationSeconds: 100 + i, addedAt: Date(timeIntervalSince1970: 0))) }
            }
            let track = try #require(store.schema.entity(named: "Track"))
            let nested = Filter.and([
                try PredicateParser.parse("title == 't3' and explicit == false", entity: track, schema: store.schema),
                try PredicateParser.parse("durationSeconds != 0", entity: track, schema: store.schema),
            ])
            try store.read { view in
                #expect(try view.candidateIDs(track, nested) != nil, "scanned every track")
                let got = try view.fetch(Query(entity: "Track", predicate: nested)).map(\.id)
                let expected = try view.fetch(Query(entity: "Track")).filter { try view.matches(nested, $0) }.map(\.id)
                #expect(got == expected)
                #expect(got.count == 10)
            }
        }
    }

    /// A path through a relationship ranks one place after its other side's plan: through a
    /// prefix on the album's title (every album, then all their tracks) it no longer wins over
    /// a selective range on the track's own index; through the album's unique `mbid` it still wins
    /// over a range. The answer is the scan's either way.
    @Test func aPathThroughARelationshipRanksOnePlaceAfterItsOtherSidesPlan() async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "a")
            // Durations 0, 25, …, 975: seven above 800.
            let tracks = (0..<40).map { makeTrack(title: "t\($0)", duration: $0 * 25) }
            _ = try await store.save { c in
                c.insert(album)
                for t in tracks {
                    c.insert(t)
                    c.set(Track.album, of: t.id, to: album.id)
                }
            }
            let track = try #require(store.schema.entity(named: "Track"))
            let broad = try PredicateParser.parse("durationSeconds > 800 and album.title prefix ''", entity: track,
                                                  schema: store.schema)
            let narrow = Filter.and([(Track.durationSeconds > 0).predicate,
                                     Track.album.matches(Album.mbid == album.mbid).predicate])
            try store.read { view in
                // The range: the eight tracks from 800 s on (the bound itself is checked on each
                // candidate, with the rest of the filter); through the albums it was all forty.
                #expect(try view.candidateIDs(track, broad)?.count == 8)
                // Through the album's unique key: its forty tracks; the range gives thirty-nine.
                #expect(try view.candidateIDs(track, narrow)?.count == 40)
                for filter in [broad, narrow] {
                    let got = try view.fetch(Query(entity: "Track", predicate: filter)).map(\.id)
                    let expected = try view.fetch(Query(entity: "Track")).filter { try view.matches(filter, $0) }.map(\.id)
                    #expect(got == expected)
                }
            }
        }
    }
}
