import Dispatch
import Strata

/// Which of the cluster's append notifications a replica's follower may leave to the replica's
/// own writer, so that a replica busy saving does not read the log once for every append another
/// machine makes (three replicas saving read it three times an append, the reads finding what
/// the writers' own appends had just brought).
///
/// A notification is sent after the append it announces committed, so an append or read of the
/// log that this replica *sends* after the notification *arrived* runs after that commit. When
/// it reaches the end of the log (an append took the head row's lock: it answers every entry
/// since the head the writer validated at, or goes right after it; a read returned everything
/// through the head), the writer holds every entry that notification announced, and applies
/// them itself. So: each statement is sent with a mark, the notifications counted so far
/// (``begin()``), and one that reached the end covers the notifications up to its mark
/// (``end(_:reached:)``).
///
/// The follower reads the log after a notification unless it is covered and the local head is
/// at the end that statement saw (``verdict(localHead:now:)``). While the writer is appending (a
/// statement in flight, or one less than ``deferral`` ago) it waits for the writer's next append
/// instead; once the writer stops, it reads. It also reads every poll interval whatever this
/// says, so a mistake here would cost latency only, never an entry.
final class NotificationLedger: Sendable {
    /// How long after its last statement the writer counts as appending still: the gap between
    /// one group's append and the next (the group applied and synced, its savers answered).
    static let deferral: Duration = .milliseconds(5)

    private struct State {
        /// Notifications counted.
        var received: UInt64 = 0
        /// Notifications whose entries a statement that reached the end of the log brought.
        var covered: UInt64 = 0
        /// The end of the log (its head) that statement saw.
        var knownHead = TransactionID(0)
        /// The writer's statements sent and not yet answered.
        var inFlight = 0
        /// When the writer last sent or was answered a statement.
        var lastActivity = ContinuousClock.now - NotificationLedger.deferral
    }

    /// What the follower should do after a wake-up.
    enum Verdict: Equatable {
        /// Every notification is covered and applied: nothing to read.
        case nothingNew
        /// The writer is appending: wait for its next append.
        case writerBusy
        /// Read the log.
        case read
    }

    private let state = Locked(State())
    /// The follower's wake-up, signalled by each notification, and when a statement of the
    /// writer is answered while a notification was not covered.
    private let wake: DispatchSemaphore

    init(wake: DispatchSemaphore) {
        self.wake = wake
    }

    /// A notification arrived.
    func noteNotification() {
        state.withLock { $0.received &+= 1 }
        wake.signal()
    }

    /// The writer sends a statement; the returned mark goes to ``end(_:reached:)``.
    func begin(at now: ContinuousClock.Instant = .now) -> UInt64 {
        state.withLock { s in
            s.inFlight += 1
            s.lastActivity = now
            return s.received
        }
    }

    /// The writer's statement sent at `mark` was answered; `reached` is the end of the log it saw
    /// when it returned every entry up to it (nil when it did not: refused, failed, or a read
    /// that stopped at its limit).
    func end(_ mark: UInt64, reached: TransactionID?, at now: ContinuousClock.Instant = .now) {
        let uncovered = state.withLock { s -> Bool in
            s.inFlight -= 1
            assert(s.inFlight >= 0, "a statement ended that the ledger was not told of")
            s.lastActivity = now
            defer { if let reached { Self.cover(&s, mark, reached) } }
            return s.received > s.covered
        }
        // The follower may be waiting for this statement (only with a notification uncovered).
        if uncovered { wake.signal() }
    }

    /// The follower read the log through its end `reached` in a read sent at `mark` (from
    /// ``markForRead()``), and applied it.
    func noteRead(_ mark: UInt64, reached: TransactionID) {
        state.withLock { Self.cover(&$0, mark, reached) }
    }

    /// The mark of a read the follower sends now.
    func markForRead() -> UInt64 {
        state.withLock { $0.received }
    }

    private static func cover(_ s: inout State, _ mark: UInt64, _ reached: TransactionID) {
        s.covered = max(s.covered, mark)
        s.knownHead = max(s.knownHead, reached)
    }

    func verdict(localHead: TransactionID, now: ContinuousClock.Instant) -> Verdict {
        state.withLock { s in
            if s.received <= s.covered && localHead >= s.knownHead { return .nothingNew }
            if s.inFlight > 0 || now - s.lastActivity < Self.deferral { return .writerBusy }
            return .read
        }
    }
}
