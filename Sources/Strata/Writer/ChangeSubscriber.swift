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
            if s.buffer.count - s.head < capacity { s.buffer.append(event) } else { s.missed += Self.transactions(in: event) }
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
