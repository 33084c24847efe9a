import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A child's commit when the store changed the same object after the child read it: a precise
/// conflict by default, or the child's merge policy (`storeWins`, `contextWins`, `propertyMerge`,
/// `custom`), also through a nested child and for a whole-object update.
@Suite struct ChildCommitConflictTests {
    func conflictSetup(_ store: Store) async throws -> (Track, ChildContext) {
        let t = Track(mbid: UUID(), title: "base", durationSeconds: 100, rating: 1, addedAt: Date(timeIntervalSince1970: 0))
        _ = try await store.save { $0.insert(t) }
        return (t, store.mainContext.newChild(label: "editor"))
    }

    @Test func conflictFailsByDefaultNamingObjectAndAttributes() async throws {
        try await withLibraryStore { store in
            let (t, child) = try await conflictSetup(store)
            try child.set(Track.title, of: t.id, to: "mine")
            _ = try await store.save { $0.set(Track.rating, of: t.id, to: 5.0) }
            do {
                try await child.commit()
                Issue.record("conflicting commit succeeded")
            } catch StrataError.conflict(let list) {
                #expect(list.count == 1)
                #expect(list[0].objectID == t.id && list[0].kind == .changed)
                #expect(list[0].changedByStore == ["rating"] && list[0].changedByContext == ["title"])
            }
            #expect(try store.mainContext.object(Track.self, id: t.id)?.title == "base")
        }
    }

    @Test func storeWinsContextWinsAndPropertyMerge() async throws {
        for policy in ["store", "context", "merge-context", "merge-store"] {
            try await withLibraryStore { store in
                let t = Track(mbid: UUID(), title: "base", durationSeconds: 100, rating: 1, addedAt: Date(timeIntervalSince1970: 0))
                _ = try await store.save { $0.insert(t) }
                let mergePolicy: MergePolicy = switch policy {
                case "store": .storeWins
                case "context": .contextWins
                case "merge-context": .propertyMerge(preferring: .context)
                default: .propertyMerge(preferring: .store)
                }
                let child = store.mainContext.newChild(label: "editor", mergePolicy: mergePolicy)
                try child.set(Track.title, of: t.id, to: "mine")
                try child.set(Track.durationSeconds, of: t.id, to: 200)
                _ = try await store.save { c in
                    c.set(Track.rating, of: t.id, to: 5.0)
                    c.set(Track.durationSeconds, of: t.id, to: 300)
                }
                try await child.commit()
                let r = try #require(try store.mainContext.object(Track.self, id: t.id))
                switch policy {
                case "store": #expect((r.title, r.durationSeconds, r.rating) == ("base", 300, 5))
                case "context": #expect((r.title, r.durationSeconds, r.rating) == ("mine", 200, 5))
                case "merge-context": #expect((r.title, r.durationSeconds, r.rating) == ("mine", 200, 5))
                default: #expect((r.title, r.durationSeconds, r.rating) == ("mine", 300, 5))
                }
            }
        }
    }

    @Test func customResolverAndDeletedUnderneath() async throws {
        try await withLibraryStore { store in
            let t = Track(mbid: UUID(), title: "base", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(t) }
            let child = store.mainContext.newChild(label: "editor", mergePolicy: .custom { conflict in
                var v = conflict.storeValues
                v[1] = .string("resolved: " + (conflict.contextValues[1] == .string("mine") ? "mine" : "?"))
                return .values(v)
            })
            try child.set(Track.title, of: t.id, to: "mine")
            _ = try await store.save { $0.set(Track.durationSeconds, of: t.id, to: 7) }
            try await child.commit()
            let r = try #require(try store.mainContext.object(Track.self, id: t.id))
            #expect(r.title == "resolved: mine" && r.durationSeconds == 7)

            // Deleted underneath: a precise conflict by default.
            let other = store.mainContext.newChild(label: "late")
            try other.set(Track.title, of: t.id, to: "late edit")
            _ = try await store.save { $0.delete(t.id) }
            do {
                try await other.commit()
                Issue.record("edit of a deleted object committed")
            } catch StrataError.conflict(let list) {
                #expect(list.first?.kind == .deleted && list.first?.objectID == t.id)
            }
        }
    }

    @Test func nestedChildKeepsTheVersionItReadForConflicts() async throws {
        try await withLibraryStore { store in
            let t = makeTrack(title: "base", duration: 1)
            _ = try await store.save { $0.insert(t) }
            let parent = store.mainContext.newChild(label: "parent")
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
            let child = store.mainContext.newChild(label: "c", mergePolicy: .propertyMerge(preferring: .context))
            t.title = "mine"
            try child.update(t)   // every attribute, only the title differs from the base
            _ = try await store.save { $0.set(Track.durationSeconds, of: t.id, to: 42) }
            try await child.commit()
            let r = try #require(try store.mainContext.object(Track.self, id: t.id))
            #expect(r.title == "mine" && r.durationSeconds == 42)
        }
    }
}
