import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A hand-written entity type of the library's `Genre` that refuses the name "refused" when
/// decoding, as a type with stricter rules than the schema's may.
private struct StrictGenre: Entity {
    static let entityName = "Genre"
    static let entityTag: UInt16 = Genre.entityTag
    static let attributeDeclarations = Genre.attributeDeclarations
    static let relationshipDeclarations = Genre.relationshipDeclarations
    var id: ObjectID
    var name: String
    var storedValues: [Value] { [.string(name)] }
    init(id: ObjectID, storedValues v: [Value]) throws {
        guard v.count == 1, case .string(let name) = v[0], name != "refused" else {
            throw StrataError.entityMismatch(type: "StrictGenre", reason: "refused")
        }
        self.id = id
        self.name = name
    }
}

/// `Genre` declared with an attribute the schema does not have.
private struct MismatchedGenre: Entity {
    static let entityName = "Genre"
    static let entityTag: UInt16 = Genre.entityTag
    static let attributeDeclarations = [AttributeDeclaration(name: "title", type: .string, isOptional: false)]
    static let relationshipDeclarations = Genre.relationshipDeclarations
    var id: ObjectID
    var storedValues: [Value] { [] }
    init(id: ObjectID, storedValues v: [Value]) throws { self.id = id }
}

@Suite struct LiveQueryTests {
    /// A typed live query skips results holding an object its type does not decode, and diffs
    /// the next results against the last ones it delivered (it diffed them against the skipped
    /// ones, whose positions the consumer never saw).
    @Test(.timeLimit(.minutes(15))) func aTypedLiveQueryDiffsAgainstWhatItDelivered() async throws {
        try await withLibraryStore { store in
            let a = Genre(name: "a"), refused = Genre(name: "refused"), c = Genre(name: "c")
            _ = try await store.save { $0.insert(a) }
            let live = Collector(store.mainContext.observe(FetchRequest<StrictGenre>(sortedBy: [Attribute<StrictGenre, String>(name: "name", index: 0).ascending])))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1).map { $0.objects.map(\.name) } == [["a"]])
            _ = try await store.save { $0.insert(refused) }
            _ = try await store.save { c in
                c.delete(refused.id)
                c.insert(Genre(id: ObjectID.make(entityTag: Genre.entityTag), name: "b"))
            }
            let seen = try await live.wait(for: 2)
            #expect(seen[1].objects.map(\.name) == ["a", "b"])
            #expect(seen[1].diff.inserted == [1] && seen[1].diff.removed.isEmpty && seen[1].diff.moved.isEmpty,
                    "\(seen[1].diff)")
            _ = c
        }
    }

    /// A typed live query of a type that does not match the schema ends at once (a typed fetch
    /// throws the mismatch); it stayed open and delivered nothing.
    @Test(.timeLimit(.minutes(15))) func aTypedLiveQueryOfAMismatchedTypeEnds() async throws {
        try await withLibraryStore { store in
            var iterator = store.mainContext.observe(FetchRequest<MismatchedGenre>()).makeAsyncIterator()
            #expect(await iterator.next() == nil)
            #expect(throws: StrataError.self) { _ = try store.mainContext.fetch(MismatchedGenre.self) }
        }
    }

    /// A live query whose filter is nested far deeper than ``Filter/maxNesting`` ends (its first
    /// evaluation refuses the query); working out which entities it follows walked the whole
    /// filter first, and overflowed the stack.
    @Test(.timeLimit(.minutes(15))) func aLiveQueryNestedTooDeepEnds() async throws {
        try await withLibraryStore { store in
            var filter = Filter.all
            for _ in 0..<50_000 { filter = .not(filter) }
            var iterator = store.mainContext.observe(Query(entity: "Genre", predicate: filter)).makeAsyncIterator()
            #expect(await iterator.next() == nil)
        }
    }

    func record(_ name: String, _ id: ObjectID, _ e: EntityDescription) -> Record {
        var r = Record(entity: e, id: id, values: [.string(name)], version: .zero)
        r.values[0] = .string(name)
        return r
    }

    @Test func diffReportsInsertsRemovalsMovesAndUpdates() throws {
        let e = try librarySchema().entity(named: "Genre")!
        let ids = (0..<5).map { _ in ObjectID.make(entityTag: e.tag) }
        let old = [record("a", ids[0], e), record("b", ids[1], e), record("c", ids[2], e), record("d", ids[3], e)]
        let new = [record("c", ids[2], e), record("a", ids[0], e), record("B", ids[1], e), record("e", ids[4], e)]
        let diff = ResultsDiff.between(old, new)
        #expect(diff.removed == [3])
        #expect(diff.inserted == [3])
        #expect(diff.updated == [2])
        #expect(diff.moved == [ResultsDiff.Move(from: 2, to: 0)])
        #expect(ResultsDiff.between(old, old).isEmpty)
    }

    @Test(.timeLimit(.minutes(15))) func mainContextQueryFollowsCommitsAndSkipsUnrelatedOnes() async throws {
        try await withLibraryStore { store in
            var iterator = store.mainContext.observe(FetchRequest<Genre>(where: Genre.name.hasPrefix("J"), sortedBy: [Genre.name.ascending])).makeAsyncIterator()
            let first = await iterator.next()
            #expect(first?.objects.isEmpty == true)
            _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let second = await iterator.next()
            #expect(second?.objects.map(\.name) == ["Jazz"] && second?.diff.inserted == [0])
            // A commit touching only another entity does not re-deliver; a matching one does.
            _ = try await store.save { $0.insert(makeTrack(title: "x", duration: 1)) }
            _ = try await store.save { $0.insert(Genre(name: "Blues")) }
            _ = try await store.save { $0.insert(Genre(name: "J-Pop")) }
            let third = await iterator.next()
            #expect(third?.objects.map(\.name) == ["J-Pop", "Jazz"])
            #expect(third?.diff.inserted == [0])
        }
    }

    @Test(.timeLimit(.minutes(15))) func childQuerySeesPendingChanges() async throws {
        try await withLibraryStore { store in
            let child = store.mainContext.newChild(label: "editor")
            var iterator = child.observe(Query(entity: "Genre")).makeAsyncIterator()
            #expect(await iterator.next()?.records.isEmpty == true)
            try child.insert(Genre(name: "pending"))
            let update = await iterator.next()
            #expect(update?.records.count == 1 && update?.diff.inserted == [0])
            child.discard()
            let after = await iterator.next()
            #expect(after?.records.isEmpty == true && after?.diff.removed == [0])
        }
    }

    @Test(.timeLimit(.minutes(15))) func liveQueryDiffIsAgainstWhatTheConsumerSaw() async throws {
        try await withLibraryStore { store in
            var iterator = store.mainContext.observe(Query(entity: "Genre")).makeAsyncIterator()
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

    // Generous limits (see Collector.wait): with the whole suite running on two cores, blocking
    // tests can hold the cooperative threads a retry needs for tens of seconds.
    @Test(.timeLimit(.minutes(15))) func anEvaluationRefusedForAPassingReasonIsTriedAgain() async throws {
        var config = StoreConfiguration()
        config.maxOpenSnapshots = 1
        try await withLibraryStore(config) { store in
            _ = try await store.save { $0.insert(Genre(name: "g")) }
            // The one snapshot allowed is taken: the pinned view's first read is refused.
            let view = try store.newViewContext(label: "report")
            view.close()
            let held = try store.snapshot(label: "held")
            let results = Collector(view.observe(FetchRequest<Genre>()))
            defer { results.cancel() }
            try await Task.sleep(for: .milliseconds(50))
            #expect(results.all.isEmpty)
            held.close()
            // Tried again without any change to trigger it.
            #expect(try await results.wait(for: 1, seconds: 120).first?.objects.map(\.name) == ["g"])
        }
    }

    @Test(.timeLimit(.minutes(15))) func aLiveQueryThatCannotBeEvaluatedEnds() async throws {
        try await withLibraryStore { store in
            let results = Collector(store.mainContext.observe(Query(entity: "NoSuchEntity")))
            let deadline = ContinuousClock.now + .seconds(60)
            while !results.finished.withLock({ $0 }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
            #expect(results.finished.withLock { $0 })
            #expect(results.all.isEmpty)
        }
    }

    @Test(.timeLimit(.minutes(15))) func pinnedContextLiveQueryIsEvaluatedAtRefresh() async throws {
        try await withLibraryStore { store in
            let view = try store.newViewContext(label: "pinned")
            let live = Collector(view.observe(FetchRequest<Genre>(sortedBy: [Genre.name.ascending])).map(\.objects))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1).map { $0.map(\.name) } == [[]])
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            try view.refresh()
            #expect(try await live.wait(for: 2).map { $0.map(\.name) } == [[], ["a"]])
        }
    }

    /// A pinned context takes no commits, but its live queries still end with the store: at
    /// its close, and when a store closed before the query was asked for.
    @Test(.timeLimit(.minutes(15))) func aPinnedContextsLiveQueryEndsWhenTheStoreCloses() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        let view = try store.newViewContext(label: "pinned")
        let child = view.newChild(label: "scratch")
        let live = Collector(view.observe(Query(entity: "Genre")))
        let childLive = Collector(child.observe(Query(entity: "Genre")))
        defer { live.cancel(); childLive.cancel() }
        #expect(try await live.wait(for: 1).first?.records.count == 0)
        #expect(try await childLive.wait(for: 1).first?.records.count == 0)
        store.close()
        #expect(try await live.waitUntilFinished(), "the pinned context's live query ended")
        #expect(try await childLive.waitUntilFinished(), "its child's live query ended")
        let later = Collector(view.observe(Query(entity: "Genre")))
        defer { later.cancel() }
        #expect(try await later.waitUntilFinished(), "a live query asked for after the close ended")
    }

    /// A filter through a relationship also watches the destination entity: a commit that changes
    /// only albums re-evaluates a query on tracks.
    @Test(.timeLimit(.minutes(15))) func liveQueryFollowsTheEntitiesItsFilterReaches() async throws {
        try await withLibraryStore { store in
            let album = Album(mbid: UUID(), title: "A", year: 1985)
            let track = makeTrack(title: "t", duration: 1)
            _ = try await store.save { c in
                c.insert(album); c.insert(track)
                c.set(Track.album, of: track.id, to: album.id)
            }
            let live = Collector(store.mainContext.observe(FetchRequest<Track>(where: Track.album.matches(Album.year >= 1990))).map(\.objects))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1).map { $0.map(\.id) } == [[]])
            _ = try await store.save { $0.set(Album.year, of: album.id, to: 1995) }
            #expect(try await live.wait(for: 2).map { $0.map(\.id) } == [[], [track.id]])
        }
    }

    /// A view context with `autoRefresh: true` follows commits like the main context.
    @Test(.timeLimit(.minutes(15))) func autoRefreshingViewContextLiveQueryFollowsCommits() async throws {
        try await withLibraryStore { store in
            let view = try store.newViewContext(label: "following", autoRefresh: true)
            let live = Collector(view.observe(Query(entity: "Genre")).map(\.records.count))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1) == [0])
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            #expect(try await live.wait(for: 2) == [0, 1])
        }
    }

    /// A nested child's live query follows its ancestors' pending changes.
    @Test(.timeLimit(.minutes(15))) func nestedChildLiveQueryFollowsAnAncestorsPendingChanges() async throws {
        try await withLibraryStore { store in
            let parent = store.mainContext.newChild(label: "parent")
            let child = parent.newChild(label: "child")
            let live = Collector(child.observe(FetchRequest<Genre>(sortedBy: [Genre.name.ascending])).map { $0.objects.map(\.name) })
            defer { live.cancel() }
            #expect(try await live.wait(for: 1) == [[]])
            try parent.insert(Genre(name: "from the parent"))
            #expect(try await live.wait(for: 2) == [[], ["from the parent"]])
            parent.discard()
            #expect(try await live.wait(for: 3) == [[], ["from the parent"], []])
        }
    }
}
