import Foundation
import LibraryModel
import Synchronization
import Testing
@testable import Strata

/// Merge policies on the cases the README's table lists besides "both sides changed
/// attributes": an object the store deleted under a child's update or delete, a child's delete of
/// an object the store changed, `.custom`'s `.keepContext` and `.keepStore`, and relationship
/// edits, which are not versioned and merge as set operations.
@Suite struct MergePolicyTests {
    /// Conflicts a custom resolver was shown.
    final class Seen: Sendable {
        let conflicts = Mutex<[MergeConflict]>([])
        func add(_ c: MergeConflict) { conflicts.withLock { $0.append(c) } }
        var all: [MergeConflict] { conflicts.withLock { $0 } }
    }

    struct Fixture {
        let track: Track
        let album: Album
        let playlist: Playlist
    }

    /// A track with a title, duration and rating, on an album and in a playlist.
    func setUp(_ store: Store) async throws -> Fixture {
        let f = Fixture(track: Track(mbid: UUID(), title: "base", durationSeconds: 100, rating: 1, addedAt: Date(timeIntervalSince1970: 0)),
                        album: Album(mbid: UUID(), title: "A"), playlist: Playlist(name: "P", createdAt: Date(timeIntervalSince1970: 0)))
        _ = try await store.save { c in
            c.insert(f.track); c.insert(f.album); c.insert(f.playlist)
            c.set(Track.album, of: f.track.id, to: f.album.id)
            c.add(f.track.id, to: Playlist.tracks, of: f.playlist.id)
        }
        return f
    }

    func policy(_ name: String, _ seen: Seen, values: @escaping @Sendable (MergeConflict) -> [Value] = { $0.baseValues }) -> MergePolicy {
        switch name {
        case "fail": .fail
        case "storeWins": .storeWins
        case "contextWins": .contextWins
        case "mergeContext": .propertyMerge(preferring: .context)
        case "mergeStore": .propertyMerge(preferring: .store)
        case "keepContext": .custom { seen.add($0); return .keepContext }
        case "keepStore": .custom { seen.add($0); return .keepStore }
        case "values": .custom { seen.add($0); return .values(values($0)) }
        default: unknownPolicy(name)
        }
    }

    private func unknownPolicy(_ name: String) -> MergePolicy {
        Issue.record("no merge policy named \(name) in this test")
        return .fail
    }

    // MARK: The store deleted the object

    @Test(arguments: ["storeWins", "mergeContext", "mergeStore", "keepStore", "contextWins", "keepContext", "values"])
    func updateOfAnObjectTheStoreDeleted(policyName: String) async throws {
        try await withLibraryStore { store in
            let f = try await setUp(store)
            let seen = Seen()
            let child = store.mainContext.newChild(label: "editor", mergePolicy: policy(policyName, seen) { conflict in
                var v = conflict.contextValues
                v[Track.durationSeconds.index] = .int(7)
                return v
            })
            try child.set(Track.title, of: f.track.id, to: "mine")
            let deleted = try await store.save { $0.delete(f.track.id) }
            let tx = try await child.commit()
            let view = store.mainContext
            let back = try view.object(Track.self, id: f.track.id)
            switch policyName {
            case "storeWins", "mergeContext", "mergeStore", "keepStore":
                // Dropped: the object stays deleted and nothing is written.
                #expect(back == nil, "\(policyName)")
                #expect(tx == deleted, "\(policyName)")
            default:
                // Inserted again: base values plus the child's change (or exactly the resolver's
                // values); its relationships stay as the delete left them.
                let r = try #require(back, "\(policyName)")
                #expect(r.title == "mine" && r.rating == 1, "\(policyName)")
                #expect(r.durationSeconds == (policyName == "values" ? 7 : 100), "\(policyName)")
                #expect(tx == deleted.next, "\(policyName)")
                #expect(try view.related(f.track.id, Track.album) == nil)
                #expect(try view.related(f.track.id, Track.playlists).isEmpty)
                #expect(try view.related(f.album.id, Album.tracks).isEmpty)
            }
            if ["keepContext", "keepStore", "values"].contains(policyName) {
                let c = try #require(seen.all.first)
                #expect(seen.all.count == 1)
                #expect(c.kind == .deleted && c.objectID == f.track.id && c.entity == "Track")
                #expect(c.baseVersion == TransactionID(1) && c.storeVersion == nil && c.storeValues.isEmpty)
                #expect(c.baseValues == f.track.storedValues)
                #expect(c.changedByStore.isEmpty && c.changedByContext == ["title"])
                #expect(c.contextValues[Track.title.index] == .string("mine"))
            }
        }
    }

    @Test(arguments: ["fail", "storeWins", "contextWins"])
    func deleteOfAnObjectTheStoreDeleted(policyName: String) async throws {
        try await withLibraryStore { store in
            let f = try await setUp(store)
            let child = store.mainContext.newChild(label: "editor", mergePolicy: policy(policyName, Seen()))
            try child.delete(f.track.id)
            let deleted = try await store.save { $0.delete(f.track.id) }
            if policyName == "fail" {
                // A conflict too under .fail.
                do {
                    try await child.commit()
                    Issue.record("commit accepted")
                } catch StrataError.conflict(let list) {
                    #expect(list.map(\.kind) == [.deleted] && list.map(\.objectID) == [f.track.id])
                }
                #expect(child.hasChanges)
            } else {
                // Already done: the commit succeeds and writes nothing.
                #expect(try await child.commit() == deleted)
                #expect(!child.hasChanges)
            }
            #expect(try store.lastTransactionID == deleted)
            #expect(try store.mainContext.object(Track.self, id: f.track.id) == nil)
        }
    }

    /// A change set that deletes an object and then edits it (with a base), after the store
    /// deleted it: under `.contextWins` the object stays deleted and the later edits are dropped
    /// with it: the delete's decision not to reinsert holds for the later edits, which never
    /// insert the object again.
    @Test func editsAfterTheSetsOwnDeleteNeverReinsert() async throws {
        try await withLibraryStore { store in
            let f = try await setUp(store)
            let p2 = Playlist(name: "P2", createdAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(p2) }
            let base = try #require(try store.mainContext.record(f.track.id))
            let deleted = try await store.save { $0.delete(f.track.id) }
            var c = ChangeSet()
            c.delete(f.track.id)
            c.add(f.track.id, to: Playlist.tracks, of: p2.id)
            c.set(Track.title, of: f.track.id, to: "again")
            c.baseVersions = [f.track.id: BaseVersion(version: base.version, values: base.values)]
            c.mergePolicy = .contextWins
            #expect(try await store.save(c) == deleted)
            #expect(try store.mainContext.object(Track.self, id: f.track.id) == nil)
            #expect(try store.mainContext.related(p2.id, Playlist.tracks).isEmpty)
        }
    }

    /// A conflict is judged on the object's whole change in the set, whichever of its operations
    /// comes first: a relationship edit before the update shows the resolver the update (it was
    /// shown no change, and `.values(contextValues)` then wrote the base values over both sides),
    /// and one before a delete shows the delete. The same set in either order saves the same.
    @Test(arguments: [false, true])
    func aConflictIsJudgedOnTheObjectsWholeChangeWhicheverOperationComesFirst(linkFirst: Bool) async throws {
        try await withLibraryStore { store async throws in
            let f = try await setUp(store)
            let genre = Genre(name: "G")
            _ = try await store.save { $0.insert(genre) }
            let read = try #require(try store.mainContext.record(f.track.id))
            _ = try await store.save { $0.set(Track.durationSeconds, of: f.track.id, to: 999) }   // another writer
            let seen = Seen()
            var c = ChangeSet()
            if linkFirst { c.set(Track.genre, of: f.track.id, to: genre.id) }
            c.set(Track.title, of: f.track.id, to: "new")
            if !linkFirst { c.set(Track.genre, of: f.track.id, to: genre.id) }
            c.baseVersions[f.track.id] = BaseVersion(version: read.version, values: read.values)
            c.mergePolicy = policy("values", seen) { $0.contextValues }
            _ = try await store.save(c)
            let conflict = try #require(seen.all.first)
            #expect(seen.all.count == 1)
            #expect(conflict.changedByContext == ["title"] && conflict.changedByStore == ["durationSeconds"])
            #expect(!conflict.contextDeletes)
            let track = try #require(try store.mainContext.object(Track.self, id: f.track.id))
            #expect(track.title == "new" && track.durationSeconds == 100)
            #expect(try store.mainContext.related(f.track.id, Track.genre)?.id == genre.id)

            // A delete after a relationship edit: the resolver is told the context deletes it.
            let again = try #require(try store.mainContext.record(f.track.id))
            _ = try await store.save { $0.set(Track.durationSeconds, of: f.track.id, to: 5) }
            var d = ChangeSet()
            d.remove(f.track.id, from: Playlist.tracks, of: f.playlist.id)
            d.delete(f.track.id)
            d.baseVersions[f.track.id] = BaseVersion(version: again.version, values: again.values)
            let seenDelete = Seen()
            d.mergePolicy = policy("keepStore", seenDelete)
            _ = try await store.save(d)
            #expect(seenDelete.all.map(\.contextDeletes) == [true])
            #expect(try store.mainContext.object(Track.self, id: f.track.id) != nil, "the store's side kept")
        }
    }

    /// Under `.fail`, an operation refused because a conflicting object's change was skipped
    /// (a new playlist taking the name the skipped rename would have freed) does not hide the
    /// conflict: the save throws `conflict`, and nothing of it is written.
    @Test func underFailARefusalThatFollowsASkippedConflictingChangeReportsTheConflict() async throws {
        try await withLibraryStore { store async throws in
            let road = Playlist(name: "Road", createdAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(road) }
            let read = try #require(try store.mainContext.record(road.id))
            _ = try await store.save { $0.set(Playlist.notes, of: road.id, to: "another writer's") }
            var c = ChangeSet()
            c.set(Playlist.name, of: road.id, to: "Road 1")
            c.insert(Playlist(name: "Road", createdAt: Date(timeIntervalSince1970: 0)))
            c.baseVersions[road.id] = BaseVersion(version: read.version, values: read.values)
            c.mergePolicy = .fail
            do {
                _ = try await store.save(c)
                Issue.record("the save was accepted")
            } catch StrataError.conflict(let list) {
                #expect(list.map(\.objectID) == [road.id] && list.map(\.changedByContext) == [["name"]])
            }
            #expect(try store.mainContext.fetch(Playlist.self).map(\.name) == ["Road"])
        }
    }

    // MARK: The child deletes an object the store changed

    /// A custom resolver's `.values(v)` keeps the object with `v` and drops the delete (they were
    /// thrown away and the object deleted); the conflict says the context deletes it.
    @Test(arguments: ["fail", "storeWins", "keepStore", "contextWins", "keepContext", "values"])
    func deleteOfAnObjectTheStoreChanged(policyName: String) async throws {
        try await withLibraryStore { store in
            let f = try await setUp(store)
            let seen = Seen()
            let child = store.mainContext.newChild(label: "editor", mergePolicy: policy(policyName, seen) { conflict in
                var v = conflict.storeValues
                v[Track.title.index] = .string("kept by the resolver")
                return v
            })
            try child.delete(f.track.id)
            let changed = try await store.save { $0.set(Track.rating, of: f.track.id, to: 5.0) }
            let view = store.mainContext
            switch policyName {
            case "fail":
                do {
                    try await child.commit()
                    Issue.record("commit accepted")
                } catch StrataError.conflict(let list) {
                    #expect(list.count == 1)
                    #expect(list.first?.kind == .changed && list.first?.objectID == f.track.id)
                    #expect(list.first?.storeVersion == changed && list.first?.changedByStore == ["rating"])
                }
                #expect(try view.object(Track.self, id: f.track.id)?.rating == 5)
            case "storeWins", "keepStore":
                // The delete is dropped whole: the object, its values and its links stay.
                #expect(try await child.commit() == changed)
                #expect(try view.object(Track.self, id: f.track.id)?.rating == 5)
                #expect(try view.related(f.playlist.id, Playlist.tracks).map(\.id) == [f.track.id])
                #expect(try view.related(f.track.id, Track.album)?.id == f.album.id)
            case "values":
                #expect(try await child.commit() == changed.next)
                let kept = try #require(try view.object(Track.self, id: f.track.id))
                #expect(kept.title == "kept by the resolver" && kept.rating == 5)
                #expect(try view.related(f.playlist.id, Playlist.tracks).map(\.id) == [f.track.id])
            default:
                #expect(try await child.commit() == changed.next)
                #expect(try view.object(Track.self, id: f.track.id) == nil)
                #expect(try view.related(f.playlist.id, Playlist.tracks).isEmpty)
                #expect(try view.related(f.album.id, Album.tracks).isEmpty)
            }
            if ["keepStore", "keepContext", "values"].contains(policyName) {
                #expect(seen.all.map(\.kind) == [.changed])
                #expect(seen.all.first?.changedByStore == ["rating"] && seen.all.first?.changedByContext == [])
                #expect(seen.all.first?.contextDeletes == true)
                #expect(seen.all.first?.description.hasSuffix("this context deletes it") == true)
            }
        }
    }

    // MARK: Relationship edits

    /// Linking and unlinking do not version an object: a child that only edits relationships of an
    /// object the store changed commits under `.fail` without a conflict, and a to-one it sets
    /// replaces whatever target the store has now.
    @Test func relationshipEditsAreNotCheckedForConflicts() async throws {
        try await withLibraryStore { store in
            let f = try await setUp(store)
            let a2 = Album(mbid: UUID(), title: "A2"), a3 = Album(mbid: UUID(), title: "A3")
            let p2 = Playlist(name: "P2", createdAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(a2); $0.insert(a3); $0.insert(p2) }
            let child = store.mainContext.newChild(label: "editor")   // .fail
            try child.set(Track.album, of: f.track.id, to: a2.id)
            try child.add(f.track.id, to: Playlist.tracks, of: p2.id)
            try child.remove(f.track.id, from: Playlist.tracks, of: f.playlist.id)
            _ = try await store.save { c in
                c.set(Track.title, of: f.track.id, to: "store")
                c.set(Track.album, of: f.track.id, to: a3.id)
            }
            let tx = try await child.commit()
            #expect(tx != nil)
            let view = store.mainContext
            #expect(try view.object(Track.self, id: f.track.id)?.title == "store")
            #expect(try view.related(f.track.id, Track.album)?.id == a2.id)
            #expect(try view.related(a3.id, Album.tracks).isEmpty)
            #expect(try view.related(f.track.id, Track.playlists).map(\.id) == [p2.id])
        }
    }

    /// Adding an edge the store added meanwhile, or removing one it removed, changes nothing.
    @Test func relationshipEditsTheStoreAlreadyMadeWriteNothing() async throws {
        try await withLibraryStore { store in
            let f = try await setUp(store)
            let p2 = Playlist(name: "P2", createdAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(p2) }
            let adder = store.mainContext.newChild(label: "adder")
            try adder.add(f.track.id, to: Playlist.tracks, of: p2.id)
            let remover = store.mainContext.newChild(label: "remover")
            try remover.remove(f.track.id, from: Playlist.tracks, of: f.playlist.id)
            let head = try await store.save { c in
                c.add(f.track.id, to: Playlist.tracks, of: p2.id)
                c.remove(f.track.id, from: Playlist.tracks, of: f.playlist.id)
            }
            #expect(try await adder.commit() == head)
            #expect(try await remover.commit() == head)
            #expect(try store.lastTransactionID == head)
            #expect(try store.mainContext.related(f.track.id, Track.playlists).map(\.id) == [p2.id])
        }
    }

    /// A child that changed an object and also linked it, when the store deleted the object
    /// meanwhile: the link follows the object's merge decision. Under `.fail` the commit throws
    /// `conflict([.deleted])`, under `.storeWins` the child's changes to the object (the link
    /// included) are dropped, under `.contextWins` the object is inserted again with the child's
    /// values and linked. (The link must not meet the deleted object as a missing one and throw
    /// `validation(objectNotFound)` whatever the policy: the child would keep its changes, and
    /// every retry would fail the same way.)
    @Test(arguments: ["fail", "storeWins", "contextWins"])
    func aLinkedObjectDeletedInTheStoreFollowsThePolicy(policyName: String) async throws {
        try await withLibraryStore { store in
            let f = try await setUp(store)
            let p2 = Playlist(name: "P2", createdAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(p2) }
            let child = store.mainContext.newChild(label: "editor", mergePolicy: policy(policyName, Seen()))
            try child.set(Track.title, of: f.track.id, to: "mine")
            try child.add(f.track.id, to: Playlist.tracks, of: p2.id)
            let deleted = try await store.save { $0.delete(f.track.id) }
            do {
                let tx = try await child.commit()
                #expect(policyName != "fail", "a .fail commit was accepted")
                if policyName == "storeWins" {
                    #expect(tx == deleted)
                    #expect(try store.mainContext.related(p2.id, Playlist.tracks).isEmpty)
                    #expect(try store.mainContext.object(Track.self, id: f.track.id) == nil)
                } else {
                    #expect(tx == deleted.next)
                    #expect(try store.mainContext.related(p2.id, Playlist.tracks).map(\.id) == [f.track.id])
                    #expect(try store.mainContext.object(Track.self, id: f.track.id)?.title == "mine")
                }
            } catch StrataError.conflict(let list) {
                #expect(policyName == "fail")
                #expect(list.map(\.kind) == [.deleted] && list.map(\.objectID) == [f.track.id])
            } catch {
                Issue.record("\(policyName): \(error)")
            }
        }
    }

    /// An object the store deleted under a child's update, restored by `.contextWins`, comes back
    /// with the values the child showed: an optional attribute it had cleared stays null. It came
    /// back holding the attribute's default, as a new insert would.
    @Test func aRestoredObjectKeepsANullItsDefaultWouldHaveFilled() async throws {
        let json = #"""
        {"model": "notes", "version": 1, "entities": [{"name": "Item", "attributes": [
          {"name": "name", "type": "string"},
          {"name": "note", "type": "string", "optional": true, "default": "n/a"}]}]}
        """#
        let schema = try Schema.parse(Array(json.utf8), source: "v1.json")
        let dir = temporaryDirectory("restore-null")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        let item = try #require(schema.entity(named: "Item"))
        var r = Record(entity: item)
        r["name"] = .string("a")
        r["note"] = .string("x")
        _ = try await store.save { $0.insert(r) }
        _ = try await store.save { $0.update(r.id, [ChangeSet.AttributeValue(attribute: 1, value: .null)]) }
        #expect(try store.mainContext.record(r.id)?["note"] == .null)
        let child = store.mainContext.newChild(label: "editor", mergePolicy: .contextWins)
        try child.change { $0.update(r.id, [ChangeSet.AttributeValue(attribute: 0, value: .string("b"))]) }
        _ = try await store.save { $0.delete(r.id) }
        #expect(try await child.commit() != nil)
        let restored = try #require(try store.mainContext.record(r.id))
        #expect(restored["name"] == .string("b") && restored["note"] == .null, "\(restored.values)")
        // The log says the same: a replay of it builds the state the store holds.
        let report = try store.verify(rebuild: true)
        #expect(report.ok, "\(report.problems)")
    }

    /// A `ChangeSet` given to `store.save` carries the bases its writer read
    /// (`BaseVersion(version:values:)`, public: nothing outside the module could make one), and
    /// the save judges them with its merge policy as a child's commit is judged; a base whose
    /// values do not match the entity's attributes is refused as a validation failure (it was
    /// indexed past its end).
    @Test func aSavesOwnBasesAreJudgedAndAShortBaseIsRefused() async throws {
        try await withLibraryStore { store in
            let f = try await setUp(store)
            let read = try #require(try store.mainContext.record(f.track.id))
            let title = try #require(read.entity.attributes.firstIndex { $0.name == "title" })
            _ = try await store.save { $0.set(Track.title, of: f.track.id, to: "theirs") }
            func edit(_ policy: MergePolicy, base: BaseVersion) -> ChangeSet {
                var c = ChangeSet()
                c.update(f.track.id, [ChangeSet.AttributeValue(attribute: title, value: .string("mine"))])
                c.baseVersions[f.track.id] = base
                c.mergePolicy = policy
                return c
            }
            let base = BaseVersion(version: read.version, values: read.values)
            await #expect(throws: StrataError.self) { try await store.save(edit(.fail, base: base)) }
            _ = try await store.save(edit(.storeWins, base: base))
            #expect(try store.mainContext.object(Track.self, id: f.track.id)?.title == "theirs")
            _ = try await store.save(edit(.contextWins, base: base))
            #expect(try store.mainContext.object(Track.self, id: f.track.id)?.title == "mine")
            let short = BaseVersion(version: read.version, values: Array(read.values.dropLast()))
            do {
                _ = try await store.save(edit(.fail, base: short))
                Issue.record("a base of too few values was accepted")
            } catch StrataError.validation(let failure) {
                #expect(failure.kind == .wrongType)
            }
        }
    }
}
