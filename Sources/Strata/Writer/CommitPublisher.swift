import Dispatch
import Logging
import StrataLMDB

/// Publishes committed transactions to the change streams in log order, each exactly once: this
/// process's commits as its writer makes them, and the commits of other processes sharing the
/// store, found by a watch of the log.
///
/// One position, the last transaction published, orders both. The writer's commits and the
/// watch publish under one lock; each publishes the log from the position up to what it has
/// (reading from the log the transactions it did not make) and moves the position, so a
/// transaction seen by both is published by whichever comes first, and none is skipped. The
/// watch is a timer that compares LMDB's last committed transaction id (the shared meta page;
/// no read transaction) with the id of the last snapshot it read, and reads the log only when
/// they differ. It runs from the first subscription until the store closes.
///
/// The meta page runs ahead of the snapshots: a committing process writes it, then (after that
/// write reached the disk) records the transaction in the lock file, where a new read
/// transaction takes its snapshot from. A look in between sees the new id in the meta page but
/// reads the log as it was. The watch therefore remembers the snapshot it read, not the meta
/// page's id, and looks again at its next step.
final class CommitPublisher: Sendable {
    private struct State {
        /// The last transaction published (the log's head when the store opened).
        var published: UInt64
        /// The snapshot the watch last read the log in: its environment (a compaction's new
        /// generation numbers its LMDB transactions from 1 again) and LMDB transaction id.
        var seen: StateID?
        var timer: DispatchSourceTimer?
        var closed = false
        /// Looks that failed in a row (a grown map this process cannot map, say), reported at
        /// the first failure, when the error changes, and then once a minute, not at every look.
        var failures = RepeatedFailure()
    }

    /// Transactions read from the log per step of a catch-up (bounds the memory of a long one).
    static let batch = 1_000
    /// Changes read per step, whatever the number of transactions: a bulk import's transactions
    /// hold a whole batch of records each (5,000 by default), so 1,000 of them could decode
    /// millions of changes at once.
    static let batchChanges = 100_000

    private let state: Locked<State>
    let hub: ChangeHub
    let schema: Schema
    private let interval: Int
    private let environment: @Sendable () -> LMDBEnvironment?
    private let logger: Logger
    private let queue = DispatchQueue(label: "strata.other-process-commits", qos: .utility)
    /// Run (tests only) inside a look, under the publisher's lock, between its read of the head
    /// and its question whether anyone subscribes.
    let betweenHeadAndSubscriberCheckForTesting = Locked<(@Sendable () -> Void)?>(nil)
    /// Run (tests only) when the first subscriber comes, under the publisher's lock, between the
    /// read of the watch's starting point and the subscription.
    let betweenStartAndSubscriptionForTesting = Locked<(@Sendable () -> Void)?>(nil)

    /// - Parameters:
    ///   - head: the log's last transaction id when the store opened (nothing before it is published).
    ///   - intervalMilliseconds: the watch's period; 0 turns the watch off.
    ///   - environment: the live generation's environment, nil once the store is closed.
    init(hub: ChangeHub, schema: Schema, head: UInt64, intervalMilliseconds: Int, logger: Logger,
         environment: @escaping @Sendable () -> LMDBEnvironment?) {
        self.hub = hub
        self.schema = schema
        self.interval = intervalMilliseconds
        self.environment = environment
        self.logger = logger
        state = Locked(State(published: head))
    }

    /// Publishes this process's `entries` (committed in `env`, in order): first any transaction of
    /// another process committed before them and not yet published, a batch at a time (the lock is
    /// let go between batches, and the watch may publish some of them meanwhile), then those of
    /// `entries` not published yet.
    func publishLocal(_ entries: [LogEntry], env: LMDBEnvironment) {
        guard let first = entries.first?.transactionID.rawValue,
              let last = entries.last?.transactionID.rawValue else { return }
        hub.recordLocal(entries)
        if interval > 0 {
            do {
                while try publishBatch(env: env, through: first - 1).more {}
            } catch {
                // The log before these entries cannot be read now: the subscribers learn they
                // missed it, and the order stays the log's.
                logger.error("could not read the log before transaction \(first) to publish it: \(error)")
                state.withLock { s in
                    guard first - 1 > s.published else { return }
                    if hub.hasSubscribers { hub.deliverMissed(Int(first - 1 - s.published)) }
                    s.published = first - 1
                }
            }
        }
        state.withLock { s in
            // Asked under the lock: a subscriber that came before this point gets these entries.
            guard hub.hasSubscribers else {
                // Nobody to tell: a subscriber that comes later starts from here.
                s.published = max(s.published, last)
                return
            }
            let fresh = entries.filter { $0.transactionID.rawValue > s.published }
            if let end = fresh.last {
                hub.deliver(fresh, schema: schema)
                s.published = end.transactionID.rawValue
            }
        }
    }

    /// Publishes every transaction of the log after the position (through `last`, when given), a
    /// batch at a time: those a bulk load committed into a generation that has just become the
    /// live one (see `BulkLoad`), or those of other machines a replica applied below its own.
    /// A log that cannot be read is logged and reported to the subscribers as missed.
    func publishCommitted(env: LMDBEnvironment, through last: TransactionID? = nil) {
        do {
            while try publishBatch(env: env, through: last?.rawValue).more {}
        } catch {
            logger.error("could not read the log to publish transactions committed here: \(error)")
            let head = last?.rawValue ?? (try? Self.head(env, schema))
            state.withLock { s in
                guard let head, head > s.published else { return }
                if hub.hasSubscribers { hub.deliverMissed(Int(head - s.published)) }
                s.published = head
            }
        }
    }

    /// Adds a subscriber to the hub and, for the first one, starts the watch of other processes'
    /// commits (it runs from then until the store closes). All under the publisher's lock, so a
    /// watch's start and the subscriptions are ordered with every look and every publication:
    ///
    /// - The first subscriber's starting point (the log's head and the snapshot it was read in) is
    ///   read before it subscribes, so another process's commit between the two is after the
    ///   position and reaches it (a head read after the subscription would take it as seen).
    /// - Two first subscribers at once cannot each bring a starting point, the later one's
    ///   winning: the second finds the watch started and just subscribes, and the position it
    ///   finds is at or before its subscription.
    ///
    /// What was committed before the start is not published to the new subscriber. Nor, when
    /// the watch runs but nobody listens (every earlier subscriber gone), what other processes
    /// committed since its last look: the position moves to the head as for a first subscriber.
    func subscribe(capacity: Int) -> ChangeSubscriber {
        state.withLock { s in
            if s.closed {
                // The store closed, or this instance migrated it: nothing will be published.
                let ended = hub.subscribe(capacity: capacity)
                ended.finish()
                return ended
            }
            guard interval > 0, s.timer == nil || !hub.hasSubscribers else { return hub.subscribe(capacity: capacity) }
            // Nil when the log cannot be read now: the position stays where local commits left it.
            let start = environment().flatMap { try? Self.headAndSnapshot($0, schema) }
            betweenStartAndSubscriptionForTesting.withLock { $0 }?()
            let subscriber = hub.subscribe(capacity: capacity)
            if let start {
                s.published = max(s.published, start.head)
                s.seen = start.snapshot
            }
            if s.timer != nil { return subscriber }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + .milliseconds(interval), repeating: .milliseconds(interval),
                           leeway: .milliseconds(max(1, interval / 10)))
            timer.setEventHandler { [weak self] in self?.poll() }
            s.timer = timer
            timer.resume()
            return subscriber
        }
    }

    /// One look: publishes what other processes committed since the last one, a batch at a time.
    func poll() {
        guard let env = environment() else { return }
        do {
            try poll(env: env, lastCommitted: env.lastCommittedTransaction())
            let recovered = state.withLock { $0.failures.succeeded() }
            if recovered > 0 {
                logger.notice("looking for other processes' commits again after \(recovered) failed look(s)")
            }
        } catch StrataError.closed {
            return   // the store (or a generation a compaction replaced) closed meanwhile
        } catch {
            // The log could not be read now (not an entry that fails to decode: those are
            // reported as missed); the next look tries again.
            let text = "\(error)"
            let report = state.withLock { s -> Int? in
                s.seen = nil
                return s.failures.failed(text, at: .now)
            }
            if let failures = report {
                let repeated = failures > 1 ? " (\(failures) failed looks in a row; tried again every \(interval) ms)" : ""
                logger.warning("could not look for other processes' commits: \(text)\(repeated)")
            }
        }
    }

    /// A look given LMDB's last committed transaction id as the meta page shows it
    /// (`lastCommitted`): when it differs from the snapshot the last look read, reads the log,
    /// publishes what it holds after the position, and remembers the first batch's snapshot. A
    /// transaction the meta page shows and that snapshot lacks is found by the next look.
    func poll(env: LMDBEnvironment, lastCommitted: UInt64) throws {
        let now = StateID(environment: env.serial, transaction: lastCommitted)
        let moved = state.withLock { s in !s.closed && now != s.seen }
        guard moved else { return }
        var first: StateID?
        var more = true
        while more {
            let batch = try publishBatch(env: env, through: nil)
            if first == nil { first = batch.snapshot }
            more = batch.more
        }
        if let first { state.withLock { $0.seen = first } }
    }

    /// Stops the watch; nothing is published after it returns.
    func close() {
        let timer = state.withLock { s -> DispatchSourceTimer? in
            s.closed = true
            defer { s.timer = nil }
            return s.timer
        }
        timer?.cancel()
    }

    /// The last committed transaction (the horizon of a compacted store whose log is empty).
    static func head(_ env: LMDBEnvironment, _ schema: Schema) throws -> UInt64 {
        try env.read { try ReadView(txn: $0, env: env, schema: schema).lastTransactionID().rawValue }
    }

    /// The last committed transaction and the state (environment and LMDB id) it was read in (one read
    /// transaction).
    static func headAndSnapshot(_ env: LMDBEnvironment, _ schema: Schema) throws -> (head: UInt64, snapshot: StateID) {
        try env.read { txn in
            let view = ReadView(txn: txn, env: env, schema: schema)
            return (try view.lastTransactionID().rawValue, view.stateID)
        }
    }

    /// Publishes, under the lock, up to ``batch`` transactions or ``batchChanges`` changes of the
    /// log after the position and not past `limit` (the head when nil); true when there may be
    /// more. With no subscriber the position just moves to the head (nobody to tell; a later
    /// subscriber starts from there). An entry that fails to decode is skipped and counted as
    /// missed; ids the log lacks (squashed by a compaction) are counted as missed too. Returns
    /// whether there may be more, and the state of the snapshot read (nil when none was).
    private func publishBatch(env: LMDBEnvironment, through limit: UInt64?) throws -> (more: Bool, snapshot: StateID?) {
        try state.withLock { s -> (more: Bool, snapshot: StateID?) in
            if s.closed { return (false, nil) }
            if let limit, limit <= s.published { return (false, nil) }
            if !hub.hasSubscribers {
                if let limit {
                    // Everything through `limit` was committed before this question.
                    s.published = max(s.published, limit)
                    return (false, nil)
                }
                // The head is read, then the question asked again: a subscriber that comes after
                // it subscribed after everything read was committed. (The head read after the one
                // question could take in a commit made after a subscription that came between,
                // and move the position past it unpublished.)
                let current = try Self.headAndSnapshot(env, schema)
                betweenHeadAndSubscriberCheckForTesting.withLock { $0 }?()
                if !hub.hasSubscribers {
                    s.published = max(s.published, current.head)
                    return (false, current.snapshot)
                }
            }
            let start = s.published + 1
            var entries: [LogEntry] = []
            var damaged = 0, changes = 0
            var end = s.published
            var full = false
            let snapshot = try env.read { txn -> StateID in
                try txn.scan(env[.log], from: TransactionID(start).keyBytes) { key, value in
                    // A key that is no transaction id (damage) names no entry to publish: said
                    // and passed over, not thrown at every later look.
                    guard key.count == 8 else {
                        logger.error("the log of \(env.path) has a key of \(key.count) bytes, not 8: passed over")
                        return true
                    }
                    var r = ByteReader(key)
                    let tx = try r.u64()
                    if let limit, tx > limit { return false }
                    do {
                        let entry = try LogEntryCodec.decode(value, transactionID: TransactionID(tx))
                        changes += entry.changes.count
                        entries.append(entry)
                    } catch {
                        damaged += 1
                        logger.error("transaction \(tx) of the log cannot be published: \(error)")
                    }
                    end = tx
                    full = entries.count + damaged >= Self.batch || changes >= Self.batchChanges
                    return !full
                }
                return StateID(environment: env.serial, transaction: LMDBEnvironment.lmdbTransactionID(txn.handle))
            }
            // Everything through `limit` is committed (the caller's commits follow it): ids the
            // log ends before it are squashed by a compaction, and missed. Left unmoved, the
            // position let the caller's commits go out after them unreported.
            if let limit, !full, end < limit { end = limit }
            guard end > s.published else { return (false, snapshot) }
            let missed = Int(end - s.published) - entries.count
            if missed > 0 { hub.deliverMissed(missed) }
            hub.deliver(entries, schema: schema)
            s.published = end
            return (full, snapshot)
        }
    }
}

/// The failures in a row of something tried again and again (the watch's looks), and when they
/// were last reported: the first failure is reported, then a failure whose error differs from the
/// one before, then the same failure again once ``interval`` has passed since the last report.
struct RepeatedFailure {
    /// How often the same failure is reported again.
    static let interval = Duration.seconds(60)
    private(set) var count = 0
    private var last = ""
    private var reported: ContinuousClock.Instant?

    /// Counts a failure with error text `error` at `now`; returns the failures in a row when it
    /// is to be reported, nil when not.
    mutating func failed(_ error: String, at now: ContinuousClock.Instant) -> Int? {
        count += 1
        defer { last = error }
        guard error != last || reported.map({ now - $0 >= Self.interval }) ?? true else { return nil }
        reported = now
        return count
    }

    /// A success: returns the failures it ends (0 when there were none) and starts again.
    mutating func succeeded() -> Int {
        defer { self = RepeatedFailure() }
        return count
    }
}
