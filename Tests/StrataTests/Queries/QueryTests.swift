import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Predicates and sorts checked against the same filter computed in plain Swift over random,
/// seeded data: index paths, scans and relationship predicates must all agree with the reference.
@Suite struct QueryTests {
    struct Fixture {
        var tracks: [Track] = []
        var albumOf: [ObjectID: ObjectID] = [:]
        var albums: [Album] = []
        var playlists: [Playlist] = []
        var playlistTracks: [ObjectID: Set<ObjectID>] = [:]
    }

    static let words = ["Jóga", "jazz", "Zoë", "夜の散歩", "alpha", "Alpha", "beta", "", "Øresund", "z", "a\u{0}b", "ab"]

    func build(_ store: Store, seed: UInt64) async throws -> Fixture {
        var rng = SeededGenerator(seed: seed)
        var f = Fixture()
        for i in 0..<12 {
            f.albums.append(Album(mbid: UUID(), title: Self.words.randomElement(using: &rng)! + " \(i)", year: Bool.random(using: &rng) ? Int.random(in: 1960...2025, using: &rng) : nil))
        }
        for i in 0..<400 {
            let title = Self.words.randomElement(using: &rng)! + (Bool.random(using: &rng) ? " \(i % 17)" : "")
            f.tracks.append(Track(mbid: UUID(), title: title, durationSeconds: Int.random(in: -5...900, using: &rng),
                                  trackNumber: Bool.random(using: &rng) ? Int.random(in: 1...20, using: &rng) : nil,
                                  rating: Int.random(in: 0...3, using: &rng) == 0 ? nil : Double(Int.random(in: 0...10, using: &rng)) / 2,
                                  addedAt: Date(timeIntervalSince1970: Double(Int.random(in: 0...1_000_000, using: &rng)))))
        }
        for i in 0..<5 { f.playlists.append(Playlist(name: "list \(i)", createdAt: Date())) }
        var changes = ChangeSet()
        f.albums.forEach { changes.insert($0) }
        f.playlists.forEach { changes.insert($0) }
        for t in f.tracks {
            changes.insert(t)
            if Int.random(in: 0...4, using: &rng) > 0 {
                let a = f.albums.randomElement(using: &rng)!
                f.albumOf[t.id] = a.id
                changes.set(Track.album, of: t.id, to: a.id)
            }
            for p in f.playlists where Int.random(in: 0...5, using: &rng) == 0 {
                f.playlistTracks[p.id, default: []].insert(t.id)
                changes.add(t.id, to: Playlist.tracks, of: p.id)
            }
        }
        _ = try await store.save(changes)
        return f
    }

    /// A random predicate and the equivalent Swift closure.
    func randomPredicate(_ f: Fixture, _ rng: inout SeededGenerator, depth: Int = 0) -> (EntityPredicate<Track>, (Track) -> Bool) {
        let word = Self.words.randomElement(using: &rng)!
        let n = Int.random(in: -10...910, using: &rng)
        let m = n + Int.random(in: 0...300, using: &rng)
        let albumsByID = Dictionary(uniqueKeysWithValues: f.albums.map { ($0.id, $0) })
        let year = Int.random(in: 1960...2025, using: &rng)
        switch Int.random(in: 0...(depth < 2 ? 15 : 11), using: &rng) {
        case 0: return (Track.durationSeconds == n, { $0.durationSeconds == n })
        case 1: return (Track.durationSeconds < n, { $0.durationSeconds < n })
        case 2: return (Track.durationSeconds >= n, { $0.durationSeconds >= n })
        case 3: return (Track.durationSeconds.between(n, m), { $0.durationSeconds >= n && $0.durationSeconds <= m })
        case 4: return (Track.title == word, { Array($0.title.utf8) == Array(word.utf8) })
        case 5: return (Track.title.hasPrefix(word), { $0.title.utf8.starts(with: word.utf8) })
        case 6: return (Track.title.contains(word, caseInsensitive: true), { word.isEmpty || $0.title.lowercased().utf8.firstRange(of: word.lowercased().utf8) != nil })
        case 7: return (Track.title > word, { Value.compareBytes($0.title.utf8, word.utf8) > 0 })
        case 8:
            let ns = (0..<3).map { _ in Int.random(in: 0...900, using: &rng) }
            return (Track.durationSeconds.in(ns), { ns.contains($0.durationSeconds) })
        case 9: return (Track.rating == nil, { $0.rating == nil })
        case 10: return (Track.rating >= 2.5, { ($0.rating.map { $0 >= 2.5 }) ?? false })
        case 11:
            let a = f.albums.randomElement(using: &rng)!
            return (Track.album == a.id, { f.albumOf[$0.id] == a.id })
        case 12: return (Track.album.matches(Album.year >= year), { t in f.albumOf[t.id].flatMap { albumsByID[$0]?.year }.map { $0 >= year } ?? false })
        case 13:
            let (p, s) = randomPredicate(f, &rng, depth: depth + 1)
            let (q, t) = randomPredicate(f, &rng, depth: depth + 1)
            return (p && q, { s($0) && t($0) })
        case 14:
            let (p, s) = randomPredicate(f, &rng, depth: depth + 1)
            let (q, t) = randomPredicate(f, &rng, depth: depth + 1)
            return (p || q, { s($0) || t($0) })
        default:
            let (p, s) = randomPredicate(f, &rng, depth: depth + 1)
            return (!p, { !s($0) })
        }
    }

    @Test(arguments: [UInt64(1), 2, 3])
    func predicatesAndSortsMatchTheReference(seed: UInt64) async throws {
        try await withLibraryStore { store in
            let f = try await build(store, seed: seed)
            var rng = SeededGenerator(seed: seed &* 7919)
            let view = store.mainContext
            for _ in 0..<150 {
                let (predicate, reference) = randomPredicate(f, &rng)
                // Sort by title (bytes), then duration descending; ties by id.
                let sorted = try view.fetch(Track.self, where: predicate, sortedBy: [Track.title.ascending, Track.durationSeconds.descending])
                let expected = f.tracks.filter(reference).sorted { a, b in
                    let c = Value.compareBytes(a.title.utf8, b.title.utf8)
                    if c != 0 { return c < 0 }
                    if a.durationSeconds != b.durationSeconds { return a.durationSeconds > b.durationSeconds }
                    return a.id < b.id
                }
                #expect(sorted.map(\.id) == expected.map(\.id), "predicate \(predicate.predicate)")
                #expect(try view.count(Track.self, where: predicate) == expected.count)
                let offset = Int.random(in: 0...5, using: &rng), limit = Int.random(in: 0...7, using: &rng)
                let window = try view.fetch(Track.self, where: predicate, sortedBy: [Track.title.ascending, Track.durationSeconds.descending], limit: limit, offset: offset)
                #expect(window.map(\.id) == Array(expected.dropFirst(offset).prefix(limit)).map(\.id))
                // Unsorted results come in id (creation) order, windowed the same way.
                let unsorted = try view.fetch(Track.self, where: predicate, limit: limit, offset: offset)
                #expect(unsorted.map(\.id) == Array(expected.map(\.id).sorted().dropFirst(offset).prefix(limit)))
            }
        }
    }

    @Test func toManyAnyAndBothDirections() async throws {
        try await withLibraryStore { store in
            let f = try await build(store, seed: 42)
            let view = store.mainContext
            let byID = Dictionary(uniqueKeysWithValues: f.tracks.map { ($0.id, $0) })
            for p in f.playlists {
                let members = f.playlistTracks[p.id] ?? []
                #expect(Set(try view.related(p.id, Playlist.tracks).map(\.id)) == members)
                for t in members { #expect(try view.related(t, Track.playlists).contains { $0.id == p.id }) }
            }
            let long = try view.fetch(Playlist.self, where: Playlist.tracks.any(Track.durationSeconds > 850))
            let expected = f.playlists.filter { (f.playlistTracks[$0.id] ?? []).contains { byID[$0]!.durationSeconds > 850 } }
            #expect(long.map(\.id) == expected.map(\.id))
            for a in f.albums {
                let tracks = try view.related(a.id, Album.tracks).map(\.id)
                #expect(Set(tracks) == Set(f.albumOf.filter { $0.value == a.id }.keys))
            }
        }
    }

    /// Case-insensitive terms compare Unicode case foldings: a word ending in a final sigma
    /// matches its capitals, and ß matches SS, in the store and in a child context (lowercasing
    /// each character left ΟΔΟΣ, as οδοσ, apart from οδος).
    @Test func caseInsensitiveTermsCompareCaseFoldings() async throws {
        try await withLibraryStore { store in
            let all = ["ΟΔΟΣ", "οδος", "Οδος", "Straße", "STRASSE", "other"]
            _ = try await store.save { c in for n in all { c.insert(Genre(name: n)) } }
            let genre = try #require(store.schema.entity(named: "Genre"))
            func names(_ filter: String, in source: some ObjectReading) throws -> Set<String> {
                let query = Query(entity: "Genre", predicate: try PredicateParser.parse(filter, entity: genre, schema: store.schema))
                return Set(try source.fetch(query).compactMap { if case .string(let s) = $0["name"] { s } else { nil } })
            }
            let child = store.mainContext.newChild(label: "folding")
            for source in [store.mainContext as any ObjectReading, child] {
                #expect(try names("name icontains 'οδος'", in: source) == ["ΟΔΟΣ", "οδος", "Οδος"])
                #expect(try names("name icontains 'ΟΔΟΣ'", in: source) == ["ΟΔΟΣ", "οδος", "Οδος"])
                #expect(try names("name icontains 'strasse'", in: source) == ["Straße", "STRASSE"])
                #expect(try names("name imatches 'stra*e'", in: source) == ["Straße", "STRASSE"])
                #expect(try names("name contains 'οδος'", in: source) == ["οδος"])
            }
        }
    }

    /// A case-insensitive pattern's sets keep their ranges as written, met by a character or
    /// one of its case forms: `[A-_]` was folded to `[a-_]` (a range that ends before it starts)
    /// and matched nothing without an error, and `[A-z]` to `[a-z]`, which left out `_`, so the
    /// case-insensitive match found fewer names than the case-sensitive one.
    @Test func caseInsensitivePatternSetsKeepTheirRangesAsWritten() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { c in for n in ["_tmp", "Q1", "q2", "~x"] { c.insert(Genre(name: n)) } }
            let genre = try #require(store.schema.entity(named: "Genre"))
            func names(_ filter: String) throws -> Set<String> {
                let query = Query(entity: "Genre", predicate: try PredicateParser.parse(filter, entity: genre, schema: store.schema))
                return Set(try store.mainContext.fetch(query).compactMap { if case .string(let s) = $0["name"] { s } else { nil } })
            }
            #expect(try names("name imatches '[A-_]*'") == ["_tmp", "Q1", "q2"])
            #expect(try names("name matches '[A-z]*'") == ["_tmp", "Q1", "q2"])
            #expect(try names("name imatches '[A-z]*'") == ["_tmp", "Q1", "q2"])
            #expect(try names("name imatches '[^A-Z]*'") == ["_tmp", "~x"])
            #expect(try names("name imatches 'Q?'") == ["Q1", "q2"])
        }
    }

    @Test func invalidQueriesAreClearErrors() async throws {
        try await withLibraryStore { store in
            let view = store.mainContext
            #expect(throws: StrataError.self) { try view.fetch(Query(entity: "Nope")) }
            #expect(throws: StrataError.self) { try view.fetch(Query(entity: "Track", predicate: .compare(attribute: 2, .equal, .string("x")))) }
            #expect(throws: StrataError.self) { try view.fetch(Query(entity: "Track", predicate: .compare(attribute: 99, .equal, .int(1)))) }
            #expect(throws: StrataError.self) { try view.fetch(Query(entity: "Track", sort: [SortKey(attribute: 42)])) }
        }
    }

    @Test func longIndexedStringsAreFoundDespiteKeyTruncation() async throws {
        try await withLibraryStore { store in
            let base = String(repeating: "é", count: 400)
            let a = makeTrack(title: base + "a", duration: 1), b = makeTrack(title: base + "b", duration: 2)
            _ = try await store.save { $0.insert(a); $0.insert(b) }
            let view = store.mainContext
            #expect(try view.fetch(Track.self, where: Track.title == base + "b").map(\.id) == [b.id])
            #expect(try view.fetch(Track.self, where: Track.title > base + "a").map(\.id) == [b.id])
            #expect(try view.fetch(Track.self, where: Track.title.hasPrefix(base)).count == 2)
        }
    }

    static let optionalUniqueSchema = #"""
    {"model":"m","version":1,"entities":[
      {"name":"Item","attributes":[{"name":"code","type":"string","optional":true},{"name":"n","type":"int"}],"uniques":[["code"]]}
    ]}
    """#

    @Test func nullsOfAnOptionalUniqueAreFound() async throws {
        let schema = try Schema.parse(Array(Self.optionalUniqueSchema.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let e = schema.entity(named: "Item")!
        _ = try await store.save { c in
            for (i, code) in [Value.string("x"), .null, .string("z"), .null].enumerated() {
                var r = Record(entity: e)
                r["code"] = code
                r["n"] = .int(Int64(i))
                c.insert(r)
            }
        }
        let view = store.mainContext
        func count(_ p: Filter) throws -> Int { try view.count(Query(entity: "Item", predicate: p)) }
        #expect(try count(.compare(attribute: 0, .equal, .null)) == 2)
        #expect(try count(.compare(attribute: 0, .less, .string("y"))) == 3)
        #expect(try count(.compare(attribute: 0, .lessOrEqual, .string("x"))) == 3)
        #expect(try count(.isIn(attribute: 0, [.string("x"), .null])) == 3)
        #expect(try count(.compare(attribute: 0, .greaterOrEqual, .string("x"))) == 2)
        #expect(try count(.compare(attribute: 0, .equal, .string("z"))) == 1)
    }
}
