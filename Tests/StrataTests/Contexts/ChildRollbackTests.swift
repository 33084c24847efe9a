import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A change refused in a child context leaves the child exactly as it was. The overlay stores an
/// insert's record and takes its unique keys first, then puts them back when a check fails (one
/// hash lookup instead of two), so these tests look at everything a failed change could leave
/// behind: records, unique keys, counts and pending operations.
@Suite struct ChildRollbackTests {
    private func kind(of error: Error) -> ValidationFailure.Kind? {
        if case .validation(let f) = error as? StrataError { return f.kind }
        return nil
    }

    @Test func anInsertWithAnIDTakenInTheChildKeepsTheFirstObject() async throws {
        try await withLibraryStore { store in
            let child = store.mainContext.newChild(label: "dup")
            let first = Genre(name: "first")
            try child.insert(first)
            let clash = Genre(id: first.id, name: "second")
            let error = #expect(throws: StrataError.self) { try child.insert(clash) }
            #expect(error.flatMap(kind) == .duplicateID)
            #expect(try child.object(Genre.self, id: first.id) == first)
            #expect(try child.count(Genre.self) == 1)
            #expect(child.pendingOperationCount == 1)
            // The failed insert took no unique key: its name is free.
            try child.insert(Genre(name: "second"))
            _ = try await child.commit()
            #expect(try store.mainContext.fetch(Genre.self).map(\.name).sorted() == ["first", "second"])
        }
    }

    @Test func anInsertWithAnIDTakenInTheStoreLeavesNothing() async throws {
        try await withLibraryStore { store in
            let stored = Genre(name: "stored")
            _ = try await store.save { $0.insert(stored) }
            let child = store.mainContext.newChild(label: "dup-base")
            let error = #expect(throws: StrataError.self) { try child.insert(Genre(id: stored.id, name: "other")) }
            #expect(error.flatMap(kind) == .duplicateID)
            #expect(try child.object(Genre.self, id: stored.id) == stored)
            #expect(try child.fetch(Genre.self) == [stored])
            #expect(!child.hasChanges)
            try child.insert(Genre(name: "other"))
        }
    }

    @Test func aUniqueClashWithTheStoreLeavesNoRecordBehind() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let child = store.mainContext.newChild(label: "clash-base")
            let refused = Genre(name: "Jazz")
            let error = #expect(throws: StrataError.self) { try child.insert(refused) }
            #expect(error.flatMap(kind) == .uniqueConstraint)
            #expect(try child.object(Genre.self, id: refused.id) == nil)
            #expect(try child.fetch(Genre.self).map(\.name) == ["Jazz"])
            #expect(try child.count(Genre.self) == 1)
            // The id of the refused insert is free.
            try child.insert(Genre(id: refused.id, name: "Blues"))
            #expect(try child.object(Genre.self, id: refused.id)?.name == "Blues")
        }
    }

    @Test func aUniqueClashInsideTheChildKeepsTheOwner() async throws {
        try await withLibraryStore { store in
            let child = store.mainContext.newChild(label: "clash-child")
            let owner = Genre(name: "Rock")
            try child.insert(owner)
            #expect(throws: StrataError.self) { try child.insert(Genre(name: "Rock")) }
            // Still taken by the owner (a refused insert must not have freed it on the way out).
            #expect(throws: StrataError.self) { try child.insert(Genre(name: "Rock")) }
            #expect(try child.fetch(Genre.self) == [owner])
            try child.delete(owner.id)
            try child.insert(Genre(name: "Rock"))
            #expect(try child.count(Genre.self) == 1)
        }
    }

    @Test func anUpdateToATakenValueKeepsItsOwnKey() async throws {
        try await withLibraryStore { store in
            let child = store.mainContext.newChild(label: "update")
            let a = Genre(name: "A"), b = Genre(name: "B")
            try child.insert(a)
            try child.insert(b)
            #expect(throws: StrataError.self) { try child.set(Genre.name, of: b.id, to: "A") }
            #expect(try child.object(Genre.self, id: b.id)?.name == "B")
            // "B" is still b's, "C" was never taken.
            #expect(throws: StrataError.self) { try child.insert(Genre(name: "B")) }
            try child.set(Genre.name, of: b.id, to: "C")
            try child.insert(Genre(name: "B"))
            #expect(try child.count(Genre.self) == 3)
        }
    }

    @Test func aChangeSetFailingAtItsLastOperationIsUndoneWhole() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "taken")) }
            let child = store.mainContext.newChild(label: "set")
            let kept = Genre(name: "kept")
            try child.insert(kept)
            let gone = Genre(name: "x")
            #expect(throws: StrataError.self) {
                try child.change { c in
                    c.insert(gone)
                    c.insert(Genre(name: "y"))
                    c.delete(kept.id)
                    c.insert(Genre(name: "taken"))
                }
            }
            #expect(try child.fetch(Genre.self, sortedBy: [Genre.name.ascending]).map(\.name) == ["kept", "taken"])
            #expect(try child.count(Genre.self) == 2)
            #expect(try child.object(Genre.self, id: gone.id) == nil)
            #expect(child.pendingOperationCount == 1)
            // Every name the failed set took or freed is as before.
            #expect(throws: StrataError.self) { try child.insert(Genre(name: "kept")) }
            try child.change { c in
                c.insert(Genre(name: "x"))
                c.insert(Genre(name: "y"))
            }
            _ = try await child.commit()
            #expect(try store.mainContext.count(Genre.self) == 4)
        }
    }

    @Test func anIDDeletedInTheChildCanBeInsertedAgain() async throws {
        try await withLibraryStore { store in
            let g = Genre(name: "old")
            _ = try await store.save { $0.insert(g) }
            let child = store.mainContext.newChild(label: "reinsert")
            try child.delete(g.id)
            #expect(try child.count(Genre.self) == 0)
            try child.insert(Genre(id: g.id, name: "new"))
            #expect(try child.object(Genre.self, id: g.id)?.name == "new")
            #expect(try child.count(Genre.self) == 1)
            #expect(throws: StrataError.self) { try child.insert(Genre(id: g.id, name: "newer")) }
            #expect(try child.object(Genre.self, id: g.id)?.name == "new")
            #expect(try child.count(Genre.self) == 1)
        }
    }
}

/// An upsert that finds its key's owner aliases its id to that owner for the rest of the change
/// set. A child applies each of its change sets alone but commits them as one; an id that a later
/// insert gives to a new object must then name that object, at the root commit as in the child.
@Suite struct UpsertAliasTests {
    private func genreUpsert(_ id: ObjectID, _ name: String) -> ChangeSet.Operation {
        .upsert(id: id, values: [.string(name)], constraint: 0)
    }

    @Test func anIDInsertedAfterItsUpsertAliasNamesTheNewObjectAtTheRootCommit() async throws {
        try await withLibraryStore { store in
            let a = Genre(name: "x")
            _ = try await store.save { $0.insert(a) }
            let child = store.mainContext.newChild(label: "alias")
            let n = ObjectID.make(entityTag: Genre.entityTag)
            try child.change { $0.append(genreUpsert(n, "x")) }       // resolves to a
            try child.insert(Genre(id: n, name: "y"))                 // a new object with id n
            try child.delete(n)                                       // deletes the new one
            #expect(try child.fetch(Genre.self).map(\.name) == ["x"])
            _ = try await child.commit()
            #expect(try store.mainContext.fetch(Genre.self) == [a])
        }
    }

    @Test func withinOneChangeSetTheInsertedObjectWinsOverTheAlias() async throws {
        try await withLibraryStore { store in
            let a = Genre(name: "x")
            _ = try await store.save { $0.insert(a) }
            let n = ObjectID.make(entityTag: Genre.entityTag)
            _ = try await store.save { c in
                c.append(genreUpsert(n, "x"))
                c.insert(Genre(id: n, name: "y"))
                c.set(Genre.name, of: n, to: "z")
            }
            let names = try store.mainContext.fetch(Genre.self, sortedBy: [Genre.name.ascending]).map(\.name)
            #expect(names == ["x", "z"])
            #expect(try store.mainContext.object(Genre.self, id: n)?.name == "z")
        }
    }
}
