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
    /// - Throws: ``StrataError/closed(path:)`` when the writer is closed.
    init(_ writer: Writer) async throws {
        let (paused, signal) = AsyncStream<Void>.makeStream()
        let wake = self.wake, lastStep = self.lastStep
        held = Task {
            defer { signal.finish() }
            try await writer.exclusive {
                signal.yield()
                wake.wait()
                if let step = lastStep.withLock({ $0 }) { try step() }
            }
        }
        var iterator = paused.makeAsyncIterator()
        if await iterator.next() == nil {
            // The writer refused the body (closed): its error says so.
            try await held.value
            throw StrataError.closed(path: writer.storePath)
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
