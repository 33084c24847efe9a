import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `Store.close()` called from inside an operation's own `progress` callback: the callback runs
/// inside the operation's read of the store (compaction, migration, verify's rebuild) or while
/// a second thread's read waits for the caller (verify's in-memory check), so a close that waited
/// for every read to end would wait for itself. The close returns at once and finishes on a
/// thread of its own when the operation's reads end; the operation then stops with
/// ``StrataError/closed(path:)`` (or returns, if it needed the store no more), and the path opens
/// again once the close has finished.
///
/// Each operation runs on a thread of its own (not the cooperative pool), and the test waits for
/// it with a deadline: an operation that never returns fails the test instead of hanging the run.
@Suite struct CloseFromCallbackTests {
    /// A task executor on a serial queue of its own, one per operation: an operation that
    /// deadlocks holds only its own queue (a shared one would stop the other tests' operations).
    private final class OwnQueueExecutor: TaskExecutor {
        private let queue = DispatchQueue(label: "strata-tests.close-from-callback")
        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    /// Runs `body` on a new thread; the result once it has returned.
    private func onThread<R: Sendable>(_ body: @escaping @Sendable () async throws -> R) -> Locked<Result<R, Error>?> {
        let outcome = Locked<Result<R, Error>?>(nil)
        Thread {
            let done = DispatchSemaphore(value: 0)
            // Kept alive here until the task ends (a task does not retain its executor preference).
            let executor = OwnQueueExecutor()
            Task(executorPreference: executor) {
                let r = await Result { try await body() }
                outcome.withLock { $0 = r }
                done.signal()
            }
            done.wait()
            withExtendedLifetime(executor) {}
        }.start()
        return outcome
    }

    private func awaitOutcome<R>(_ outcome: Locked<Result<R, Error>?>, _ what: String) async throws -> Result<R, Error> {
        let deadline = Date().addingTimeInterval(60)
        while true {
            if let r = outcome.withLock({ $0 }) { return r }
            try #require(Date() < deadline, "\(what) never returned after close() from its progress callback (deadlock)")
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    private func isClosedError(_ error: Error) -> Bool {
        if case StrataError.closed = error { return true }
        return false
    }

    @Test func closeFromACompactionsCopyingProgressStopsTheCompaction() async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let store = try Store.open(at: dir, schema: schema)
        _ = try await store.save(genres(200))
        _ = try await store.save { $0.insert(Genre(name: "after")) }
        let calledClose = Locked(0)
        let callbacksAfterClose = Locked(0)
        let outcome = onThread {
            try await store.compact { p in
                if calledClose.withLock({ $0 }) > 0 {
                    callbacksAfterClose.withLock { $0 += 1 }
                    return
                }
                guard p.phase == .copying else { return }
                store.close()
                store.close()   // a second call from the same place must not wait either
                calledClose.withLock { $0 += 1 }
            }
        }
        let result = try await awaitOutcome(outcome, "compact()")
        #expect(calledClose.withLock { $0 } == 1, "close() returned inside the callback")
        // The build stops right after the callback (without that check it copied on, reporting
        // each database, and failed only at the catch-up).
        #expect(callbacksAfterClose.withLock { $0 } == 0)
        switch result {
        case .success: Issue.record("the compaction switched generations on a closed store")
        case .failure(let error): #expect(isClosedError(error), "expected StrataError.closed, got \(error)")
        }
        #expect(store.isClosed)
        let again = try await openAfterBackgroundClose(dir, schema: schema)
        defer { again.close() }
        #expect(try again.snapshot(label: "t").count(Query(entity: "Genre")) == 201, "nothing saved before was lost")
    }

    /// Where the migration's callback closes the store.
    enum MigrationClosePoint: String, CaseIterable, Sendable {
        /// The log side's first report, on the migrating thread inside its read.
        case logStart
        /// The state side's last report (done > 0), on the second thread inside its read.
        case stateEnd
        /// `logStart` in a dry run, which used to return its report after such a close.
        case logStartDryRun
        /// `stateEnd` in a dry run: the build has nothing left to check, so only the check after
        /// the read stops it.
        case stateEndDryRun

        var isDryRun: Bool { self == .logStartDryRun || self == .stateEndDryRun }
        var isStateEnd: Bool { self == .stateEnd || self == .stateEndDryRun }
    }

    @Test(arguments: MigrationClosePoint.allCases)
    func closeFromAMigrationsProgressStopsTheMigration(at point: MigrationClosePoint) async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let schemas = try Schema.loadAll(directory: librarySchemaDirectory)
        try #require(schemas.count >= 2)
        try await makeV1TrackStore(at: dir, schema: schemas[0])
        let store = try Store.openExisting(at: dir)
        let calledClose = Locked(0)
        let callbacksAfterClose = Locked(0)
        let outcome = onThread {
            try await store.migrate(schemas: schemas, to: schemas[1].version, registry: libraryMigrations,
                                    dryRun: point.isDryRun) { p in
                if calledClose.withLock({ $0 }) > 0 { callbacksAfterClose.withLock { $0 += 1 } }
                let here = point.isStateEnd ? (p.phase == .base && p.done > 0) : p.phase == .log
                guard here, calledClose.withLock({ $0 }) == 0 else { return }
                store.close()
                calledClose.withLock { $0 += 1 }
            }
        }
        let result = try await awaitOutcome(outcome, "migrate() closed at \(point)")
        #expect(calledClose.withLock { $0 } == 1)
        switch result {
        case .success: Issue.record("the migration returned a report after close() at \(point)")
        case .failure(let error): #expect(isClosedError(error), "expected StrataError.closed, got \(error)")
        }
        if !point.isStateEnd {
            // Closed before the state side started (it then runs after the log side, on this
            // thread): the log side stops at its next entry, and neither side reports again
            // (without the cancellation both went on to the end, reporting as they went).
            #expect(callbacksAfterClose.withLock { $0 } == 0)
        }
        // Not migrated: the store still opens with v1 and holds its 10,000 tracks.
        let again = try await openAfterBackgroundClose(dir, schema: schemas[0])
        defer { again.close() }
        #expect(try again.snapshot(label: "t").count(Query(entity: "Track")) == 10_000)
    }

    @Test(arguments: [false, true])
    func closeFromVerifysProgressDoesNotWaitForVerify(rebuild: Bool) async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let store = try Store.open(at: dir, schema: schema)
        for i in 0..<5 { _ = try await store.save(genres(100, prefix: "g\(i)")) }
        let calledClose = Locked(0)
        let outcome = onThread {
            try store.verify(rebuild: rebuild) { p in
                guard p.phase == .replaying, calledClose.withLock({ $0 }) == 0 else { return }
                store.close()
                calledClose.withLock { $0 += 1 }
            }
        }
        let result = try await awaitOutcome(outcome, "verify(rebuild: \(rebuild))")
        #expect(calledClose.withLock { $0 } == 1)
        if rebuild {
            // The rebuild may finish from what it has already read, or stop at its next read.
            if case .failure(let error) = result { #expect(isClosedError(error), "expected StrataError.closed, got \(error)") }
            if case .success(let report) = result { #expect(report.problemCount == 0) }
        } else {
            // The in-memory check on two threads (the case that needs the thread mark): its
            // callback comes while the second thread's read waits for this one, and it has read
            // everything it needs by then, so it returns its report.
            let report = try result.get()
            #expect(report.method == .inMemory && report.problemCount == 0)
        }
        #expect(store.isClosed)
        let again = try await openAfterBackgroundClose(dir, schema: schema)
        defer { again.close() }
        #expect(try again.snapshot(label: "t").count(Query(entity: "Genre")) == 500)
    }
}

/// An abandoned generation removes its own directory only: after a close from a progress
/// callback, the store may be opened again (removing the unfinished generation) and compacted
/// into a new generation of the same number before the first operation abandons its own.
@Suite struct PendingGenerationTests {
    @Test func abandonRemovesItsOwnDirectoryAndNotALaterOneOfTheSameName() throws {
        let store = try Store.temporary(schema: try librarySchema())
        defer { store.close() }
        let mine = try store.makeGeneration(like: store.env)
        mine.abandon()
        #expect(!FileManager.default.fileExists(atPath: mine.env.path), "abandon() left its own generation")

        let old = try store.makeGeneration(like: store.env)
        // What a reopen and a new compaction do meanwhile: remove it, make one of the same name.
        try FileManager.default.removeItem(atPath: old.env.path)
        try FileManager.default.createDirectory(atPath: old.env.path, withIntermediateDirectories: false)
        try Data("new".utf8).write(to: URL(fileURLWithPath: old.env.path + "/marker"))
        old.abandon()
        #expect(FileManager.default.fileExists(atPath: old.env.path + "/marker"), "abandon() removed another generation of the same name")
        try FileManager.default.removeItem(atPath: old.env.path)
    }
}
