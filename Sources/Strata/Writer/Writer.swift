import Dispatch
import Foundation
import Logging
import Synchronization

/// The one writer of a store: owns every LMDB write transaction on the store's live environment
/// in this process. (A compaction or migration writes its new generation, a separate environment,
/// from its own threads until the switch, which runs on this writer's queue.)
///
/// Saves are queued; a serial dispatch queue drains them in groups (group commit): every save
/// waiting when a commit starts goes into the same LMDB transaction, each in its own nested
/// transaction so that one failing save is dropped without touching the others (a group that is
/// one caller's ordered saves, which stop at their first failure, runs flat: see
/// ``apply(_:_:env:flatOrderedGroup:)``). Each save gets its own transaction id and log entry;
/// the group costs one fsync.
///
/// The write transaction begins, runs and commits inside one synchronous block on the queue, so
/// it never crosses a thread or a suspension point.
final class Writer: Sendable {
    struct PendingSave: Sendable {
        let changes: ChangeSet
        let author: String
        let metadata: [String: String]
        let completion: Completion

        /// Hands the save's outcome to whoever waits for it.
        func complete(_ result: Result<TransactionID, Error>) {
            switch completion {
            case .continuation(let c): c.resume(with: result)
            case .waiter(let w): w.result.withLock { $0 = result }
            case .signal(let w, let done):
                w.result.withLock { $0 = result }
                done.signal()
            case .member(let group, let index): group.complete(index, result)
            }
        }
    }

    /// How a save's caller waits: suspended (``submit(_:author:metadata:)``) or blocked in the
    /// writer queue's `sync` (``submitAndWait(_:author:metadata:)``), which reads the result after.
    enum Completion: Sendable {
        case continuation(CheckedContinuation<TransactionID, Error>)
        case waiter(Waiter)
        /// Blocked on a semaphore while the writer's own queue commits (a replica's
        /// ``submitAndWait(_:author:metadata:)``: its commit waits for the network, which must not
        /// happen on the caller's thread, possibly an event loop).
        case signal(Waiter, DispatchSemaphore)
        /// One of the saves ``submitInOrder(_:author:stopAtFailure:)`` queued together, at this
        /// position.
        case member(GroupWaiter, Int)
    }

    /// The saves ``submitInOrder(_:author:stopAtFailure:)`` queued together: their results, and
    /// the task that waits for the last of them.
    final class GroupWaiter: Sendable {
        private struct State {
            var results: [Result<TransactionID, Error>?]
            var remaining: Int
            var continuation: CheckedContinuation<[Result<TransactionID, Error>], Never>?
            /// The earliest save that failed, and its error.
            var firstFailure: (index: Int, error: Error)?
        }
        private let state: Locked<State>
        /// Whether a save that fails refuses the ones after it
        /// (see ``submitInOrder(_:author:stopAtFailure:)``).
        let stopsAtFailure: Bool

        init(count: Int, stopsAtFailure: Bool) {
            state = Locked(State(results: Array(repeating: nil, count: count), remaining: count))
            self.stopsAtFailure = stopsAtFailure
        }

        /// With ``stopsAtFailure``: for the save at `index`, the error of an earlier save that
        /// failed, which it is refused with (the writer asks before it resolves each member).
        func refusal(for index: Int) -> Error? {
            guard stopsAtFailure, let f = state.withLock({ $0.firstFailure }), f.index < index else { return nil }
            return f.error
        }

        /// Notes the failure of the save at `index` once it is final (its transaction was
        /// aborted for it and the saves before it are committed again without it).
        func noteFailure(_ index: Int, _ error: Error) {
            state.withLock { s in
                if s.firstFailure.map({ index < $0.index }) ?? true { s.firstFailure = (index, error) }
            }
        }

        /// Waits for every result (`start` queues the saves; it runs once the continuation is
        /// in place, so a result can never arrive before there is someone to resume).
        func wait(_ start: () -> Void) async -> [Result<TransactionID, Error>] {
            await withCheckedContinuation { continuation in
                state.withLock { $0.continuation = continuation }
                start()
            }
        }

        func complete(_ index: Int, _ result: Result<TransactionID, Error>) {
            let done = state.withLock { s -> (CheckedContinuation<[Result<TransactionID, Error>], Never>,
                                              [Result<TransactionID, Error>])? in
                guard s.results[index] == nil else { return nil }
                s.results[index] = result
                if case .failure(let e) = result, s.firstFailure.map({ index < $0.index }) ?? true {
                    s.firstFailure = (index, e)
                }
                s.remaining -= 1
                guard s.remaining == 0, let c = s.continuation else { return nil }
                s.continuation = nil
                // Every slot is filled once `remaining` is zero (each index completes once).
                assert(!s.results.contains { $0 == nil }, "a group's saves all have a result")
                return (c, s.results.map { $0 ?? .failure(StrataError.closed(path: "")) })
            }
            if let (c, results) = done { c.resume(returning: results) }
        }
    }

    final class Waiter: Sendable {
        let result = Locked<Result<TransactionID, Error>?>(nil)
        var isDone: Bool { result.withLock { $0 != nil } }
    }

    private struct State {
        /// How saves and bodies get onto the queue (``WriterEntry``).
        var entry = WriterEntry()
        var syncScheduled = false
        var lastSync = ContinuousClock.now
        var statistics = WriterStatistics()
        /// Saves the last group commit answered (asynchronous callers only), and how long it took.
        var lastGroupSize = 0
        var lastCommitNanos: UInt64 = 0
    }

    /// The environment commits go to; replaced (on the writer queue only) by compaction.
    private let envBox: Locked<LMDBEnvironment>
    var env: LMDBEnvironment { envBox.withLock { $0 } }
    let schema: Schema
    let config: StoreConfiguration
    let publisher: CommitPublisher
    let logger: Logger
    let queue = DispatchQueue(label: "strata.writer", qos: .userInitiated)
    private let state = Locked(State())
    /// Signalled once per ``WriterEntry/gatherTarget`` reached (see ``gather()``).
    private let gathered = DispatchSemaphore(value: 0)
    /// Entered while an inline claim is held (under the lock, with the claim), left when it ends:
    /// a `saveAndWait` that finds the claim held waits on it before entering the queue.
    private let inlineClaimHeld = DispatchGroup()
    private let afterCommit: @Sendable () -> Void
    /// Set when the store is a replica of a cluster (its `meta` names the cluster): every save
    /// goes through ``replication``, and fails while none is attached.
    let isReplica = Atomic<Bool>(false)
    /// The shared log a replica's saves are appended to (see `Writer+Replication.swift`).
    let replication = Locked<(any ReplicationLog)?>(nil)

    init(env: LMDBEnvironment, storePath: String, schema: Schema, config: StoreConfiguration, publisher: CommitPublisher,
         logger: Logger, afterCommit: @escaping @Sendable () -> Void) {
        self.storePath = storePath
        self.envBox = Locked(env)
        self.schema = schema
        self.config = config
        self.publisher = publisher
        self.logger = logger
        self.afterCommit = afterCommit
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
    }

    /// The store's directory, for ``StrataError/closed(path:)`` (the environment's is a
    /// generation inside it).
    let storePath: String

    var statistics: WriterStatistics { state.withLock { $0.statistics } }

    /// The most changes a relaxed asynchronous save may have to commit on its caller's thread
    /// (see ``submit(_:author:metadata:)``): a larger one hops to the writer's thread, so that a
    /// task doing a bulk save does not hold a thread of Swift's cooperative pool for its length.
    static let inlineCommitMaxChanges = 64

    /// Queues a save and waits until it is committed (and, when durable, on disk).
    ///
    /// In ``Durability/relaxed`` mode a small save (at most ``inlineCommitMaxChanges`` changes)
    /// that finds the writer idle is committed on the caller's thread, as
    /// ``submitAndWait(_:author:metadata:)`` does: a relaxed commit waits for no fsync, so it is
    /// CPU work of tens of microseconds, less than the two thread hops (to the writer's queue
    /// and back to the task) it saves. A durable save always hops: its fsync would hold a thread
    /// of the cooperative pool.
    func submit(_ changes: ChangeSet, author: String, metadata: [String: String]) async throws -> TransactionID {
        // A replica's commit waits for the shared log's round trip: never on the caller's thread.
        if config.durability == .relaxed, changes.count <= Self.inlineCommitMaxChanges,
           !isReplica.load(ordering: .relaxed),
           let id = try commitInlineIfIdle(changes, author: author, metadata: metadata) {
            return id
        }
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TransactionID, Error>) in
            let save = PendingSave(changes: changes, author: author, metadata: metadata,
                                   completion: .continuation(continuation))
            switch state.withLock({ $0.entry.queueAsync(save, maxPending: config.maxPendingSaves) }) {
            case .refusedClosed: continuation.resume(throwing: refusal)
            case .refusedFull:
                continuation.resume(throwing: StrataError.writerOverloaded(limit: config.maxPendingSaves))
            case .startDrain: queue.async { self.drain() }
            case .wakeGatherer: gathered.signal()
            case .queued: break
            }
        }
    }

    /// Queues `sets` one after the other, at once, and waits until each is committed or refused:
    /// a group commit then takes them together (up to ``StoreConfiguration/maxSavesPerGroup``),
    /// so their B-tree pages are copied and synced once for all of them, while each keeps its own
    /// transaction id, validation and log entry, and one that fails is dropped alone. Saves of
    /// other callers queued before come first; none can come between them. Results are in the
    /// order of `sets`. With `stopAtFailure`, a save that fails refuses every later one with
    /// its error, so that what commits is a prefix of `sets`; without it each stands alone.
    func submitInOrder(_ sets: [(changes: ChangeSet, metadata: [String: String])], author: String,
                       stopAtFailure: Bool) async -> [Result<TransactionID, Error>] {
        guard !sets.isEmpty else { return [] }
        let group = GroupWaiter(count: sets.count, stopsAtFailure: stopAtFailure)
        let saves = sets.indices.map {
            PendingSave(changes: sets[$0].changes, author: author, metadata: sets[$0].metadata,
                        completion: .member(group, $0))
        }
        return await group.wait {
            var refused: StrataError?
            var actions: [WriterEntry.AsyncEntry] = []
            state.withLock { s in
                if s.entry.closed {
                    refused = refusal
                } else if s.entry.pending.count + saves.count > config.maxPendingSaves {
                    refused = .writerOverloaded(limit: config.maxPendingSaves)
                } else {
                    actions = saves.map { s.entry.queueAsync($0, maxPending: config.maxPendingSaves) }
                }
            }
            if let refused {
                for save in saves { save.complete(.failure(refused)) }
                return
            }
            for action in actions {
                switch action {
                case .startDrain: queue.async { self.drain() }
                case .wakeGatherer: gathered.signal()
                case .queued, .refusedClosed, .refusedFull: break
                }
            }
        }
    }

    /// Queues a save and blocks the calling thread until it is committed. `queue.sync` runs the
    /// block on the calling thread once the writer queue is free, so an uncontended save commits
    /// right here, with no hop to the writer's thread and back; saves queued meanwhile (by any
    /// caller) go into the same group commit. An inline save that has claimed the writer commits
    /// first: this waits for it (its group may take this save). Throws
    /// ``StrataError/saveFromWriter(path:)`` on the writer queue itself, which would wait for itself.
    func submitAndWait(_ changes: ChangeSet, author: String, metadata: [String: String]) throws -> TransactionID {
        if isCurrentQueue {
            throw StrataError.saveFromWriter(path: storePath)
        }
        if isReplica.load(ordering: .acquiring) {
            return try submitAndWaitOnWriterQueue(changes, author: author, metadata: metadata)
        }
        let waiter = Waiter()
        let save = PendingSave(changes: changes, author: author, metadata: metadata, completion: .waiter(waiter))
        switch state.withLock({ $0.entry.queueCaller(save, maxPending: config.maxPendingSaves) }) {
        case .refusedClosed: throw refusal
        case .refusedFull: throw StrataError.writerOverloaded(limit: config.maxPendingSaves)
        case .commit: break
        case .waitForInlineClaim: inlineClaimHeld.wait()
        }
        defer { state.withLock { $0.entry.endCaller() } }
        return try commitOnCallersThread(until: waiter, maxGroupChanges: nil)
    }

    /// A replica's ``submitAndWait(_:author:metadata:)``: the save is queued as an asynchronous
    /// one is, committed by the writer's queue, and the caller blocks on a semaphore until then.
    private func submitAndWaitOnWriterQueue(_ changes: ChangeSet, author: String,
                                            metadata: [String: String]) throws -> TransactionID {
        let waiter = Waiter(), done = DispatchSemaphore(value: 0)
        let save = PendingSave(changes: changes, author: author, metadata: metadata, completion: .signal(waiter, done))
        switch state.withLock({ $0.entry.queueAsync(save, maxPending: config.maxPendingSaves) }) {
        case .refusedClosed: throw refusal
        case .refusedFull: throw StrataError.writerOverloaded(limit: config.maxPendingSaves)
        case .startDrain: queue.async { self.drain() }
        case .wakeGatherer: gathered.signal()
        case .queued: break
        }
        done.wait()
        guard let result = waiter.result.withLock({ $0 }) else { throw StrataError.closed(path: storePath) }
        return try result.get()
    }

    /// Commits groups inside `queue.sync` (on the calling thread once the queue is free) until
    /// `waiter`'s save, queued before, has its result; returns it. With `maxGroupChanges`, a
    /// group takes the saves queued behind the caller's only while their changes fit in it (the
    /// others are left to the drain their callers scheduled).
    private func commitOnCallersThread(until waiter: Waiter, maxGroupChanges: Int?) throws -> TransactionID {
        queue.sync {
            asQueueBlock {
                let hooks = testHooks.withLock { $0 }
                hooks.beforeCallerTakesGroup?()
                // An asynchronous drain that ran first may have committed this save already.
                var first = true
                while !waiter.isDone {
                    let batch = state.withLock {
                        $0.entry.takeGroup(limit: config.maxSavesPerGroup, maxChanges: maxGroupChanges)
                    }
                    if batch.isEmpty { break }
                    if first { hooks.afterCallerTookGroup?() }
                    first = false
                    commit(batch)
                }
            }
        }
        guard let result = waiter.result.withLock({ $0 }) else {
            // Not reachable: the save was queued before the sync block and only the writer
            // queue takes saves out; kept as an error rather than a trap.
            throw StrataError.closed(path: storePath)
        }
        return try result.get()
    }

    /// The inline commit of ``submit(_:author:metadata:)``. When the writer is idle (nothing
    /// queued, no drain, no caller committing on its own thread, no ``exclusive(_:)`` body), it
    /// claims it, queues the save and commits it on the calling thread inside `queue.sync`,
    /// which the idle queue lets in at once. Until the claim ends nothing else enters the queue
    /// (``WriterEntry``, rule 2), and the group takes saves queued meanwhile only up to
    /// ``inlineCommitMaxChanges`` changes in all: the saver's thread commits a small group and
    /// never waits for another commit or a body.
    ///
    /// Returns nil, having queued nothing, when the writer is busy or the caller is on the writer
    /// queue: the save then takes the asynchronous path and joins the next group.
    private func commitInlineIfIdle(_ changes: ChangeSet, author: String,
                                    metadata: [String: String]) throws -> TransactionID? {
        if isCurrentQueue { return nil }
        let waiter = Waiter()
        let save = PendingSave(changes: changes, author: author, metadata: metadata, completion: .waiter(waiter))
        let claimed = state.withLock { s -> Bool? in
            let claimed = s.entry.claimInline(save)
            if claimed == true {
                s.statistics.inlineAsyncSaves += 1
                inlineClaimHeld.enter()
            }
            return claimed
        }
        guard let claimed else { throw refusal }
        guard claimed else { return nil }
        testHooks.withLock { $0.beforeInlineCommit }?()
        defer {
            let (deferred, startDrain) = state.withLock { s in
                defer { inlineClaimHeld.leave() }
                return s.entry.endInline()
            }
            for body in deferred { queue.async(execute: body) }
            if startDrain { queue.async { self.drain() } }
        }
        return try commitOnCallersThread(until: waiter, maxGroupChanges: Self.inlineCommitMaxChanges)
    }

    /// Tests only: closures the writer calls at two points of a caller's own commit, so tests
    /// can hold a saver there and order other work around it deterministically.
    struct TestHooks: Sendable {
        /// On the saving thread, after an inline save claimed the writer and before it enters
        /// the queue.
        var beforeInlineCommit: (@Sendable () -> Void)?
        /// On the writer queue, when a caller committing on its own thread (`saveAndWait` or an
        /// inline save) has entered it, before it takes its group.
        var beforeCallerTakesGroup: (@Sendable () -> Void)?
        /// On the writer queue, when such a caller has taken its first group (the queue of
        /// pending saves no longer holds it), before it commits.
        var afterCallerTookGroup: (@Sendable () -> Void)?
    }
    /// Tests only (see ``TestHooks``); empty otherwise.
    let testHooks = Locked(TestHooks())
    /// Tests only: saves queued and not yet taken into a group.
    var pendingForTesting: Int { state.withLock { $0.entry.pending.count } }
    /// Closed, or stopped by a migration that replaced the store (``stopFromQueue(failing:)``):
    /// nothing more may be written through this writer.
    var isStopped: Bool { state.withLock { $0.entry.closed } }
    /// Why ``stopFromQueue(failing:)`` stopped the writer, if it did.
    let stopReason = Locked<StrataError?>(nil)
    /// See ``failedFlush``.
    private let flushFailure = Locked<StrataError?>(nil)
    /// A replica's: the last transaction it appended to the cluster's log and then could not
    /// apply (its local commit and the catch-up after it failed). It appends nothing more until
    /// a catch-up has applied it (``Writer/commitReplicated(_:)``).
    let unappliedAppend = Locked<TransactionID?>(nil)
    /// Run at once when a sync fails (``noteFailedSync(_:)``: a relaxed flush, on the flush's
    /// queue, or a durable commit, on the writer's): the store notes it in its marker of
    /// unsynced commits.
    let onFlushFailure = Locked<(@Sendable () -> Void)?>(nil)
    /// What a save or body refused by a closed or stopped writer throws: the stop's reason
    /// (a migration's switch, a switch the disk may not hold) or ``StrataError/closed(path:)``.
    var refusal: StrataError { stopReason.withLock { $0 } ?? .closed(path: storePath) }
    /// Tests only: a drain is queued or running.
    var drainingForTesting: Bool { state.withLock { $0.entry.drainScheduled } }
    /// Tests only: `exclusive` bodies asked for and not finished.
    var exclusiveQueuedForTesting: Int { state.withLock { $0.entry.exclusiveBodies } }

    /// Marks the writer queue, so ``submitAndWait(_:author:metadata:)`` can refuse to run on it.
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    /// How many of the first `pending` saves the next group takes: at most `limit`, and with
    /// `maxChanges` the first save always, then the next ones while the group's changes stay
    /// within it (an inline commit's budget: a large save queued behind stays for the drain).
    static func groupSize(_ pending: [PendingSave], limit: Int, maxChanges: Int?) -> Int {
        let n = min(pending.count, limit)
        guard let maxChanges else { return n }
        var taken = 0, changes = 0
        while taken < n, taken == 0 || changes + pending[taken].changes.count <= maxChanges {
            changes += pending[taken].changes.count
            taken += 1
        }
        return taken
    }

    /// Whether the caller runs on this writer's queue (inside a save or an `exclusive` body),
    /// also under another queue's block nested in it: a merge closure of this writer's save that
    /// saves into a second store runs that save inside the second writer's `queue.sync`, where
    /// `getSpecific` sees only the second queue, and a `queue.sync` on this one from there would
    /// trap in libdispatch ("already owned by current thread").
    var isCurrentQueue: Bool {
        queueThread.load(ordering: .relaxed) == currentThreadID()
            || DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self)
    }

    /// The thread running a block of `queue` that can reach callers' code (a drain, a caller's
    /// commit, an `exclusive` body), 0 when none. The queue is serial: one such block at a time.
    /// Each thread compares it only with its own id, which only it writes and clears again
    /// before its block ends, so relaxed ordering suffices.
    private let queueThread = Atomic<UInt>(0)

    /// Runs `body`, a block of `queue`, with ``queueThread`` set to this thread.
    private func asQueueBlock<R>(_ body: () throws -> R) rethrows -> R {
        let previous = queueThread.exchange(currentThreadID(), ordering: .relaxed)
        defer { queueThread.store(previous, ordering: .relaxed) }
        return try body()
    }

    /// Refuses saves and `exclusive` bodies from now on, without waiting for anything (the first
    /// step of ``close()``, for a close asked for on the writer's own queue).
    func refuseNewWork() {
        // Closed: from now on a refusal says so, whatever stopped the writer before (under the
        // state lock, as a stop sets its reason: the later of the two decides).
        state.withLock { s in
            stopReason.withLock { $0 = nil }
            s.entry.close()
        }
    }

    /// Stops accepting saves and bodies, waits for the saves, drains and bodies let in before to
    /// finish, and flushes relaxed commits (never call it on the writer's queue: see
    /// ``isCurrentQueue``). Returns false when that final flush failed (the commits may not all
    /// be on disk).
    @discardableResult
    func close() -> Bool {
        precondition(!isCurrentQueue, "Writer.close() on the writer's own queue would wait for itself")
        refuseNewWork()
        // Waits until nothing that was let in before the close can still reach the queue: a
        // caller about to enter it to commit on its own thread, a drain about to be queued, an
        // `exclusive` body (one deferred by an inline commit is queued only when that commit
        // ends). New saves and bodies are refused now, so this ends.
        repeat {
            queue.sync {}
        } while state.withLock({ !$0.entry.isQuiescent })
        if config.durability == .relaxed {
            do { try env.sync() } catch {
                logger.error("final sync failed: \(error)")
                return false
            }
        }
        return true
    }

    /// Has relaxed-mode commits flushed to disk: the flush runs on a background queue
    /// (``LMDBEnvironment/requestFlush(onError:)``) while the writer goes on committing; the
    /// commits made before this call are on disk when that flush ends.
    /// A flush that fails stops the writer: the kernel may have dropped the pages it could not
    /// write (marked clean, to be read back from the disk later), and a commit made over them
    /// would build on what the disk holds, not on what was committed. No save is acknowledged
    /// after it; the store is read as it is, and opened again (and verified) to write.
    private func syncRelaxed() {
        state.withLock { $0.lastSync = ContinuousClock.now }
        env.requestFlush { [logger, weak self] error in
            logger.error("relaxed-mode sync failed: \(error); the store takes no more saves until it is opened again")
            guard let self else { return }
            // Noted at once, not when the stop runs: a group that starts before it is refused
            // too, and the store's marker says so now (a process killed before its close left a
            // marker the next open took for a clean exit: its own sync succeeded, the kernel
            // having reported the write error once, to this process, and dropped the pages).
            let reason = self.noteFailedSync(error)
            queue.async { self.stopFromQueue(failing: reason) }
        }
    }

    /// Notes that a sync of this store failed (a relaxed flush, or a durable commit's write or
    /// sync): ``failedFlush`` is set, so no group is committed after it, and the store's marker
    /// says so (``onFlushFailure``). Returns the error later saves are refused with.
    private func noteFailedSync(_ error: LMDBError) -> StrataError {
        let reason = StrataError.lmdb(LMDBError(code: error.code, operation: """
            \(error.operation): the store takes no more saves until it is opened again (then verify it)
            """))
        flushFailure.withLock { $0 = reason }
        onFlushFailure.withLock { $0 }?()
        return reason
    }

    /// The failure of a sync, once one failed (``noteFailedSync(_:)``): no group is committed
    /// after it, and the store's close does not take the commits for flushed.
    package var failedFlush: StrataError? { flushFailure.withLock { $0 } }

    /// Runs `body` on the writer queue between two commits: no save is applied while it runs.
    /// Compaction uses it to catch up and switch generations atomically. Asked for during an
    /// inline commit, the body is queued when that commit ends; after ``close()`` it does not
    /// run and this throws ``StrataError/closed(path:)`` (``close()`` waits for bodies asked
    /// for before it), and after ``stopFromQueue(failing:)`` it throws the stop's reason
    /// (``refusal``).
    func exclusive<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<R, Error>) in
            let run: @Sendable () -> Void = { [self] in
                // Asked for before a stop (a migration's switch, or a switch whose directory sync
                // failed), run after: its generation is retired or not durable, so it does not
                // run. (Bodies let in before a plain close still run.)
                let replaced = state.withLock { $0.entry.replaced }
                let result: Result<R, Error> = replaced ? .failure(refusal)
                    : asQueueBlock { Result { try body() } }
                state.withLock { $0.entry.exclusiveEnded() }
                c.resume(with: result)
            }
            switch state.withLock({ $0.entry.askExclusive(run) }) {
            case .run: queue.async(execute: run)
            case .deferred: break
            case .refusedClosed: c.resume(throwing: refusal)
            }
        }
    }

    /// Stops the writer from inside ``exclusive(_:)``: later saves and the ones still queued fail
    /// with `error` (none is acknowledged). Used when a migration replaced the store underneath,
    /// and when a new generation's switch could not be made durable.
    func stopFromQueue(failing error: StrataError) {
        dispatchPrecondition(condition: .onQueue(queue))
        let pending = state.withLock { s -> [PendingSave] in
            // After a close, refusals say closed (see `refuseNewWork`).
            if !s.entry.closed { stopReason.withLock { $0 = error } }
            return s.entry.closeFailingQueued()
        }
        for save in pending { save.complete(.failure(error)) }
    }

    /// Points commits at a new environment. Call only from inside ``exclusive(_:)``.
    func replaceEnvironment(_ new: LMDBEnvironment) {
        dispatchPrecondition(condition: .onQueue(queue))
        envBox.withLock { $0 = new }
    }

    /// Commits one group, then queues itself again while saves wait: work queued meanwhile by
    /// ``exclusive(_:)`` (a compaction's catch-up) runs between two groups instead of waiting for
    /// a pause in the load.
    private func drain() { asQueueBlock { drainGroup() } }

    /// ``drain()``'s body.
    private func drainGroup() {
        gather()
        let batch = state.withLock { $0.entry.takeDrainGroup(limit: config.maxSavesPerGroup) }
        if batch.isEmpty { return }
        let started = DispatchTime.now().uptimeNanoseconds
        commit(batch)
        let took = DispatchTime.now().uptimeNanoseconds &- started
        let answered = batch.reduce(0) { n, save in
            if case .continuation = save.completion { return n + 1 }
            return n
        }
        state.withLock { s in
            s.lastGroupSize = answered
            s.lastCommitNanos = took
            s.statistics.commitNanoseconds &+= took
        }
        queue.async { self.drain() }
    }

    /// Group commit's gathering step (on the writer queue, before taking a group): when the last
    /// group answered several asynchronous savers and fewer saves are queued now, waits until as
    /// many are queued again or ``StoreConfiguration/groupCommitGatherMicroseconds`` (at most
    /// half the last commit's time) passed. Without it, savers that were just answered come back
    /// one by one while the next commit already started with the first of them, and groups
    /// alternate between one save and the rest.
    private func gather() {
        let limitNanos = UInt64(max(0, config.groupCommitGatherMicroseconds)) * 1_000
        guard limitNanos > 0 else { return }
        let wait = state.withLock { s -> UInt64? in
            let target = min(s.lastGroupSize, config.maxSavesPerGroup)
            let queued = s.entry.pending.count
            guard target > 1, queued > 0, queued < target, !s.entry.closed else { return nil }
            s.entry.gatherTarget = target
            return min(limitNanos, s.lastCommitNanos / 2)
        }
        guard let wait else { return }
        let started = DispatchTime.now().uptimeNanoseconds
        defer {
            let waited = DispatchTime.now().uptimeNanoseconds &- started
            state.withLock { $0.statistics.gatherNanoseconds &+= waited }
        }
        if gathered.wait(timeout: .now() + .nanoseconds(Int(wait))) == .success { return }
        // Timed out. A save may have reached the target meanwhile and be about to signal: if it
        // cleared the target, take its signal so the semaphore stays balanced.
        let signalled = state.withLock { s -> Bool in
            defer { s.entry.gatherTarget = 0 }
            return s.entry.gatherTarget == 0
        }
        if signalled { gathered.wait() }
    }

    /// Changes the writer's counters (from the writer's queue or any thread).
    func updateStatistics(_ change: (inout WriterStatistics) -> Void) {
        state.withLock { change(&$0.statistics) }
    }

    /// Counts map growths made for a commit that was then aborted (the map stays grown).
    func noteMapGrowths(_ growths: Int) {
        if growths > 0 { state.withLock { $0.statistics.mapGrowths += growths } }
    }

    /// The changes from which a group's commit has the kernel start writing its pages while LMDB
    /// still writes them out (``LMDBEnvironment/withWritebackDuringCommit(_:)``): a group that
    /// large dirties enough pages for the sync to wait on the disk. (A held write always does: it
    /// is an import's.)
    static let writebackDuringCommitMinChanges = 5_000

    private func commit(_ batch: [PendingSave]) {
        // After a failed relaxed flush nothing is committed over the pages the kernel may have
        // dropped (the writer's stop is on its way).
        if let failed = flushFailure.withLock({ $0 }) {
            fail(batch, failed)
            return
        }
        if isReplica.load(ordering: .acquiring) {
            commitReplicated(batch)
            return
        }
        let env = self.env
        var growths = 0
        let large = batch.reduce(0) { $0 + $1.changes.count } >= Self.writebackDuringCommitMinChanges
        while true {
            do {
                let (results, entries, lmdbID) = try env.write(writebackDuringCommit: large) { txn in
                    let applied = try apply(batch, txn, env: env, flatOrderedGroup: true)
                    return (applied.results, applied.entries, LMDBEnvironment.lmdbTransactionID(txn.handle))
                }
                if let last = entries.last {
                    env.publishHead(lmdbTransaction: lmdbID, transactionID: last.transactionID)
                } else if config.durability == .durable {
                    // Nothing written, so LMDB synced nothing; yet each save returns the store's
                    // head as its transaction, which may be another process's relaxed commit
                    // not flushed yet. A durable save returns once what it names is on disk.
                    try env.sync()
                }
                finish(batch, results, entries, growths: growths)
                return
            } catch let e as LMDBError where e.isMapFull {
                do {
                    if try env.growMap() {
                        growths += 1
                        logger.info("map full: grew to \(env.mapSizeBytes) bytes, redoing \(batch.count) save(s)")
                        continue
                    }
                    if batch.count > 1 {
                        // The group does not fit; some of its saves alone may (a member of an
                        // ordered call that fails refuses that call's later saves: its result is
                        // noted in its ``GroupWaiter``). The map grown meanwhile stays grown:
                        // counted here, as each commit starts its own count.
                        noteMapGrowths(growths)
                        for save in batch { commit([save]) }
                    } else {
                        noteMapGrowths(growths)
                        fail(batch, StrataError.storeFull(maxMapSizeBytes: config.maxMapSizeBytes))
                    }
                } catch {
                    noteMapGrowths(growths)
                    fail(batch, error)
                }
                return
            } catch let failure as OrderedGroupFailure {
                // The transaction was aborted. The failed save and every later one fail with its
                // error; the saves before it are committed again without them.
                if case .member(let g, let i) = batch[failure.index].completion { g.noteFailure(i, failure.error) }
                // The map grown meanwhile stays grown: counted here, as the commit of the prefix
                // starts its own count.
                noteMapGrowths(growths)
                fail(Array(batch[failure.index...]), failure.error)
                if failure.index > 0 { commit(Array(batch[..<failure.index])) }
                return
            } catch {
                // A commit whose write or sync failed with an I/O error: the kernel may have
                // dropped the pages it could not write (marked clean, its error reported once),
                // this process's and those another process's relaxed commits left in the cache.
                // A later commit's sync would then succeed over them, and its save be
                // acknowledged durable on pages the disk does not have. As for a failed relaxed
                // flush: no more saves until the store is opened again, and a marker says so.
                stopIfSyncFailed(error)
                fail(batch, error)
                return
            }
        }
    }

    /// On the writer queue, after a write transaction failed with `error`: an I/O error (its
    /// write or its sync) stops the writer and is noted (``noteFailedSync(_:)``), since a later
    /// commit's sync could succeed over pages the kernel dropped.
    func stopIfSyncFailed(_ error: Error) {
        guard case StrataError.lmdb(let e) = Self.strataError(error), e.code == EIO else { return }
        logger.error("a commit's write or sync failed: \(e); the store takes no more saves until it is opened again")
        stopFromQueue(failing: noteFailedSync(e))
    }

    /// A save of a group applied flat (see ``apply(_:_:env:flatOrderedGroup:)``) failed: its
    /// position in the group and its error. The transaction is aborted with it.
    struct OrderedGroupFailure: Error {
        let index: Int
        let error: Error
    }

    /// Whether `batch` is two or more saves of one ``submitInOrder(_:author:stopAtFailure:)``
    /// call that stop at their first failure, and nothing else.
    static func isOneOrderedGroup(_ batch: [PendingSave]) -> Bool {
        guard batch.count > 1, case .member(let first, _) = batch[0].completion, first.stopsAtFailure else {
            return false
        }
        return batch.allSatisfy {
            if case .member(let g, _) = $0.completion { g === first } else { false }
        }
    }

    /// `error` as a save reports it: LMDB's errors wrapped in ``StrataError/lmdb(_:)``.
    static func strataError(_ error: Error) -> Error {
        (error as? LMDBError).map { StrataError.lmdb($0) } ?? error
    }

    func fail(_ batch: [PendingSave], _ error: Error) {
        let wrapped = Self.strataError(error)
        state.withLock { $0.statistics.failedSaves += batch.count }
        for save in batch { save.complete(.failure(wrapped)) }
    }

    func finish(_ batch: [PendingSave], _ results: [Result<TransactionID, Error>], _ entries: [LogEntry],
                growths: Int) {
        let relaxed = config.durability == .relaxed && !entries.isEmpty
        if relaxed,
           state.withLock({ ContinuousClock.now - $0.lastSync >= .milliseconds(config.relaxedSyncIntervalMs) }) {
            // Under steady load the queue never idles for the delayed sync: ask for it here.
            syncRelaxed()
        }
        let scheduleSync = state.withLock { s -> Bool in
            s.statistics.lmdbCommits += 1
            s.statistics.transactions += entries.count
            s.statistics.mapGrowths += growths
            for r in results {
                if case .success = r { s.statistics.saves += 1 } else { s.statistics.failedSaves += 1 }
            }
            guard relaxed, !s.syncScheduled else { return false }
            s.syncScheduled = true
            return true
        }
        // Published before the savers resume: when `save` returns, its transaction is already in
        // every change stream (a subscriber never sees a save's return before its event).
        if !entries.isEmpty { publisher.publishLocal(entries, env: env) }
        for (save, result) in zip(batch, results) { save.complete(result) }
        let threshold = config.releaseMappedPagesAfterChanges
        if threshold > 0, entries.reduce(0, { $0 + $1.changes.count }) >= threshold {
            do {
                try env.releaseMappedPages()
            } catch {
                logger.warning("could not release mapped pages after a bulk commit: \(error)")
            }
        }
        afterCommit()
        if scheduleSync {
            queue.asyncAfter(deadline: .now() + .milliseconds(config.relaxedSyncIntervalMs)) {
                // close() sets `closed` and then waits for this queue, so a sync that runs after it
                // sees `closed` and never touches the environment close() is about to free.
                let closed = self.state.withLock { s -> Bool in
                    s.syncScheduled = false
                    return s.entry.closed
                }
                if !closed { self.syncRelaxed() }
            }
        }
    }

    /// What ``apply(_:_:env:flatOrderedGroup:)`` did with a group.
    struct AppliedGroup {
        /// Each save's result, in the group's order.
        var results: [Result<TransactionID, Error>] = []
        /// The log entries written, and their encoded bytes (as the log holds them).
        var entries: [LogEntry] = []
        var encoded: [[UInt8]] = []
    }

    /// Applies every save of the group inside `txn`. Returns each save's result and the log entries written.
    ///
    /// Each save of a group runs in a nested transaction, so that one that fails is dropped
    /// alone. With `flatOrderedGroup`, a group that is one ordered submission stopping at its
    /// first failure (``isOneOrderedGroup(_:)``, an import's batches) runs flat instead: a
    /// nested transaction copies every page it touches that the group already changed, which
    /// cost a third of an incremental import's time. A failure then throws
    /// ``OrderedGroupFailure`` (the caller aborts and commits the saves before it again).
    ///
    /// With a `footprint`, every object and unique key the saves read or write is noted in it
    /// (a replica's group, for ``ReplicationLog/append(_:validatedAt:footprint:)``).
    ///
    /// With a `heldLog` (a held write's, ``HeldLog``), the log entries are handed to it instead of
    /// being put into the log (``AppliedGroup/encoded`` stays empty), and the head is its own.
    func apply(_ batch: [PendingSave], _ txn: LMDBTransaction, env: LMDBEnvironment,
               flatOrderedGroup: Bool = false, footprint: FootprintBuilder? = nil,
               heldLog: HeldLog? = nil) throws -> AppliedGroup {
        // Read inside the transaction: another process may have committed since this one did.
        // At most ``TransactionID/largest`` (``ReadView/lastTransactionID()`` checks it): `next`
        // cannot overflow, and each save is held to the largest id below.
        let head = try heldLog?.head ?? ReadView(txn: txn, env: env, schema: schema).lastTransactionID()
        var next = head.next
        var group = AppliedGroup()
        let flat = flatOrderedGroup && Self.isOneOrderedGroup(batch)
        // Asked once, before any save is applied: a failure then leaves nothing half done.
        let heldCompressed = try heldLog.map { _ in try logTakesCompressedEntries(txn, env: env) } ?? false
        // Members of an ordered group that failed in this pass (the group's outcome is final only
        // once the transaction commits: a replica may redo the pass at a new head).
        var failedHere: [ObjectIdentifier: Error] = [:]
        // A save of a group that fails alone: its result, and for a member of an ordered group
        // the refusal of that call's later saves in this pass.
        func failedAlone(_ save: PendingSave, _ failure: Error) {
            if case .member(let g, _) = save.completion, failedHere[ObjectIdentifier(g)] == nil {
                failedHere[ObjectIdentifier(g)] = failure
            }
            group.results.append(.failure(failure))
        }
        for (index, save) in batch.enumerated() {
            if case .member(let g, let i) = save.completion,
               let refusal = g.refusal(for: i) ?? (g.stopsAtFailure ? failedHere[ObjectIdentifier(g)] : nil) {
                if flat { throw OrderedGroupFailure(index: index, error: refusal) }
                group.results.append(.failure(refusal))
                continue
            }
            // Every id of the group within the largest.
            guard next <= .largest else {
                let full = StrataError.corruptLogEntry(transaction: head, reason: "the log reached the largest transaction id")
                if batch.count == 1 { throw full }
                if flat { throw OrderedGroupFailure(index: index, error: full) }
                failedAlone(save, full)
                continue
            }
            if save.changes.count > config.maxChangesPerSave {
                let tooLarge = StrataError.saveTooLarge(changes: save.changes.count, limit: config.maxChangesPerSave)
                if batch.count == 1 { throw tooLarge }
                if flat { throw OrderedGroupFailure(index: index, error: tooLarge) }
                failedAlone(save, tooLarge)
                continue
            }
            do {
                // A lone save needs no nested transaction: if it fails, the whole transaction is aborted.
                let putsLog = heldLog == nil
                // A held transaction's saves gather their index entries for its commit: here,
                // without a nested transaction, a save that fails ends the whole transaction (a
                // nested one aborted alone would leave its entries gathered).
                let resolved: (LogEntry, [UInt8])?
                if batch.count == 1 || flat {
                    resolved = try resolve(save, txn, next, env: env, footprint: footprint, putsLog: putsLog,
                                           heldIndexes: heldLog?.indexes)
                } else {
                    // Its entries go straight into the indexes: those gathered before it are
                    // written first (outside the nested transaction, which must be the only one
                    // in use while it is open), so that every key still ends as the last save
                    // left it. (A held step is one ordered group, flat: not reached today.)
                    if let held = heldLog?.indexes {
                        try held.write(txn, env: env, schema: schema, releaseMappedPagesEvery: 0)
                    }
                    resolved = try env.nested(in: txn) {
                        try resolve(save, $0, next, env: env, footprint: footprint, putsLog: putsLog)
                    }
                }
                if let (entry, bytes) = resolved {
                    group.results.append(.success(next))
                    group.entries.append(entry)
                    if let heldLog {
                        heldLog.add(entry, compressed: heldCompressed)
                    } else {
                        group.encoded.append(bytes)
                    }
                    next = next.next
                } else {
                    group.results.append(.success(TransactionID(next.rawValue - 1)))
                }
            } catch let e as LMDBError where e.isMapFull {
                throw e
            } catch {
                if batch.count == 1 { throw error }
                let failure = (error as? LMDBError).map { StrataError.lmdb($0) } ?? error
                if flat { throw OrderedGroupFailure(index: index, error: failure) }
                failedAlone(save, failure)
            }
        }
        return group
    }

    /// ``StateApplier/releaseMappedPagesEvery`` for writing `changes` changes at random places of
    /// `env`: ``StateApplier/bulkReleaseInterval`` from ``StoreConfiguration/releaseMappedPagesAfterChanges``
    /// changes on, while no reader has used the store recently; otherwise 0 (never).
    func releaseInterval(changes: Int, env: LMDBEnvironment) -> Int {
        let threshold = config.releaseMappedPagesAfterChanges
        return threshold > 0 && changes >= threshold && !env.hadReadersRecently ? StateApplier.bulkReleaseInterval : 0
    }

    /// Resolves and applies one save at transaction `tx`: its log entry, and, with `putsLog`, the
    /// entry's bytes as it put them into the log (without, no bytes: the caller has it encoded).
    private func resolve(_ save: PendingSave, _ txn: LMDBTransaction, _ tx: TransactionID,
                         env: LMDBEnvironment, footprint: FootprintBuilder?,
                         putsLog: Bool = true, heldIndexes: HeldIndexEntries? = nil) throws -> (LogEntry, [UInt8])? {
        var applier = StateApplier(txn: txn, env: env, schema: schema, transactionID: tx)
        applier.heldIndexes = heldIndexes
        applier.releaseMappedPagesEvery = releaseInterval(changes: save.changes.count, env: env)
        let changes: [LoggedChange]
        if let footprint {
            var resolver = SaveResolver(applier: FootprintRecorder(base: applier, footprint: footprint), limits: config)
            try resolver.run(save.changes)
            changes = resolver.changes
        } else {
            var resolver = SaveResolver(applier: applier, limits: config)
            try resolver.run(save.changes)
            changes = resolver.changes
        }
        guard !changes.isEmpty else { return nil }
        let entry = LogEntry(transactionID: tx, schemaVersion: schema.version,
                             timestampMs: Int64(Date().timeIntervalSince1970 * 1000), author: save.author,
                             metadata: save.metadata, changes: changes)
        guard putsLog else { return (entry, []) }
        let encoded = try LogEntryCodec.encode(entry) { try logTakesCompressedEntries(txn, env: env) }
        _ = try withUnsafeBytes(of: tx.rawValue.bigEndian) { key in
            try encoded.withUnsafeBytes { try txn.put(env[.log], key: key, value: $0, mode: .append) }
        }
        return (entry, encoded)
    }

    /// Whether log entries may be compressed: only in a store whose format says so (a store of an
    /// earlier format may still be opened by a Strata that cannot read compressed entries), and,
    /// on a replica, only into a shared log whose every reader decodes them.
    private func logTakesCompressedEntries(_ txn: LMDBTransaction, env: LMDBEnvironment) throws -> Bool {
        try MetaKey.logTakesCompressedEntries(txn, meta: env[.meta])
            && replication.withLock { $0?.takesCompressedEntries ?? true }
    }
}
