/// How work gets onto the writer's serial queue: the writer's entry as one state machine.
///
/// Three routes lead to a commit, and one to an `exclusive` body:
///
/// - **inline**: a small relaxed asynchronous save that finds the writer idle claims it and
///   commits on its own thread inside `queue.sync` (no hop to the writer's thread and back);
/// - **caller's thread**: a `saveAndWait` queues its save and commits groups inside `queue.sync`
///   on its own thread until its save has a result;
/// - **drain**: any other asynchronous save queues its save; a drain block on the writer's queue
///   commits groups while saves are queued;
/// - **exclusive body**: runs on the queue between two commits.
///
/// The writer keeps this value under its lock and changes it only through the transitions
/// below, each of which says what the caller must do next (start a drain, wake the gatherer,
/// wait for the inline claim, …). The rules they keep:
///
/// 1. An inline claim is taken only when the writer is idle: nothing queued, no drain, no
///    caller committing, no exclusive body queued.
/// 2. While an inline claim is held nothing else enters the queue ahead of it: an asynchronous
///    save is queued without starting a drain (the claim's end starts it), a `saveAndWait` waits
///    for the claim to end, and an exclusive body is deferred until then. So the inline saver's
///    thread commits only its own group, at most ``Writer/inlineCommitMaxChanges`` changes.
/// 3. At most one drain is scheduled at a time; it stops when it finds nothing queued.
/// 4. After ``close()`` nothing new is let in; the writer's close waits until ``isQuiescent``.
///
/// A pure value: its transitions are tested on their own (`WriterEntryTests`).
struct WriterEntry {
    /// Saves queued and not yet taken into a group, oldest first.
    private(set) var pending: [Writer.PendingSave] = []
    /// A drain is scheduled on the writer's queue or running.
    private(set) var drainScheduled = false
    /// Callers committing on their own thread, or about to: `saveAndWait`s and an inline save.
    private(set) var callersCommitting = 0
    /// The inline claim, when one is held: the exclusive bodies asked for during it, queued
    /// when it ends.
    private(set) var inlineClaim: [@Sendable () -> Void]?
    /// Exclusive bodies asked for and not finished (deferred ones included).
    private(set) var exclusiveBodies = 0
    /// New saves and bodies are refused.
    private(set) var closed = false
    /// Stopped by ``closeFailingQueued()`` — a migration replaced the store underneath, or a
    /// switch could not be made durable: an exclusive body let in before but run after the stop
    /// must not run (its generation is retired or may not survive a power loss), where one let
    /// in before a plain close still runs.
    private(set) var replaced = false
    /// While a drain gathers: how many queued saves end its wait early (0: not gathering).
    var gatherTarget = 0

    /// The writer is idle: an asynchronous save may claim it (rule 1).
    var isIdle: Bool { pending.isEmpty && !drainScheduled && callersCommitting == 0 && exclusiveBodies == 0 }

    /// Nothing let in can still reach the queue: no caller about to commit, no drain, no body.
    var isQuiescent: Bool { exclusiveBodies == 0 && callersCommitting == 0 && !drainScheduled }

    // MARK: Asynchronous saves

    /// What the caller of ``queueAsync(_:maxPending:)`` does next.
    enum AsyncEntry: Equatable {
        case refusedClosed, refusedFull
        /// Queued; schedule a drain.
        case startDrain
        /// Queued; the drain gathering saves has as many as it waits for: signal it.
        case wakeGatherer
        /// Queued; a drain, a caller's commit or the inline claim's end will take it.
        case queued
    }

    /// Queues an asynchronous save that does not commit inline.
    mutating func queueAsync(_ save: Writer.PendingSave, maxPending: Int) -> AsyncEntry {
        if closed { return .refusedClosed }
        if pending.count >= maxPending { return .refusedFull }
        pending.append(save)
        if gatherTarget > 0, pending.count >= gatherTarget {
            gatherTarget = 0
            return .wakeGatherer
        }
        // Rule 2: a drain started now could run before the inline saver enters the queue.
        if drainScheduled || inlineClaim != nil { return .queued }
        drainScheduled = true
        return .startDrain
    }

    /// Claims the idle writer for an inline commit of `save` (queued here); false when it is
    /// not idle (nothing queued then). Nil when closed.
    mutating func claimInline(_ save: Writer.PendingSave) -> Bool? {
        if closed { return nil }
        guard isIdle else { return false }
        inlineClaim = []
        callersCommitting += 1
        pending.append(save)
        return true
    }

    /// Ends the inline claim: the exclusive bodies deferred during it, to queue now, and whether
    /// to start a drain for saves queued meanwhile that the inline group left.
    mutating func endInline() -> (deferredBodies: [@Sendable () -> Void], startDrain: Bool) {
        precondition(inlineClaim != nil && callersCommitting > 0, "WriterEntry.endInline() without a claim")
        let bodies = inlineClaim ?? []
        inlineClaim = nil
        callersCommitting -= 1
        let startDrain = !pending.isEmpty && !drainScheduled
        if startDrain { drainScheduled = true }
        return (bodies, startDrain)
    }

    // MARK: Callers committing on their own thread

    /// What the caller of ``queueCaller(_:maxPending:)`` does next.
    enum CallerEntry: Equatable {
        case refusedClosed, refusedFull
        /// Queued; commit on the caller's thread now.
        case commit
        /// Queued; wait for the inline claim to end, then commit on the caller's thread.
        case waitForInlineClaim
    }

    /// Queues a `saveAndWait`'s save; the caller then commits it (``endCaller()`` after).
    mutating func queueCaller(_ save: Writer.PendingSave, maxPending: Int) -> CallerEntry {
        if closed { return .refusedClosed }
        if pending.count >= maxPending { return .refusedFull }
        pending.append(save)
        callersCommitting += 1
        return inlineClaim == nil ? .commit : .waitForInlineClaim
    }

    /// A `saveAndWait` caller has its result.
    mutating func endCaller() {
        precondition(callersCommitting > 0, "WriterEntry.endCaller() without a caller")
        callersCommitting -= 1
    }

    // MARK: Groups

    /// Takes the next group for a caller's commit (see ``Writer/groupSize(_:limit:maxChanges:)``).
    mutating func takeGroup(limit: Int, maxChanges: Int? = nil) -> [Writer.PendingSave] {
        let n = Writer.groupSize(pending, limit: limit, maxChanges: maxChanges)
        defer { pending.removeFirst(n) }
        return Array(pending.prefix(n))
    }

    /// Takes the next group for the drain; with nothing queued the drain ends (rule 3).
    mutating func takeDrainGroup(limit: Int) -> [Writer.PendingSave] {
        guard !pending.isEmpty else {
            drainScheduled = false
            return []
        }
        return takeGroup(limit: limit)
    }

    // MARK: Exclusive bodies

    /// What the caller of ``askExclusive(_:)`` does next.
    enum ExclusiveEntry: Equatable { case refusedClosed, run, deferred }

    /// Lets in an exclusive body: run it now (queue it), or deferred to the inline claim's end.
    mutating func askExclusive(_ body: @escaping @Sendable () -> Void) -> ExclusiveEntry {
        // After close the environment may be gone: a body must not run.
        if closed { return .refusedClosed }
        exclusiveBodies += 1
        guard inlineClaim != nil else { return .run }
        inlineClaim?.append(body)
        return .deferred
    }

    /// An exclusive body has run.
    mutating func exclusiveEnded() {
        precondition(exclusiveBodies > 0, "WriterEntry.exclusiveEnded() without a body")
        exclusiveBodies -= 1
    }

    // MARK: Closing

    /// Refuses new saves and bodies from now on (rule 4).
    mutating func close() { closed = true }

    /// Closes and takes every queued save, to fail them (a store replaced underneath, or a
    /// switch the disk may not hold).
    mutating func closeFailingQueued() -> [Writer.PendingSave] {
        closed = true
        replaced = true
        defer { pending.removeAll() }
        return pending
    }
}
