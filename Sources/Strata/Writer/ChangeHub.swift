import Foundation

/// Fans committed transactions out to subscribers (held weakly: a dropped stream unsubscribes)
/// and to commit ledgers (likewise).
final class ChangeHub: Sendable {
    private struct Weak: Sendable { weak var subscriber: ChangeSubscriber? }
    private struct WeakLedger: Sendable { weak var ledger: (any LocalCommitRecorder)? }
    private let subscribers = Locked<[Weak]>([])
    private let ledgers = Locked<[WeakLedger]>([])
    /// What runs at ``finishAll()`` (the store closed, or this instance migrated it), by token;
    /// `finished` once it ran.
    private let endListeners = Locked<(finished: Bool, next: Int, bodies: [Int: @Sendable () -> Void])>(
        (false, 0, [:]))

    /// Gives `ledger` every commit of this process published from now on (it keeps those it
    /// wants: an import's own, a save's entry), until the ledger is released.
    func register(_ ledger: any LocalCommitRecorder) {
        ledgers.withLock { list in
            list.removeAll { $0.ledger === nil }
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

    /// Gives this process's commits to the ledgers (which count an import's own transactions, never
    /// another process's).
    func recordLocal(_ entries: [LogEntry]) {
        let watching = ledgers.withLock { $0.compactMap(\.ledger) }
        for ledger in watching {
            for entry in entries { ledger.record(entry) }
        }
    }

    /// Whether a subscriber is alive and not finished (a cancelled stream still held by its
    /// owner is not: no summary is built and no other process's commit read for it).
    /// Asked by every commit: a look, no copy (``live()`` lets the others go).
    var hasSubscribers: Bool {
        subscribers.withLock { list in list.contains { $0.subscriber.map { !$0.isFinished } ?? false } }
    }

    /// The subscribers alive and not finished; the others are let go of.
    private func live() -> [ChangeSubscriber] {
        subscribers.withLock { list in
            list.removeAll { $0.subscriber?.isFinished ?? true }
            return list.compactMap(\.subscriber)
        }
    }

    /// Delivers committed transactions to every subscriber, in the order given (the
    /// ``CommitPublisher`` calls it in log order, each transaction once).
    func deliver(_ entries: [LogEntry], schema: Schema) {
        let live = live()
        guard !live.isEmpty else { return }
        for entry in entries {
            let event = ChangeEvent.committed(Self.summary(entry, schema: schema))
            for s in live { s.deliver(event) }
        }
    }

    /// Tells every subscriber it missed `count` transactions (the log could not be read for them).
    func deliverMissed(_ count: Int) {
        for s in live() { s.deliver(.fellBehind(missed: count)) }
    }

    func finishAll() {
        for s in subscribers.withLock({ $0.compactMap(\.subscriber) }) { s.finish() }
        let bodies = endListeners.withLock { l -> [@Sendable () -> Void] in
            l.finished = true
            defer { l.bodies.removeAll() }
            return Array(l.bodies.values)
        }
        for body in bodies { body() }
    }

    /// Runs `body` when the hub finishes (at once, on this thread, if it has); the token removes
    /// it (``removeEndListener(_:)``). For what must end with the store but takes no commits (a
    /// pinned context's live query).
    func onFinish(_ body: @escaping @Sendable () -> Void) -> Int? {
        let token = endListeners.withLock { l -> Int? in
            guard !l.finished else { return nil }
            l.next += 1
            l.bodies[l.next] = body
            return l.next
        }
        if token == nil { body() }
        return token
    }

    func removeEndListener(_ token: Int) { endListeners.withLock { _ = $0.bodies.removeValue(forKey: token) } }

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
