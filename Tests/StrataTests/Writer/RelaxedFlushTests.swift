import CLMDB
import Foundation
import Glibc
import LibraryModel
import Synchronization
import Testing
@testable import Strata

/// Relaxed mode's flushes run on a background queue: the writer asks for one at most
/// every `relaxedSyncIntervalMs` and goes on committing while the kernel writes the pages out.
@Suite struct RelaxedFlushTests {
    private func relaxed(intervalMs: Int) -> StoreConfiguration {
        var config = StoreConfiguration()
        config.durability = .relaxed
        config.relaxedSyncIntervalMs = intervalMs
        return config
    }

    /// A flush held up (by the test hook) does not hold up the writer: later saves commit while it
    /// waits, and it runs once released.
    @Test func savesCommitWhileAFlushRuns() async throws {
        let dir = temporaryDirectory("relaxed-flush")
        defer { try? FileManager.default.removeItem(at: dir) }
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let entries = Atomic<Int>(0)
        do {
            let store = try Store.open(at: dir, schema: try librarySchema(), configuration: relaxed(intervalMs: 1))
            let env = store.env
            env.beforeFlushForTesting.withLock { hook in
                hook = {
                    entries.add(1, ordering: .relaxed)
                    entered.signal()
                    // Bounded, so a writer that flushed inline would be slow here, not stuck.
                    _ = release.wait(timeout: .now() + .seconds(120))
                }
            }
            try await Task.sleep(for: .milliseconds(5))   // past the interval: the first save asks for a flush
            _ = try store.saveAndWait { $0.insert(Genre(name: "first")) }
            #expect(entered.wait(timeout: .now() + .seconds(60)) == .success, "the first save asked for a flush")
            for i in 0..<20 { _ = try store.saveAndWait { $0.insert(Genre(name: "later \(i)")) } }
            #expect(entries.load(ordering: .relaxed) == 1, "one flush, held up, while 20 saves committed")
            #expect(env.flushInProgress)
            #expect(env.completedFlushes == 0, "saves waited for the flush")
            #expect(try store.mainContext.count(Genre.self) == 21)
            env.beforeFlushForTesting.withLock { $0 = nil }
            release.signal()
            env.waitForFlushes()
            #expect(env.completedFlushes >= 1)
            store.close()
        }
        let reopened = try Store.open(at: dir, schema: try librarySchema())
        defer { reopened.close() }
        #expect(try reopened.mainContext.count(Genre.self) == 21)
    }

    /// Requests made while a flush runs coalesce into one more flush, which starts after them.
    @Test func requestsDuringAFlushCoalesce() throws {
        let (env, dir) = try openEnvironment("flush-coalesce")
        defer { try? FileManager.default.removeItem(at: dir) }
        defer { env.close() }
        let (entered, release) = holdFlushes(of: env)
        let errors = Atomic<Int>(0)
        env.requestFlush { _ in errors.add(1, ordering: .relaxed) }
        #expect(entered.wait(timeout: .now() + .seconds(60)) == .success, "the first flush started")
        for _ in 0..<50 { env.requestFlush { _ in errors.add(1, ordering: .relaxed) } }
        release.signal()
        #expect(entered.wait(timeout: .now() + .seconds(60)) == .success, "one more flush ran after the requests")
        release.signal()
        env.waitForFlushes()
        #expect(env.completedFlushes == 2)
        #expect(errors.load(ordering: .relaxed) == 0)
    }

    /// A flush asked for after the environment closed does nothing (it never touches the freed
    /// environment).
    @Test func aRequestAfterCloseRunsNoFlush() throws {
        let (env, dir) = try openEnvironment("flush-closed")
        defer { try? FileManager.default.removeItem(at: dir) }
        env.close()
        env.requestFlush { _ in }
        env.waitForFlushes()
        #expect(env.completedFlushes == 0)
    }

    /// The environment closes while a requested flush is queued (held up before it starts): the
    /// flush then finds it closed and does nothing.
    @Test func aFlushQueuedWhenTheEnvironmentClosesDoesNothing() throws {
        let (env, dir) = try openEnvironment("flush-closing")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (entered, release) = holdFlushes(of: env)
        env.requestFlush { _ in }
        #expect(entered.wait(timeout: .now() + .seconds(60)) == .success)
        let closed = DispatchSemaphore(value: 0)
        Thread { env.close(); closed.signal() }.start()
        #expect(closed.wait(timeout: .now() + .seconds(60)) == .success, "close() waited for a flush that had not started")
        release.signal()
        env.waitForFlushes()
        #expect(env.completedFlushes == 0)
    }

    /// A failed background flush consumes the kernel's one report of the write error: it is kept,
    /// and the next `sync()` (a relaxed store's close) throws it instead of succeeding.
    @Test func aFailedFlushIsThrownByTheNextSync() throws {
        let (env, dir) = try openEnvironment("flush-error")
        defer { try? FileManager.default.removeItem(at: dir) }
        defer { env.close() }
        try env.sync()
        // The flush's fdatasync fails as a write error would: LMDB's descriptor is swapped (dup2,
        // atomically, so no other test can get its number meanwhile) for a pipe, which cannot be
        // synced (EINVAL), then swapped back.
        var fd: Int32 = -1
        try #require(mdb_env_get_fd(env.handle, &fd) == MDB_SUCCESS)
        var pipeEnds: [Int32] = [-1, -1]
        try #require(pipe(&pipeEnds) == 0)
        let saved = dup(fd)
        try #require(saved >= 0)
        try #require(dup2(pipeEnds[0], fd) == fd)
        let reported = Atomic<Int>(0)
        env.requestFlush { _ in reported.add(1, ordering: .relaxed) }
        env.waitForFlushes()
        #expect(dup2(saved, fd) == fd)   // the data file back: the next sync itself succeeds
        for d in [saved, pipeEnds[0], pipeEnds[1]] { Glibc.close(d) }
        #expect(reported.load(ordering: .relaxed) == 1)
        #expect(throws: LMDBError.self) { try env.sync() }
    }

    /// A relaxed (`MDB_NOSYNC`) environment in a fresh directory.
    private func openEnvironment(_ name: String) throws -> (LMDBEnvironment, URL) {
        let dir = temporaryDirectory(name)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let options = LMDBOptions(mapSizeBytes: 16 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: true, noLock: false)
        return (try LMDBEnvironment(path: dir.path, options: options), dir)
    }

    /// Holds each of `env`'s background flushes before it starts: it signals `entered`, then
    /// waits for `release` (at most 3 s, so a test that goes wrong is slow, not stuck).
    private func holdFlushes(of env: LMDBEnvironment) -> (entered: DispatchSemaphore, release: DispatchSemaphore) {
        let entered = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        env.beforeFlushForTesting.withLock { hook in
            hook = {
                entered.signal()
                _ = release.wait(timeout: .now() + .seconds(120))
            }
        }
        return (entered, release)
    }

    @Test func relaxedStoreClosesCleanlyRightAfterSaving() async throws {
        var config = StoreConfiguration()
        config.durability = .relaxed
        config.relaxedSyncIntervalMs = 5
        let dir = temporaryDirectory("relaxed-close")
        defer { try? FileManager.default.removeItem(at: dir) }
        for i in 0..<20 {
            let store = try Store.open(at: dir.appendingPathComponent("s\(i)"), schema: try librarySchema(),
                                       configuration: config)
            _ = try await store.save { $0.insert(Genre(name: "g\(i)")) }
            store.close()
            // Its close flushed the commits: no marker of unsynced ones is left.
            #expect(try UnsyncedCommits.markers(in: dir.appendingPathComponent("s\(i)").path).isEmpty, "store \(i)")
        }
        // The delayed syncs of closed stores must not touch freed environments (that ends the
        // process); reopened, every store holds its genre and says it was closed cleanly.
        try await Task.sleep(for: .milliseconds(50))
        for i in 0..<20 {
            let store = try Store.open(at: dir.appendingPathComponent("s\(i)"), schema: try librarySchema(),
                                       configuration: config)
            defer { store.close() }
            #expect(!store.crashedWithUnsyncedCommits, "store \(i)")
            #expect(try store.mainContext.fetch(Genre.self).map(\.name) == ["g\(i)"])
        }
    }
    /// A background flush that fails (the disk reports an I/O error) stops the writer: the next
    /// saves are refused with the flush's error, while the store can still be read. It went on
    /// acknowledging saves over pages the kernel may have dropped.
    @Test func aFailedFlushStopsTheWriter() async throws {
        let dir = temporaryDirectory("relaxed-flush-failed")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Store.open(at: dir, schema: try librarySchema(), configuration: relaxed(intervalMs: 1))
        defer { store.close() }
        store.env.flushErrorForTesting.withLock { $0 = EIO }
        try await Task.sleep(for: .milliseconds(5))
        _ = try store.saveAndWait { $0.insert(Genre(name: "before the failed flush")) }
        store.env.waitForFlushes()
        var refused: Error?
        for i in 0..<200 where refused == nil {
            do {
                _ = try store.saveAndWait { $0.insert(Genre(name: "after \(i)")) }
                try await Task.sleep(for: .milliseconds(5))
            } catch {
                refused = error
            }
        }
        guard case StrataError.lmdb(let e)? = refused else {
            Issue.record("saves went on after a failed flush: \(String(describing: refused))")
            return
        }
        #expect(e.code == EIO && e.operation.contains("takes no more saves"), "\(e)")
        #expect(try store.mainContext.fetch(Genre.self).contains { $0.name == "before the failed flush" })
        store.env.flushErrorForTesting.withLock { $0 = nil }
    }

    /// A failed background flush is noted in the store's marker at once, and stays noted: a
    /// process killed after it (no close) left a marker that the next open settled as a clean
    /// exit (its own sync succeeds: the kernel reported the write error once, and dropped the
    /// pages), and a close whose final flush succeeded cleared it. The next open reports it.
    @Test func aFailedFlushIsNotedInTheMarkerAtOnceAndStaysNoted() async throws {
        let dir = temporaryDirectory("relaxed-flush-noted")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema(), configuration: relaxed(intervalMs: 1))
            store.env.flushErrorForTesting.withLock { $0 = EIO }
            _ = try store.saveAndWait { $0.insert(Genre(name: "before the failed flush")) }
            store.env.waitForFlushes()
            let deadline = ContinuousClock.now + .seconds(30)
            while store.writer?.failedFlush == nil, ContinuousClock.now < deadline {
                _ = try? store.saveAndWait { $0.insert(Genre(name: "more \(UUID())")) }
                store.env.waitForFlushes()
            }
            #expect(store.writer?.failedFlush != nil)
            // Noted before any close.
            let markers = try UnsyncedCommits.markers(in: dir.path)
            #expect(markers.count == 1 && markers.allSatisfy(\.flushFailed), "\(markers)")
            // The close's own flush succeeds now: the marker is not cleared for it.
            store.env.flushErrorForTesting.withLock { $0 = nil }
            store.close()
        }
        let reopened = try Store.open(at: dir, schema: try librarySchema())
        defer { reopened.close() }
        #expect(reopened.crashedWithUnsyncedCommits)
    }

    /// A durable commit whose write or sync fails with an I/O error stops the writer, as a failed
    /// relaxed flush does, and leaves a marker that the next open reports: the kernel may have
    /// dropped the pages it could not write, and the next commit's sync, succeeding over them,
    /// would have acknowledged a durable save on pages the disk does not have.
    @Test func aDurableCommitWhoseSyncFailsStopsTheWriterAndIsReportedByTheNextOpen() async throws {
        let dir = temporaryDirectory("durable-sync-failed")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            _ = try await store.save { $0.insert(Genre(name: "before")) }
            store.env.commitErrorForTesting.withLock { $0 = EIO }
            await #expect(throws: StrataError.self) { _ = try await store.save { $0.insert(Genre(name: "failed")) } }
            store.env.commitErrorForTesting.withLock { $0 = nil }
            await #expect { _ = try await store.save { $0.insert(Genre(name: "after")) } } throws: { error in
                guard case StrataError.lmdb(let e) = error else { return false }
                return e.code == EIO && e.operation.contains("takes no more saves")
            }
            let markers = try UnsyncedCommits.markers(in: dir.path)
            #expect(markers.count == 1 && markers.allSatisfy(\.flushFailed), "\(markers)")
            store.close()
        }
        let reopened = try Store.open(at: dir, schema: try librarySchema())
        defer { reopened.close() }
        #expect(reopened.crashedWithUnsyncedCommits)
        _ = try await reopened.save { $0.insert(Genre(name: "after reopening")) }
    }
}
