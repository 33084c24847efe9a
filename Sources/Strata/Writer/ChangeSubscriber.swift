final class ChangeSubscriber: Sendable {
    private struct State {
        var buffer: [ChangeEvent] = []
        var head = 0
        var missed = 0
        /// Object ids named by the buffered events (``objectIDLimit``).
        var ids = 0
        var waiting: CheckedContinuation<ChangeEvent?, Never>?
        var finished = false
    }
    private let state = Locked(State())
    let capacity: Int
    /// Object ids the buffered events may name in all: past it, as past ``capacity`` events,
    /// later events are dropped and counted as missed (a subscriber that stops reading during an
    /// import of 5,000 records a transaction held about 5 million ids, 100–200 MB, at 1,024
    /// events). An event is always buffered when none is: one large transaction is delivered.
    let objectIDLimit: Int
    /// The default ``objectIDLimit``.
    static let maxBufferedObjectIDs = 1 << 20

    init(capacity: Int, objectIDLimit: Int = ChangeSubscriber.maxBufferedObjectIDs) {
        self.capacity = max(1, capacity)
        self.objectIDLimit = max(1, objectIDLimit)
    }

    /// The object ids `event` names.
    private static func objectIDs(in event: ChangeEvent) -> Int {
        guard case .committed(let tx) = event else { return 0 }
        return tx.changedObjects.values.reduce(0) { $0 + $1.count }
    }

    /// Whether the subscriber ended (its stream cancelled, or the store closed): nothing is
    /// delivered to it, and the hub lets go of it.
    var isFinished: Bool { state.withLock { $0.finished } }

    /// Whether a task waits in ``next()`` (tests).
    var isWaitingForTesting: Bool { state.withLock { $0.waiting != nil } }

    /// The transactions `event` stands for: one committed, or the count a notice of missed ones
    /// carries (dropped or folded into a later notice, it is counted as that many).
    private static func transactions(in event: ChangeEvent) -> Int {
        switch event {
        case .committed: 1
        case .fellBehind(let missed): missed
        }
    }

    func deliver(_ event: ChangeEvent) {
        let waiter = state.withLock { s -> CheckedContinuation<ChangeEvent?, Never>? in
            if s.finished { return nil }
            if let w = s.waiting {
                s.waiting = nil
                return w
            }
            let buffered = s.buffer.count - s.head, ids = Self.objectIDs(in: event)
            if buffered == 0 || (buffered < capacity && s.ids + ids <= objectIDLimit) {
                s.buffer.append(event)
                s.ids += ids
            } else {
                s.missed += Self.transactions(in: event)
            }
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
                        let missed = s.buffer[s.head...].reduce(s.missed) { $0 + Self.transactions(in: $1) }
                        s.missed = 0
                        s.buffer.removeAll()
                        s.head = 0
                        s.ids = 0
                        return .some(.fellBehind(missed: missed))
                    }
                    if s.head < s.buffer.count {
                        let e = s.buffer[s.head]
                        s.head += 1
                        s.ids -= Self.objectIDs(in: e)
                        if s.head > 64, s.head * 2 > s.buffer.count {
                            s.buffer.removeFirst(s.head)
                            s.head = 0
                        }
                        return .some(e)
                    }
                    if s.finished || Task.isCancelled { return .some(nil) }
                    // One consumer at a time: a second task waiting on the same stream ends its
                    // iteration at once (overwriting the first waiter left that task suspended
                    // for ever, its cancellation resuming the other one).
                    if s.waiting != nil { return .some(nil) }
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
