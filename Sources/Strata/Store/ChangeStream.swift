import Foundation

/// A committed transaction as published to observers.
public struct CommittedTransaction: Sendable, Equatable {
    public let id: TransactionID
    public let author: String
    public let timestamp: Date
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
    public typealias Element = ChangeEvent
    let subscriber: ChangeSubscriber

    public struct AsyncIterator: AsyncIteratorProtocol {
        let subscriber: ChangeSubscriber
        public mutating func next() async -> ChangeEvent? { await subscriber.next() }
    }

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

/// The ids of the transactions this process's writer commits with one metadata value (for
/// example `importID` = an import's id), recorded as they are published, before the saves that
/// made them return.
///
/// A save that changes nothing returns the store's last transaction id without writing, and
/// that id may be another process's transaction (or another save's of this process): the saver
/// asks ``take(_:)`` whether the id it got is one of its own commits. Two savers of this process
/// using the same metadata value at the same time would see each other's commits; no two
/// savers of different processes ever do.
final class CommitLedger: Sendable {
    let key: String
    let value: String
    private let recorded = Locked<Set<TransactionID>>([])

    init(key: String, value: String) {
        self.key = key
        self.value = value
    }

    func record(_ entry: LogEntry) {
        guard entry.metadata[key] == value else { return }
        _ = recorded.withLock { $0.insert(entry.transactionID) }
    }

    /// Whether `id` was committed with this ledger's metadata value since the last call that
    /// took it; forgets it.
    func take(_ id: TransactionID) -> Bool {
        recorded.withLock { $0.remove(id) != nil }
    }
}

/// Fans committed transactions out to subscribers (held weakly: a dropped stream unsubscribes)
/// and to commit ledgers (likewise).
final class ChangeHub: Sendable {
    private struct Weak: Sendable { weak var subscriber: ChangeSubscriber? }
    private struct WeakLedger: Sendable { weak var ledger: CommitLedger? }
    private let subscribers = Locked<[Weak]>([])
    private let ledgers = Locked<[WeakLedger]>([])

    /// Records every commit published from now on whose metadata matches `ledger`'s, until the
    /// ledger is released.
    func register(_ ledger: CommitLedger) {
        ledgers.withLock { list in
            list.removeAll { $0.ledger == nil }
            list.append(WeakLedger(ledger: ledger))
        }
    }

    func subscribe(capacity: Int) -> ChangeSubscriber {
        let s = ChangeSubscriber(capacity: capacity)
        subscribers.withLock { list in
            list.removeAll { $0.subscriber == nil }
            list.append(Weak(subscriber: s))
        }
        return s
    }

    func publish(_ entries: [LogEntry], schema: Schema) {
        let watching = ledgers.withLock { $0.compactMap(\.ledger) }
        for ledger in watching {
            for entry in entries { ledger.record(entry) }
        }
        let live = subscribers.withLock { $0.compactMap(\.subscriber) }
        guard !live.isEmpty else { return }
        for entry in entries {
            let event = ChangeEvent.committed(Self.summary(entry, schema: schema))
            for s in live { s.deliver(event) }
        }
    }

    func finishAll() {
        for s in subscribers.withLock({ $0.compactMap(\.subscriber) }) { s.finish() }
    }

    static func summary(_ entry: LogEntry, schema: Schema) -> CommittedTransaction {
        var changed: [String: Set<ObjectID>] = [:]
        func note(_ id: ObjectID) {
            changed[schema.entity(tag: id.entityTag)?.name ?? "tag \(id.entityTag)", default: []].insert(id)
        }
        for c in entry.changes {
            for id in c.objectIDs { note(id) }
        }
        return CommittedTransaction(id: entry.transactionID, author: entry.author,
                                    timestamp: Date(timeIntervalSince1970: Double(entry.timestampMs) / 1000),
                                    metadata: entry.metadata, changedObjects: changed)
    }
}
