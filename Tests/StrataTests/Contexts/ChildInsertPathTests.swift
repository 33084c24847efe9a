import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A typed `insert` into a child context takes a path of its own (no `SaveResolver`; a new id
/// whose keys nobody holds changes the layer in place, without an undo list; anything else goes
/// through the applier). These tests hold it to the writer's rules: every object a save refuses,
/// the child refuses with the same kind of error, leaving nothing behind; a change set refused
/// after many single inserts takes back its own changes only; and every way off the in-place
/// path (a key taken in the child or below, a key the child freed, an id the child deleted or
/// the store holds) ends as the applier decides.
@Suite struct ChildInsertPathTests {
    private func kind(of error: Error) -> ValidationFailure.Kind? {
        if case .validation(let f) = error as? StrataError { return f.kind }
        return nil
    }

    private func track(id: ObjectID = ObjectID.make(entityTag: 3), title: String = "t", rating: Double? = nil) -> Track {
        Track(id: id, mbid: UUID(), title: title, durationSeconds: 200, rating: rating, addedAt: Date(timeIntervalSince1970: 1_700_000_000))
    }

    private func failure(of error: Error?) -> ValidationFailure? {
        if case .validation(let f) = error as? StrataError { return f }
        return nil
    }

    /// An optional attribute with a default that a child clears after inserting the object
    /// commits as the child shows it (null), as one save of the same insert and change stores
    /// it: the commit does not give a child's inserted object its defaults a second time.
    @Test func anAttributeClearedAfterTheInsertCommitsAsTheChildShowsIt() async throws {
        let text = #"""
        {"model": "shop", "version": 1, "entities": [{"name": "Invoice", "attributes": [
          {"name": "number", "type": "int"}, {"name": "fee", "type": "int", "optional": true, "default": 5}],
         "uniques": [["number"]]}]}
        """#
        let schema = try Schema.parse(Array(text.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let e = try #require(schema.entity(named: "Invoice"))
        func invoice(_ n: Int64) -> Record {
            var r = Record(entity: e)
            r["number"] = .int(n)
            return r
        }
        let cleared = [ChangeSet.AttributeValue(attribute: 1, value: .null)]
        let direct = invoice(1)
        _ = try await store.save { c in
            c.insert(direct)
            c.update(direct.id, cleared)
        }
        #expect(try store.mainContext.record(direct.id)?["fee"] == .null)

        let child = store.mainContext.newChild(label: "clear")
        let viaChild = invoice(2)
        try child.insert(viaChild)
        #expect(try child.record(viaChild.id)?["fee"] == .int(5))
        try child.change { $0.update(viaChild.id, cleared) }
        #expect(try child.record(viaChild.id)?["fee"] == .null)
        try await child.commit()
        #expect(try store.mainContext.record(viaChild.id)?["fee"] == .null)
        #expect(try store.verify().ok)
    }

    /// Each refused object with the failure a save reports for it, written out (kind, field and
    /// reason as the writer words them): both paths share `ValueRules`, so comparing them with
    /// each other alone would prove nothing about the wording.
    @Test func aChildRefusesWhatASaveRefusesWithTheSameFailure() async throws {
        var configuration = StoreConfiguration()
        configuration.maxValueBytes = 64
        try await withLibraryStore(configuration) { store in
            let refused: [(Track, ValidationFailure.Kind, String?, String)] = [
                (track(rating: .nan), .wrongType, "rating", "doubles must be finite"),
                (track(rating: .infinity), .wrongType, "rating", "doubles must be finite"),
                (track(title: String(repeating: "x", count: 65)), .valueTooLarge, "title", "65 bytes exceed maxValueBytes (64)"),
                // A Genre's id on a Track, and an id of no entity: a typed insert is refused for its
                // id before its values are looked at (it inserted an object of the id's entity).
                (track(id: ObjectID.make(entityTag: 4)), .objectNotFound, nil, "the id is of another entity than Track"),
                (track(id: ObjectID.make(entityTag: 99)), .objectNotFound, nil, "the id is of another entity than Track"),
            ]
            let child = store.mainContext.newChild(label: "refusals")
            try child.insert(track(title: "kept"))
            for (object, kind, field, reason) in refused {
                let saved = await #expect(throws: StrataError.self) { _ = try await store.save { $0.insert(object) } }
                let inserted = #expect(throws: StrataError.self) { try child.insert(object) }
                let fromSave = try #require(failure(of: saved), "\(reason)")
                #expect(failure(of: inserted) == fromSave, "\(reason)")
                #expect(fromSave.kind == kind && fromSave.field == field && fromSave.reason == reason, "\(fromSave)")
                #expect(fromSave.objectID == object.id)
                #expect(try child.record(object.id) == nil, "\(reason)")
            }
            #expect(child.pendingOperationCount == 1)
            #expect(try child.count(Track.self) == 1)
            #expect(try await child.commit() != nil)
            #expect(try store.mainContext.fetch(Track.self).map(\.title) == ["kept"])
        }
    }

    /// A closed store is reported as closed, before the object's own faults (as when the
    /// resolver checked the object inside the read).
    @Test func aClosedStoreIsReportedBeforeAnInvalidObject() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        let child = store.mainContext.newChild(label: "closed")
        store.close()
        let error = #expect(throws: StrataError.self) { try child.insert(track(rating: .nan)) }
        guard case .closed = error else {
            Issue.record("expected .closed, got \(String(describing: error))")
            return
        }
    }

    @Test func aChangeSetRefusedAfterSingleInsertsTakesBackItsOwnChangesOnly() async throws {
        try await withLibraryStore { store in
            let child = store.mainContext.newChild(label: "mixed")
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
            #expect(try child.fetch(Genre.self).map(\.name).sorted() == ["a", "b", "c"])
            try child.insert(Genre(name: "d"))
            #expect(try child.count(Genre.self) == 4)
            _ = try await child.commit()
            #expect(try store.mainContext.fetch(Genre.self).map(\.name).sorted() == ["a", "b", "c", "d"])
        }
    }
    /// An object with three unique keys (code, email, phone), typed, for the in-place path.
    private struct Account: Entity {
        static let entityName = "Account"
        static let entityTag: UInt16 = 1
        static let attributeDeclarations = [AttributeDeclaration(name: "code", type: .string, isOptional: false),
                                            AttributeDeclaration(name: "email", type: .string, isOptional: true),
                                            AttributeDeclaration(name: "phone", type: .string, isOptional: true)]
        static let relationshipDeclarations: [RelationshipDeclaration] = []
        var id: ObjectID
        var code: String
        var email: String?
        var phone: String?
        init(id: ObjectID = ObjectID.make(entityTag: 1), code: String, email: String?, phone: String? = nil) {
            self.id = id
            self.code = code
            self.email = email
            self.phone = phone
        }
        var storedValues: [Value] { [.string(code), email.map(Value.string) ?? .null, phone.map(Value.string) ?? .null] }
        init(id: ObjectID, storedValues: [Value]) throws {
            func text(_ v: Value) -> String? { if case .string(let s) = v { s } else { nil } }
            guard let code = text(storedValues[0]) else { throw StrataError.closed(path: "") }
            self.init(id: id, code: code, email: text(storedValues[1]), phone: text(storedValues[2]))
        }
    }

    private func withAccounts(_ body: (Store) async throws -> Void) async throws {
        let text = #"""
        {"model": "bank", "version": 1, "entities": [{"name": "Account", "attributes": [
          {"name": "code", "type": "string"}, {"name": "email", "type": "string", "optional": true},
          {"name": "phone", "type": "string", "optional": true}],
         "uniques": [["code"], ["email"], ["phone"]]}]}
        """#
        let store = try Store.temporary(schema: try Schema.parse(Array(text.utf8), source: "v1.json", expectedVersion: 1))
        defer { store.close() }
        try await body(store)
    }

    private func isUniqueClash(_ error: Error?) -> Bool { failure(of: error)?.kind == .uniqueConstraint }

    /// The second key of an object clashes in the child after its first was free: the object is
    /// refused with the clash and its first key is not left taken.
    @Test func aSecondKeyTakenInTheChildLeavesTheFirstFree() async throws {
        try await withAccounts { store in
            let child = store.mainContext.newChild(label: "keys")
            try child.insert(Account(code: "a", email: "x@example.org"))
            let refused = Account(code: "b", email: "x@example.org")
            let error = #expect(throws: StrataError.self) { try child.insert(refused) }
            #expect(isUniqueClash(error), "\(String(describing: error))")
            #expect(try child.record(refused.id) == nil)
            #expect(child.pendingOperationCount == 1)
            try child.insert(Account(code: "b", email: "y@example.org"))   // "b" is free
            #expect(try child.count(Account.self) == 2)
            try await child.commit()
            #expect(try store.mainContext.fetch(Account.self).map(\.code).sorted() == ["a", "b"])
            #expect(try store.verify().ok)
        }
    }

    /// A key held by a stored object is refused; one the child took from a stored object (by
    /// changing it) is free for a new object; an object without a value for a key holds none.
    @Test func keysHeldBelowAreJudgedAsTheChildShowsThem() async throws {
        try await withAccounts { store in
            let kept = Account(code: "k", email: nil), moved = Account(code: "m", email: "m@example.org")
            _ = try await store.save { c in
                c.insert(kept)
                c.insert(moved)
            }
            let child = store.mainContext.newChild(label: "below")
            let error = #expect(throws: StrataError.self) { try child.insert(Account(code: "k", email: nil)) }
            #expect(isUniqueClash(error), "\(String(describing: error))")
            try child.change { $0.update(Account(id: moved.id, code: "m2", email: "m2@example.org")) }
            let taker = Account(code: "m", email: "m@example.org")
            try child.insert(taker)
            try child.insert(Account(code: "n", email: nil))   // a second object without an email
            #expect(try child.count(Account.self) == 4)
            try await child.commit()
            #expect(try store.mainContext.fetch(Account.self).map(\.code).sorted() == ["k", "m", "m2", "n"])
            #expect(try store.mainContext.record(taker.id)?["email"] == .string("m@example.org"))
            #expect(try store.verify().ok)
        }
    }

    /// An id the store holds is a duplicate; an id the child deleted may be inserted again, and
    /// the child and then the store show the new values.
    @Test func anIDTheStoreHoldsIsADuplicateAndOneDeletedInTheChildIsFree() async throws {
        try await withAccounts { store in
            let stored = Account(code: "s", email: nil)
            _ = try await store.save { $0.insert(stored) }
            let child = store.mainContext.newChild(label: "ids")
            let error = #expect(throws: StrataError.self) { try child.insert(Account(id: stored.id, code: "t", email: nil)) }
            #expect(failure(of: error)?.kind == .duplicateID, "\(String(describing: error))")
            #expect(!child.hasChanges)
            try child.change { $0.delete(stored.id) }
            try child.insert(Account(id: stored.id, code: "s2", email: "s@example.org"))
            #expect(try child.record(stored.id)?["code"] == .string("s2"))
            #expect(try child.count(Account.self) == 1)
            try await child.commit()
            #expect(try store.mainContext.record(stored.id)?["code"] == .string("s2"))
            #expect(try store.mainContext.count(Account.self) == 1)
            #expect(try store.verify().ok)
        }
    }

    /// The third key of an object clashes in the child after its first two were free: neither
    /// of them is left taken.
    @Test func aThirdKeyTakenInTheChildLeavesTheFirstTwoFree() async throws {
        try await withAccounts { store in
            let child = store.mainContext.newChild(label: "three keys")
            try child.insert(Account(code: "a", email: "a@example.org", phone: "1"))
            let error = #expect(throws: StrataError.self) {
                try child.insert(Account(code: "b", email: "b@example.org", phone: "1"))
            }
            #expect(isUniqueClash(error), "\(String(describing: error))")
            try child.insert(Account(code: "b", email: "b@example.org", phone: "2"))
            #expect(try child.count(Account.self) == 2)
            try await child.commit()
            #expect(try store.verify().ok)
        }
    }

    /// The same id inserted twice in one child is a duplicate, also when the second object's
    /// unique key is too long to store (the id is judged first, as the writer does), and the
    /// first object stays as it was.
    @Test func anIDInsertedTwiceInAChildIsADuplicateBeforeItsKeysAreJudged() async throws {
        try await withAccounts { store in
            let child = store.mainContext.newChild(label: "twice")
            let first = Account(code: "a", email: nil)
            try child.insert(first)
            for code in ["b", String(repeating: "z", count: 600)] {
                let error = #expect(throws: StrataError.self) { try child.insert(Account(id: first.id, code: code, email: nil)) }
                #expect(failure(of: error)?.kind == .duplicateID, "\(String(describing: error))")
            }
            #expect(try child.record(first.id)?["code"] == .string("a"))
            #expect(try child.count(Account.self) == 1)
            #expect(child.pendingOperationCount == 1)
        }
    }

    /// A parent that inserts an object with the id of one its child inserted changes its layer's
    /// revision, so the child counts the object once (its count delta was worked out over the
    /// parent's earlier layer).
    @Test func aChildCountsAnObjectItsParentInsertedLaterOnce() async throws {
        try await withAccounts { store in
            let parent = store.mainContext.newChild(label: "parent")
            let child = parent.newChild(label: "child")
            let shared = Account(code: "a", email: nil)
            try child.insert(shared)
            #expect(try child.count(Account.self) == 1)
            try parent.insert(Account(id: shared.id, code: "p", email: nil))
            #expect(try child.count(Account.self) == 1)
            #expect(try child.fetch(Account.self).count == 1)
            #expect(try child.record(shared.id)?["code"] == .string("a"))
        }
    }

    /// The in-place path itself: it inserts a new object (and gives the layer a new revision),
    /// and declines, changing nothing, an id or a key the layer holds already.
    @Test func theInPlacePathInsertsWhatIsClearAndDeclinesTheRest() async throws {
        try await withAccounts { store in
            let e = try #require(store.schema.entity(named: "Account"))
            let a = ObjectID.make(entityTag: 1), b = ObjectID.make(entityTag: 1)
            try store.read { view throws in
                let below = MergedSource(base: view, overlays: []).top
                var layer = Overlay()
                let before = layer.revision
                #expect(try layer.insertIfClear(e, a, [.string("a"), .null, .null], over: below))
                #expect(layer.revision != before)
                let inserted = layer.revision
                #expect(try !layer.insertIfClear(e, a, [.string("x"), .null, .null], over: below))
                #expect(try !layer.insertIfClear(e, b, [.string("a"), .null, .null], over: below))
                #expect(layer.revision == inserted)
                #expect(layer.records.count == 1 && layer.uniques.count == 1 && layer.order.count == 1)
                #expect(layer.countDelta[e.tag] == 1)
            }
        }
    }
}
