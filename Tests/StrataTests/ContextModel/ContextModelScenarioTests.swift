import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Short fixed programs for the consequences the context semantics spell out. Each checks first
/// that the model reads what the semantics say (so the model is tested too), then runs the
/// program on the real store against the model like the random programs.
@Suite struct ContextModelScenarioTests {
    static let al0 = ModelPool.id(Album.entityTag, 0), al1 = ModelPool.id(Album.entityTag, 1)
    static let t0 = ModelPool.id(Track.entityTag, 0), t1 = ModelPool.id(Track.entityTag, 1)
    static let g0 = ModelPool.id(Genre.entityTag, 0), g1 = ModelPool.id(Genre.entityTag, 1)
    static let p0 = ModelPool.id(Playlist.entityTag, 0)

    static func album(_ id: ObjectID, _ n: Int) -> ModelOp {
        .insert(id, ModelPool.values(Album.entityTag) { $0 == 0 ? .uuid(ModelPool.uuid(200 + n)) : $0 == 1 ? .string("x") : .null })
    }
    static func track(_ id: ObjectID, _ n: Int) -> ModelOp {
        .insert(id, ModelPool.values(Track.entityTag) { i in
            switch i {
            case 0: .uuid(ModelPool.uuid(300 + n))
            case 1: .string("t1")
            case 2: .int(100)
            case 10: .int(0)
            default: .null
            }
        })
    }
    static func genre(_ id: ObjectID, _ name: String) -> ModelOp { .insert(id, [.string(name)]) }
    static func playlist(_ id: ObjectID, _ name: String) -> ModelOp { .insert(id, ModelPool.values(Playlist.entityTag) { $0 == 0 ? .string(name) : .null }) }

    /// A named program and what the model must read at its end.
    struct Scenario: Sendable, CustomTestStringConvertible {
        let name: String
        let steps: [ModelStep]
        let check: @Sendable (ContextModel) -> Bool
        var testDescription: String { name }
    }

    static let scenarios: [Scenario] = [
        Scenario(name: "a child's to-one stays its own when the store sets another target", steps: [
            .save([album(al0, 0), album(al1, 1), track(t0, 0)]),
            .newChild(1, parent: 0, policy: .fail),
            .change(1, [.link(Track.album.tag, t0, al1)], typed: true),
            .save([.link(Track.album.tag, t0, al0)]),
        ]) { m in
            let v = m.view(1)
            return v.targets(Track.album.tag, of: t0) == [al1] && v.targets(Album.tracks.tag, of: al1) == [t0]
                && v.targets(Album.tracks.tag, of: al0).isEmpty && m.store.targets(Track.album.tag, of: t0) == [al0]
        },
        Scenario(name: "an object deleted in a child is not listed by a link the store makes to it", steps: [
            .save([track(t0, 0), playlist(p0, "p1")]),
            .newChild(1, parent: 0, policy: .fail),
            .change(1, [.delete(t0)], typed: true),
            .save([.link(Playlist.tracks.tag, p0, t0)]),
        ]) { m in m.view(1).targets(Playlist.tracks.tag, of: p0).isEmpty && m.store.targets(Playlist.tracks.tag, of: p0) == [t0] },
        Scenario(name: "an object deleted in a child and in the store is gone once from counts and fetches", steps: [
            .save([track(t0, 0), track(t1, 1)]),
            .newChild(1, parent: 0, policy: .fail),
            .change(1, [.delete(t0)], typed: true),
            .save([.delete(t0)]),
        ]) { m in m.view(1).count(Query(entity: "Track"), m.schema) == 1 && m.view(1).fetch(Query(entity: "Track"), m.schema) == [t1] },
        Scenario(name: "a child of a pinned view reads what it committed before and after the view refreshes", steps: [
            .save([genre(g0, "rock")]),
            .newView(1),
            .newChild(2, parent: 1, policy: .fail),
            .change(2, [genre(g1, "jazz")], typed: true),
            .commit(2),
            .save([.update(g0, [ModelAttribute(index: 0, value: .string("pop"))])]),
        ]) { m in
            let child = m.view(2), view = m.view(1)
            return child.exists(g1) && !view.exists(g1) && child.objects[g0]?.values == [.string("rock")]
        },
        Scenario(name: "a pinned view's child keeps reading its commit after a refresh", steps: [
            .newView(1),
            .newChild(2, parent: 1, policy: .fail),
            .change(2, [genre(g1, "jazz")], typed: true),
            .commit(2),
            .refresh(1),
            .change(2, [.update(g1, [ModelAttribute(index: 0, value: .string("folk"))])], typed: true),
            .commit(2),
        ]) { m in m.view(2).objects[g1]?.values == [.string("folk")] && m.view(1).objects[g1]?.values == [.string("jazz")] },
        Scenario(name: "a commit refused for a unique clash with a store insert commits after a rename in the child", steps: [
            .newChild(1, parent: 0, policy: .fail),
            .change(1, [genre(g0, "rock")], typed: true),
            .save([genre(g1, "rock")]),
            .commit(1),
            .change(1, [.update(g0, [ModelAttribute(index: 0, value: .string("jazz"))])], typed: true),
            .commit(1),
        ]) { m in m.store.objects[g0]?.values == [.string("jazz")] && m.store.objects[g1]?.values == [.string("rock")] },
        Scenario(name: "a child's delete and insert of the same unique name commit together", steps: [
            .save([genre(g0, "rock")]),
            .newChild(1, parent: 0, policy: .fail),
            .change(1, [.delete(g0)], typed: true),
            .change(1, [genre(g1, "rock")], typed: true),
            .commit(1),
        ]) { m in !m.store.exists(g0) && m.store.objects[g1]?.values == [.string("rock")] },
        Scenario(name: "two objects swapping unique names in a child commit together", steps: [
            .save([genre(g0, "rock"), genre(g1, "jazz")]),
            .newChild(1, parent: 0, policy: .fail),
            .change(1, [.update(g0, [ModelAttribute(index: 0, value: .string("pop"))])], typed: true),
            .change(1, [.update(g1, [ModelAttribute(index: 0, value: .string("rock"))])], typed: true),
            .change(1, [.update(g0, [ModelAttribute(index: 0, value: .string("jazz"))])], typed: true),
            .commit(1),
        ]) { m in m.store.objects[g0]?.values == [.string("jazz")] && m.store.objects[g1]?.values == [.string("rock")] },
        Scenario(name: "deleting a genre's tracks and then the genre commits despite the deny rule", steps: [
            .save([genre(g0, "rock"), track(t0, 0), .link(Track.genre.tag, t0, g0)]),
            .newChild(1, parent: 0, policy: .fail),
            .change(1, [.delete(t0)], typed: true),
            .change(1, [.delete(g0)], typed: true),
            .commit(1),
        ]) { m in !m.store.exists(g0) && !m.store.exists(t0) },
        Scenario(name: "a nested child sends only the attributes it changed", steps: [
            .save([track(t0, 0)]),
            .newChild(1, parent: 0, policy: .fail),
            .newChild(2, parent: 1, policy: nil),
            .change(2, [.update(t0, [ModelAttribute(index: 1, value: .string("t2"))])], typed: true),
            .change(1, [.update(t0, [ModelAttribute(index: 2, value: .int(300))])], typed: true),
            .commit(2),
            .commit(1),
        ]) { m in m.store.objects[t0]?.values[1] == .string("t2") && m.store.objects[t0]?.values[2] == .int(300) },
        Scenario(name: "a store change between a nested child's edit and its commit into the parent is a conflict at the root", steps: [
            .save([track(t0, 0)]),
            .newChild(1, parent: 0, policy: .fail),
            .newChild(2, parent: 1, policy: nil),
            .change(2, [.update(t0, [ModelAttribute(index: 1, value: .string("t2"))])], typed: true),
            .save([.update(t0, [ModelAttribute(index: 2, value: .int(300))])]),
            .commit(2),
            .commit(1),
        ]) { m in m.store.objects[t0]?.values[1] == .string("t1") && m.hasPendingLayer(1) },
        Scenario(name: "property merge keeps the store's attribute and writes the child's", steps: [
            .save([track(t0, 0)]),
            .newChild(1, parent: 0, policy: .propertyMerge(preferContext: false)),
            .change(1, [.update(t0, [ModelAttribute(index: 1, value: .string("t2")), ModelAttribute(index: 2, value: .int(200))])], typed: false),
            .save([.update(t0, [ModelAttribute(index: 2, value: .int(300)), ModelAttribute(index: 10, value: .int(2))])]),
            .commit(1),
        ]) { m in
            let v = m.store.objects[t0]?.values
            return v?[1] == .string("t2") && v?[2] == .int(300) && v?[10] == .int(2)
        },
        Scenario(name: "context wins inserts an object the store deleted again", steps: [
            .save([track(t0, 0)]),
            .newChild(1, parent: 0, policy: .contextWins),
            .change(1, [.update(t0, [ModelAttribute(index: 1, value: .string("t3"))])], typed: true),
            .save([.delete(t0)]),
            .commit(1),
        ]) { m in m.store.objects[t0]?.values[1] == .string("t3") },
        Scenario(name: "store wins drops the child's change and its edge edits of that object", steps: [
            .save([track(t0, 0), playlist(p0, "p1")]),
            .newChild(1, parent: 0, policy: .storeWins),
            .change(1, [.update(t0, [ModelAttribute(index: 1, value: .string("t3"))])], typed: true),
            .change(1, [.link(Track.playlists.tag, t0, p0)], typed: true),
            .save([.update(t0, [ModelAttribute(index: 2, value: .int(300))])]),
            .commit(1),
        ]) { m in m.store.objects[t0]?.values[1] == .string("t1") && m.store.targets(Track.playlists.tag, of: t0).isEmpty },
        // A nested child deletes an album and inserts it again under its id, then links the track
        // the store meanwhile gave that album back to it: its commit unlinks the album's tracks
        // and links the track again, which changes nothing the parent shows. The parent's layer
        // then holds the new values, not the link, which stays the store's: when another writer
        // deletes the album (its tracks go with it), the parent still shows both objects (it
        // changed them) and no link between them.
        Scenario(name: "a child's commit that links a to-one back to its target leaves the link to the state below", steps: [
            .save([album(al0, 0), track(t0, 0)]),
            .newChild(1, parent: 0, policy: .storeWins),
            .newChild(2, parent: 1, policy: .storeWins),
            .change(2, [.delete(al0)], typed: true),
            .save([.link(Track.album.tag, t0, al0)]),
            .change(2, [album(al0, 1), .link(Track.album.tag, t0, al0),
                        .update(t0, [ModelAttribute(index: 1, value: .string("t2"))])], typed: true),
            .commit(2),
            .save([.delete(al0)]),
        ]) { m in
            let v = m.view(1)
            return v.exists(t0) && v.exists(al0) && v.targets(Track.album.tag, of: t0).isEmpty
                && v.targets(Album.tracks.tag, of: al0).isEmpty && m.store.objects[t0] == nil
        },
        // A nested child clears a track's genre and deletes the genre (a genre with tracks is
        // denied): committed into its parent, the track's genre shows as cleared through the
        // genre's delete as well as through the unlink; the parent's commit still sends the
        // unlink, so the store's delete is allowed.
        Scenario(name: "a to-one a child's commit cleared stays cleared where its target is deleted too", steps: [
            .save([genre(g0, "pop"), track(t0, 0), .link(Track.genre.tag, t0, g0)]),
            .newChild(1, parent: 0, policy: .storeWins),
            .newChild(2, parent: 1, policy: nil),
            .change(2, [.unlink(Track.genre.tag, t0, nil)], typed: true),
            .change(2, [.delete(g0)], typed: true),
            .commit(2),
            .commit(1),
        ]) { m in m.store.objects[g0] == nil && m.store.exists(t0) && m.store.targets(Track.genre.tag, of: t0).isEmpty },
    ]

    @Test(arguments: scenarios)
    func scenarioReadsAsTheSemanticsSayAndTheStoreAgrees(_ scenario: Scenario) async throws {
        var model = ContextModel(schema: try librarySchema())
        model.addView(0, autoRefresh: true)
        for step in scenario.steps { Self.run(step, on: &model) }
        #expect(scenario.check(model), "the model does not read as the semantics say")

        let harness = try ModelHarness(schema: try librarySchema())
        defer { harness.close() }
        for step in scenario.steps {
            if let differences = await harness.perform(step) {
                Issue.record(Comment(rawValue: "\(scenario.name): the implementation and the model disagree:\n"
                    + differences.map { "  " + $0 }.joined(separator: "\n") + "\nSteps:\n" + harness.trace.map { "  " + $0 }.joined(separator: "\n")))
                return
            }
        }
    }

    /// A step on the model alone (refusals are part of some scenarios).
    static func run(_ step: ModelStep, on model: inout ContextModel) {
        switch step {
        case .newView(let v): model.addView(v, autoRefresh: false)
        case .refresh(let v): model.refresh(v)
        case .drop(let c): model.drop(c)
        case .newChild(let c, let p, let policy): model.addChild(c, parent: p, policy: policy ?? model.children[p]?.policy ?? .fail)
        case .change(let c, let ops, _): try? model.change(c, ops)
        case .save(let ops): _ = try? model.save(ops)
        case .commit(let c): _ = try? model.commit(c)
        case .discard(let c): model.discard(c)
        case .rebase(let c): try? model.rebase(c)
        }
    }
}
