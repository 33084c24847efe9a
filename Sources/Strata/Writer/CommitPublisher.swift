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
/// no read transaction) with the last one it saw, and reads the log only when it moved. It runs
/// from the first subscription until the store closes.
final class CommitPublisher: Sendable {
    private struct State {
        /// The last transaction published (the log's head when the store opened).
        var published: UInt64
        /// LMDB's last committed transaction id when the watch last looked.
        var seenLMDB: UInt64 = 0
        var timer: DispatchSourceTimer?
        var closed = false
    }

    /// Transactions read from the log per step of a catch-up (bounds the memory of a long one).
    static let batch = 1_000

    private let state: Locked<State>
    let hub: ChangeHub
    let schema: Schema
    private let interval: Int
    private let environment: @Sendable () -> LMDBEnvironment?
    private let logger: Logger
    private let queue = DispatchQueue(label: "strata.other-process-commits", qos: .utility)

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
    /// another process committed before them and not yet published, then those not published yet.
    func publishLocal(_ entries: [LogEntry], env: LMDBEnvironment) {
        guard let first = entries.first?.transactionID.rawValue else { return }
        hub.recordLocal(entries)
        let listening = hub.hasSubscribers
        state.withLock { s in
            guard listening else {
                // Nobody to tell: a subscriber that comes later starts from here.
                s.published = max(s.published, entries[entries.count - 1].transactionID.rawValue)
                return
            }
            if first > s.published + 1, interval > 0 { publish(from: &s, through: first - 1, env: env) }
            let fresh = entries.filter { $0.transactionID.rawValue > s.published }
            if let last = fresh.last {
                hub.deliver(fresh, schema: schema)
                s.published = last.transactionID.rawValue
            }
        }
    }

    /// Starts the watch of other processes' commits (once; from the first subscription on). What
    /// was committed before is not published to the new subscriber.
    func startWatching() {
        guard interval > 0, let env = environment() else { return }
        let head = try? Self.head(env), seen = try? env.lastCommittedTransaction()
        state.withLock { s in
            guard s.timer == nil, !s.closed else { return }
            if let head, let seen {
                s.published = max(s.published, head)
                s.seenLMDB = seen
            }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + .milliseconds(interval), repeating: .milliseconds(interval),
                           leeway: .milliseconds(max(1, interval / 10)))
            timer.setEventHandler { [weak self] in self?.poll() }
            s.timer = timer
            timer.resume()
        }
    }

    /// One look: publishes what other processes committed since the last one.
    func poll() {
        guard let env = environment() else { return }
        let listening = hub.hasSubscribers
        do {
            let last = try env.lastCommittedTransaction()
            try state.withLock { s in
                guard !s.closed, last != s.seenLMDB else { return }
                s.seenLMDB = last
                if listening {
                    publish(from: &s, through: nil, env: env)
                } else {
                    // Nobody to tell: a subscriber that comes later starts from the head.
                    s.published = max(s.published, try Self.head(env))
                }
            }
        } catch StrataError.closed {
            return   // the store (or a generation a compaction replaced) closed meanwhile
        } catch {
            logger.warning("could not look for other processes' commits: \(error)")
        }
    }

    /// The log's last transaction id (0 for an empty log).
    static func head(_ env: LMDBEnvironment) throws -> UInt64 {
        try env.read { txn in
            try txn.last(env[.log]) { k, _ -> UInt64 in
                var r = ByteReader(k)
                return try r.u64()
            }
        } ?? 0
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

    /// Publishes the log after `s.published` up to `through` (the head when nil), in batches.
    private func publish(from s: inout State, through limit: UInt64?, env: LMDBEnvironment) {
        while true {
            let start = s.published + 1
            let entries: [LogEntry]
            do {
                entries = try env.read { txn in
                    var found: [LogEntry] = []
                    try txn.scan(env[.log], from: TransactionID(start).keyBytes) { key, value in
                        var r = ByteReader(key)
                        let tx = try r.u64()
                        if let limit, tx > limit { return false }
                        found.append(try LogEntryCodec.decode(value, transactionID: TransactionID(tx)))
                        return found.count < Self.batch
                    }
                    return found
                }
            } catch StrataError.closed {
                return   // a generation a compaction replaced: the next look reads the new one
            } catch {
                // A damaged entry: the subscribers learn they missed what could not be read.
                logger.error("could not read the log after transaction \(s.published) to publish it: \(error)")
                if let limit, limit > s.published {
                    hub.deliverMissed(Int(limit - s.published))
                    s.published = limit
                }
                return
            }
            guard let first = entries.first?.transactionID.rawValue,
                  let last = entries.last?.transactionID.rawValue else { return }
            // Ids are gap-free; a gap is a part of the log compaction squashed while this
            // process was not looking.
            if first > start { hub.deliverMissed(Int(first - start)) }
            hub.deliver(entries, schema: schema)
            s.published = last
            if entries.count < Self.batch { return }
        }
    }
}
