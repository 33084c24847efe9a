import Foundation
import LibraryModel
import Testing
@testable import Strata

@Suite struct LiveQueryTests {
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

    @Test(.timeLimit(.minutes(1))) func mainContextQueryFollowsCommitsAndSkipsUnrelatedOnes() async throws {
        try await withLibraryStore { store in
            var iterator = try store.mainContext.observe(FetchRequest<Genre>(where: Genre.name.hasPrefix("J"), sortedBy: [Genre.name.ascending])).makeAsyncIterator()
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

    @Test(.timeLimit(.minutes(1))) func childQuerySeesPendingChanges() async throws {
        try await withLibraryStore { store in
            let child = try store.mainContext.newChild(label: "editor")
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
}
