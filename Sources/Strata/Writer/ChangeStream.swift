import Foundation

/// A committed transaction as published to observers.
public struct CommittedTransaction: Sendable, Equatable {
    /// The transaction's id.
    public let id: TransactionID
    /// Who saved it (the `author` of the save, or a child context's label).
    public let author: String
    /// When it was committed.
    public let timestamp: Date
    /// The metadata saved with it.
    public let metadata: [String: String]
    /// Every object inserted, updated, deleted or re-linked, by entity name.
    public let changedObjects: [String: Set<ObjectID>]
}

/// What a change-stream subscriber receives.
public enum ChangeEvent: Sendable, Equatable {
    /// The next committed transaction.
    case committed(CommittedTransaction)
    /// The subscriber's buffer was full and `missed` transactions were dropped for it; refetch
    /// what you show instead of applying deltas.
    case fellBehind(missed: Int)
}

/// An `AsyncSequence` of committed transactions. The writer never waits for a subscriber: each
/// has a bounded buffer (``StoreConfiguration/changeStreamBufferSize``) and is told when it fell
/// behind.
///
/// ```swift
/// for await event in store.changes() {
///     if case .committed(let tx) = event { print(tx.id, tx.changedObjects["Track"]?.count ?? 0) }
/// }
/// ```
public struct ChangeStream: AsyncSequence, Sendable {
    /// Each element is a committed transaction or a notice that the subscriber fell behind.
    public typealias Element = ChangeEvent
    let subscriber: ChangeSubscriber

    /// Delivers the subscriber's events in commit order.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let subscriber: ChangeSubscriber
        /// The next event; waits for the next commit when none is buffered, and returns `nil` once the stream is
        /// cancelled and its buffered events are delivered.
        public mutating func next() async -> ChangeEvent? { await subscriber.next() }
    }

    /// An iterator over this subscriber's events (one subscriber: iterate a stream once).
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(subscriber: subscriber) }

    /// Stops the stream: a pending `next()` returns nil.
    public func cancel() { subscriber.finish() }
}

final class ChangeSubscriber: Sendable {
    private struct State {
        var buffer: [ChangeEvent] = []
        var head = 0
        var missed = 0
        var waiting: CheckedContinuation<ChangeEvent?, Never>?
        var finished = false
    }
    private let state = Locked(State())
    let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func deliver(_ event: ChangeEvent) {
        let waiter = state.withLock { s -> CheckedContinuation<ChangeEvent?, Never>? in
            if s.finished { return nil }
            if let w = s.waiting {
                s.waiting = nil
                return w
            }
            if s.buffer.count - s.head < capacity { s.buffer.append(event) } else { s.missed += 1 }
            return nil
        }
        waiter?.resume(returning: event)
    }

    func finish() {
        let waiter = state.withLock { s -> CheckedContinuation<ChangeEvent?, Never>? in
            s.finished = true
            defer { s.waiting = nil }
            return s.waiting
        }
        waiter?.resume(returning: nil)
    }

    func next() async -> ChangeEvent? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<ChangeEvent?, Never>) in
                let ready = state.withLock { s -> ChangeEvent?? in
                    if s.missed > 0 {
                        // Whatever is buffered is older than what was dropped: replace it by one notice.
                        let missed = s.missed + (s.buffer.count - s.head)
                        s.missed = 0
                        s.buffer.removeAll()
                        s.head = 0
                        return .some(.fellBehind(missed: missed))
                    }
                    if s.head < s.buffer.count {
                        let e = s.buffer[s.head]
                        s.head += 1
                        if s.head > 64, s.head * 2 > s.buffer.count {
                            s.buffer.removeFirst(s.head)
                            s.head = 0
                        }
                        return .some(e)
                    }
                    if s.finished || Task.isCancelled { return .some(nil) }
                    s.waiting = c
                    return .none
                }
                if let ready { c.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }
}
