import Dispatch
import StrataLMDB

/// One write transaction of this process's writer, held open across several steps and
/// committed as a whole at the end, or not at all.
///
/// An import that checks its input as it goes hands each batch to the writer as soon as it is
/// built (``apply(_:author:)``), so the writer applies it while the import reads and checks the
/// next; ``commit()`` commits every batch in one LMDB transaction (one log entry each, as
/// separate saves would have), and ``abort()`` — or a batch the writer refuses — leaves the
/// store as it was. Meanwhile the writer does nothing else: saves of this process queue (up to
/// ``StoreConfiguration/maxPendingSaves``) and are committed after it, other processes' writers
/// wait for LMDB's write lock, and readers go on reading the state from before.
///
/// Exactly one of ``commit()`` and ``abort()`` must be called (after a refused batch, either may
/// be: both end at once), or the writer waits for ever, and so does ``Store/close()``.
final class HeldWrite: Sendable {
    /// What the writer is asked to do next.
    enum Step: Sendable {
        /// Apply these saves in the transaction; the reply carries the error that ended it, if one did.
        case apply([Writer.PendingSave], reply: CheckedContinuation<Error?, Never>)
        case commit
        case abort
    }

    /// Thrown out of the transaction by ``abort()``.
    struct Aborted: Error {}

    private let channel: Channel
    private let held: Task<[TransactionID], Error>

    /// Returns once the writer runs the transaction's body (the saves it was committing are
    /// committed). Throws ``StrataError/closed(path:)`` when the writer is closed.
    init(_ writer: Writer) async throws {
        let channel = Channel(), reached = ExclusiveBodyReached()
        self.channel = channel
        held = Task {
            do {
                return try await writer.exclusive {
                    reached.fire(true)
                    defer { channel.end() }
                    return try writer.runHeld(channel)
                }
            } catch {
                reached.fire(false)
                channel.end()
                throw error
            }
        }
        guard await reached.wait() else {
            _ = try await held.value
            throw StrataError.closed(path: writer.storePath)
        }
    }

    /// Applies `sets` in the held transaction, each its own save and log entry, in this order.
    /// Throws the writer's error when one of them is refused, or the error that ended the
    /// transaction before (nothing of it is written then; ``commit()`` throws it too).
    func apply(_ sets: [(changes: ChangeSet, metadata: [String: String])], author: String) async throws {
        guard !sets.isEmpty else { return }
        // The writer asks a member whether an earlier one failed; nobody waits on the group.
        let group = Writer.GroupWaiter(count: sets.count, stopsAtFailure: true)
        let saves = sets.indices.map {
            Writer.PendingSave(changes: sets[$0].changes, author: author, metadata: sets[$0].metadata,
                               completion: .member(group, $0))
        }
        let failure = await withCheckedContinuation { (c: CheckedContinuation<Error?, Never>) in
            channel.send(.apply(saves, reply: c))
        }
        guard let failure else { return }
        // Refused because the transaction had ended: with the error that ended it, if any.
        if failure is Ended, case .failure(let ended) = await held.result { throw ended }
        throw failure
    }

    /// Commits everything applied, in one LMDB transaction, and returns each save's transaction
    /// id in the order they were applied (a save that changed nothing gets the id before it, as
    /// a save of the store does). Throws the error that ended the transaction instead, if one did.
    func commit() async throws -> [TransactionID] {
        channel.send(.commit)
        return try await held.value
    }

    /// Drops everything applied: the store is left as it was.
    func abort() async {
        channel.send(.abort)
        _ = try? await held.value
    }

    /// The steps on their way to the writer, and whether it still takes them.
    final class Channel: Sendable {
        private struct State {
            var steps: [Step] = []
            /// The writer's transaction ended (committed, aborted or failed): steps are refused.
            var ended = false
        }
        private let state = Locked(State())
        private let wake = DispatchSemaphore(value: 0)

        /// Queues `step` for the writer; an apply sent after the end is refused at once.
        func send(_ step: Step) {
            let refused = state.withLock { s -> Step? in
                if s.ended { return step }
                s.steps.append(step)
                return nil
            }
            if case .apply(_, let reply)? = refused { reply.resume(returning: Ended()) }
            if refused == nil { wake.signal() }
        }

        /// On the writer queue: the next step, waiting for it.
        func next() -> Step {
            while true {
                if let step = state.withLock({ s -> Step? in s.steps.isEmpty ? nil : s.steps.removeFirst() }) {
                    return step
                }
                wake.wait()
            }
        }

        /// The transaction ended: steps still queued, and later ones, are refused.
        func end() {
            let left = state.withLock { s -> [Step] in
                s.ended = true
                defer { s.steps = [] }
                return s.steps
            }
            for case .apply(_, let reply) in left { reply.resume(returning: Ended()) }
        }
    }

    /// A step sent after the transaction ended.
    struct Ended: Error, CustomStringConvertible {
        var description: String { "the held write transaction has ended" }
    }

    /// The writer became a cluster replica's before the transaction's body ran: its saves go
    /// through the cluster's log, never straight into the local store.
    struct ReplicaWriter: Error, CustomStringConvertible {
        var description: String { "the store became a replica of a cluster: its saves go through the cluster" }
    }
}

extension Writer {
    /// The end of a held transaction before its commit: the index entries its saves gathered,
    /// sorted together (releasing mapped pages as a save of as many changes does), then the
    /// log's entries.
    private func finishHeld(_ log: HeldLog, _ txn: LMDBTransaction, env: LMDBEnvironment) throws {
        try log.indexes.write(txn, env: env, schema: schema,
                              releaseMappedPagesEvery: releaseInterval(changes: log.indexes.count, env: env))
        try log.putAll(txn, env: env)
    }

    /// ``HeldWrite``'s body, on the writer queue: applies each step's saves in one write
    /// transaction until the commit (or the abort), then publishes and completes them as a
    /// group commit does. A full map is grown and every step applied again in a new transaction
    /// (another process may have committed in between: the steps are judged again against what
    /// it did); a step the writer refuses ends the transaction with its error.
    func runHeld(_ channel: HeldWrite.Channel) throws -> [TransactionID] {
        dispatchPrecondition(condition: .onQueue(queue))
        // A body admitted before a migration stopped the writer runs after it: it must not
        // write into the generation the migration left.
        if isStopped { throw refusal }
        // Marked a replica by a body that ran before this one (the importer looked before).
        if isReplica.load(ordering: .acquiring) { throw HeldWrite.ReplicaWriter() }
        var steps: [[PendingSave]] = []
        // The commit was asked for: after a growth the steps are applied again and committed
        // at once (the step is not sent twice).
        var committing = false
        // The step being applied when the transaction failed: it is answered with the outcome.
        var owed: CheckedContinuation<Error?, Never>?
        var growths = 0
        while true {
            let env = self.env
            var group = AppliedGroup()
            var saves: [PendingSave] = []
            func applyStep(_ batch: [PendingSave], _ txn: LMDBTransaction, _ log: HeldLog) throws {
                let applied = try apply(batch, txn, env: env, flatOrderedGroup: true, heldLog: log)
                for result in applied.results { _ = try result.get() }
                group.results += applied.results
                group.entries += applied.entries
                saves += batch
            }
            do {
                let lmdbID = try env.write(writebackDuringCommit: true) { txn -> UInt64 in
                    // The entries are encoded beside the writer and put into the log at the end.
                    let log = HeldLog(head: try ReadView(txn: txn, env: env, schema: schema).lastTransactionID())
                    for batch in steps { try applyStep(batch, txn, log) }
                    owed?.resume(returning: nil)
                    owed = nil
                    if committing {
                        try finishHeld(log, txn, env: env)
                        return LMDBEnvironment.lmdbTransactionID(txn.handle)
                    }
                    while true {
                        switch channel.next() {
                        case .apply(let batch, let reply):
                            steps.append(batch)
                            owed = reply
                            try applyStep(batch, txn, log)
                            owed = nil
                            reply.resume(returning: nil)
                        case .commit:
                            // The commit itself may find the map full (LMDB's free list and
                            // database records take pages too), as may the log's entries.
                            committing = true
                            try finishHeld(log, txn, env: env)
                            return LMDBEnvironment.lmdbTransactionID(txn.handle)
                        case .abort:
                            throw HeldWrite.Aborted()
                        }
                    }
                }
                if let last = group.entries.last {
                    env.publishHead(lmdbTransaction: lmdbID, transactionID: last.transactionID)
                }
                finish(saves, group.results, group.entries, growths: growths)
                return try group.results.map { try $0.get() }
            } catch let e as LMDBError where e.isMapFull {
                let grown: Bool
                do {
                    grown = try env.growMap()
                } catch {
                    let failure = Self.strataError(error)
                    owed?.resume(returning: failure)
                    throw failure
                }
                guard grown else {
                    let full = StrataError.storeFull(maxMapSizeBytes: config.maxMapSizeBytes)
                    owed?.resume(returning: full)
                    throw full
                }
                growths += 1
                logger.info("map full: grew to \(env.mapSizeBytes) bytes, applying \(steps.count) held step(s) again")
            } catch {
                let failure = Self.strataError((error as? OrderedGroupFailure)?.error ?? error)
                stopIfSyncFailed(failure)
                owed?.resume(returning: failure)
                throw failure
            }
        }
    }
}
