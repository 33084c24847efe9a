import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The in-flight rules of the context semantics, with real concurrency:
/// - "While a root commit is in flight, new changes to C stay pending (they are not part of that
///   commit); discard() during the flight drops everything not handed to the flight; the flight
///   itself completes (or fails) on its own. Nothing else is ever dropped."
/// - "Overlapping commit() calls on one child run one after the other: the second commits what is
///   pending when the first has finished (nil if nothing)."
/// The writer is held (`holdWriter`) to keep a commit in flight deterministically; a seeded loop
/// of real tasks then checks the same rules under whatever interleaving happens.
@Suite(.timeLimit(.minutes(15))) struct ContextModelConcurrencyTests {
    /// Genre names of `names` in `context`, sorted.
    static func names(_ context: some ObjectReading, prefix: String) throws -> [String] {
        try context.fetch(Genre.self, where: Genre.name.hasPrefix(prefix)).map(\.name).sorted()
    }

    static func insert(_ names: [String], into child: ChildContext) throws {
        for n in names { try child.insert(Genre(id: ObjectID.make(entityTag: Genre.entityTag), name: n)) }
    }

    static func genreNames(_ prefix: String, _ range: Range<Int>) -> [String] { range.map { "\(prefix)\($0)" } }

    /// Returns once the store's writer has a save queued (the held commit is in flight).
    static func waitUntilSaveQueued(_ store: Store, count: Int = 1) async throws {
        let writer = try #require(store.writer)
        try await waitUntil { writer.pendingForTesting >= count }
    }

    @Test func changesMadeWhileACommitIsInFlightStayPendingAndCommitNext() async throws {
        try await withLibraryStore { store in
            let main = store.mainContext
            let child = main.newChild(label: "in-flight")
            let first = Self.genreNames("a", 0..<50), later = Self.genreNames("b", 0..<10)
            try Self.insert(first, into: child)
            let held = try await holdWriter(store)
            let flight = Task { try await child.commit() }
            try await Self.waitUntilSaveQueued(store)
            try Self.insert(later, into: child)
            try await held.release()
            let tx = try await flight.value
            #expect(tx != nil)
            #expect(try Self.names(main, prefix: "") == first.sorted(), "the flight commits exactly what was pending when it started")
            #expect(try Self.names(child, prefix: "") == (first + later).sorted())
            #expect(child.hasChanges, "changes made during the flight are still pending")
            _ = try await child.commit()
            #expect(try Self.names(main, prefix: "") == (first + later).sorted())
            #expect(!child.hasChanges)
        }
    }

    @Test func discardDuringAFlightKeepsTheFlightAndEditsMadeAfterTheDiscard() async throws {
        try await withLibraryStore { store in
            let main = store.mainContext
            let child = main.newChild(label: "discarding")
            let first = Self.genreNames("a", 0..<50), later = Self.genreNames("b", 0..<10)
            try Self.insert(first, into: child)
            let held = try await holdWriter(store)
            let flight = Task { try await child.commit() }
            try await Self.waitUntilSaveQueued(store)
            child.discard()
            try Self.insert(later, into: child)
            try await held.release()
            _ = try await flight.value
            #expect(try Self.names(main, prefix: "") == first.sorted(), "the flight completes on its own")
            #expect(try Self.names(child, prefix: "b") == later.sorted(), "edits made after the discard are pending")
            _ = try await child.commit()
            #expect(try Self.names(main, prefix: "") == (first + later).sorted(), "nothing made after the discard is lost")
        }
    }

    @Test func aSecondCommitDuringAFlightWaitsAndCommitsNothingTwice() async throws {
        try await withLibraryStore { store in
            let main = store.mainContext
            let child = main.newChild(label: "overlapping")
            let first = Self.genreNames("a", 0..<50)
            try Self.insert(first, into: child)
            let held = try await holdWriter(store)
            let one = Task { try await child.commit() }
            try await Self.waitUntilSaveQueued(store)
            let two = Task { try await child.commit() }
            try await Task.sleep(for: .milliseconds(50))
            try await held.release()
            let r1 = await one.result, r2 = await two.result
            #expect(throws: Never.self) { try r1.get() }
            #expect(throws: Never.self, "an overlapping commit must not fail (no duplicateID)") { try r2.get() }
            let txs = [try? r1.get(), try? r2.get()].compactMap { $0 }
            #expect(txs.count == 1, "one of the two commits saves the changes, the other has nothing left: \(txs)")
            #expect(try Self.names(main, prefix: "") == first.sorted())
            #expect(!child.hasChanges)
        }
    }

    @Test func aSecondCommitDuringAFlightCommitsWhatWasAddedMeanwhile() async throws {
        try await withLibraryStore { store in
            let main = store.mainContext
            let child = main.newChild(label: "overlapping")
            let first = Self.genreNames("a", 0..<50), later = Self.genreNames("b", 0..<10)
            try Self.insert(first, into: child)
            let held = try await holdWriter(store)
            let one = Task { try await child.commit() }
            try await Self.waitUntilSaveQueued(store)
            try Self.insert(later, into: child)
            let two = Task { try await child.commit() }
            try await Task.sleep(for: .milliseconds(50))
            try await held.release()
            let r1 = await one.result, r2 = await two.result
            #expect(throws: Never.self) { try r1.get() }
            #expect(throws: Never.self, "an overlapping commit must not fail") { try r2.get() }
            if let a = try? r1.get(), let b = try? r2.get() { #expect(a != b, "two commits, two transactions") }
            #expect(try Self.names(main, prefix: "") == (first + later).sorted())
            #expect(!child.hasChanges)
        }
    }

    /// What one round of the loop does while a commit is in flight.
    enum Interleaving: CaseIterable {
        case discardThenEdit, editThenSecondCommit, secondCommitThenEdit, discardEditSecondCommit
        /// The objects the flight deletes are inserted again under their ids (some with the
        /// values they had, some changed): once the delete lands they are new objects.
        case insertTheDeletedAgain
    }

    @Test(arguments: [UInt64(21), 22, 23])
    func commitsDiscardsAndEditsInFlightLoseNothing(seed: UInt64) async throws {
        try await withLibraryStore { store in
            var rng = SeededGenerator(seed: seed)
            let main = store.mainContext
            for round in 0..<30 {
                let prefix = "r\(round)-"
                let child = main.newChild(label: "round \(round)")
                let before = Self.genreNames(prefix + "a", 0..<Int.random(in: 1...40, using: &rng))
                let after = Self.genreNames(prefix + "b", 0..<Int.random(in: 1...10, using: &rng))
                // Objects of the store the flight deletes.
                let doomed = Self.genreNames(prefix + "c", 0..<Int.random(in: 1...5, using: &rng)).map {
                    Genre(id: ObjectID.make(entityTag: Genre.entityTag), name: $0)
                }
                _ = try await store.save { c in for g in doomed { c.insert(g) } }
                try Self.insert(before, into: child)
                for g in doomed { try child.delete(g.id) }
                let interleaving = Interleaving.allCases.randomElement(using: &rng) ?? .discardThenEdit
                let pause = Int.random(in: 0...3, using: &rng)
                var commits = [Task { try await child.commit() }]
                for _ in 0..<pause { await Task.yield() }
                var discarded = false
                var insertedAgain: [String] = []
                switch interleaving {
                case .discardThenEdit:
                    child.discard()
                    discarded = true
                    try Self.insert(after, into: child)
                case .editThenSecondCommit:
                    try Self.insert(after, into: child)
                    commits.append(Task { try await child.commit() })
                case .secondCommitThenEdit:
                    commits.append(Task { try await child.commit() })
                    try Self.insert(after, into: child)
                case .discardEditSecondCommit:
                    child.discard()
                    discarded = true
                    try Self.insert(after, into: child)
                    commits.append(Task { try await child.commit() })
                case .insertTheDeletedAgain:
                    try Self.insert(after, into: child)
                    for g in doomed {
                        let again = Genre(id: g.id, name: Bool.random(using: &rng) ? g.name : g.name + "!")
                        try child.insert(again)
                        insertedAgain.append(again.name)
                    }
                }
                for (i, c) in commits.enumerated() {
                    let r = await c.result
                    #expect(throws: Never.self, "seed \(seed) round \(round) (\(interleaving)): commit \(i + 1) must not fail") { try r.get() }
                }
                _ = try await child.commit()
                let saved = try Self.names(main, prefix: prefix)
                let savedBefore = saved.filter { $0.hasPrefix(prefix + "a") }, savedAfter = saved.filter { $0.hasPrefix(prefix + "b") }
                #expect(savedAfter == after.sorted(), "seed \(seed) round \(round) (\(interleaving)): an edit made after the last discard was lost")
                let savedDoomed = saved.filter { $0.hasPrefix(prefix + "c") }
                if interleaving == .insertTheDeletedAgain {
                    #expect(savedDoomed == insertedAgain.sorted(),
                            "seed \(seed) round \(round): the objects inserted again while their delete was in flight were lost")
                } else if discarded {
                    // The flight deleted them with the rest of what it was handed, or was handed nothing.
                    #expect(savedDoomed == (savedBefore.isEmpty ? doomed.map(\.name).sorted() : []),
                            "seed \(seed) round \(round) (\(interleaving)): the flight's deletes")
                } else {
                    #expect(savedDoomed.isEmpty, "seed \(seed) round \(round) (\(interleaving)): the flight's deletes")
                }
                if discarded {
                    #expect(savedBefore.isEmpty || savedBefore == before.sorted(),
                            "seed \(seed) round \(round) (\(interleaving)): the flight commits all it was handed or nothing")
                } else {
                    #expect(savedBefore == before.sorted(), "seed \(seed) round \(round) (\(interleaving)): nothing was discarded, all is saved")
                }
                #expect(!child.hasChanges)
            }
        }
    }
}
