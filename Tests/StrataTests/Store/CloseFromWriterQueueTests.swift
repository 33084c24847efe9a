import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `Store.close()` called on the writer's own queue — from a custom merge closure, which runs
/// inside the save — cannot wait for that queue (it would wait for itself: a deadlock). It
/// refuses new work at once and finishes the close on another thread when the save ends.
@Suite struct CloseFromWriterQueueTests {
    /// An executor of this suite's own, kept alive by this constant: a task does not retain its
    /// executor preference.
    static let executor = HookExecutor()

    /// Polls `condition` every 10 ms until it holds or `seconds` have passed, checking once more
    /// after the deadline (in the full suite this task can wait seconds for a thread of the
    /// cooperative pool, which CPU-bound tests occupy; a deadlock never ends). False if it never held.
    private func eventually(_ seconds: Double = 60, _ condition: () async throws -> Bool) async rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            if try await condition() { return true }
            if Date() >= deadline { return try await condition() }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    @Test(arguments: [Durability.durable, .relaxed])
    func aMergeClosureThatClosesTheStoreLetsTheSaveFinish(durability: Durability) async throws {
        let dir = temporaryDirectory("close-from-writer")
        defer { try? FileManager.default.removeItem(at: dir) }
        var configuration = StoreConfiguration()
        configuration.durability = durability
        let schema = try librarySchema()
        let store = try Store.open(at: dir, schema: schema, configuration: configuration)
        let track = Track(mbid: UUID(), title: "base", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
        _ = try await store.save { $0.insert(track) }
        let closedInside = Locked(false)
        let child = store.mainContext.newChild(label: "closer", mergePolicy: .custom { _ in
            store.close()
            closedInside.withLock { $0 = store.isClosed }
            return .keepContext
        })
        try child.set(Track.title, of: track.id, to: "mine")
        _ = try await store.save { $0.set(Track.durationSeconds, of: track.id, to: 7) }   // the conflict

        let result = Locked<Result<TransactionID?, Error>?>(nil)
        // On an executor of its own, not on the cooperative pool, which CPU-bound tests of the full
        // suite can occupy for seconds.
        Task(executorPreference: Self.executor) {
            let r = await Result(catching: { try await child.commit() })
            result.withLock { $0 = r }
        }
        let finished = await eventually { result.withLock { $0 != nil } }
        try #require(finished, "the commit whose merge closure closed the store never returned (deadlock)")
        // The commit returned a transaction id (nil would mean it wrote nothing).
        _ = try #require(try result.withLock { $0 }?.get(), "the commit wrote no transaction")
        #expect(closedInside.withLock { $0 })
        #expect(store.isClosed)
        #expect(throws: StrataError.self) { _ = try store.mainContext.fetch(Track.self) }

        // The close finishes in the background; then the store opens again, with the save in it.
        var reopened: Store?
        let opened = await eventually {
            do {
                reopened = try Store.open(at: dir, schema: schema, configuration: configuration)
                return true
            } catch StrataError.alreadyOpen {
                return false
            } catch {
                Issue.record("reopening failed: \(error)")
                return true
            }
        }
        try #require(opened, "the background close never finished")
        let again = try #require(reopened)
        defer { again.close() }
        #expect(again !== store)
        let saved = try #require(try again.mainContext.object(Track.self, id: track.id))
        #expect(saved.title == "mine" && saved.durationSeconds == 7)
    }
}

/// The last reference to a store released on the writer's queue (a merge closure held it):
/// `deinit` cannot wait for that queue either, and closes on a thread of its own.
@Suite struct ReleaseOnWriterQueueTests {
    @Test func aStoreReleasedInsideASaveClosesAfterIt() async throws {
        let dir = temporaryDirectory("release-on-writer")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        var store: Store? = try Store.open(at: dir, schema: schema)
        let track = Track(mbid: UUID(), title: "base", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
        let first = try await store!.save { $0.insert(track) }
        _ = try await store!.save { $0.set(Track.durationSeconds, of: track.id, to: 7) }   // the conflict
        let base = try #require(try store!.snapshot(asOf: first).record(track.id))
        // A change based on the first version, whose merge closure drops the only reference.
        let box = Locked<Store?>(store)
        let released = Locked(false)
        var changes = ChangeSet()
        changes.set(Track.title, of: track.id, to: "mine")
        changes.baseVersions[track.id] = BaseVersion(version: first, values: base.values)
        changes.mergePolicy = .custom { _ in
            box.withLock { $0 = nil }
            released.withLock { $0 = true }
            return .keepContext
        }
        let writer = try #require(store?.writer)
        let weakStore = WeakBox(store)
        store = nil
        let committed = Locked<Result<TransactionID, Error>?>(nil)
        let sending = changes
        Thread {
            let r = Result { try writer.submitAndWait(sending, author: "", metadata: [:]) }
            committed.withLock { $0 = r }
        }.start()
        let deadline = Date().addingTimeInterval(60)
        while committed.withLock({ $0 == nil }) {
            try #require(Date() < deadline, "the save whose merge closure released the store never returned")
            try await Task.sleep(for: .milliseconds(5))
        }
        _ = try #require(committed.withLock { $0 }).get()
        #expect(released.withLock { $0 })
        #expect(weakStore.value == nil, "the closure held the last reference")
        // The close ends in the background; then the path opens again, with the save in it.
        let again = try await openAfterBackgroundClose(dir, schema: schema)
        defer { again.close() }
        let saved = try #require(try again.mainContext.object(Track.self, id: track.id))
        #expect(saved.title == "mine" && saved.durationSeconds == 7)
    }
}

/// A weak reference, to see that an object was released.
final class WeakBox<T: AnyObject & Sendable>: Sendable {
    weak let value: T?
    init(_ value: T?) { self.value = value }
}

/// A close that waits for a compaction's switch (asked for before the close) closes the
/// environment the store switched to, not the one it had when the close began.
@Suite struct CloseDuringCompactionTests {
    @Test func aCloseAfterACompactionSwitchClosesTheNewEnvironment() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        _ = try await store.save { $0.insert(Genre(name: "g")) }
        let before = store.env
        let held = try await holdWriter(store)
        let writer = try #require(store.writer)
        let compaction = Task { try await store.compact() }
        // The compaction's switch is queued behind the held body; then the store is closed.
        let deadline = Date().addingTimeInterval(60)
        while writer.exclusiveQueuedForTesting < 2 {
            try #require(Date() < deadline, "the compaction never asked for its switch")
            try await Task.sleep(for: .milliseconds(1))
        }
        let closed = closeOnThread(store)
        while !store.isClosed {   // the close has begun (and waits for the queue) before the release
            try #require(Date() < deadline, "close() never began")
            try await Task.sleep(for: .milliseconds(1))
        }
        try await held.release()
        _ = try await compaction.value
        while !closed.withLock({ $0 }) {
            try #require(Date() < deadline, "close() never returned")
            try await Task.sleep(for: .milliseconds(1))
        }
        let after = try #require(store.writer).env
        #expect(after !== before, "the compaction switched generations")
        #expect(after.isClosed, "the environment switched to during the close was left open")
    }
}

/// Two stores' writer queues nested on one thread: a merge closure of a save into store A saves
/// into store B (B's commit runs inside B's `queue.sync`, nested in A's block), and B's merge
/// closure then closes A or saves into A. There `getSpecific` sees only B's queue, so A's
/// writer did not know it was on its own queue: closing A waited for A's queue and saving into A
/// entered it, and libdispatch trapped ("dispatch_sync called on queue already owned by current
/// thread"). A's writer now records the thread running its blocks.
@Suite struct NestedWriterQueueTests {
    /// A change set setting `Track.title` of a track saved in `store`, based on the track's first
    /// version while the store already has a second one (a conflict), with `onConflict` as its
    /// merge closure (keeping the change set's values).
    private func conflictingChange(_ store: Store, title: String, onConflict: @escaping @Sendable () -> Void) async throws -> (ChangeSet, ObjectID) {
        let track = Track(mbid: UUID(), title: "base", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
        let first = try await store.save { $0.insert(track) }
        _ = try await store.save { $0.set(Track.durationSeconds, of: track.id, to: 7) }
        let base = try #require(try store.snapshot(asOf: first).record(track.id))
        var changes = ChangeSet()
        changes.set(Track.title, of: track.id, to: title)
        changes.baseVersions[track.id] = BaseVersion(version: first, values: base.values)
        changes.mergePolicy = .custom { _ in
            onConflict()
            return .keepContext
        }
        return (changes, track.id)
    }

    @Test func closingTheOuterStoreFromANestedMergeClosureClosesItAfterItsSave() async throws {
        let dirA = temporaryDirectory("nested-a"), dirB = temporaryDirectory("nested-b")
        defer {
            try? FileManager.default.removeItem(at: dirA)
            try? FileManager.default.removeItem(at: dirB)
        }
        let schema = try librarySchema()
        let a = try Store.open(at: dirA, schema: schema)
        let b = try Store.open(at: dirB, schema: schema)
        defer { b.close() }
        let closedInside = Locked(false)
        let (changesB, idB) = try await conflictingChange(b, title: "b") {
            a.close()
            closedInside.withLock { $0 = a.isClosed }
        }
        let savedB = Locked<Result<TransactionID, Error>?>(nil)
        let (changesA, idA) = try await conflictingChange(a, title: "a") {
            let r = Result { try b.saveAndWait(changesB) }
            savedB.withLock { $0 = r }
        }
        let savedA = try await resultOnThread("the save into A") { try a.saveAndWait(changesA) }
        _ = try savedA.get()
        _ = try #require(savedB.withLock { $0 }, "A's merge closure never ran").get()
        #expect(closedInside.withLock { $0 }, "close() from inside returned with A closed")
        #expect(a.isClosed)
        #expect(try b.mainContext.object(Track.self, id: idB)?.title == "b")
        // A's close finishes in the background; then A opens again, with its save in it.
        let again = try await openAfterBackgroundClose(dirA, schema: schema)
        defer { again.close() }
        #expect(try again.mainContext.object(Track.self, id: idA)?.title == "a")
    }

    @Test func savingIntoTheOuterStoreFromANestedMergeClosureIsRefused() async throws {
        let schema = try librarySchema()
        let a = try Store.temporary(schema: schema)
        let b = try Store.temporary(schema: schema)
        defer {
            b.close()
            a.close()
        }
        let inner = Locked<Result<TransactionID, Error>?>(nil)
        let (changesB, _) = try await conflictingChange(b, title: "b") {
            let r = Result { try a.saveAndWait { $0.insert(Genre(name: "from B's closure")) } }
            inner.withLock { $0 = r }
        }
        let (changesA, _) = try await conflictingChange(a, title: "a") { _ = try? b.saveAndWait(changesB) }
        _ = try await resultOnThread("the save into A") {
            let tx = try a.saveAndWait(changesA)
            // Out of the nested blocks, the same thread is no longer taken for A's queue.
            _ = try a.saveAndWait { $0.insert(Genre(name: "afterwards")) }
            return tx
        }.get()
        let result = try #require(inner.withLock { $0 }, "B's merge closure never ran")
        switch result {
        case .success: Issue.record("a save into A from inside A's own save was committed")
        case .failure(let error):
            guard case StrataError.saveFromWriter(let path) = error else {
                Issue.record("expected StrataError.saveFromWriter, got \(error)")
                return
            }
            // The store as the caller opened it, not its current generation's directory (which
            // a compaction or migration replaces), as every other error names it.
            #expect(path == a.path)
        }
        #expect(try a.mainContext.fetch(Genre.self).map(\.name) == ["afterwards"])
    }
}
