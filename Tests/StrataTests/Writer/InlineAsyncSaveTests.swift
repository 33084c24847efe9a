import Dispatch
import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A small `save` in relaxed mode that finds the writer idle commits on its task's thread
/// (`Writer.commitInlineIfIdle`). `WriterStatistics.inlineAsyncSaves` tells which path a save
/// took; these tests check that the inline path is taken exactly when documented, and that it
/// keeps every promise of the queued path: ids in order, all-or-nothing validation, saves from
/// other callers meanwhile, a held writer, a closed store.
///
/// Serialized: several tests hold a saver at a writer hook (`HeldHook`) on `HookExecutor`'s
/// one thread; two such tests at once would wait for each other's saver.
@Suite(.serialized) struct InlineAsyncSaveTests {
    @Test func sequentialSmallRelaxedSavesCommitInlineWithConsecutiveIDs() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            var ids: [UInt64] = []
            for i in 0..<40 { ids.append(try await store.save(genres(1, prefix: "g\(i)")).rawValue) }
            #expect(ids == Array(1...40))
            let stats = store.statistics
            #expect(stats.inlineAsyncSaves == 40, "\(stats)")
            #expect(stats.saves == 40 && stats.transactions == 40 && stats.lmdbCommits == 40, "\(stats)")
            #expect(try store.mainContext.count(Genre.self) == 40)
        }
    }

    @Test func theLimitIsSixtyFourChanges() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            _ = try await store.save(genres(Writer.inlineCommitMaxChanges, prefix: "at"))
            #expect(store.statistics.inlineAsyncSaves == 1)
            _ = try await store.save(genres(Writer.inlineCommitMaxChanges + 1, prefix: "over"))
            #expect(store.statistics.inlineAsyncSaves == 1, "a save over the limit committed inline")
            #expect(store.statistics.saves == 2)
            #expect(try store.mainContext.count(Genre.self) == 2 * Writer.inlineCommitMaxChanges + 1)
        }
        #expect(Writer.inlineCommitMaxChanges == 64, "README and Store.save document 64")
    }

    @Test func durableSavesAlwaysHop() async throws {
        try await withLibraryStore { store in
            for i in 0..<5 { _ = try await store.save(genres(1, prefix: "d\(i)")) }
            #expect(store.statistics.inlineAsyncSaves == 0)
            #expect(store.statistics.saves == 5)
        }
    }

    /// A refused inline save writes nothing and leaves the path open: the next save commits
    /// inline again (the "inline commit under way" mark was cleared).
    @Test func aRefusedInlineSaveWritesNothingAndTheNextOneStillCommitsInline() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            let first = makeTrack(title: "one", duration: 100)
            let tx1 = try await store.save { $0.insert(first) }
            var clash = makeTrack(title: "two", duration: 200)
            clash.mbid = first.mbid
            var changes = ChangeSet()
            changes.insert(Genre(name: "not written"))
            changes.insert(clash)
            await #expect {
                _ = try await store.save(changes)
            } throws: { error in
                guard case StrataError.validation(let f) = error else { return false }
                return f.kind == .uniqueConstraint
            }
            #expect(try store.mainContext.count(Genre.self) == 0)
            #expect(try store.mainContext.count(Track.self) == 1)
            let tx2 = try await store.save(genres(1, prefix: "after"))
            #expect(tx2.rawValue == tx1.rawValue + 1, "the refused save used a transaction id")
            let stats = store.statistics
            #expect(stats.inlineAsyncSaves == 3, "\(stats)")
            #expect(stats.saves == 2 && stats.failedSaves == 1, "\(stats)")
        }
    }

    /// While an `exclusive` body holds the writer, a save must not block its task's thread on
    /// the writer queue: it queues, commits after the release, and is not counted inline.
    @Test(.timeLimit(.minutes(15))) func aSaveWhileTheWriterIsHeldQueuesInsteadOfBlocking() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            let held = try await holdWriter(store)
            let writer = try #require(store.writer)
            // On a thread of its own: if it wrongly commits inline, it blocks there, not in the pool.
            let save = saveOnHookExecutor(store, genres(1, prefix: "held"))
            // Queued either way (an inline claim queues it too); then its path is decided.
            try await waitUntil { writer.pendingForTesting > 0 }
            #expect(store.statistics.lmdbCommits == 0, "a commit ran while the writer was held")
            #expect(store.statistics.inlineAsyncSaves == 0, "the save waited inline behind the held writer")
            try await held.release()
            #expect(try await save.value.rawValue == 1)
            #expect(store.statistics.inlineAsyncSaves == 0)
            #expect(try store.mainContext.count(Genre.self) == 1)
        }
    }

    /// Async savers on tasks and blocking savers on threads at once, in relaxed mode: every save
    /// commits exactly once, the transaction ids are 1…n without a gap or a repeat, no large
    /// save commits inline, and afterwards the inline path is open again.
    @Test(.timeLimit(.minutes(15))) func concurrentAsyncAndBlockingSaversAllCommitOnce() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            let tasks = 6, perTask = 60, threads = 2, perThread = 60
            let threadIDs = Locked<[UInt64]>([])
            let threadErrors = Locked<[String]>([])
            let group = DispatchGroup()
            for t in 0..<threads {
                group.enter()
                Thread {
                    defer { group.leave() }
                    for i in 0..<perThread {
                        do {
                            let id = try store.saveAndWait(genres(1, prefix: "thread\(t)-\(i)"))
                            threadIDs.withLock { $0.append(id.rawValue) }
                        } catch {
                            threadErrors.withLock { $0.append("\(error)") }
                        }
                    }
                }.start()
            }
            let taskIDs = try await withThrowingTaskGroup(of: [UInt64].self) { g in
                for t in 0..<tasks {
                    g.addTask {
                        var ids: [UInt64] = []
                        for i in 0..<perTask {
                            // Every fifth save is over the inline limit, so groups mix both sizes.
                            let n = i % 5 == 0 ? Writer.inlineCommitMaxChanges + 1 : 1
                            ids.append(try await store.save(genres(n, prefix: "task\(t)-\(i)")).rawValue)
                        }
                        return ids
                    }
                }
                var all: [UInt64] = []
                for try await ids in g { all += ids }
                return all
            }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                group.notify(queue: .global()) { c.resume() }
            }
            #expect(threadErrors.withLock { $0 }.isEmpty, "\(threadErrors.withLock { $0 })")
            let all = taskIDs + threadIDs.withLock { $0 }
            let total = tasks * perTask + threads * perThread
            #expect(all.count == total)
            #expect(all.sorted() == Array(1...UInt64(total)), "transaction ids with a gap or a repeat")
            let stats = store.statistics
            #expect(stats.saves == total && stats.transactions == total, "\(stats)")
            // Which path each small save took depends on timing (a blocking saver in the queue
            // sends it the queued way); the large ones never commit inline.
            #expect(stats.inlineAsyncSaves <= tasks * (perTask - perTask / 5), "a large save committed inline: \(stats)")
            // Once the load is over and the last drain has ended, nothing is left counted: the
            // next small save commits inline.
            let writer = try #require(store.writer)
            try await waitUntil { !writer.drainingForTesting }
            _ = try await store.save(genres(1, prefix: "after"))
            #expect(store.statistics.inlineAsyncSaves == stats.inlineAsyncSaves + 1, "\(store.statistics)")
            let oversized = tasks * (perTask / 5)
            let expected = tasks * (perTask - perTask / 5) + oversized * (Writer.inlineCommitMaxChanges + 1) + threads * perThread + 1
            #expect(try store.mainContext.count(Genre.self) == expected)
        }
    }

    @Test func aSaveAfterCloseIsRefused() async throws {
        let store = try Store.temporary(schema: try librarySchema(), configuration: relaxedConfiguration())
        _ = try await store.save(genres(1, prefix: "before"))
        store.close()
        await #expect {
            _ = try await store.save(genres(1, prefix: "after"))
        } throws: { error in
            if case StrataError.closed = error { return true }
            return false
        }
    }
    /// A `saveAndWait` caller commits inside the writer queue without marking it as draining:
    /// a small `save` arriving during its commit must take the queued path, not block its
    /// thread in the queue behind it (inline, it would wait behind a bulk save for as long as
    /// that takes: seconds). Deterministic: a test hook holds the blocking caller inside the queue.
    @Test(.timeLimit(.minutes(15))) func aSmallSaveDuringABlockingSaveDoesNotCommitInline() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            let writer = try #require(store.writer)
            let inside = HeldHook.arm(writer) { $0.afterCallerTookGroup = $1 }
            let blockingID = Locked<UInt64?>(nil)
            Thread {
                blockingID.withLock { $0 = (try? store.saveAndWait(genres(100, prefix: "blocking")))?.rawValue }
            }.start()
            try await inside.waitUntilReached()
            // If it wrongly commits inline, it blocks in the queue on the hook executor's thread,
            // and the test still releases the caller and reports it.
            let small = saveOnHookExecutor(store, genres(1, prefix: "small"))
            // Queued either way (an inline claim queues it too); then its path is decided.
            try await waitUntil { writer.pendingForTesting > 0 }
            #expect(store.statistics.inlineAsyncSaves == 0, "the small save committed inline while a saveAndWait held the writer queue")
            inside.release()
            let smallID = try await small.value.rawValue
            try await waitUntil { blockingID.withLock { $0 } != nil }
            #expect(blockingID.withLock { $0 } == 1 && smallID == 2)
            #expect(store.statistics.inlineAsyncSaves == 0)
            #expect(try store.mainContext.count(Genre.self) == 101)
        }
    }

    /// An `exclusive` body asked for between an inline save's claim and its commit runs after
    /// that commit (it is deferred), so the saver's thread never waits for a body (a
    /// compaction's catch-up, with its fsync). Deterministic: the test hook holds the saver
    /// between claim and commit while the body is asked for.
    @Test(.timeLimit(.minutes(15))) func anExclusiveBodyAskedForDuringAnInlineCommitRunsAfterIt() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            let writer = try #require(store.writer)
            let claimed = HeldHook.arm(writer) { $0.beforeInlineCommit = $1 }
            let save = saveOnHookExecutor(store, genres(1, prefix: "inline"))
            try await claimed.waitUntilReached()
            // Asked for (queued or deferred), or already run: the latter is the bug, caught below.
            let body = try await askForExclusive(writer) { writer.statistics.saves }
            claimed.release()
            #expect(try await save.value.rawValue == 1)
            #expect(try await body.value == 1, "the exclusive body ran before the inline commit it was asked for during")
            #expect(store.statistics.inlineAsyncSaves == 1)
            #expect(writer.exclusiveQueuedForTesting == 0)
        }
    }

    /// `close()` while an inline save is between its claim and its commit, with an `exclusive`
    /// body deferred behind it: close waits for both (the save commits, the body runs on the
    /// open environment), and a body asked for after the close is refused.
    @Test(.timeLimit(.minutes(15))) func closeWaitsForAnInlineSaveAndADeferredBody() async throws {
        let store = try Store.temporary(schema: try librarySchema(), configuration: relaxedConfiguration())
        let writer = try #require(store.writer)
        let claimed = HeldHook.arm(writer) { $0.beforeInlineCommit = $1 }
        let save = saveOnHookExecutor(store, genres(1, prefix: "inline"))
        try await claimed.waitUntilReached()
        let body = try await askForExclusive(writer) {
            try writer.env.read { txn in try ReadView(txn: txn, env: writer.env, schema: writer.schema).lastTransactionID() }
        }
        let closed = closeOnThread(store)
        try await Task.sleep(for: .milliseconds(50))
        #expect(!closed.withLock { $0 }, "close() returned while a save it had let in was still to commit")
        claimed.release()
        #expect(try await save.value.rawValue == 1)
        #expect(try await body.value.rawValue == 1, "the deferred body did not see the inline commit")
        try await waitUntil { closed.withLock { $0 } }
        await #expect {
            _ = try await writer.exclusive { 0 }
        } throws: { error in
            if case StrataError.closed = error { return true }
            return false
        }
    }

    /// `close()` while an inline save is between its claim and its commit (no body involved):
    /// close waits for the commit instead of closing the environment underneath it.
    @Test(.timeLimit(.minutes(15))) func closeWaitsForAnInlineSaveBetweenClaimAndCommit() async throws {
        let store = try Store.temporary(schema: try librarySchema(), configuration: relaxedConfiguration())
        let writer = try #require(store.writer)
        let claimed = HeldHook.arm(writer) { $0.beforeInlineCommit = $1 }
        let save = saveOnHookExecutor(store, genres(1, prefix: "inline"))
        try await claimed.waitUntilReached()
        let closed = closeOnThread(store)
        try await Task.sleep(for: .milliseconds(50))
        #expect(!closed.withLock { $0 }, "close() returned while a save it had let in was still to commit")
        claimed.release()
        #expect(try await save.value.rawValue == 1)
        try await waitUntil { closed.withLock { $0 } }
        #expect(writer.statistics.saves == 1)
    }

    /// An inline commit's group takes the saves queued behind the caller's only while their
    /// changes fit in ``Writer/inlineCommitMaxChanges``; the first save is always taken; without
    /// a budget only `maxSavesPerGroup` limits it.
    @Test func anInlineGroupTakesQueuedSavesOnlyWithinItsChangeBudget() {
        func saves(_ sizes: [Int]) -> [Writer.PendingSave] {
            sizes.map { n in
                Writer.PendingSave(changes: genres(n, prefix: "s\(n)"), author: "t", metadata: [:], completion: .waiter(Writer.Waiter()))
            }
        }
        let budget = Writer.inlineCommitMaxChanges
        #expect(Writer.groupSize(saves([1, 1, 1]), limit: 64, maxChanges: budget) == 3)
        #expect(Writer.groupSize(saves([1, budget, 1]), limit: 64, maxChanges: budget) == 1, "a save over what is left of the budget joined")
        #expect(Writer.groupSize(saves([1, budget - 1, 1]), limit: 64, maxChanges: budget) == 2)
        #expect(Writer.groupSize(saves([budget + 5, 1]), limit: 64, maxChanges: budget) == 1, "the caller's own save is always taken")
        #expect(Writer.groupSize(saves([1, 1, 1]), limit: 2, maxChanges: budget) == 2)
        #expect(Writer.groupSize(saves([1, 500, 1]), limit: 64, maxChanges: nil) == 3)
        #expect(Writer.groupSize([], limit: 64, maxChanges: budget) == 0)
    }

    /// The inline commit's group leaves a large save queued behind it for the drain: the
    /// caller's thread commits only its own small group. Deterministic: a hook holds the inline
    /// saver inside the queue until the large save is queued behind it.
    @Test(.timeLimit(.minutes(15))) func anInlineCommitLeavesALargeQueuedSaveToTheDrain() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            let writer = try #require(store.writer)
            let inside = HeldHook.arm(writer) { $0.beforeCallerTakesGroup = $1 }
            let small = saveOnHookExecutor(store, genres(1, prefix: "inline"))
            try await inside.waitUntilReached()
            let large = Task { try await store.save(genres(Writer.inlineCommitMaxChanges + 1, prefix: "large")) }
            try await waitUntil { writer.pendingForTesting >= 2 }
            inside.release()
            #expect(try await small.value.rawValue == 1)
            #expect(try await large.value.rawValue == 2)
            let stats = store.statistics
            #expect(stats.inlineAsyncSaves == 1, "\(stats)")
            #expect(stats.lmdbCommits == 2, "the inline commit took the large save into its group: \(stats)")
        }
    }

    /// An asynchronous save queued between an inline save's claim and its commit does not start
    /// a drain that could commit first and take the inline save into its own, larger group: the
    /// inline group commits alone, and the claim's end starts the drain for the large save.
    /// Deterministic: the hook holds the inline saver between claim and commit.
    @Test(.timeLimit(.minutes(15))) func aLargeSaveQueuedDuringAnInlineClaimCommitsAfterIt() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            let writer = try #require(store.writer)
            let claimed = HeldHook.arm(writer) { $0.beforeInlineCommit = $1 }
            let small = saveOnHookExecutor(store, genres(1, prefix: "inline"))
            try await claimed.waitUntilReached()
            let large = Task { try await store.save(genres(Writer.inlineCommitMaxChanges + 1, prefix: "large")) }
            // Both queued, or (the defect) committed by a drain that went ahead of the inline saver.
            try await waitUntil { writer.pendingForTesting >= 2 || store.statistics.saves > 0 }
            #expect(store.statistics.saves == 0, "a drain committed while the inline claim was held")
            #expect(!writer.drainingForTesting, "a drain was started while the inline claim was held")
            claimed.release()
            #expect(try await small.value.rawValue == 1)
            #expect(try await large.value.rawValue == 2)
            let stats = store.statistics
            #expect(stats.inlineAsyncSaves == 1 && stats.lmdbCommits == 2, "\(stats)")
        }
    }

    /// A `saveAndWait` made between an inline save's claim and its commit waits for the claim to
    /// end instead of entering the queue first with the inline save in its group.
    @Test(.timeLimit(.minutes(15))) func aSaveAndWaitDuringAnInlineClaimCommitsAfterIt() async throws {
        try await withLibraryStore(relaxedConfiguration()) { store in
            let writer = try #require(store.writer)
            let claimed = HeldHook.arm(writer) { $0.beforeInlineCommit = $1 }
            let small = saveOnHookExecutor(store, genres(1, prefix: "inline"))
            try await claimed.waitUntilReached()
            let blockingID = Locked<UInt64?>(nil)
            Thread {
                let id = try? store.saveAndWait(genres(Writer.inlineCommitMaxChanges + 1, prefix: "blocking"))
                blockingID.withLock { $0 = id?.rawValue ?? 0 }
            }.start()
            try await waitUntil { writer.pendingForTesting >= 2 || store.statistics.saves > 0 }
            try await Task.sleep(for: .milliseconds(20))
            #expect(store.statistics.saves == 0, "the saveAndWait committed while the inline claim was held")
            #expect(blockingID.withLock { $0 } == nil, "the saveAndWait committed while the inline claim was held")
            claimed.release()
            #expect(try await small.value.rawValue == 1)
            try await waitUntil { blockingID.withLock { $0 } != nil }
            #expect(blockingID.withLock { $0 } == 2)
            let stats = store.statistics
            #expect(stats.inlineAsyncSaves == 1 && stats.lmdbCommits == 2, "\(stats)")
        }
    }
}
