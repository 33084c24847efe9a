import Foundation
import LibraryModel
import Synchronization
import Testing
@testable import Strata

/// `Store.close()` on one thread while others read through the main context (each read a short
/// LMDB read transaction that no registry knows of) and through snapshots. LMDB requires every
/// transaction to be ended before `mdb_env_close`; a close that did not wait for the short reads
/// under way could unmap the file under them. Every read either returns a result or throws
/// ``StrataError/closed(path:)``; the process does not crash.
@Suite struct CloseWhileReadingTests {
    /// What a reader thread saw: reads that returned, and errors other than `closed`.
    private struct Tally: Sendable {
        var reads = 0
        var unexpected: [String] = []
    }

    @Test func closeWhileOtherThreadsReadEndsEveryReadCleanly() async throws {
        let schema = try librarySchema()
        var totalReads = 0
        for round in 0..<20 {
            // A close that never returns fails the round; the deadline only bounds the wait, and
            // is long because in the full parallel run on two cores a round's threads and its
            // waits queue behind every other test's (a close there waited seconds for a read).
            let deadline = Date().addingTimeInterval(180)
            let store = try Store.temporary(schema: schema)
            _ = try await store.save(genres(50, prefix: "r\(round)"))
            let stop = Atomic<Bool>(false)
            let tallies = Locked<[Tally]>([])
            for reader in 0..<3 {
                Thread {
                    var t = Tally()
                    while !stop.load(ordering: .relaxed) {
                        do {
                            switch reader {
                            case 0: _ = try store.mainContext.fetch(Genre.self)
                            case 1: _ = try store.lastTransactionID
                            default:
                                let s = try store.snapshot(label: "reader")
                                _ = try s.count(Query(entity: "Genre"))
                                s.close()
                            }
                            t.reads += 1
                        } catch StrataError.closed {
                            break
                        } catch {
                            t.unexpected.append("\(error)")
                            break
                        }
                    }
                    tallies.withLock { $0.append(t) }
                }.start()
            }
            // Let the readers get going, then close under them (a different moment each round).
            usleep(UInt32(500 + round * 100))
            let closed = closeOnThread(store)
            try await waitUntil { closed.withLock { $0 } || Date() > deadline }
            try #require(closed.withLock { $0 }, "round \(round): close() never returned")
            stop.store(true, ordering: .relaxed)
            try await waitUntil { tallies.withLock { $0.count } == 3 || Date() > deadline }
            let all = tallies.withLock { $0 }
            try #require(all.count == 3, "round \(round): a reader never returned after close()")
            #expect(all.allSatisfy { $0.unexpected.isEmpty }, "round \(round): \(all.flatMap(\.unexpected))")
            totalReads += all.reduce(0) { $0 + $1.reads }
        }
        #expect(totalReads > 0, "the readers never read before the close")
    }

    /// A short read under way on another thread (a view context's fetch, here held inside it)
    /// keeps `close()` waiting until it ends; the read then completes with its result.
    @Test func closeWaitsForAShortReadUnderWayOnAnotherThread() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        _ = try await store.save(genres(10))
        let inside = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let read = Locked<Result<Int, Error>?>(nil)
        Thread {
            let r = Result {
                try store.read { view -> Int in
                    inside.signal()
                    release.wait()
                    return try view.count(Query(entity: "Genre"))
                }
            }
            read.withLock { $0 = r }
        }.start()
        try #require(inside.wait(timeout: .now() + 60) == .success)
        let env = store.env
        let closed = closeOnThread(store)
        let deadline = Date().addingTimeInterval(60)
        // The close has reached the environment (which marks itself closed, then waits).
        try await waitUntil { env.isClosed || Date() > deadline }
        try #require(env.isClosed, "close() never reached the environment")
        try await Task.sleep(for: .milliseconds(50))
        #expect(!closed.withLock { $0 }, "close() returned while a read was under way")
        release.signal()
        // A limit of its own from here: in the loaded parallel suite the wait above can take most
        // of the first one (it catches a close that never returns, not a slow one).
        let ending = Date().addingTimeInterval(300)
        try await waitUntil { (closed.withLock { $0 } && read.withLock { $0 != nil }) || Date() > ending }
        #expect(closed.withLock { $0 }, "close() never returned after the read ended")
        #expect(try read.withLock { $0 }?.get() == 10)
    }

    /// Reads refused by a closed environment (past the store's own check, as a read racing the
    /// close is) name the store's directory, not the generation's inside it.
    @Test func readsRefusedByAClosedEnvironmentNameTheStore() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        defer { store.close() }
        store.env.close()
        for (what, attempt) in [("read", { _ = try store.read { _ in 0 } }),
                                ("snapshot", { _ = try Snapshot.open(store: store, label: "late", now: SnapshotRegistry.monotonicNanos()) })] as [(String, () throws -> Void)] {
            do {
                try attempt()
                Issue.record("\(what) on a closed environment returned")
            } catch StrataError.closed(let path) {
                #expect(path == store.path, "\(what): \(path)")
            }
        }
    }

    /// A snapshot whose open races with the store's close (it began its read before the close
    /// emptied the registry) is refused, and its read ended, instead of being registered into
    /// the emptied registry, where its transaction would keep the close waiting.
    @Test func aSnapshotOpenedAfterTheRegistryClosedIsRefused() throws {
        let store = try Store.temporary(schema: try librarySchema())
        store.snapshots.closeAll()   // the store's close, up to the environment's
        var late: Snapshot?
        do {
            late = try Snapshot.open(store: store, label: "late", now: SnapshotRegistry.monotonicNanos())
            Issue.record("a snapshot was registered after the registry closed")
        } catch StrataError.closed(let path) {
            #expect(path == store.path)
        }
        late?.close()
        store.close()
    }

    /// A custom merge closure of a child context's `apply` runs inside a short read of the
    /// store (its root is the main context); a `close()` there goes to the background instead of
    /// waiting for that read.
    @Test func closeFromAChildsMergeClosureInsideItsReadDoesNotWaitForIt() async throws {
        let dir = temporaryDirectory("close-in-apply")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let store = try Store.open(at: dir, schema: schema)
        let track = Track(mbid: UUID(), title: "base", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
        let first = try await store.save { $0.insert(track) }
        _ = try await store.save { $0.set(Track.durationSeconds, of: track.id, to: 7) }
        let base = try #require(try store.snapshot(asOf: first).record(track.id))
        var changes = ChangeSet()
        changes.set(Track.title, of: track.id, to: "mine")
        changes.baseVersions[track.id] = BaseVersion(version: first, values: base.values)
        changes.mergePolicy = .custom { _ in
            store.close()
            return .keepContext
        }
        let child = store.mainContext.newChild(label: "closer")
        let sending = changes
        let result = try await resultOnThread("apply() after close() from its merge closure") { try child.apply(sending) }
        _ = try result.get()   // the apply itself needed nothing more from the store
        #expect(store.isClosed)
        try await openAfterBackgroundClose(dir, schema: schema).close()
    }
}

/// Two `close()` calls at once: the one that does not close waits for the other, so that once
/// either has returned the store is closed and opens again. (The second returned at once when
/// it came between the first's closed flag and its start, and an open right after it failed
/// with "still closing".)
@Suite struct ConcurrentCloseTests {
    @Test func aCloseThatFindsTheStoreClosingWaitsForIt() throws {
        let dir = temporaryDirectory("concurrent-close")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let failures = Locked<[String]>([])
        for round in 0..<50 {
            let store = try Store.open(at: dir, schema: schema)
            // The closing close pauses once the store reads as closed: the other finds it closed.
            store.closeStartingForTesting.withLock { $0 = { usleep(20_000) } }
            let reopened = Locked<[Store]>([])
            DispatchQueue.concurrentPerform(iterations: 2) { _ in
                store.close()
                do {
                    let again = try Store.open(at: dir, schema: schema)
                    reopened.withLock { $0.append(again) }
                } catch {
                    failures.withLock { $0.append("round \(round): \(error)") }
                }
            }
            for s in reopened.withLock({ $0 }) { s.close() }
        }
        let found = failures.withLock { $0 }
        #expect(found.isEmpty, "\(found.count) opens right after a close returned failed: \(found.prefix(3))")
    }
}

/// A snapshot whose last reference goes on another thread while the store's close is ending its
/// transaction: its memory stays until the close has let go of it, and the close finishes
/// whichever thread the snapshot is released on, its own included. (A `deinit` that skipped the
/// registry's lock once the close had marked the snapshot ended could free it while the close was
/// still letting its lock go; one that waited for the registry's lock in every such case would
/// deadlock here when the last release came on the closing thread.)
@Suite struct SnapshotReleasedDuringCloseTests {
    // The limit catches a deadlock, which never ends: fifteen minutes, as a loaded parallel suite
    // stretches a test's time by minutes.
    @Test(.timeLimit(.minutes(15))) func aSnapshotReleasedWhileTheCloseEndsItOutlivesTheClose() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        let path = store.snapshots.path
        let holder = Locked<Snapshot?>(try store.snapshot(label: "released during the close"))
        let deinitEnded = Locked<Bool>(false)
        let endedWhileTheCloseWasInside = Locked<Bool>(false)
        Snapshot.deinitEndedForTesting.set { p in if p == path { deinitEnded.withLock { $0 = true } } }
        Snapshot.afterTakenByStoreCloseForTesting.set { p in
            guard p == path else { return }
            // The last reference goes on another thread while the close is inside the snapshot.
            Thread { holder.withLock { $0 = nil } }.start()
            usleep(200_000)
            let ended = deinitEnded.withLock { $0 }
            endedWhileTheCloseWasInside.withLock { $0 = ended }
        }
        defer {
            Snapshot.afterTakenByStoreCloseForTesting.set(nil)
            Snapshot.deinitEndedForTesting.set(nil)
        }
        store.close()
        #expect(!endedWhileTheCloseWasInside.withLock { $0 }, "the snapshot was freed under the close")
        let deadline = Date().addingTimeInterval(60)
        while !deinitEnded.withLock({ $0 }), Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(deinitEnded.withLock { $0 }, "the snapshot was never released")
    }
}

/// Only a read of the store being closed sends its close to the background: closing another
/// store from inside a read of this one is an ordinary close, finished when it returns.
@Suite struct CloseInsideAnotherStoresReadTests {
    @Test func closingAnotherStoreInsideAReadFinishesBeforeItReturns() async throws {
        let schema = try librarySchema()
        let a = try Store.temporary(schema: schema)
        defer { a.close() }
        let dirB = temporaryDirectory("other-store")
        defer { try? FileManager.default.removeItem(at: dirB) }
        let b = try Store.open(at: dirB, schema: schema)
        _ = try await b.save(genres(3))
        try a.read { _ in b.close() }
        // Finished, not still closing: the path opens again at once.
        let again = try Store.open(at: dirB, schema: schema)
        defer { again.close() }
        #expect(try again.mainContext.count(Genre.self) == 3)
    }
}

/// A pinned view context read, refreshed or closed from inside its own read (a custom merge
/// closure of a child whose root it is runs there): a nested read would take the snapshot's
/// lock again, and so would its close. A nested read uses the outer read's transaction, and the
/// close happens when the outer read ends.
@Suite struct ClosePinnedContextInsideItsReadTests {
    enum Action: String, CaseIterable, Sendable { case read, refresh, close }

    @Test(arguments: Action.allCases)
    func thePinnedRootUsedFromAMergeClosure(action: Action) async throws {
        let store = try Store.temporary(schema: try librarySchema())
        let track = Track(mbid: UUID(), title: "base", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
        let first = try await store.save { $0.insert(track) }
        _ = try await store.save { $0.set(Track.durationSeconds, of: track.id, to: 7) }   // the conflict
        let pinned = try store.newViewContext(label: "pinned")
        let pinnedAt = try pinned.transactionID
        // A later save the pinned context does not see until it refreshes.
        let latest = try await store.save { $0.insert(Genre(name: "later")) }
        let base = try #require(try store.snapshot(asOf: first).record(track.id))
        let before = try store.openSnapshots().count
        let calls = Locked(0)
        let seen = Locked<Result<Int?, Error>?>(nil)
        var changes = ChangeSet()
        changes.set(Track.title, of: track.id, to: "mine")
        changes.baseVersions[track.id] = BaseVersion(version: first, values: base.values)
        changes.mergePolicy = .custom { _ in
            calls.withLock { $0 += 1 }
            let r = Result { () throws -> Int? in
                switch action {
                case .read: return try pinned.object(Track.self, id: track.id)?.durationSeconds
                case .refresh: try pinned.refresh(); return nil
                case .close: pinned.close(); return nil
                }
            }
            seen.withLock { $0 = r }
            return .keepContext
        }
        let child = pinned.newChild(label: "child")
        let sending = changes
        let result = try await resultOnThread("apply() using its pinned root (the snapshot's lock taken twice)") { try child.apply(sending) }
        try result.get()
        #expect(calls.withLock { $0 } == 1, "the merge closure ran once")
        let inside = try #require(seen.withLock { $0 }).get()
        switch action {
        case .read:
            #expect(inside == 7, "the nested read saw the pinned state")
            #expect(try pinned.transactionID == pinnedAt)
            #expect(try store.openSnapshots().count == before)
        case .refresh:
            // The old snapshot released when the read ended; the context now at the latest.
            #expect(try pinned.transactionID == latest)
            #expect(try store.openSnapshots().count == before)
        case .close:
            #expect(try store.openSnapshots().count == before - 1)
            #expect(try pinned.transactionID == latest, "the next read pins the latest")
        }
        store.close()
    }
}

/// An export's `emit` runs between its snapshot's reads: a `close()` from it closes the store and
/// the export stops there with `closed` instead of writing the rest.
@Suite struct CloseFromExportEmitTests {
    @Test func closeFromEmitStopsTheExport() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        _ = try await store.save(genres(20))
        let lines = Locked(0)
        let result = try await resultOnThread("the export after close() from emit") {
            try Exporter(store: store).export(Query(entity: "Genre"), format: .ndjson) { _ in
                lines.withLock { $0 += 1 }
                store.close()
            }.records
        }
        switch result {
        case .success(let n): Issue.record("the export went on to write \(n) records")
        case .failure(let error):
            guard case StrataError.closed = error else { Issue.record("expected closed, got \(error)"); return }
        }
        #expect(lines.withLock { $0 } == 1)
    }
}

/// `forEachTransaction`'s body runs between its snapshot's reads, as an export's `emit` does: a
/// `close()` from it closes the store and the visit stops with `closed`.
@Suite struct CloseFromTransactionVisitTests {
    @Test func closeFromTheBodyStopsTheVisit() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        for i in 0..<5 { _ = try await store.save(genres(2, prefix: "v\(i)")) }
        let visited = Locked(0)
        let result = try await resultOnThread("forEachTransaction after close() from its body") {
            try store.forEachTransaction { _ in
                visited.withLock { $0 += 1 }
                store.close()
                return true
            }
        }
        switch result {
        case .success: Issue.record("the visit went on to the end after close()")
        case .failure(let error):
            guard case StrataError.closed = error else { Issue.record("expected closed, got \(error)"); return }
        }
        #expect(visited.withLock { $0 } == 1)
    }
}
