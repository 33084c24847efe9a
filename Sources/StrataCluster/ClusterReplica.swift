import Dispatch
import Foundation
import Logging
import PostgresNIO
import Strata
import Synchronization

/// A store working as a replica of a cluster: its saves go through the cluster's log in
/// PostgreSQL, and what other machines append is applied to it in order. Reads, contexts, live
/// queries and change streams are the store's own (``store``), served locally; they fire for
/// commits made on other machines too.
///
/// ```swift
/// let store = try Store.openExisting(at: URL(fileURLWithPath: "/var/lib/app/library.strata"))
/// let replica = try await ClusterReplica.open(store: store, address: try ClusterAddress.resolve(nil))
/// let tx = try await replica.store.save(changes)   // in PostgreSQL, then applied here
/// ```
///
/// A save returns once PostgreSQL has committed it and this replica has applied it, so a machine
/// reads its own writes. A save that another machine's append overtook is validated again at the
/// new head (merge policies and unique constraints decide as on one machine).
///
/// A follower thread keeps the replica current: it listens for PostgreSQL's notification of an
/// append (a signal only; the entries are read from the log), and reads the log every
/// ``pollInterval`` as well, so a lost notification costs latency only. Readers never wait for it.
/// While the replica saves, its own appends bring what other machines appended (each answers
/// the entries since the head it was validated at), and the follower leaves the notifications
/// they cover to them instead of reading the log for each.
public final class ClusterReplica: Sendable {
    /// The local store.
    public let store: Store
    /// This replica's name in the cluster (`strata_replicas`, and each entry it appends).
    public let name: String
    /// The cluster's id (the store's ``Store/replicaClusterID``).
    public let clusterID: String
    /// How often the follower reads the log when no notification came.
    public let pollInterval: Duration
    /// The longest ``pollInterval`` (a day): a lost notification may cost that much latency.
    public static let maxPollInterval: Duration = .seconds(86_400)
    let address: ClusterAddress
    let log: SharedLog
    private let follower: Follower
    /// The follower's reads of the log so far (tests).
    var followerReads: Int { follower.reads.load(ordering: .relaxed) }

    private init(store: Store, name: String, clusterID: String, address: ClusterAddress, pollInterval: Duration,
                 log: SharedLog, follower: Follower) {
        self.store = store
        self.name = name
        self.clusterID = clusterID
        self.address = address
        self.pollInterval = pollInterval
        self.log = log
        self.follower = follower
    }

    /// Attaches `store`, a replica (made by ``Cluster/initialize(store:address:name:)`` or
    /// ``Cluster/join(at:address:configuration:name:)``), to its cluster at `address`, catches it up,
    /// and starts following the log.
    ///
    /// - Throws: ``ClusterError`` when PostgreSQL cannot be reached, holds no cluster, or the store
    ///   is not a replica of the cluster there, or (``ClusterError/Kind/mustRejoin``) when its
    ///   machine went down while it had unsynced commits; ``StrataError/replication(_:)`` when
    ///   the store is behind the cluster's retention horizon (make it again with `join`);
    ///   ``ClusterError/Kind/badArgument`` when `pollInterval` is not from 1 ms to
    ///   ``maxPollInterval`` or `name` holds a NUL character.
    public static func open(store: Store, address: ClusterAddress, name: String? = nil,
                            pollInterval: Duration = .milliseconds(250)) async throws -> ClusterReplica {
        try checkName(name)
        guard pollInterval >= .milliseconds(1) && pollInterval <= maxPollInterval else {
            throw ClusterError(.badArgument, "pollInterval \(pollInterval): must be from 1 ms to a day")
        }
        guard let storeCluster = try store.replicaClusterID else {
            throw ClusterError(.wrongStore, """
                \(store.path) is not a replica of a cluster (make one with `storectl cluster init` or `cluster join`)
                """)
        }
        try refuseIfTorn(store)
        let logger = Logger(label: "strata.cluster")
        let name = name ?? Self.defaultName(store)
        try checkName(name)  // also one kept in the store by a caller of Store.setReplicaName
        let writerSession = PostgresSession(address: address, logger: logger)
        defer { writerSession.close() }
        let cluster: Cluster.Row
        do {
            cluster = try await offPool("open") { try Cluster.readCluster(writerSession) }
        } catch let e as ClusterError where e.kind == .noCluster {
            // A `cluster init` of this store stopped before its cluster was made: finishing it is
            // the way on (its store is marked already, so it is not one of one machine either).
            if let making = try store.clusterBeingMadeIn {
                throw ClusterError(.noCluster, Cluster.unfinishedInit(store, making: making))
            }
            throw e
        }
        guard cluster.id == storeCluster else {
            throw ClusterError(.wrongStore, """
                \(store.path) is a replica of cluster \(storeCluster); the database at \(address) holds cluster \
                \(cluster.id)
                """)
        }
        // The cluster exists: an init that made it but stopped before saying so to the store.
        if try store.clusterBeingMadeIn != nil { try await store.finishMakingCluster(clusterID: storeCluster) }
        try await checkHistory(store, writerSession, address: address)
        let wake = DispatchSemaphore(value: 0)
        let ledger = NotificationLedger(wake: wake)
        let log = SharedLog(session: PostgresSession(address: address, logger: logger, expectedCluster: cluster.id),
                            replica: name, layout: cluster.layout, ledger: ledger)
        try store.attachReplication(log)
        do {
            try await store.catchUpReplica()
        } catch {
            await store.detachReplication()
            log.session.close()
            throw error
        }
        // Listed at its position from the moment it is open (the follower's heartbeats go on).
        if let head = try? store.lastTransactionID {
            // On this open's own session: the writer's may be in a save's transaction by now.
            _ = try? await offPool("open") { try Follower.report(writerSession, name: name, head: head) }
        }
        let follower = Follower(store: store, name: name,
                                session: PostgresSession(address: address, logger: logger, expectedCluster: cluster.id),
                                interval: pollInterval, logger: logger, wake: wake, ledger: ledger)
        follower.start()
        return ClusterReplica(store: store, name: name, clusterID: cluster.id, address: address,
                              pollInterval: pollInterval, log: log, follower: follower)
    }

    /// Refuses a replica whose machine went down while it was open with relaxed durability and
    /// commits not yet flushed (``Strata/Store/crashedWithUnsyncedCommits``): its file may hold
    /// part of a commit, and nothing applied on top of it could be trusted.
    static func refuseIfTorn(_ store: Store) throws {
        guard !store.crashedWithUnsyncedCommits else {
            throw ClusterError(.mustRejoin, """
                \(store.path): the machine went down while this replica was open with relaxed durability and \
                commits not yet flushed, so its file may hold part of a commit; make a new replica with \
                `storectl cluster join` (the cluster holds every acknowledged save)
                """)
        }
    }

    /// Refuses a replica whose last transaction is not the cluster's transaction of that id: its
    /// history diverged from the cluster's (a cluster database restored from an older backup,
    /// after which other machines appended as many transactions as this replica had beyond it),
    /// and applying the log after it would mix two histories. A replica past the cluster's head
    /// is told so when it catches up; one whose last transaction the cluster no longer keeps
    /// (trimmed behind a snapshot), or that keeps none of its own (made from a snapshot, or
    /// compacted), is not checked here.
    static func checkHistory(_ store: Store, _ session: PostgresSession, address: ClusterAddress) async throws {
        let diverged = try await offPool("open") { try historyDiverged(store, session) }
        if let head = diverged {
            throw StrataError.replication(ReplicationError(.rejectedEntry, """
                \(store.path): this replica's transaction \(head) is not the cluster's transaction \(head) at \(address): \
                its history diverged from the cluster's (the database restored from an older backup?); start it \
                again from the cluster's latest snapshot with `storectl cluster reset STORE`
                """))
        }
    }

    /// The replica's last transaction when the cluster holds another transaction under its id
    /// (``checkHistory(_:_:address:)``), nil when it holds the same one or none there.
    static func historyDiverged(_ store: Store, _ session: PostgresSession,
                                at position: TransactionID? = nil) throws -> TransactionID? {
        let head = try position ?? store.lastTransactionID
        guard head > .zero, let position = Int64(exactly: head.rawValue) else { return nil }
        let rows: [ReplicatedEntry]
        do {
            rows = try session.run("""
                SELECT id, entry, author, saved_ms, schema_version FROM strata_log WHERE id = \(position)
                """).map { row in
                let (id, payload, author, saved, version) = try row.decode((Int64, ByteBuffer, String, Int64, Int32).self)
                return try ReplicatedEntry(row: id, payload, author, saved, version)
            }
        } catch let e as PostgresSession.Failure {
            throw ClusterError(.unavailable, "reading the cluster's log: \(e.text)")
        }
        guard let shared = rows.first else { return nil }
        do {
            return try store.holdsLogEntry(shared) == false ? head : nil
        } catch {
            // Damage, on one side or the other, which trying again does not mend.
            throw StrataError.replication(ReplicationError(.rejectedEntry, """
                transaction \(head), as the cluster holds it or as this replica does, cannot be read: \(error)
                """))
        }
    }

    /// The name kept in the store (``Store/replicaName``, given when the cluster was made from
    /// it), else `host:store path`, unique per store on a machine.
    static func defaultName(_ store: Store) -> String {
        ((try? store.replicaName) ?? nil) ?? "\(ProcessInfo.processInfo.hostName):\(store.path)"
    }

    /// Refuses a replica name PostgreSQL's text cannot hold (a NUL character): every append
    /// would fail.
    static func checkName(_ name: String?) throws {
        guard let name, let problem = nameProblem(name) else { return }
        throw ClusterError(.badArgument, "replica name '\(EchoedText.shown(name))': \(problem)")
    }

    /// Why `name` cannot name a replica (nil when it can): a NUL character, which PostgreSQL's
    /// text cannot hold, or any control character, or none at all (a name is shown in `cluster
    /// status` and stored with every entry appended: a name people can read).
    public static func nameProblem(_ name: String) -> String? {
        if name.unicodeScalars.contains("\u{0}") { return "holds a NUL character" }
        if name.isEmpty || name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            return "must not be empty or hold control characters"
        }
        return nil
    }

    /// A replica's name as messages and `cluster status` show it: whole, control characters
    /// escaped, so that it can be given back to `storectl cluster forget` (default names,
    /// `host:path`, are often longer than the 64 characters other input is cut to); cut only past
    /// ``shownNameMaxBytes``.
    public static func shownName(_ name: String) -> String {
        name.utf8.count <= shownNameMaxBytes ? EchoedText.escaped(name) : EchoedText.shown(name)
    }

    /// The longest name ``shownName(_:)`` shows whole: a path's longest on Linux, with a host.
    public static let shownNameMaxBytes = 4_352

    /// The name a replica made at `url` goes by unless it is given one: `host:store path`, the
    /// path as the store will have it (its directory's symbolic links resolved).
    public static func defaultName(forStoreAt url: URL) -> String {
        let standard = url.standardizedFileURL
        let parent = standard.deletingLastPathComponent().resolvingSymlinksInPath()
        return "\(ProcessInfo.processInfo.hostName):\(parent.appendingPathComponent(standard.lastPathComponent).path)"
    }

    /// Stops following the log (after a last report of this replica's position to the cluster)
    /// and detaches the store from the cluster: its saves fail until a replica is opened again.
    /// Does not close the store.
    public func close() async {
        let follower = self.follower
        _ = try? await offPool("close") { follower.stop() }
        // After the group commit running now, if any: its append is not cut off.
        await store.detachReplication()
        log.session.close()
    }

    /// Waits until this replica has applied the cluster's log up to `position` (or the cluster's
    /// head when nil), catching up itself rather than waiting for the follower.
    @discardableResult
    public func catchUp(to position: TransactionID? = nil) async throws -> TransactionID {
        var head = try await store.catchUpReplica()
        if let position {
            while head < position {
                try await Task.sleep(for: .milliseconds(5))
                head = try await store.catchUpReplica()
            }
        }
        return head
    }

    /// The cluster as this replica sees it.
    ///
    /// This replica's own row shows at least the position the replica has applied: its last
    /// report may have been lost (PostgreSQL was down when it was written), and the row then
    /// contradicted the replica's own position. Only the position: when it was last seen stays as
    /// the row says (a follower that stopped reporting still shows as not seen).
    public func status() async throws -> ClusterStatus {
        let store = self.store, name = self.name
        let session = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
        defer { session.close() }
        var status = try await offPool("status") { try Cluster.status(session, store: store) }
        if let applied = status.applied, let own = status.replicas.firstIndex(where: { $0.name == name }) {
            status.replicas[own].applied = max(status.replicas[own].applied, applied)
        }
        return status
    }
}

/// The follower thread of a ``ClusterReplica``.
final class Follower: Sendable {
    private struct State {
        var stopped = false
        var started = false
    }

    let store: Store
    let name: String
    let session: PostgresSession
    let interval: Duration
    let logger: Logger
    private let state = Locked(State())
    /// Signalled by each notification, and when a statement of the writer is answered while a
    /// notification is not covered (``NotificationLedger``).
    private let wake: DispatchSemaphore
    private let ledger: NotificationLedger
    private let finished = DispatchSemaphore(value: 0)
    /// Reads of the log so far (tests).
    let reads = Atomic<Int>(0)
    /// Entries read from the log per step.
    static let batch = 1_000
    /// Heartbeats (`strata_replicas`) at most this often.
    static let heartbeatInterval: Duration = .seconds(1)

    init(store: Store, name: String, session: PostgresSession, interval: Duration, logger: Logger,
         wake: DispatchSemaphore, ledger: NotificationLedger) {
        self.store = store
        self.name = name
        self.session = session
        self.interval = interval
        self.logger = logger
        self.wake = wake
        self.ledger = ledger
    }

    func start() {
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "strata.cluster.follower"
        state.withLock { $0.started = true }
        thread.start()
    }

    func stop() {
        let running = state.withLock { s -> Bool in
            defer { s.stopped = true }
            return !s.stopped && s.started
        }
        guard running else { return }
        wake.signal()
        finished.wait()
        if let head = try? store.lastTransactionID { try? heartbeat(head) }
        session.close()
    }

    private var stopped: Bool { state.withLock { $0.stopped } }

    private func run() {
        var listening: PostgresConnection?
        var lastHeartbeat = ContinuousClock.now - Self.heartbeatInterval
        var lastRead = ContinuousClock.now - interval
        var mustRead = true
        // Failures in a row (PostgreSQL away), and the last one reported: the follower waits
        // longer after each, up to ``maxRetryDelay``, and reports a failure once until it changes
        // or the follower gets through (it tried again at once, and logged each try: 22 warnings
        // in a second while a command failed on the same outage).
        var failures = 0
        var reported: String?
        while !stopped {
            do {
                if listening == nil || listening?.isClosed == true {
                    listening = try session.listen(ClusterSchema.channel) { [ledger] in ledger.noteNotification() }
                    mustRead = true
                }
                if mustRead {
                    lastRead = .now
                    let head = try follow()
                    if ContinuousClock.now - lastHeartbeat >= Self.heartbeatInterval {
                        try heartbeat(head)
                        lastHeartbeat = .now
                    }
                } else if ContinuousClock.now - lastHeartbeat >= Self.heartbeatInterval {
                    try heartbeat(try store.lastTransactionID)
                    lastHeartbeat = .now
                }
                if failures > 0 { logger.info("cluster follower of \(store.path): PostgreSQL reached again") }
                failures = 0
                reported = nil
            } catch StrataError.closed {
                return
            } catch {
                // A writer stopped by a failed sync commits nothing more until the store is
                // opened again: nothing to retry.
                if let reason = store.writerStopReason {
                    logger.error("cluster follower of \(store.path) stops: \(reason.text)")
                    return
                }
                // A broken connection is found closed at the next turn and listened on again; a
                // live one keeps its listener.
                let text = error.text
                if text != reported { logger.warning("cluster follower of \(store.path): \(text)") }
                reported = text
                failures += 1
                let delay = min(Self.maxRetryDelay, interval * Double(1 << min(failures - 1, 16)))
                // Stuck on an entry it cannot apply (a migration it must make first, a horizon
                // it is behind, a rejected entry) while PostgreSQL answers: the replica is alive
                // and says so, or `status` shows it as gone and `forget` removes its row.
                let answering: Bool
                if case StrataError.replication(let e) = error, e.kind != .unavailable { answering = true } else {
                    answering = false
                }
                // The whole delay, not cut short by notifications: each is another machine's
                // append, and reading the log again at each re-read up to a batch that cannot be
                // applied either.
                let retryAt = ContinuousClock.now + delay
                while !stopped, ContinuousClock.now < retryAt {
                    if answering, ContinuousClock.now - lastHeartbeat >= Self.heartbeatInterval {
                        if let head = try? store.lastTransactionID, (try? heartbeat(head)) != nil { lastHeartbeat = .now }
                    }
                    _ = wake.wait(timeout: Self.dispatchTime(min(retryAt, ContinuousClock.now + Self.heartbeatInterval)))
                }
                mustRead = true
                continue
            }
            // Every `interval` at least, whatever the ledger says; after a notification unless
            // the writer's appends brought what it announced.
            let woken = wake.wait(timeout: Self.dispatchTime(lastRead + interval)) == .success
            mustRead = stopped || !woken || readsAfterWakeUp(pollAt: lastRead + interval)
        }
    }

    /// After a wake-up: whether the log must be read now, or the writer's appends bring what the
    /// notifications announced: while it is appending (``NotificationLedger/Verdict/writerBusy``)
    /// the follower waits for its next append, until `pollAt` at the latest.
    private func readsAfterWakeUp(pollAt: ContinuousClock.Instant) -> Bool {
        while !stopped {
            guard let local = try? store.lastTransactionID else { return true }
            let now = ContinuousClock.now
            switch ledger.verdict(localHead: local, now: now) {
            case .nothingNew: return false
            case .read: return true
            case .writerBusy:
                if now >= pollAt { return true }
                _ = wake.wait(timeout: Self.dispatchTime(min(pollAt, now + NotificationLedger.deferral)))
            }
        }
        return true
    }

    /// `instant` of the continuous clock as a dispatch time (both count from boot on Linux, not
    /// necessarily from the same origin: converted through the time left).
    private static func dispatchTime(_ instant: ContinuousClock.Instant) -> DispatchTime {
        let left = instant - .now
        guard left > .zero else { return .now() }
        let nanos = left.components.seconds * 1_000_000_000 + left.components.attoseconds / 1_000_000_000
        return .now() + .nanoseconds(Int(min(nanos, Int64(Int.max))))
    }

    /// The longest wait between tries while PostgreSQL cannot be reached.
    static let maxRetryDelay: Duration = .seconds(5)

    /// Applies what the log holds after the local head, a batch at a time. Returns the head after.
    private func follow() throws -> TransactionID {
        var head = try store.lastTransactionID
        while !stopped {
            let mark = ledger.markForRead()
            reads.add(1, ordering: .relaxed)
            let (batch, shared) = try SharedLog.entriesAndHead(session, after: head, limit: Self.batch)
            guard let last = batch.last?.transactionID else {
                if let end = SharedLog.end(of: batch, after: head, head: shared) { ledger.noteRead(mark, reached: end) }
                break
            }
            head = try apply(batch)
            if head >= last, let end = SharedLog.end(of: batch, after: last, head: shared) {
                ledger.noteRead(mark, reached: end)
            }
            // Stopped before the cluster's migration entry: met first on the next step, it throws.
            if head < last { continue }
            if !ReplicatedEntry.mayBeFollowed(batch, limit: Self.batch, readBytes: SharedLog.readBytes(session)) { break }
        }
        return head
    }

    /// ``Store/applyReplicated(_:)`` from this thread (it waits on the writer's queue, not on
    /// the cooperative pool).
    private func apply(_ batch: [ReplicatedEntry]) throws -> TransactionID {
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<TransactionID, Error>?>(nil)
        let store = self.store
        Task {
            let r = await Result(catching: { try await store.applyReplicated(batch) })
            result.withLock { $0 = r }
            done.signal()
        }
        done.wait()
        guard let r = result.withLock({ $0 }) else { throw StrataError.closed(path: store.path) }
        return try r.get()
    }

    private func heartbeat(_ head: TransactionID) throws {
        try Self.report(session, name: name, head: head)
    }

    /// Writes replica `name`'s row of `strata_replicas` (what `cluster status` lists): its
    /// position, host, process and the time.
    static func report(_ session: PostgresSession, name: String, head: TransactionID) throws {
        let applied = Int64(head.rawValue), pid = Int32(getpid()), host = ProcessInfo.processInfo.hostName
        _ = try session.run("""
            INSERT INTO strata_replicas (name, applied, host, pid, last_seen)
                VALUES (\(name), \(applied), \(host), \(pid), now())
            ON CONFLICT (name) DO UPDATE SET applied = excluded.applied, host = excluded.host, pid = excluded.pid,
                last_seen = now()
            """)
    }
}

extension Result where Failure == Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
