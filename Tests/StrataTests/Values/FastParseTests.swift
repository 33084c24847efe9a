import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Bugs found in review, each with a test that fails if it comes back.
@Suite struct RegressionTests {
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
        let view = try store.mainContext
        func count(_ p: Filter) throws -> Int { try view.count(Query(entity: "Item", predicate: p)) }
        #expect(try count(.compare(attribute: 0, .equal, .null)) == 2)
        #expect(try count(.compare(attribute: 0, .less, .string("y"))) == 3)
        #expect(try count(.compare(attribute: 0, .lessOrEqual, .string("x"))) == 3)
        #expect(try count(.isIn(attribute: 0, [.string("x"), .null])) == 3)
        #expect(try count(.compare(attribute: 0, .greaterOrEqual, .string("x"))) == 2)
        #expect(try count(.compare(attribute: 0, .equal, .string("z"))) == 1)
    }

    @Test func relationshipNamesAreReservedLikeAttributes() {
        let json = #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[],"relationships":[{"name":"id","destination":"A","inverse":"id"}]}]}"#
        #expect(throws: SchemaError.self) { try Schema.parse(Array(json.utf8), source: "v1.json") }
        let model = #"{"model":"kw-model","version":1,"entities":[{"name":"A","attributes":[]}]}"#
        #expect(throws: SchemaError.self) { try Schema.parse(Array(model.utf8), source: "v1.json") }
    }

    @Test func generatedCodeEscapesKeywordAttributes() throws {
        let json = #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"default","type":"int"}]}]}"#
        let source = ModelGenerator.swiftSource(for: try Schema.parse(Array(json.utf8), source: "v1.json"))
        #expect(source.contains("public var `default`: Swift.Int"))
        #expect(source.contains("self.`default` = try Swift.Int(storedValue: v[0])"))
    }

    @Test func createIfMissingFalseDoesNotCreateInAnEmptyDirectory() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        var config = StoreConfiguration()
        config.createIfMissing = false
        #expect(throws: StrataError.self) { try Store.open(at: dir, schema: try librarySchema(), configuration: config) }
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("current").path))
    }

    @Test func pinnedContextRefreshesAtTheSnapshotLimit() async throws {
        var config = StoreConfiguration()
        config.maxOpenSnapshots = 1
        try await withLibraryStore(config) { store in
            let view = try store.newViewContext(label: "only")
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            try view.refresh()
            #expect(try view.count(Genre.self) == 1)
        }
    }

    @Test func storeIsReleasedWithoutCloseAfterUsingTheMainContext() throws {
        weak var weakStore: Store?
        var path = ""
        do {
            let store = try Store.temporary(schema: try librarySchema())
            path = store.path
            _ = try store.mainContext.count(Genre.self)
            weakStore = store
        }
        #expect(weakStore == nil, "the main context keeps the store alive")
        try? FileManager.default.removeItem(atPath: path)
    }

    @Test func readerCountIsActiveReadersNotAHighWaterMark() async throws {
        try await withLibraryStore { store in
            let snapshots = try (0..<5).map { try store.snapshot(label: "s\($0)") }
            let during = try store.info().readers
            for s in snapshots { s.close() }
            let after = try store.info().readers
            #expect(during >= 6)   // five pinned plus info's own
            #expect(after == 1)
        }
    }

    @Test func relaxedStoreClosesCleanlyRightAfterSaving() async throws {
        var config = StoreConfiguration()
        config.durability = .relaxed
        config.relaxedSyncIntervalMs = 5
        for _ in 0..<20 {
            let store = try Store.temporary(schema: try librarySchema(), configuration: config)
            _ = try await store.save { $0.insert(Genre(name: "x")) }
            store.close()
        }
        // The delayed syncs of closed stores must not touch freed environments.
        try await Task.sleep(for: .milliseconds(50))
    }

    @Test func csvKeepsEmptyStringsApartFromNullAndIgnoresABOM() throws {
        let dir = temporaryDirectory("csv")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let csv = dir.appendingPathComponent("Playlist.csv")
        try Data(("\u{FEFF}name , createdAt,notes\n" + "a,2024-01-01T00:00:00Z,\"\"\n" + "b,2024-01-01T00:00:00Z,\n").utf8).write(to: csv)
        let r = try storectl("import", store, csv.path, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let out = try storectl("query", store, "--entity", "Playlist", "--sort", "name", "--json").stdout.split(separator: "\n")
        #expect(try JSONValue.parse(String(out[0]))["notes"] == .string(""))
        #expect(try JSONValue.parse(String(out[1]))["notes"] == nil)
    }

    @Test func importReportsANullUniqueKeyBeforeWriting() throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(#"{"entity":"Genre","name":null}"#.utf8).write(to: input)
        let r = try storectl("import", store, input.path, "--quiet")
        #expect(r.status == 65)
        #expect(r.stderr.contains("in.ndjson:1: name:"), "\(r.stderr)")
    }

    @Test func importResolvesReferencesToInputRecordsByIdAndOtherKeys() throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        // The album is referenced by its mbid but given with an explicit id, after the track.
        let albumID = ObjectID.make(entityTag: 2)
        let lines = [
            #"{"entity":"Track","mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e0631","title":"t","durationSeconds":1,"addedAt":"2024-01-01T00:00:00Z","album":{"mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e0632"}}"#,
            #"{"entity":"Album","id":"\#(albumID)","mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e0632","title":"a"}"#,
        ]
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(lines.joined(separator: "\n").utf8).write(to: input)
        let r = try storectl("import", store, input.path, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let c = try storectl("query", store, "--entity", "Track", "--where", "album == '\(albumID)'", "--count")
        #expect(c.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1")
    }

    @Test func continueOnErrorSkipsLinksToRejectedRecords() throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let lines = [
            #"{"entity":"Track","mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e0631","title":"t","durationSeconds":1,"addedAt":"2024-01-01T00:00:00Z","genre":{"name":"Bad"}}"#,
            #"{"entity":"Genre","name":"Bad","oops":1}"#,
        ]
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(lines.joined(separator: "\n").utf8).write(to: input)
        let rejects = dir.appendingPathComponent("rejects").path
        let r = try storectl("import", store, input.path, "--continue-on-error", "--rejects", rejects, "--json", "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let summary = try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(summary["rejected"] == .int(2))
        #expect(summary["records"] == .int(0))
    }

    @Test func rejectsFileThatCannotBeCreatedExits73() throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(#"{"entity":"Genre","name":"a"}"#.utf8).write(to: input)
        let r = try storectl("import", store, input.path, "--continue-on-error", "--rejects", "/nonexistent/dir/rejects")
        #expect(r.status == 73)
    }
}

@Suite struct ContextRegressionTests {
    @Test func nestedChildKeepsTheVersionItReadForConflicts() async throws {
        try await withLibraryStore { store in
            let t = makeTrack(title: "base", duration: 1)
            _ = try await store.save { $0.insert(t) }
            let parent = try store.mainContext.newChild(label: "parent")
            let child = parent.newChild(label: "child")
            try child.set(Track.title, of: t.id, to: "child edit")
            // The store changes after the child read the object, before the child commits upward.
            _ = try await store.save { $0.set(Track.durationSeconds, of: t.id, to: 99) }
            try await child.commit()
            await #expect(throws: StrataError.self) { try await parent.commit() }
            // After looking at the conflict, the parent can accept the store's version and write.
            try parent.rebase()
            try await parent.commit()
            let r = try #require(try store.mainContext.object(Track.self, id: t.id))
            #expect(r.title == "child edit" && r.durationSeconds == 99)
        }
    }

    @Test func propertyMergePreferringContextKeepsStoreOnlyChangesOfAWholeObjectUpdate() async throws {
        try await withLibraryStore { store in
            var t = makeTrack(title: "base", duration: 1)
            _ = try await store.save { $0.insert(t) }
            let child = try store.mainContext.newChild(label: "c", mergePolicy: .propertyMerge(preferring: .context))
            t.title = "mine"
            try child.update(t)   // every attribute, only the title differs from the base
            _ = try await store.save { $0.set(Track.durationSeconds, of: t.id, to: 42) }
            try await child.commit()
            let r = try #require(try store.mainContext.object(Track.self, id: t.id))
            #expect(r.title == "mine" && r.durationSeconds == 42)
        }
    }

    @Test(.timeLimit(.minutes(1))) func liveQueryDiffIsAgainstWhatTheConsumerSaw() async throws {
        try await withLibraryStore { store in
            var iterator = try store.mainContext.observe(Query(entity: "Genre")).makeAsyncIterator()
            #expect(await iterator.next()?.records.isEmpty == true)
            // Two commits before the consumer looks again: it may get only the newest results,
            // and their diff must then cover both inserts.
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            _ = try await store.save { $0.insert(Genre(name: "b")) }
            try await Task.sleep(for: .milliseconds(100))
            var seen = 0
            while seen < 2, let update = await iterator.next() {
                #expect(update.diff.inserted.count == update.records.count - seen, "diff against results never delivered")
                seen = update.records.count
            }
        }
    }
}

@Suite struct FastParseTests {
    @Test func datesAgreeWithFoundation() {
        var rng = SeededGenerator(seed: 99)
        let style = Date.ISO8601FormatStyle()
        for _ in 0..<2000 {
            let seconds = Double(Int64.random(in: -2_000_000_000...4_000_000_000, using: &rng))
            let text = style.format(Date(timeIntervalSince1970: seconds))
            #expect(FastParse.date(text) == Date(timeIntervalSince1970: seconds), "\(text)")
        }
        #expect(FastParse.date("2024-02-29T12:00:00Z") != nil)
        #expect(FastParse.date("2023-02-29T12:00:00Z") == nil)
        #expect(FastParse.date("2024-13-01T00:00:00Z") == nil)
        #expect(FastParse.date("2024-05-01T12:00:00.250Z") == Date(timeIntervalSince1970: 1_714_564_800.25))
        #expect(ISO8601.date(from: "2024-05-01T12:00:00+02:00") == Date(timeIntervalSince1970: 1_714_557_600))
    }

    @Test func uuidsAgreeWithFoundation() {
        for _ in 0..<1000 {
            let u = UUID()
            #expect(FastParse.uuid(u.uuidString) == u)
            #expect(FastParse.uuid(u.uuidString.lowercased()) == u)
        }
        #expect(FastParse.uuid("not-a-uuid") == nil)
        #expect(FastParse.uuid("7e66a91c-080f-5eea-aa6b-d2e7423e063g") == nil)
    }
}
