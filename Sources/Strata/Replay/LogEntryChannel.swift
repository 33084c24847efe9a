import Foundation

/// Batches of the log's changes (as ``FoldOp``s) handed from the thread reading the log to the
/// thread folding it, at most ``capacity`` batches ahead, then how the reading ended.
///
/// `@unchecked Sendable` is safe: every stored property is read and written only while
/// `condition` is locked.
final class LogEntryChannel: @unchecked Sendable {
    /// Batches the reader may run ahead of the folder.
    let capacity = 8
    private let condition = NSCondition()
    private var batches: [[FoldOp]] = []
    private var end: Result<Bool, Error>?
    private var cancelled = false
    private var released = false

    /// Queues a batch, waiting while ``capacity`` are queued; false once the folder stopped.
    func put(_ batch: [FoldOp]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while batches.count >= capacity && !cancelled { condition.wait() }
        guard !cancelled else { return false }
        batches.append(batch)
        condition.broadcast()
        return true
    }

    /// The reader is done: whether the log was complete and sound, or its error. The first call
    /// counts; later ones are ignored.
    func finish(_ result: Result<Bool, Error>) {
        condition.lock()
        if end == nil { end = result }
        condition.broadcast()
        condition.unlock()
    }

    /// Whether the folder stopped before the end.
    var wasCancelled: Bool {
        condition.lock()
        defer { condition.unlock() }
        return cancelled
    }

    /// The folder stopped: the reader's next ``put(_:)`` returns false.
    func cancel() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        condition.unlock()
    }

    /// The folder is done with every batch (and what they point at): ``waitUntilReleased()``
    /// returns.
    func release() {
        condition.lock()
        released = true
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until the folder released the batches or stopped (``release()``, ``cancel()``): the
    /// reader holds the map lock until then, since the batches point into the map.
    func waitUntilReleased() {
        condition.lock()
        defer { condition.unlock() }
        while !released && !cancelled { condition.wait() }
    }

    /// Feeds every batch to `deliver` as it arrives; returns the reader's result. Stops (and
    /// cancels the reader) when `deliver` returns false.
    func drain(into deliver: ([FoldOp]) -> Bool) throws -> Bool {
        while true {
            condition.lock()
            while batches.isEmpty && end == nil { condition.wait() }
            if batches.isEmpty, let end {
                condition.unlock()
                return try end.get()
            }
            let batch = batches.removeFirst()
            condition.broadcast()
            condition.unlock()
            guard deliver(batch) else {
                cancel()
                return false
            }
        }
    }
}
