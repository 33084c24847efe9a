import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Typed predicates and query options the randomized `QueryTests` do not generate: `hasSuffix`,
/// case-insensitive `hasPrefix`/`hasSuffix` (also on `String?`), `EntityPredicate.id(in:)`,
/// `ToOne != id` and `== nil`, paths through two to-ones, `ToMany.any`/`contains` with `!`,
/// sorting on several keys with unset values, `in` with more values than an index range takes,
/// `FetchRequest`, and windows past the end. Every expectation is written out by hand.
@Suite struct TypedQueryTests {
    struct Fixture {
        var t: [Track] = []
        let iceland = Artist(mbid: UUID(), name: "Ása", country: "IS")
        let nowhere = Artist(mbid: UUID(), name: "Bo")
        let a1 = Album(mbid: UUID(), title: "A1"), a2 = Album(mbid: UUID(), title: "A2")
        let p1 = Playlist(name: "P1", createdAt: Date(timeIntervalSince1970: 0)), p2 = Playlist(name: "P2", createdAt: Date(timeIntervalSince1970: 0))
    }

    /// t0 "Jóga" (100 s, no rating, A1 by an Icelandic artist, in P1), t1 "jógi" (200, 3, A2),
    /// t2 "Saga" (300, 3, no album, in P1 and P2), t3 "SAGA live" (400, 5, A1), t4 "intro" (50, none).
    func build(_ store: Store) async throws -> Fixture {
        var f = Fixture()
        f.t = [makeTrack(title: "Jóga", duration: 100), makeTrack(title: "jógi", duration: 200, rating: 3),
               makeTrack(title: "Saga", duration: 300, rating: 3), makeTrack(title: "SAGA live", duration: 400, rating: 5),
               makeTrack(title: "intro", duration: 50)]
        let fx = f
        _ = try await store.save { c in
            c.insert(fx.iceland); c.insert(fx.nowhere); c.insert(fx.a1); c.insert(fx.a2); c.insert(fx.p1); c.insert(fx.p2)
            for t in fx.t { c.insert(t) }
            c.set(Album.artist, of: fx.a1.id, to: fx.iceland.id)
            c.set(Album.artist, of: fx.a2.id, to: fx.nowhere.id)
            c.set(Track.album, of: fx.t[0].id, to: fx.a1.id)
            c.set(Track.album, of: fx.t[1].id, to: fx.a2.id)
            c.set(Track.album, of: fx.t[3].id, to: fx.a1.id)
            c.add(fx.t[0].id, to: Playlist.tracks, of: fx.p1.id)
            c.add(fx.t[2].id, to: Playlist.tracks, of: fx.p1.id)
            c.add(fx.t[2].id, to: Playlist.tracks, of: fx.p2.id)
        }
        return f
    }

    @Test func stringOperatorsIdListsAndRelationships() async throws {
        try await withLibraryStore { store in
            let f = try await build(store)
            let view = store.mainContext
            // The titles of the matching tracks, by duration.
            func titles(_ p: EntityPredicate<Track>) throws -> [String] {
                try view.fetch(Track.self, where: p, sortedBy: [Track.durationSeconds.ascending]).map(\.title)
            }
            #expect(try titles(Track.title.hasSuffix("ga")) == ["Jóga", "Saga"])
            #expect(try titles(Track.title.hasSuffix("GA", caseInsensitive: true)) == ["Jóga", "Saga"])
            #expect(try titles(Track.title.hasSuffix("GA")).isEmpty)
            // `title` is indexed: a case-insensitive prefix must not be answered from the index.
            #expect(try titles(Track.title.hasPrefix("jó", caseInsensitive: true)) == ["Jóga", "jógi"])
            #expect(try titles(Track.title.hasPrefix("jó")) == ["jógi"])
            #expect(try titles(Track.title.hasPrefix("saga", caseInsensitive: true)) == ["Saga", "SAGA live"])
            #expect(try titles(Track.title.contains("AG", caseInsensitive: true) && !Track.title.contains("AG")) == ["Saga"])
            // On an optional string attribute: no value never matches.
            #expect(try view.fetch(Artist.self, where: Artist.country.hasSuffix("s", caseInsensitive: true)).map(\.id) == [f.iceland.id])
            #expect(try view.fetch(Artist.self, where: Artist.country.hasPrefix("i", caseInsensitive: true)).map(\.id) == [f.iceland.id])
            #expect(try view.count(Artist.self, where: Artist.country.contains("")) == 1)

            // Ids, alone (the planner's first choice) and with another condition.
            #expect(try titles(.id(in: [f.t[4].id, f.t[2].id])) == ["intro", "Saga"])
            #expect(try titles(.id(in: [f.t[4].id, f.t[2].id]) && Track.durationSeconds > 100) == ["Saga"])
            #expect(try titles(.id(in: [])).isEmpty)

            // To-one: != includes the tracks with no album; == nil finds exactly those.
            #expect(try titles(Track.album != f.a1.id) == ["intro", "jógi", "Saga"])
            #expect(try titles(Track.album == nil) == ["intro", "Saga"])
            #expect(try titles(Track.album != nil) == ["Jóga", "jógi", "SAGA live"])
            // Through two to-ones.
            #expect(try titles(Track.album.matches(Album.artist.matches(Artist.country == "IS"))) == ["Jóga", "SAGA live"])
            #expect(try titles(Track.album.matches(Album.artist.matches(Artist.country == nil))) == ["jógi"])
            #expect(try titles(!Track.album.matches(Album.artist.matches(Artist.country == "IS"))) == ["intro", "jógi", "Saga"])

            // To-many: any, contains, and their negation (objects with no targets never match any).
            #expect(try titles(Track.playlists.any(Playlist.name == "P2")) == ["Saga"])
            #expect(try titles(!Track.playlists.any(.all)) == ["intro", "jógi", "SAGA live"])
            #expect(try titles(Track.playlists.contains(f.p1.id)) == ["Jóga", "Saga"])
            #expect(try view.fetch(Playlist.self, where: Playlist.tracks.contains(f.t[0].id)).map(\.id) == [f.p1.id])
            #expect(try view.fetch(Playlist.self, where: !Playlist.tracks.any(Track.durationSeconds > 250), sortedBy: [Playlist.name.ascending]).isEmpty)
            #expect(try view.fetch(Album.self, where: Album.tracks.any(Track.rating == nil), sortedBy: [Album.title.ascending]).map(\.id) == [f.a1.id])
        }
    }

    @Test func sortOnSeveralKeysWithUnsetValuesAndWindows() async throws {
        try await withLibraryStore { store in
            let f = try await build(store)
            let view = store.mainContext
            // No value sorts before every value: first ascending, last descending; ties by the
            // next key, then by id.
            let byRatingThenTitle = try view.fetch(Track.self, sortedBy: [Track.rating.ascending, Track.title.descending]).map(\.title)
            #expect(byRatingThenTitle == ["intro", "Jóga", "jógi", "Saga", "SAGA live"])
            let descending = try view.fetch(Track.self, sortedBy: [Track.rating.descending, Track.durationSeconds.descending]).map(\.title)
            #expect(descending == ["SAGA live", "Saga", "jógi", "Jóga", "intro"])
            #expect(try view.fetch(Track.self, where: Track.rating < 4, sortedBy: [Track.rating.ascending, Track.durationSeconds.ascending]).map(\.title)
                    == ["intro", "Jóga", "jógi", "Saga"])

            // Windows.
            let request = FetchRequest<Track>(where: Track.durationSeconds >= 100, sortedBy: [Track.rating.descending, Track.title.ascending], limit: 2, offset: 1)
            #expect(try view.fetch(request).map(\.title) == ["Saga", "jógi"])
            #expect(try view.fetch(Track.self, sortedBy: [Track.title.ascending], limit: 3, offset: 4).map(\.title) == ["jógi"])
            #expect(try view.fetch(Track.self, sortedBy: [Track.title.ascending], offset: 5).isEmpty)
            #expect(try view.fetch(Track.self, offset: 99).isEmpty)
            #expect(try view.fetch(Track.self, limit: 0).isEmpty)
            #expect(try view.fetch(Track.self, sortedBy: [Track.title.ascending], limit: 0).isEmpty)
            #expect(try view.fetch(Track.self, limit: 2).map(\.id) == [f.t[0].id, f.t[1].id].sorted())
            // Unsorted: id order, the window applied to it.
            #expect(try view.fetch(Track.self, limit: 2, offset: 3).map(\.id) == Array(f.t.map(\.id).sorted()[3...4]))
            #expect(throws: StrataError.self) { try view.fetch(Track.self, limit: -1) }
            #expect(throws: StrataError.self) { try view.fetch(Track.self, offset: -1) }
        }
    }

    /// `in` with more than 64 values (not an index range) and with `null`.
    @Test func inWithManyValuesAndNull() async throws {
        try await withLibraryStore { store in
            _ = try await build(store)
            let view = store.mainContext
            let many = Array(stride(from: 0, through: 1000, by: 10))   // 101 values, includes 50…400
            #expect(try view.count(Track.self, where: Track.durationSeconds.in(many)) == 5)
            #expect(try view.count(Track.self, where: Track.durationSeconds.in(many.filter { $0 != 300 })) == 4)
            #expect(try view.fetch(Track.self, where: Track.title.in(["Saga", "intro", "nope"]), sortedBy: [Track.title.ascending]).map(\.title) == ["Saga", "intro"])
            #expect(try view.fetch(Track.self, where: Track.rating.in([nil, 5]), sortedBy: [Track.durationSeconds.ascending]).map(\.title)
                    == ["intro", "Jóga", "SAGA live"])
            #expect(try view.count(Track.self, where: Track.rating.in([])) == 0)
        }
    }

    /// An id list naming an object of another entity matches nothing of it: a fetch or count of
    /// this entity never returns or counts it (the `.ids` access path must skip records of other
    /// entities, or the typed fetch fails decoding an Album as a Track with a misleading
    /// `entityMismatch`). Also through a child holding a pending insert.
    @Test
    func idListWithAnotherEntitysIDMatchesOnlyThisEntity() async throws {
        try await withLibraryStore { store in
            let f = try await build(store)
            let view = store.mainContext
            let query = Query(entity: "Track", predicate: .idIn([f.t[2].id, f.a1.id]))
            #expect(try view.fetch(query).map(\.id) == [f.t[2].id])
            #expect(try view.count(query) == 1)
            #expect(try view.fetch(Track.self, where: .id(in: [f.t[2].id, f.a1.id])).map(\.id) == [f.t[2].id])
            #expect(try view.count(Query(entity: "Track", predicate: .idIn([f.a1.id]))) == 0)
            let child = store.mainContext.newChild(label: "pending")
            let pending = Album(mbid: UUID(), title: "Pending")
            try child.insert(pending)
            let withPending = Query(entity: "Track", predicate: .idIn([f.t[2].id, pending.id, f.a1.id]))
            #expect(try child.fetch(withPending).map(\.id) == [f.t[2].id])
            #expect(try child.count(withPending) == 1)
        }
    }
}

/// `object(_:id:)` given the id of an object of another entity returns nil (it does not decode
/// that record as the wrong type), while `record(_:)` returns the record.
@Suite struct TypedReadTests {
    @Test func objectWithAnIdOfAnotherEntityIsNil() async throws {
        try await withLibraryStore { store in
            let playlist = Playlist(name: "Road", createdAt: Date(timeIntervalSince1970: 1_700_000_000), notes: "n")
            let genre = Genre(name: "Folk")
            _ = try await store.save { $0.insert(playlist); $0.insert(genre) }
            let view = try store.newViewContext(label: "v")
            let child = store.mainContext.newChild(label: "c")
            for (name, ctx) in [("main", store.mainContext as any ObjectReading), ("view", view), ("child", child)] {
                #expect(try ctx.object(Genre.self, id: playlist.id) == nil, "\(name)")
                #expect(try ctx.object(Track.self, id: playlist.id) == nil, "\(name)")
                #expect(try ctx.object(Playlist.self, id: genre.id) == nil, "\(name)")
                #expect(try ctx.object(Playlist.self, id: playlist.id) == playlist, "\(name)")
                let r = try #require(try ctx.record(playlist.id), "\(name)")
                #expect(r.entity.name == "Playlist" && r.id == playlist.id && r["name"] == .string("Road"), "\(name)")
                #expect(try ctx.record(genre.id)?.entity.name == "Genre", "\(name)")
            }
            // Unsaved in a child: the same.
            let fresh = Genre(name: "Jazz")
            try child.insert(fresh)
            #expect(try child.object(Playlist.self, id: fresh.id) == nil)
            #expect(try child.object(Genre.self, id: fresh.id) == fresh)
            #expect(try child.record(fresh.id)?.entity.name == "Genre")
        }
    }

    /// A filter built in code nested deeper than ``Filter/maxNesting`` is refused as an invalid
    /// query (it overflowed the stack at about 2,000 levels in a debug build); one at the limit
    /// runs, and long `||` chains are flat.
    @Test func aFilterNestedTooDeepIsRefused() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(makeTrack(title: "t", duration: 7)) }
            func nested(_ levels: Int) -> EntityPredicate<Track> {
                var p = EntityPredicate<Track>.all
                for i in 0..<levels { p = !(p || Track.durationSeconds == i) }
                return p
            }
            for levels in [2_000, Filter.maxNesting] {
                #expect {
                    _ = try store.mainContext.count(Track.self, where: nested(levels))
                } throws: { error in
                    guard case StrataError.invalidQuery(_, let reason) = error else { return false }
                    return reason.contains("nested more than \(Filter.maxNesting) levels")
                }
            }
            // The same predicate folded in Swift for the one track (duration 7): `!(p || d == i)`.
            let levels = Filter.maxNesting / 2 - 1
            var matches = true
            for i in 0..<levels { matches = !(matches || 7 == i) }
            #expect(try store.mainContext.count(Track.self, where: nested(levels)) == (matches ? 1 : 0))
            var chain = EntityPredicate<Track>(.or([]))
            for i in 0..<5_000 { chain = chain || Track.durationSeconds == i }
            #expect(try store.mainContext.count(Track.self, where: chain) == 1)
        }
    }
}
