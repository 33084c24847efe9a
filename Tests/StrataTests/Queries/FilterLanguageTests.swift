import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The `--where` / `--sort` language (`PredicateParser`), form by form as the README's "The query
/// filter language" lists it: each documented form must give exactly this `Filter`, and the
/// documented evaluation rules for `null` and `in []` must hold; filters nested too deeply are
/// refused.
@Suite struct FilterLanguageTests {
    let schema: Schema
    init() throws { schema = try librarySchema() }

    func parse(_ text: String, _ entity: String = "Track") throws -> Filter {
        try PredicateParser.parse(text, entity: try #require(schema.entity(named: entity)), schema: schema)
    }

    func expectParse(_ text: String, on entity: String = "Track", _ expected: Filter, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let got = try parse(text, entity)
            #expect(got == expected, "\(text)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(text): \(error)", sourceLocation: sourceLocation)
        }
    }

    func expectError(_ text: String, on entity: String = "Track", _ message: String, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let got = try parse(text, entity)
            Issue.record("\(text) parsed as \(got)", sourceLocation: sourceLocation)
        } catch let e as PredicateParser.ParseError {
            #expect(e.description.contains(message), "\(text): \(e)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(text): \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func everyDocumentedFormGivesItsFilter() throws {
        let title = Track.title.index, duration = Track.durationSeconds.index, rating = Track.rating.index
        expectParse("durationSeconds > 300 and (title contains 'love' or rating >= 4.5)", .and([
            .compare(attribute: duration, .greater, .int(300)),
            .or([.string(attribute: title, .contains, "love", caseInsensitive: false), .compare(attribute: rating, .greaterOrEqual, .double(4.5))]),
        ]))
        for (op, expected) in [("==", ComparisonOperator.equal), ("=", .equal), ("!=", .notEqual), ("<", .less), ("<=", .lessOrEqual),
                               (">", .greater), (">=", .greaterOrEqual)] {
            expectParse("durationSeconds \(op) -5", .compare(attribute: duration, expected, .int(-5)))
        }
        expectParse("album.year between 1990 and 1999", .through(relationship: Track.album.tag, .between(attribute: Album.year.index, .int(1990), .int(1999))))
        expectParse("playlists.name == 'Road trip'", .any(relationship: Track.playlists.tag, .compare(attribute: Playlist.name.index, .equal, .string("Road trip"))))
        expectParse("album.artist.country == 'IS'",
                    .through(relationship: Track.album.tag, .through(relationship: Album.artist.tag, .compare(attribute: Artist.country.index, .equal, .string("IS")))))
        expectParse("genre == null", .related(relationship: Track.genre.tag, nil))
        expectParse("genre != null", .not(.related(relationship: Track.genre.tag, nil)))
        expectParse("playlists == null", .not(.any(relationship: Track.playlists.tag, .all)))
        expectParse("playlists != null", .any(relationship: Track.playlists.tag, .all))
        let albumID = try #require(ObjectID(string: "000201a200a516391e9970a8e742d8f3"))
        expectParse("album == '000201a200a516391e9970a8e742d8f3'", .related(relationship: Track.album.tag, albumID))
        expectParse("album != '000201a200a516391e9970a8e742d8f3'", .not(.related(relationship: Track.album.tag, albumID)))
        expectParse("title prefix 'Jó'", .string(attribute: title, .hasPrefix, "Jó", caseInsensitive: false))
        expectParse("title suffix 'Jó'", .string(attribute: title, .hasSuffix, "Jó", caseInsensitive: false))
        expectParse("title contains 'night'", .string(attribute: title, .contains, "night", caseInsensitive: false))
        expectParse("title icontains 'night'", .string(attribute: title, .contains, "night", caseInsensitive: true))
        expectParse("title matches '*[^ -~]*'", .string(attribute: title, .matches, "*[^ -~]*", caseInsensitive: false))
        expectParse("title imatches 'night*'", .string(attribute: title, .matches, "night*", caseInsensitive: true))
        expectParse("year in [1997, 2001]", on: "Album", .isIn(attribute: Album.year.index, [.int(1997), .int(2001)]))
        expectParse("year in []", on: "Album", .isIn(attribute: Album.year.index, []))
        expectParse("not explicit == true", .not(.compare(attribute: Track.explicit.index, .equal, .bool(true))))
        expectParse("addedAt >= '2024-01-01T00:00:00Z'", .compare(attribute: Track.addedAt.index, .greaterOrEqual, .date(Date(timeIntervalSince1970: 1_704_067_200))))
        expectParse("mbid == '82d6edf7-3c84-5d05-811b-3b924c91ddff'",
                    .compare(attribute: Track.mbid.index, .equal, .uuid(try #require(UUID(uuidString: "82d6edf7-3c84-5d05-811b-3b924c91ddff")))))
        expectParse("artworkHash == 'AAH6'", .compare(attribute: Track.artworkHash.index, .equal, .bytes([0, 1, 250])))
    }

    @Test func valuesQuotesAndKeywords() throws {
        let title = Track.title.index, explicit = Track.explicit.index, rating = Track.rating.index
        expectParse("title == 'it''s'", .compare(attribute: title, .equal, .string("it's")))
        expectParse(#"title == "say ""hi""""#, .compare(attribute: title, .equal, .string(#"say "hi""#)))
        expectParse("title == ''", .compare(attribute: title, .equal, .string("")))
        // A quoted empty string for a non-string attribute, and null, are "no value".
        expectParse("rating == ''", .compare(attribute: rating, .equal, .null))
        expectParse("rating == null", .compare(attribute: rating, .equal, .null))
        expectParse("rating < 1e3", .compare(attribute: rating, .less, .double(1000)))
        expectParse("rating > 4", .compare(attribute: rating, .greater, .double(4)))
        for (text, value) in [("true", true), ("false", false), ("1", true), ("0", false), ("'yes'", true), ("'no'", false)] {
            expectParse("explicit == \(text)", .compare(attribute: explicit, .equal, .bool(value)))
        }
        expectError("durationSeconds == 4.5", "'durationSeconds' is int")
        expectError("title == 'x' AND rating == 1", "unexpected 'AND'")
        expectError("title == true", "expected a value for 'title'")
    }

    /// Numbers with a sign or a signed exponent read as written (`1e-5` was "'1e' is not a
    /// number", `+5` an unexpected character); a sort or group path through more than
    /// ``PredicateParser/maxPathSteps`` relationships is refused as a filter's is (it was taken).
    @Test func signedNumbersAndLongSortPaths() throws {
        let rating = Track.rating.index, duration = Track.durationSeconds.index
        expectParse("rating < 2.5e-3", .compare(attribute: rating, .less, .double(0.0025)))
        expectParse("rating < 1E+6", .compare(attribute: rating, .less, .double(1_000_000)))
        expectParse("rating > +4", .compare(attribute: rating, .greater, .double(4)))
        expectParse("durationSeconds == +5", .compare(attribute: duration, .equal, .int(5)))
        expectParse("durationSeconds in [-1, +2, 300]", .isIn(attribute: duration, [.int(-1), .int(2), .int(300)]))
        expectError("rating < 1e", "'1e'")
        expectError("rating < 1e-", "'1e-'")
        // A number may start with its point (`.5`, as decimal text may), and any white space
        // separates tokens (a carriage return, a no-break space): both were refused.
        expectParse("rating < .5", .compare(attribute: rating, .less, .double(0.5)))
        expectParse("rating > -.25", .compare(attribute: rating, .greater, .double(-0.25)))
        expectParse("rating\u{A0}<\u{A0}2\r\n", .compare(attribute: rating, .less, .double(2)))
        // An int attribute takes a whole number in any form the README lists, read exactly, as
        // an import does (`1E+6` was refused as "not an integer"); a fraction, or a number past
        // the int range, is refused saying which. A CSV cell is the same text form.
        expectParse("durationSeconds < 1E+6", .compare(attribute: duration, .less, .int(1_000_000)))
        expectParse("durationSeconds == 2.5e2", .compare(attribute: duration, .equal, .int(250)))
        expectParse("durationSeconds == -100.0", .compare(attribute: duration, .equal, .int(-100)))
        expectParse("durationSeconds == 9.223372036854775807e18",
                    .compare(attribute: duration, .equal, .int(.max)))
        expectError("durationSeconds == 2.5", "'durationSeconds' is int: '2.5' is not an integer")
        expectError("durationSeconds == 1e30", "'1e30' is outside the int range")
        #expect(try ValueConversion.value(fromText: "1e2", type: .int) == .int(100))

        let chain = try Schema.parse(Array(#"""
            {"model": "chain", "version": 1, "entities": [
              {"name": "N", "attributes": [{"name": "name", "type": "string"}],
               "relationships": [
                 {"name": "next", "destination": "N", "inverse": "prev", "optional": true},
                 {"name": "prev", "destination": "N", "inverse": "next", "optional": true}]}]}
            """#.utf8), source: "v1.json", expectedVersion: 1)
        let n = try #require(chain.entity(named: "N"))
        let eight = String(repeating: "next.", count: 8) + "name", nine = String(repeating: "next.", count: 9) + "name"
        #expect(try PredicateParser.parseSort(eight, entity: n, schema: chain).first?.path.count == 8)
        #expect { try PredicateParser.parseSort(nine, entity: n, schema: chain) } throws: { error in
            (error as? PredicateParser.ParseError)?.reason.contains("a path of 9 relationships: at most 8") == true
        }
        #expect(throws: PredicateParser.ParseError.self) { try PredicateParser.parse(nine + " == 'x'", entity: n, schema: chain) }
    }

    /// An attribute named `not` (the schema allows it) can be compared (`not == 1` was refused as
    /// "expected an attribute name"), and `not` before another comparison is still the operator.
    @Test func anAttributeNamedNotCanBeCompared() throws {
        let schema = try Schema.parse(Array(#"""
            {"model": "m", "version": 1, "entities": [{"name": "E", "attributes": [
              {"name": "not", "type": "int", "optional": true}, {"name": "x", "type": "int", "optional": true}]}]}
            """#.utf8), source: "v1.json", expectedVersion: 1)
        let e = try #require(schema.entity(named: "E"))
        func parse(_ text: String) throws -> Filter { try PredicateParser.parse(text, entity: e, schema: schema) }
        #expect(try parse("not == 1") == .compare(attribute: 0, .equal, .int(1)))
        #expect(try parse("not in [1, 2] and x > 0") ==
                (.isIn(attribute: 0, [.int(1), .int(2)]) && .compare(attribute: 1, .greater, .int(0))))
        #expect(try parse("not x == 1") == .not(.compare(attribute: 1, .equal, .int(1))))
        #expect(try parse("not not == 1") == .not(.compare(attribute: 0, .equal, .int(1))))
        #expect(try parse("not (x == 1)") == .not(.compare(attribute: 1, .equal, .int(1))))
        // Without such an attribute, `not ==` is still an error at the operator.
        #expect(throws: PredicateParser.ParseError.self) {
            try PredicateParser.parse("not == 1", entity: try #require(librarySchema().entity(named: "Track")), schema: try librarySchema())
        }
    }

    /// `not` binds tightest, then `and`, then `or`; parentheses group.
    @Test func precedence() {
        let a = Filter.compare(attribute: Track.explicit.index, .equal, .bool(true))
        let b = Filter.compare(attribute: Track.durationSeconds.index, .less, .int(5))
        let c = Filter.compare(attribute: Track.rating.index, .equal, .null)
        expectParse("not explicit == true and durationSeconds < 5 or rating == null", .or([.and([.not(a), b]), c]))
        expectParse("rating == null or not explicit == true and durationSeconds < 5", .or([c, .and([.not(a), b])]))
        expectParse("not (explicit == true or durationSeconds < 5) and rating == null", .and([.not(.or([a, b])), c]))
        expectParse("explicit == true and durationSeconds < 5 and rating == null", .and([a, b, c]))
    }

    /// A huge number in a filter, where a number does not belong or as a decimal of too many
    /// digits, is shown cut after 64 characters with its length, as other input is: it was
    /// echoed whole (100,000 digits to standard error).
    /// A date literal past what a store holds is refused as the filter is read, at its position
    /// and as written (it was refused when the query ran, exit 65, naming it in seconds).
    @Test func aDateLiteralOutOfRangeIsRefusedWhereItIsWritten() {
        expectError("addedAt < '+960000-01-01T00:00:00Z'",
                    "at character 11: 'addedAt' is date: '+960000-01-01T00:00:00Z' is out of range: dates must lie within")
    }

    @Test func aHugeNumberIsShownCut() {
        let huge = String(repeating: "1", count: 100_000)
        for text in ["durationSeconds == 1 \(huge)", "durationSeconds == \(huge)"] {
            do {
                let got = try parse(text)
                Issue.record("parsed as \(got)")
            } catch {
                let message = "\(error)"
                #expect(message.count < 400 && message.contains("…(100000 bytes)"), "\(message.prefix(200))")
            }
        }
        #expect {
            _ = try DecimalNumber.parse(huge)
        } throws: { error in
            let message = "\(error)"
            return message.count < 400 && message.contains("100000 significant digits")
        }
    }

    @Test func errorsNameThePositionAndTheProblem() {
        // The README's example, verbatim.
        expectError("(durationSeconds > )", "at character 20: expected a value for 'durationSeconds', found ')'")
        expectError("genre > '000401a200a516391e9970a8e742d8f3'", "a relationship compares with == or != only")
        expectError("playlists == 'x'", "'playlists' is to-many: compare it with null")
        expectError("playlists > null", "'playlists' is to-many: compare it with null")
        expectError("genre == 'Jazz'", "expected an object id string or null")
        // An id of another entity can match no target: refused while parsing, where it stands.
        expectError("genre == '000301a200a516422dc1f7b130b7ab25'",
                    "at character 10: 'genre' leads to entity Genre; 000301a200a516422dc1f7b130b7ab25 is an id of entity Track")
        expectError("genre != '00f001a200a516422dc1f7b130b7ab25'", "is an id of no entity of this schema")
        expectError("durationSeconds contains '5'", "'contains' needs a string attribute")
        expectError("title matches '[abc'", "pattern: a '[' without its ']'")
        expectError("colour == 'red'", "Track has no attribute or relationship 'colour'")
        expectError("title == 'open", "at character 10: unterminated string")
        expectError("title ~ 'x'", "at character 7: unexpected character '~'")
        // A filter that ends where more was expected is pointed at its end (it was pointed at
        // the last token, the `(` itself).
        expectError("(", "at character 2: expected an attribute name at the end of the filter")
        expectError("title == 'a' and", "at character 17: expected an attribute name at the end of the filter")
        expectError("(title == 'a'", "at character 14: expected ')' at the end of the filter")
        // An unknown name is pointed at where it starts (it was pointed past, at the operator).
        expectError("colour == 'red'", "at character 1: Track has no attribute or relationship 'colour'")
        expectError("durationSeconds > 1 and album.colour == 'red'",
                    "at character 25: Album has no attribute or relationship 'colour'")
        expectError("year in [1997", on: "Album", "expected ']'")
        expectError("year between 1990", on: "Album", "expected 'and' in between")
        expectError("(title == 'x'", "expected ')'")
        // A path follows at most `maxPathSteps` relationships (each to-many one multiplies what a
        // scan reads; a long one nested the filter without limit).
        let round = "album" + String(repeating: ".tracks.album", count: 4) + ".title == 'x'"
        expectError(round, "a path of 9 relationships: at most 8 may be followed")
        let eight = "album" + String(repeating: ".tracks.album", count: 3) + ".artist.name == 'x'"
        #expect(throws: Never.self) { _ = try parse(eight) }
        // A path with a step without a name (`.` alone read past the end of the path).
        for path in [".", "..", ". == 1", ".title == 'x'", "album. == null", "album..title == 'x'"] {
            expectError(path, "expected an attribute name before and after each '.'")
        }
    }

    @Test func sortLists() throws {
        let album = try #require(schema.entity(named: "Album"))
        #expect(try PredicateParser.parseSort("year,-title", entity: album) == [SortKey(attribute: Album.year.index, ascending: true),
                                                                               SortKey(attribute: Album.title.index, ascending: false)])
        #expect(try PredicateParser.parseSort(" -year , mbid", entity: album) == [SortKey(attribute: Album.year.index, ascending: false),
                                                                                 SortKey(attribute: Album.mbid.index, ascending: true)])
        #expect(throws: PredicateParser.ParseError.self) { try PredicateParser.parseSort("year,-nope", entity: album) }
        let track = try #require(schema.entity(named: "Track"))
        #expect(try PredicateParser.parseSort("album.title,-album.artist.name", entity: track, schema: schema) == [
            SortKey(path: [Track.album.tag], attribute: Album.title.index),
            SortKey(path: [Track.album.tag, Album.artist.tag], attribute: Artist.name.index, ascending: false),
        ])
        for (text, message) in [("playlists.name", "'playlists' is not a to-one relationship of Track"),
                                ("album.nope", "unknown sort attribute 'nope' of Album"),
                                ("album.title", "needs the schema")] {
            do {
                _ = try PredicateParser.parseSort(text, entity: track, schema: text == "album.title" ? nil : schema)
                Issue.record("\(text) parsed")
            } catch let e as PredicateParser.ParseError {
                #expect(e.reason.contains(message), "\(text): \(e)")
            }
        }
    }

    /// A sort key's error points at that key (and at the step of its path), not at the start of
    /// the list; SQL's `title desc` is answered with how descending is written.
    @Test func sortErrorsPointAtTheirKey() throws {
        let track = try #require(schema.entity(named: "Track"))
        for (text, expected) in [("title,nope", "at character 7: unknown sort attribute 'nope' of Track"),
                                 ("title, -nope", "at character 9: unknown sort attribute 'nope' of Track"),
                                 ("title,album.nope", "at character 13: unknown sort attribute 'nope' of Album"),
                                 ("-title,album.artist.x", "at character 21: unknown sort attribute 'x' of Artist"),
                                 ("title,genre.tracks.name", "at character 13: 'tracks' is not a to-one relationship of Genre"),
                                 ("ü,title,,year", "at character 1: unknown sort attribute 'ü' of Track"),
                                 ("title,,year", "at character 7: an empty sort attribute"),
                                 ("title,count(album)", "at character 13: 'album' is not a to-many relationship of Track"),
                                 ("title desc", "at character 1: unknown sort attribute 'title desc' of Track (a '-' before a name sorts descending: -title)")] {
            do {
                _ = try PredicateParser.parseSort(text, entity: track, schema: schema)
                Issue.record("\(text) parsed")
            } catch let e as PredicateParser.ParseError {
                #expect(e.description.hasPrefix(expected), "\(text): \(e)")
            }
        }
    }

    /// A sort through to-one relationships: by the target's attribute, objects without a target
    /// first (ascending) or last (descending), ties by id; the same in the typed API, over a
    /// child's pending changes too.
    @Test func aSortPathOrdersByTheTargetsAttribute() async throws {
        try await withLibraryStore { store in
            let b = Album(mbid: UUID(), title: "B"), a = Album(mbid: UUID(), title: "A")
            let t1 = makeTrack(title: "t1", duration: 1), t2 = makeTrack(title: "t2", duration: 2)
            let t3 = makeTrack(title: "t3", duration: 3), t4 = makeTrack(title: "t4", duration: 4)
            _ = try await store.save { c in
                for x in [a, b] { c.insert(x) }
                for t in [t1, t2, t3, t4] { c.insert(t) }
                c.set(Track.album, of: t1.id, to: b.id)
                c.set(Track.album, of: t2.id, to: a.id)
                c.set(Track.album, of: t4.id, to: a.id)
            }
            let view = store.mainContext
            let track = try #require(store.schema.entity(named: "Track"))
            let sort = try PredicateParser.parseSort("album.title,-durationSeconds", entity: track, schema: store.schema)
            let titles = try view.fetch(Query(entity: "Track", sort: sort)).map { $0["title"] }
            #expect(titles == [.string("t3"), .string("t4"), .string("t2"), .string("t1")])
            let typed = try view.fetch(FetchRequest<Track>(sortedBy: [Track.album.descending(Album.title)])).map(\.title)
            #expect(typed.prefix(1) == ["t1"] && typed.last == "t3")
            let child = view.newChild(label: "edit")
            try child.set(Album.title, of: b.id, to: "0")
            #expect(try child.fetch(FetchRequest<Track>(sortedBy: [Track.album.ascending(Album.title)], limit: 2))
                .map(\.title) == ["t3", "t1"])
            #expect(throws: StrataError.self) {
                _ = try view.fetch(Query(entity: "Track", sort: [SortKey(path: [Track.playlists.tag], attribute: 0)]))
            }
        }
    }

    /// Evaluation rules the README states for parsed filters: `null` sorts before every value (so
    /// `< v` matches it), `== null` finds unset values, `[]` matches nothing, `icontains` ignores
    /// case and the others compare bytes, paths through to-one and to-many relationships.
    @Test func parsedFiltersEvaluateAsDocumented() async throws {
        try await withLibraryStore { store in
            let unrated = makeTrack(title: "Night Train", duration: 100)
            let low = makeTrack(title: "night bus", duration: 200, rating: 2)
            let high = makeTrack(title: "Daylight", duration: 300, rating: 5)
            let artist = Artist(mbid: UUID(), name: "Ása", country: "IS")
            let album = Album(mbid: UUID(), title: "A", year: 1995)
            let road = Playlist(name: "Road trip", createdAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { c in
                for t in [unrated, low, high] { c.insert(t) }
                c.insert(artist); c.insert(album); c.insert(road)
                c.set(Album.artist, of: album.id, to: artist.id)
                c.set(Track.album, of: low.id, to: album.id)
                c.add(high.id, to: Playlist.tracks, of: road.id)
            }
            let view = store.mainContext
            func titles(_ text: String) throws -> [String] {
                try view.fetch(Query(entity: "Track", predicate: try parse(text), sort: [SortKey(attribute: Track.durationSeconds.index)]))
                    .map { $0["title"] }.map { if case .string(let s) = $0 { s } else { "?" } }
            }
            #expect(try titles("rating < 3") == ["Night Train", "night bus"])
            #expect(try titles("rating == null") == ["Night Train"])
            #expect(try titles("rating != null") == ["night bus", "Daylight"])
            #expect(try titles("rating in [null, 5]") == ["Night Train", "Daylight"])
            #expect(try titles("title in []").isEmpty)
            #expect(try titles("durationSeconds in []").isEmpty)
            #expect(try titles("title icontains 'NIGHT'") == ["Night Train", "night bus"])
            #expect(try titles("title contains 'Night'") == ["Night Train"])
            #expect(try titles("title prefix 'night'") == ["night bus"])
            #expect(try titles("title suffix 'light'") == ["Daylight"])
            #expect(try titles("album.artist.country == 'IS'") == ["night bus"])
            #expect(try titles("album.year between 1990 and 1999 and not rating > 2") == ["night bus"])
            #expect(try titles("album == null") == ["Night Train", "Daylight"])
            #expect(try titles("playlists.name == 'Road trip'") == ["Daylight"])
            #expect(try titles("not playlists.name == 'Road trip'") == ["Night Train", "night bus"])
            #expect(try titles("playlists == null") == ["Night Train", "night bus"])
            #expect(try titles("title matches '?ight*'") == ["Night Train", "night bus"])
            #expect(try titles("title imatches 'NIGHT *'") == ["Night Train", "night bus"])
            #expect(try titles("title matches '*[^ -~]*'").isEmpty)
            #expect(try view.fetch(Track.self, where: Track.title.matches("*light")).map(\.title) == ["Daylight"])
            #expect(throws: StrataError.self) { try view.fetch(Track.self, where: Track.title.matches("[z-a]")) }
            #expect(try titles("playlists != null") == ["Daylight"])
            #expect(try view.fetch(Track.self, where: Track.playlists.isEmpty).map(\.title).sorted() == ["Night Train", "night bus"])
            #expect(try view.fetch(Track.self, where: Track.playlists.isNotEmpty).map(\.title) == ["Daylight"])
            #expect(try view.count(Track.self, where: Track.playlists.isEmpty) == 2)
            // In a child, over pending changes: a track added to the playlist is no longer "on none".
            let child = view.newChild(label: "edit")
            try child.change { $0.add(unrated.id, to: Playlist.tracks, of: road.id) }
            #expect(try child.fetch(Track.self, where: Track.playlists.isEmpty).map(\.title) == ["night bus"])
        }
    }

    /// `--where` nested deeper than ``PredicateParser/maxNesting`` is a usage error (not a stack
    /// overflow, SIGSEGV); up to the limit it parses.
    @Test func aDeeplyNestedFilterIsRefused() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let deep = String(repeating: "not ", count: 3_000) + "name == \"g1\""
        let r = try await storectl("query", store, "--entity", "Genre", "--where", deep)
        #expect(r.status == 64, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("nested more than \(PredicateParser.maxNesting) levels"), "\(r.stderr)")
        let parens = String(repeating: "(", count: 100) + "name == \"g1\"" + String(repeating: ")", count: 100)
        #expect(try await storectl("query", store, "--entity", "Genre", "--where", parens).status == 64)
        let ok = String(repeating: "not ", count: PredicateParser.maxNesting) + "name == \"g1\""
        let fine = try await storectl("query", store, "--entity", "Genre", "--where", ok, "--count")
        #expect(fine.status == 0, "\(fine.stderr)")
        #expect(fine.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1")
    }
}
