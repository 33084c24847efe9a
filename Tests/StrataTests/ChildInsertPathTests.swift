import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A typed `insert` into a child context takes a path of its own (no `SaveResolver`, a reused
/// undo list). These tests hold it to the writer's rules: every object a save refuses, the child
/// refuses with the same kind of error, leaving nothing behind; and a change set refused after
/// many single inserts takes back its own changes only.
@Suite struct ChildInsertPathTests {
    private func kind(of error: Error) -> ValidationFailure.Kind? {
        if case .validation(let f) = error as? StrataError { return f.kind }
        return nil
    }

    private func track(id: ObjectID = ObjectID.make(entityTag: 3), title: String = "t", rating: Double? = nil) -> Track {
        Track(id: id, mbid: UUID(), title: title, durationSeconds: 200, rating: rating, addedAt: Date(timeIntervalSince1970: 1_700_000_000))
    }

    @Test func aChildRefusesWhatASaveRefusesWithTheSameKind() async throws {
        var configuration = StoreConfiguration()
        configuration.maxValueBytes = 64
        try await withLibraryStore(configuration) { store in
            let refused: [(String, Track, ValidationFailure.Kind)] = [
                ("not finite", track(rating: .nan), .wrongType),
                ("too large", track(title: String(repeating: "x", count: 65)), .valueTooLarge),
                // A Genre's id on a Track: the entity has one attribute, the track gives twelve.
                ("another entity's id", track(id: ObjectID.make(entityTag: 4)), .unknownAttribute),
                ("unknown entity", track(id: ObjectID.make(entityTag: 99)), .unknownEntity),
            ]
            let child = try store.mainContext.newChild(label: "refusals")
            try child.insert(track(title: "kept"))
            for (what, object, expected) in refused {
                let saved = await #expect(throws: StrataError.self, "\(what): save") { _ = try await store.save { $0.insert(object) } }
                let inserted = #expect(throws: StrataError.self, "\(what): child") { try child.insert(object) }
                #expect(saved.flatMap(kind) == expected, "\(what): save")
                #expect(inserted.flatMap(kind) == expected, "\(what): child")
                #expect(try child.record(object.id) == nil, "\(what)")
            }
            #expect(child.pendingOperationCount == 1)
            #expect(try child.count(Track.self) == 1)
            #expect(try await child.commit() != nil)
            #expect(try store.mainContext.fetch(Track.self).map(\.title) == ["kept"])
        }
    }

    @Test func aChangeSetRefusedAfterSingleInsertsTakesBackItsOwnChangesOnly() async throws {
        try await withLibraryStore { store in
            let child = try store.mainContext.newChild(label: "mixed")
            for name in ["a", "b", "c"] { try child.insert(Genre(name: name)) }
            let extra = Genre(name: "d")
            #expect(throws: StrataError.self) {
                try child.change { c in
                    c.insert(extra)
                    c.insert(Genre(name: "a"))   // clashes with the first single insert
                }
            }
            #expect(try child.record(extra.id) == nil)
            #expect(try child.fetch(Genre.self).map(\.name).sorted() == ["a", "b", "c"])
            #expect(try child.count(Genre.self) == 3)
            #expect(child.pendingOperationCount == 3)
            // Single inserts after the refusal still roll back on a clash, and the name the refused
            // set had taken is free.
            #expect(throws: StrataError.self) { try child.insert(Genre(name: "b")) }
            try child.insert(Genre(name: "d"))
            #expect(try child.count(Genre.self) == 4)
            _ = try await child.commit()
            #expect(try store.mainContext.fetch(Genre.self).map(\.name).sorted() == ["a", "b", "c", "d"])
        }
    }
}
