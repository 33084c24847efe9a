import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Aggregates (`aggregate(_:groupedBy:_:)`): on random data with replayable seeds, every group's
/// count, sums, minima, maxima and means equal a plain computation over the same data held in
/// Swift arrays; the refused forms say why.
@Suite struct AggregateTests {
    struct Model {
        var duration: Int
        var rating: Double?
        var title: String
        var genre: Int?
        var album: Int?
        var playlists: Int
    }

    @Test(arguments: 1...3)
    func aggregatesEqualAPlainComputation(seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        try await withLibraryStore { store in
            let genres = (0..<4).map { Genre(name: "g\($0)") }
            let albums = (0..<5).map { Album(mbid: UUID(), title: "a\($0)", year: [1990, 2000, nil][$0 % 3]) }
            let playlists = (0..<3).map { Playlist(name: "p\($0)", createdAt: Date(timeIntervalSince1970: 0)) }
            var model: [Model] = []
            _ = try await store.save { c in
                for x in genres { c.insert(x) }
                for x in albums { c.insert(x) }
                for x in playlists { c.insert(x) }
                for _ in 0..<150 {
                    let m = Model(duration: Int.random(in: 1...600, using: &rng),
                                  rating: Bool.random(using: &rng) ? Double(Int.random(in: 0...10, using: &rng)) / 2 : nil,
                                  title: "t\(Int.random(in: 0..<40, using: &rng))",
                                  genre: Int.random(in: 0..<5, using: &rng) < 4 ? Int.random(in: 0..<4, using: &rng) : nil,
                                  album: Bool.random(using: &rng) ? Int.random(in: 0..<5, using: &rng) : nil,
                                  playlists: Int.random(in: 0...3, using: &rng))
                    model.append(m)
                    let t = Track(mbid: UUID(), title: m.title, durationSeconds: m.duration, rating: m.rating,
                                  addedAt: Date(timeIntervalSince1970: 0))
                    c.insert(t)
                    if let g = m.genre { c.set(Track.genre, of: t.id, to: genres[g].id) }
                    if let a = m.album { c.set(Track.album, of: t.id, to: albums[a].id) }
                    for p in 0..<m.playlists { c.add(t.id, to: Playlist.tracks, of: playlists[p].id) }
                }
            }
            let functions: [EntityAggregate<Track>] = [.sum(Track.durationSeconds), .sum(Track.rating), .min(Track.title),
                                                  .max(Track.durationSeconds), .average(Track.rating),
                                                  .countValues(Track.rating)]
            func expected(_ key: (Model) -> Value, _ filter: (Model) -> Bool = { _ in true }) -> [AggregateRow] {
                let groups = Dictionary(grouping: model.filter(filter), by: key)
                return groups.keys.sorted { Value.compare($0, $1) < 0 }.map { g in
                    let ms = groups[g]!
                    let ratings = ms.compactMap(\.rating)
                    return AggregateRow(group: g, count: ms.count, values: [
                        .int(Int64(ms.map(\.duration).reduce(0, +))),
                        .double(ratings.reduce(0, +)),
                        ms.map(\.title).min().map { .string($0) } ?? .null,
                        ms.map(\.duration).max().map { .int(Int64($0)) } ?? .null,
                        ratings.isEmpty ? .null : .double(ratings.reduce(0, +) / Double(ratings.count)),
                        .int(Int64(ratings.count)),
                    ])
                }
            }
            let view = store.mainContext
            #expect(try view.aggregate(Track.self, functions) == expected { _ in .null })
            #expect(try view.aggregate(Track.self, groupedBy: .by(Track.genre), functions)
                    == expected { m in m.genre.map { .string(genres[$0].id.description) } ?? .null })
            #expect(try view.aggregate(Track.self, groupedBy: .by(Track.album, Album.year), functions)
                    == expected { m in m.album.flatMap { albums[$0].year }.map { .int(Int64($0)) } ?? .null })
            #expect(try view.aggregate(Track.self, groupedBy: .size(of: Track.playlists), functions)
                    == expected { .int(Int64($0.playlists)) })
            #expect(try view.aggregate(Track.self, where: Track.durationSeconds > 300, groupedBy: .by(Track.rating), functions)
                    == expected({ $0.rating.map { .double($0) } ?? .null }, { $0.duration > 300 }))
            // Filtered, through a to-one: groups whose objects all fail the filter are not rows.
            #expect(try view.aggregate(Track.self, where: Track.durationSeconds > 500, groupedBy: .by(Track.genre), functions)
                    == expected({ m in m.genre.map { .string(genres[$0].id.description) } ?? .null }, { $0.duration > 500 }))
            #expect(try view.aggregate(Track.self, where: Track.durationSeconds < 40, groupedBy: .by(Track.album, Album.year),
                                       functions)
                    == expected({ m in m.album.flatMap { albums[$0].year }.map { .int(Int64($0)) } ?? .null },
                                { $0.duration < 40 }))
            #expect(try view.aggregate(Track.self, where: Track.durationSeconds < 40, groupedBy: .by(Track.album))
                    .map(\.count).reduce(0, +) == model.filter { $0.duration < 40 }.count)
            // In a child, over its pending changes: one more track in genre 0.
            let child = view.newChild(label: "edit")
            let extra = Track(mbid: UUID(), title: "zz", durationSeconds: 7, addedAt: Date(timeIntervalSince1970: 0))
            try child.insert(extra)
            try child.set(Track.genre, of: extra.id, to: genres[0].id)
            model.append(Model(duration: 7, rating: nil, title: "zz", genre: 0, album: nil, playlists: 0))
            #expect(try child.aggregate(Track.self, groupedBy: .by(Track.genre), functions)
                    == expected { m in m.genre.map { .string(genres[$0].id.description) } ?? .null })
            // Through an `ObjectReading` of the application's own whose unsorted fetches come in
            // another order than the store's (every track fell in the null group but the first).
            let reversed = ReversedReading(base: child)
            #expect(try reversed.aggregate(Track.self, groupedBy: .by(Track.genre), functions)
                    == expected { m in m.genre.map { .string(genres[$0].id.description) } ?? .null })
            #expect(try reversed.aggregate(Track.self, groupedBy: .by(Track.album, Album.year), functions)
                    == expected { m in m.album.flatMap { albums[$0].year }.map { .int(Int64($0)) } ?? .null })
        }
    }

    /// An `ObjectReading` whose fetches come newest id first.
    struct ReversedReading: ObjectReading {
        let base: ChildContext
        var schema: Schema { base.schema }
        func record(_ id: ObjectID) throws -> Record? { try base.record(id) }
        func relatedIDs(_ r: RelationshipDescription, of id: ObjectID) throws -> [ObjectID] { try base.relatedIDs(r, of: id) }
        func fetch(_ query: Query) throws -> [Record] { Array(try base.fetch(query).reversed()) }
        func count(_ query: Query) throws -> Int { try base.count(query) }
    }

    /// A typed aggregate's key and functions are the entity's own (one over another entity's
    /// attribute, `.sum(Album.year)` in an aggregate of `Track`, does not compile: it summed the
    /// track's attribute at the same position); each is the untyped form of the same key.
    @Test func typedKeysAreTheEntitysOwnAndMakeTheUntypedOnes() {
        #expect(EntityGroupKey<Track>.by(Track.genre).key == .target(relationship: Track.genre.tag))
        #expect(EntityGroupKey<Track>.by(Track.album, Album.year).key
                == .attribute(path: [Track.album.tag], attribute: Album.year.index))
        #expect(EntityGroupKey<Playlist>.size(of: Playlist.tracks).key == .count(relationship: Playlist.tracks.tag))
        #expect(EntityAggregate<Track>.sum(Track.durationSeconds).function == .sum(attribute: Track.durationSeconds.index))
        #expect(EntityAggregate<Track>.countValues(Track.rating).function == .countValues(attribute: Track.rating.index))
    }

    @Test func refusedFormsSayWhy() async throws {
        try await withLibraryStore { store in
            let view = store.mainContext
            for (key, functions, message): (GroupKey?, [AggregateFunction], String) in [
                (nil, [.sum(Track.title)], "sums and averages need an int, double or decimal attribute"),
                (.count(relationship: Track.album.tag), [], "is not a to-many relationship"),
                (.target(relationship: Track.playlists.tag), [], "is not a to-one relationship"),
                (.attribute(path: [Track.playlists.tag], attribute: 0), [], "is not a to-one relationship"),
                (nil, [.min(attribute: 99)], "out of range"),
            ] {
                #expect {
                    _ = try view.aggregate(Query(entity: "Track"), groupedBy: key, functions)
                } throws: { error in
                    guard case StrataError.invalidQuery(_, let reason) = error else { return false }
                    return reason.contains(message)
                }
            }
            let empty = try view.aggregate(Track.self, [.sum(Track.durationSeconds), .average(Track.rating)])
            #expect(empty == [AggregateRow(group: .null, count: 0, values: [.int(0), .null])])
            #expect(try view.aggregate(Track.self, groupedBy: .by(Track.genre)).isEmpty)
        }
    }

    /// A path through a to-one with no target: a filter through it matches nothing (the target
    /// must exist and match, `album.year == null` included), while a group by it puts the object
    /// with those whose value is missing, as a sort by it does.
    @Test func anObjectWithNoTargetMatchesNothingThroughItAndGroupsWithNoValue() async throws {
        try await withLibraryStore { store in
            let dated = Album(mbid: UUID(), title: "dated", year: 1999), undated = Album(mbid: UUID(), title: "undated")
            let inDated = makeTrack(title: "a", duration: 1), inUndated = makeTrack(title: "b", duration: 2)
            let alone = makeTrack(title: "c", duration: 3)
            _ = try await store.save { c in
                for x in [dated, undated] { c.insert(x) }
                for t in [inDated, inUndated, alone] { c.insert(t) }
                c.set(Track.album, of: inDated.id, to: dated.id)
                c.set(Track.album, of: inUndated.id, to: undated.id)
            }
            let view = store.mainContext
            let track = try #require(store.schema.entity(named: "Track"))
            func ids(_ filter: String) throws -> Set<ObjectID> {
                let query = Query(entity: "Track", predicate: try PredicateParser.parse(filter, entity: track, schema: store.schema))
                return Set(try view.fetch(query).map(\.id))
            }
            #expect(try ids("album.year == null") == [inUndated.id])
            #expect(try ids("album.year != null") == [inDated.id])
            #expect(try ids("album == null") == [alone.id])
            let rows = try view.aggregate(Track.self, groupedBy: .by(Track.album, Album.year))
            #expect(rows.map(\.group) == [.null, .int(1999)] && rows.map(\.count) == [2, 1], "\(rows)")
        }
    }

    /// A sum of doubles that overflows is an error naming the attribute, as an int sum past
    /// Int64 is (it was infinite, which JSON and the table printed as null: "no value"); an
    /// average whose sum overflows is the mean all the same (1e308 for two values of 1e308).
    @Test func aDoubleSumThatOverflowsIsRefused() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { c in
                for i in 0..<2 {
                    c.insert(Track(mbid: UUID(), title: "big \(i)", durationSeconds: 1, rating: 1e308,
                                   addedAt: Date(timeIntervalSince1970: 0)))
                }
            }
            let view = store.mainContext
            #expect {
                _ = try view.aggregate(Track.self, [.sum(Track.rating)])
            } throws: { error in
                guard case StrataError.invalidQuery(_, let reason) = error else { return false }
                return reason.contains("the sum of 'rating' exceeds what a double holds")
            }
            let both = try view.aggregate(Track.self, [.average(Track.rating)])
            #expect(both.first?.values == [.double(1e308)], "\(both)")
            // Many values at the largest double: the running mean is held to it (rounding carried
            // it past, to infinity, printed as null).
            let largest = Double.greatestFiniteMagnitude
            _ = try await store.save { c in
                for i in 0..<700 {
                    c.insert(Track(mbid: UUID(), title: "largest \(i)", durationSeconds: 1, rating: largest,
                                   addedAt: Date(timeIntervalSince1970: 0)))
                }
            }
            let many = try view.aggregate(Query(entity: "Track", predicate: (Track.title.hasPrefix("largest")).predicate),
                                          groupedBy: nil, [.average(attribute: 6)])
            #expect(many.first?.values == [.double(largest)], "\(many)")
            // One such value alone is its own sum and average.
            let one = try view.aggregate(Query(entity: "Track", predicate: (Track.title == "big 0").predicate), groupedBy: nil,
                                         [.sum(attribute: 6), .average(attribute: 6)])
            #expect(one.first?.values == [.double(1e308), .double(1e308)])
        }
    }
    /// A double sum is the exact sum of its terms rounded once, whatever their order (1, 1e100
    /// and -1e100 summed to 1 in one order and 0 in the other), and a mean is that sum, or an int
    /// sum kept exactly, over the count (an int mean added the terms as doubles, and two values
    /// summing to 1 averaged 0).
    @Test(arguments: [false, true])
    func aSumIsExactAndAMeanIsItOverTheCount(reversed: Bool) async throws {
        let schemaText = #"""
        {"model":"m","version":1,"entities":[{"name":"R","attributes":[{"name":"k","type":"string"},
         {"name":"i","type":"int","optional":true},{"name":"d","type":"double","optional":true}],"uniques":[["k"]]}]}
        """#
        let schema = try Schema.parse(Array(schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("aggregate-exact")
        defer { try? FileManager.default.removeItem(at: dir) }
        var lines = [
            #"{"entity":"R","k":"a","i":4611686018427387905,"d":1}"#,
            #"{"entity":"R","k":"b","i":-4611686018427387904,"d":1e100}"#,
            #"{"entity":"R","k":"c","d":-1e100}"#,
        ]
        if reversed { lines.reverse() }
        _ = try await Importer(store: store).run(files: [try writeInput(lines, in: dir)])
        let rows = try store.mainContext.aggregate(Query(entity: "R"), groupedBy: nil,
                                                   [.sum(attribute: 1), .average(attribute: 1), .sum(attribute: 2),
                                                    .average(attribute: 2)])
        #expect(rows.first?.values == [.int(1), .double(0.5), .double(1), .double(1.0 / 3)], "\(rows)")
    }

    /// A double mean is the exact mean rounded once, not the rounded sum divided (a second
    /// rounding): the mean of 9.73, 8.462, 3.9, 4.802, 7.97 and 6.65 is 6.919, which came out as
    /// 6.9190000000000005. The expected values are the exact means (Python's `Fraction`) as
    /// doubles, each of them one the rounded sum over the count missed.
    @Test func aDoubleMeanIsTheExactMeanRoundedOnce() {
        let cases: [([Double], Double)] = [
            ([9.73, 8.462, 3.9, 4.802, 7.97, 6.65], 6.919),
            ([5.7, 2.55, 7.61], 5.286666666666667),
            ([5.782, 1.703, 2.3, 7.705, 9.201, 2.322], 4.8355),
            ([229.0, 988.106, -172.1, -913.0, -440.0], -61.5988),
            ([-857619.0862859177, -695772.1627941271, -779.5], -518056.91636001493),
            ([-51392.30866743799, -74122.02225884038, 475654.7054278131, 739822.5049223225, 952.24, 874763.3822836697,
              439372.9518481835], 343578.7790793872),
            ([-764173.421481996, -417.8, -933.0, 235.16, -866242.6660605118, -673.3, 452844.5150767516,
              -93932.19978715025, 96832.55606201757], -130717.79513232099),
        ]
        var rng = SeededGenerator(seed: 11)
        for (terms, exact) in cases {
            var sum = ExactDoubleSum()
            for x in terms { sum.add(x) }
            #expect(sum.total.map { $0 / Double(terms.count) } != exact, "not a case the plain division misses: \(terms)")
            for _ in 0..<10 {
                var total = DoubleTotal()
                for x in terms.shuffled(using: &rng) { total.add(x) }
                #expect(total.mean(of: terms.count) == exact, "\(terms)")
            }
        }
    }

    /// An int mean, and a double mean whose sum is past the largest double, are rounded once
    /// too: the mean of 9007199254740993, 1 and 1 is 3002399751580331.5 (it came out as
    /// 3002399751580332: the sum converted, then divided), and of 1.7976931348623157e308, 1.7e308
    /// and 5.164604925736347e306 it is 1.1831130613732264e308 (the scaled-down mean was divided,
    /// then scaled: …262e308). Expected values: Python's `Fraction`.
    @Test func intMeansAndMeansPastTheLargestDoubleAreRoundedOnce() {
        #expect(Accumulator.mean(of: Int128(9007199254740993) + 2, count: 3) == 3002399751580331.5)
        #expect(Double(Int128(9007199254740995)) / 3 != 3002399751580331.5, "not a case the plain division misses")
        var total = DoubleTotal()
        for x in [1.7976931348623157e308, 1.7e308, 5.164604925736347e306] { total.add(x) }
        #expect(total.sum == nil)
        #expect(total.mean(of: 3) == 1.1831130613732264e308)
        var negative = DoubleTotal()
        for x in [-1.7976931348623157e308, -1.7e308, -5.164604925736347e306] { negative.add(x) }
        #expect(negative.mean(of: 3) == -1.1831130613732264e308)
    }

    /// ``ExactDoubleSum`` gives the exact sum rounded once (the values Python's `math.fsum`
    /// gives), in every order of the terms; a running sum gives other values for each.
    @Test func exactDoubleSumsAreRoundedOnceInAnyOrder() {
        let cases: [([Double], Double)] = [
            ([0.1, 0.2, 0.3, -0.6], 2.7755575615628914e-17),
            ([1e16, 1.0, 1e-16, -1e16], 1.0),
            ([1.7e308, 1e292, -1.7e308], 1e292),
            (Array(repeating: 0.1, count: 10), 1.0),
            ([9007199254740992.0, 1.0, 1.0], 9007199254740994.0),
        ]
        var rng = SeededGenerator(seed: 7)
        for (terms, exact) in cases {
            for _ in 0..<20 {
                var sum = ExactDoubleSum()
                for x in terms.shuffled(using: &rng) { sum.add(x) }
                #expect(sum.total == exact, "\(terms)")
            }
        }
        // A partial sum past the largest double leaves the total unknown (the caller sums the
        // terms scaled down).
        var over = ExactDoubleSum()
        for x in [1.7e308, 1.7e308, -1.7e308] { over.add(x) }
        #expect(over.total == nil)
    }

    /// A sum is an error only when its total is past what its type holds, never because a
    /// running sum on the way was: the same values in either order give the same sums (an int
    /// near Int64's limit, a decimal of 38 nines, doubles near the largest), and a decimal
    /// average whose sum needs more than 38 digits is the exact sum divided (it failed, in
    /// one order of the terms and not in the other).
    @Test(arguments: [false, true])
    func sumsDoNotDependOnTheOrderOfTheirTerms(reversed: Bool) async throws {
        let schemaText = #"""
        {"model":"m","version":1,"entities":[{"name":"R","attributes":[{"name":"k","type":"string"},
         {"name":"i","type":"int","optional":true},{"name":"m","type":"decimal","optional":true},
         {"name":"d","type":"double","optional":true}],"uniques":[["k"]]}]}
        """#
        let schema = try Schema.parse(Array(schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("aggregate-order")
        defer { try? FileManager.default.removeItem(at: dir) }
        let nines = String(repeating: "9", count: 38)
        var lines = [
            #"{"entity":"R","k":"a","i":9223372036854775807,"m":"\#(nines)","d":1.7e308}"#,
            #"{"entity":"R","k":"b","i":1,"m":"0.5","d":1.7e308}"#,
            #"{"entity":"R","k":"c","i":-2,"m":"-0.5","d":-1.7e308}"#,
        ]
        if reversed { lines.reverse() }
        _ = try await Importer(store: store).run(files: [try writeInput(lines, in: dir)])
        let rows = try store.mainContext.aggregate(Query(entity: "R"), groupedBy: nil,
                                                   [.sum(attribute: 1), .sum(attribute: 2), .sum(attribute: 3),
                                                    .average(attribute: 2)])
        let big = try #require(Decimal(string: nines))
        let third = try #require(Decimal(string: String(repeating: "3", count: 38)))
        #expect(rows.first?.values == [.int(Int64.max - 1), .decimal(big), .double(1.7e308), .decimal(third)],
                "\(rows)")
        // A total past the limits is still refused.
        let more = try writeInput([#"{"entity":"R","k":"e","i":2,"m":"0.1","d":1.7e308}"#], in: dir, "more.ndjson")
        _ = try await Importer(store: store).run(files: [more])
        for (attribute, message) in [(1, "exceeds Int64"), (2, "more than 38 significant digits"),
                                     (3, "exceeds what a double holds")] {
            #expect {
                _ = try store.mainContext.aggregate(Query(entity: "R"), groupedBy: nil, [.sum(attribute: attribute)])
            } throws: { error in
                guard case StrataError.invalidQuery(_, let reason) = error else { return false }
                return reason.contains(message)
            }
        }
        // A total of few digits past the decimal's range says so (it was said to need more than
        // 38 significant digits): 9e164 + 9e164.
        let range = try Store.temporary(schema: schema)
        defer { range.close() }
        _ = try await Importer(store: range).run(files: [try writeInput([#"{"entity":"R","k":"a","m":9e164}"#,
                                                                         #"{"entity":"R","k":"b","m":9e164}"#],
                                                                        in: dir, "range.ndjson")])
        #expect {
            _ = try range.mainContext.aggregate(Query(entity: "R"), groupedBy: nil, [.sum(attribute: 2)])
        } throws: { error in
            guard case StrataError.invalidQuery(_, let reason) = error else { return false }
            return reason.contains("the sum of 'm' is too large for a decimal") && !reason.contains("significant digits")
        }
        // Its average is the exact sum divided: (10^38 - 1 + 0.1) / 4, rounded to 38 digits.
        let mean = try store.mainContext.aggregate(Query(entity: "R"), groupedBy: nil, [.average(attribute: 2)])
        let quarter = try #require(Decimal(string: "25000000000000000000000000000000000000"))
        #expect(mean.first?.values == [.decimal(quarter)], "\(mean)")
    }

    /// A double sum whose running sum passes the largest double in one order of its terms and
    /// not in another, with a term below 2^-958: the same sum and mean in every order (the
    /// order that overflowed summed the terms scaled down, which lost the small one: 0 instead
    /// of 2^-1030).
    @Test(arguments: [[1.7e308, 1.7e308, -1.7e308, -1.7e308, 0x1p-1030], [1.7e308, -1.7e308, 1.7e308, -1.7e308, 0x1p-1030],
                      [0x1p-1030, -1.7e308, -1.7e308, 1.7e308, 1.7e308]])
    func aDoubleSumPastTheLargestOnTheWayKeepsItsSmallestTerms(terms: [Double]) async throws {
        let schemaText = #"""
        {"model":"m","version":1,"entities":[{"name":"R","attributes":[{"name":"k","type":"int"},
         {"name":"d","type":"double"}],"uniques":[["k"]]}]}
        """#
        let schema = try Schema.parse(Array(schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let r = try #require(schema.entity(named: "R"))
        // Ids follow the order of the inserts, and a sum meets its terms in id order.
        for (k, d) in terms.enumerated() {
            var record = Record(entity: r)
            record["k"] = .int(Int64(k))
            record["d"] = .double(d)
            _ = try await store.save { $0.insert(record) }
        }
        let rows = try store.mainContext.aggregate(Query(entity: "R"), groupedBy: nil, [.sum(attribute: 1), .average(attribute: 1)])
        #expect(rows.first?.values == [.double(0x1p-1030), .double(0x1p-1030 / 5)], "\(rows)")
    }

    /// A grouped sum past what its type holds names the group it overflowed in (it named only the
    /// attribute); an ungrouped one names none.
    @Test func aGroupedSumPastItsTypeNamesItsGroup() async throws {
        let schemaText = #"""
        {"model":"m","version":1,"entities":[{"name":"R","attributes":[{"name":"k","type":"string"},
         {"name":"g","type":"string","optional":true},{"name":"i","type":"int"}],"uniques":[["k"]]}]}
        """#
        let schema = try Schema.parse(Array(schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("aggregate-group-overflow")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await Importer(store: store).run(files: [try writeInput([
            #"{"entity":"R","k":"1","g":"small","i":1}"#,
            #"{"entity":"R","k":"2","g":"big","i":9223372036854775807}"#,
            #"{"entity":"R","k":"3","g":"big","i":1}"#,
            #"{"entity":"R","k":"4","i":9223372036854775807}"#,
            #"{"entity":"R","k":"5","i":9223372036854775807}"#,
        ], in: dir)])
        func reason(_ key: GroupKey?, _ predicate: Filter = .all) -> String? {
            do {
                _ = try store.mainContext.aggregate(Query(entity: "R", predicate: predicate), groupedBy: key,
                                                    [.sum(attribute: 2)])
                return nil
            } catch StrataError.invalidQuery(_, let reason) {
                return reason
            } catch {
                return "\(error)"
            }
        }
        let byG = GroupKey.attribute(path: [], attribute: 1)
        // The group without a value comes first in key order.
        #expect(reason(byG) == "the sum of 'i' exceeds Int64, in the group of objects without a value")
        #expect(reason(byG, .compare(attribute: 1, .equal, .string("big"))) == "the sum of 'i' exceeds Int64, in the group of 'big'")
        #expect(reason(byG, .compare(attribute: 1, .equal, .string("small"))) == nil)
        #expect(reason(nil) == "the sum of 'i' exceeds Int64")
    }

    /// 0.0 and -0.0 compare equal, so they are one group, shown as 0.0 whichever object came first,
    /// with or without an index on the attribute (the group took the first object's sign: -0.0).
    @Test(arguments: [false, true])
    func zeroAndNegativeZeroAreOneGroupShownAsZero(indexed: Bool) async throws {
        let schemaText = #"""
        {"model":"m","version":1,"entities":[{"name":"R","attributes":[{"name":"k","type":"string"},
         {"name":"d","type":"double"}],"uniques":[["k"]],"indexes":\#(indexed ? #"[["d"]]"# : "[]")}]}
        """#
        let schema = try Schema.parse(Array(schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("aggregate-zero")
        defer { try? FileManager.default.removeItem(at: dir) }
        let lines = [#"{"entity":"R","k":"a","d":-0.0}"#, #"{"entity":"R","k":"b","d":0.0}"#,
                     #"{"entity":"R","k":"c","d":-0.0}"#, #"{"entity":"R","k":"e","d":-1.5}"#]
        _ = try await Importer(store: store).run(files: [try writeInput(lines, in: dir)])
        // Counts alone (read from the index when there is one) and with a sum (every object read).
        for functions in [[], [AggregateFunction.sum(attribute: 1)]] {
            let rows = try store.mainContext.aggregate(Query(entity: "R"), groupedBy: .attribute(path: [], attribute: 1),
                                                       functions)
            #expect(rows.map(\.group) == [.double(-1.5), .double(0)] && rows.map(\.count) == [1, 3], "\(rows)")
            guard case .double(let zero)? = rows.last?.group else { continue }
            #expect(zero.sign == .plus, "\(rows)")
        }
    }
}
