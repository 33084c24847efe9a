import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Model-based stress: tasks make random edits in children and grandchildren, commit, discard and
/// fetch, each checked step by step against a plain dictionary; at the end the store must equal
/// the union of what was committed. Seeds make it repeatable; a hang fails by the time limit.
@Suite struct ContextStressTests {
    struct Model: Equatable {
        var tracks: [ObjectID: (title: String, duration: Int)] = [:]
        static func == (a: Model, b: Model) -> Bool {
            a.tracks.count == b.tracks.count && a.tracks.allSatisfy { k, v in b.tracks[k].map { $0 == v } ?? false }
        }
    }

    /// What a context shows for the task's own tracks.
    func observed(_ context: some ObjectReading, owner: Int) throws -> Model {
        var m = Model()
        for t in try context.fetch(Track.self, where: Track.isrc == "task-\(owner)") { m.tracks[t.id] = (t.title, t.durationSeconds) }
        return m
    }

    func worker(_ store: Store, owner: Int, seed: UInt64, steps: Int) async throws -> Model {
        var rng = SeededGenerator(seed: seed)
        var committed = Model()
        let main = store.mainContext
        for _ in 0..<steps {
            let child = main.newChild(label: "task-\(owner)")
            var childModel = committed
            let nested = Bool.random(using: &rng)
            let editor = nested ? child.newChild(label: "task-\(owner)-nested") : child
            var editorModel = childModel
            for _ in 0..<Int.random(in: 1...12, using: &rng) {
                switch Int.random(in: 0...9, using: &rng) {
                case 0...4:
                    var t = makeTrack(title: "t\(Int.random(in: 0...999, using: &rng))", duration: Int.random(in: 1...900, using: &rng))
                    t.isrc = "task-\(owner)"
                    try editor.insert(t)
                    editorModel.tracks[t.id] = (t.title, t.durationSeconds)
                case 5...7:
                    if let id = editorModel.tracks.keys.sorted().randomElement(using: &rng) {
                        let d = Int.random(in: 1...900, using: &rng)
                        try editor.set(Track.durationSeconds, of: id, to: d)
                        editorModel.tracks[id]?.duration = d
                    }
                default:
                    if let id = editorModel.tracks.keys.sorted().randomElement(using: &rng) {
                        try editor.delete(id)
                        editorModel.tracks[id] = nil
                    }
                }
                #expect(try observed(editor, owner: owner) == editorModel)
            }
            if nested {
                if Bool.random(using: &rng) {
                    try await editor.commit()
                    childModel = editorModel
                } else {
                    editor.discard()
                }
                #expect(try observed(child, owner: owner) == childModel)
            } else {
                childModel = editorModel
            }
            if Int.random(in: 0...3, using: &rng) > 0 {
                try await child.commit()
                committed = childModel
            } else {
                child.discard()
            }
            #expect(try observed(main, owner: owner) == committed)
        }
        return committed
    }

    @Test(.timeLimit(.minutes(15)), arguments: [UInt64(11), 12])
    func randomNestedEditsMatchTheModel(seed: UInt64) async throws {
        try await withLibraryStore { store in
            let models = try await withThrowingTaskGroup(of: Model.self) { group in
                for owner in 0..<6 {
                    group.addTask { try await worker(store, owner: owner, seed: seed &* 1000 &+ UInt64(owner), steps: 25) }
                }
                // A reader keeps fetching while the workers write.
                group.addTask {
                    for _ in 0..<50 { _ = try store.mainContext.count(Track.self, where: Track.durationSeconds > 450) }
                    return Model()
                }
                var all: [Model] = []
                for try await m in group { all.append(m) }
                return all
            }
            var expected = Model()
            for m in models { expected.tracks.merge(m.tracks) { a, _ in a } }
            var actual = Model()
            for t in try store.mainContext.fetch(Track.self) { actual.tracks[t.id] = (t.title, t.durationSeconds) }
            #expect(actual == expected)
        }
    }
}
