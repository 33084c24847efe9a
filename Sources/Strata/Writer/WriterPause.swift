import Dispatch

/// This process's writer held still: an exclusive body (``Writer/exclusive(_:)``) that waits
/// until it is told to end. Saves submitted meanwhile queue (up to
/// ``StoreConfiguration/maxPendingSaves``) and are committed, in order, once the pause ends.
///
/// A bulk load holds one while it builds a new generation beside the live one: nothing can be
/// committed to the live generation then, so the generation the load started from is the one it
/// replaces. Exactly one of ``resume()`` and ``finish(_:)`` must be called, or the writer waits
/// for ever (and so does ``Store/close()``).
final class WriterPause: Sendable {
    private let wake = DispatchSemaphore(value: 0)
    /// The last step, run on the writer before it goes on (nil: just go on).
    private let lastStep = Locked<(@Sendable () throws -> Void)?>(nil)
    private let held: Task<Void, Error>

    /// Returns once the writer is paused (the saves it was committing are committed).
    /// - Throws: ``StrataError/closed(path:)`` when the writer is closed; `CancellationError`
    ///   when the task was cancelled meanwhile (the writer is let go at once).
    init(_ writer: Writer) async throws {
        let wake = self.wake, lastStep = self.lastStep
        let reached = ExclusiveBodyReached()
        held = Task {
            do {
                try await writer.exclusive {
                    reached.fire(true)
                    wake.wait()
                    if let step = lastStep.withLock({ $0 }) { try step() }
                }
            } catch {
                reached.fire(false)
                throw error
            }
        }
        // A checked continuation, not a stream: a cancelled task must still learn whether the
        // body was reached, or a body that is would wait for ever.
        guard await reached.wait() else {
            // The writer refused the body (closed): its error says so.
            try await held.value
            throw StrataError.closed(path: writer.storePath)
        }
        if Task.isCancelled {
            wake.signal()
            try await held.value
            throw CancellationError()
        }
    }

    /// Lets the writer go on, without a last step.
    func resume() { wake.signal() }

    /// Runs `step` on the writer, then lets it go on; returns or throws what `step` does.
    func finish(_ step: @escaping @Sendable () throws -> Void) async throws {
        lastStep.withLock { $0 = step }
        wake.signal()
        try await held.value
    }
}

/// Whether an exclusive body of the writer (``Writer/exclusive(_:)``) was reached (true) or
/// refused (false), told once: what ``WriterPause`` and ``HeldWrite`` wait for before they return.
final class ExclusiveBodyReached: Sendable {
    private let state = Locked<(outcome: Bool?, waiter: CheckedContinuation<Bool, Never>?)>((nil, nil))

    func fire(_ outcome: Bool) {
        let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard s.outcome == nil else { return nil }
            s.outcome = outcome
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: outcome)
    }

    func wait() async -> Bool {
        await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            let known = state.withLock { s -> Bool? in
                if s.outcome == nil { s.waiter = c }
                return s.outcome
            }
            if let known { c.resume(returning: known) }
        }
    }
}
