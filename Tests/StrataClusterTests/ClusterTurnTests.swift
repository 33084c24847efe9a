import Foundation
import LibraryModel
@testable import Strata
import StrataTestSupport
import Synchronization
import Testing
@testable import StrataCluster

/// Waiting one's turn to append: a replica that keeps losing the race for the shared head holds
/// the other machines off (`ReplicationLog.appendInTurn`), catches up and validates at the head
/// itself, so its saves get through, and are judged as on one machine.
@Suite(.serialized) struct ClusterTurnTests {
    @Test func anAppendInTurnHoldsOffOtherAppendsUntilItCommits() async throws {
        try await withCluster(replicas: 1) { c in
            await c.replicas[0].close()
            let address = c.address
            typealias Outcome = (head: UInt64, turnHead: UInt64, other: ReplicationAppend?, waited: Bool)
            let outcome = try await onOwnThread { () -> Outcome in
                let mine = PostgresSession(address: address, logger: .init(label: "test"))
                let theirs = PostgresSession(address: address, logger: .init(label: "test"))
                defer {
                    mine.close()
                    theirs.close()
                }
                let head = try Cluster.readCluster(theirs).head
                let bodyReturned = Atomic<Bool>(false)
                let other = Locked<(ReplicationAppend?, Bool)>((nil, false))
                let otherDone = DispatchSemaphore(value: 0)
                var turnHead: UInt64 = 0
                try SharedLog(session: mine, replica: "mine", layout: Int(ClusterSchema.layout)).appendInTurn { shared in
                    turnHead = shared.rawValue
                    // Another machine appends at the same head while this one holds its turn.
                    Thread {
                        let entry = ReplicatedEntry(transactionID: shared.next, bytes: [2], author: "theirs",
                                                    timestampMs: 0, schemaVersion: 2)
                        let result = try? SharedLog(session: theirs, replica: "theirs", layout: Int(ClusterSchema.layout)).append([entry], after: shared)
                        other.withLock { $0 = (result, bodyReturned.load(ordering: .acquiring)) }
                        otherDone.signal()
                    }.start()
                    Thread.sleep(forTimeInterval: 0.3)
                    bodyReturned.store(true, ordering: .releasing)
                    return [ReplicatedEntry(transactionID: shared.next, bytes: [1], author: "mine", timestampMs: 0,
                                            schemaVersion: 2)]
                }
                otherDone.wait()
                let (result, afterTurn) = other.withLock { $0 }
                return (head, turnHead, result, afterTurn)
            }
            #expect(outcome.turnHead == outcome.head, "the turn is given the shared head")
            #expect(outcome.other == .behind, "the other machine's append at the same head lost")
            #expect(outcome.waited, "and it waited for the turn to end")
            let postgres = c.postgres, database = c.address.database
            let rows = try await onOwnThread {
                try postgres.sql("SELECT id, author FROM strata_log ORDER BY id", database: database)
            }
            #expect(rows == "\(outcome.turnHead + 1)|mine")
        }
    }

    /// A connection that breaks before a turn's COMMIT (here under its append statement) ends
    /// a transaction PostgreSQL rolls back: nothing was appended, and the savers are told so
    /// (`unavailable`), not that the cluster may hold their saves (`outcomeUnknown`).
    @Test func aTurnWhoseConnectionBreaksBeforeItsCommitAppendedNothing() async throws {
        try await withCluster(replicas: 1) { c in
            await c.replicas[0].close()
            let address = c.address
            let outcome = try await onOwnThread { () -> ReplicationError? in
                let mine = PostgresSession(address: address, logger: .init(label: "test"))
                let theirs = PostgresSession(address: address, logger: .init(label: "test"))
                defer {
                    mine.close()
                    theirs.close()
                }
                do {
                    try SharedLog(session: mine, replica: "mine", layout: Int(ClusterSchema.layout)).appendInTurn { shared in
                        let pid = try mine.run("SELECT pg_backend_pid()").first?.decode(Int32.self) ?? 0
                        _ = try theirs.run("SELECT pg_terminate_backend(\(pid))")
                        return [ReplicatedEntry(transactionID: shared.next, bytes: [1], author: "mine", timestampMs: 0,
                                                schemaVersion: 2)]
                    }
                    return nil
                } catch StrataError.replication(let e) {
                    return e
                }
            }
            #expect(outcome?.kind == .unavailable, "\(String(describing: outcome))")
            let postgres = c.postgres, database = c.address.database
            let rows = try await onOwnThread {
                try postgres.sql("SELECT count(*) FROM strata_log WHERE author = 'mine'", database: database)
            }
            #expect(rows == "0")
        }
    }

    /// The same on the racing paths (right after the head, and after a later head by footprint):
    /// a connection that breaks under the append (here while it waits for the head row another
    /// session holds) appended nothing. Between BEGIN and COMMIT (a cluster without the
    /// committing procedures) the savers are told `unavailable`: the COMMIT was never sent. A
    /// committing procedure's `CALL` is its statement and its commit in one: a connection lost
    /// under it leaves the outcome unknown to the client, and the savers are told so.
    @Test(arguments: [false, true], [false, true])
    func aRaceWhoseConnectionBreaksBeforeItsCommitAppendedNothing(byFootprint: Bool,
                                                                  committingProcedures: Bool) async throws {
        try await withCluster(replicas: 1) { c in
            await c.replicas[0].close()
            let address = c.address
            if !committingProcedures { try await c.dropCommittingProcedures() }
            let outcome = try await onOwnThread { () -> String in
                let mine = PostgresSession(address: address, logger: .init(label: "test"))
                let holder = PostgresSession(address: address, logger: .init(label: "test"))
                let killer = PostgresSession(address: address, logger: .init(label: "test"))
                defer {
                    mine.close()
                    holder.close()
                    killer.close()
                }
                let head = TransactionID(UInt64(try Cluster.readCluster(mine).head))
                let pid = try mine.run("SELECT pg_backend_pid()").first?.decode(Int32.self) ?? 0
                let log = SharedLog(session: mine, replica: "mine", layout: Int(ClusterSchema.layout))
                // Encoded as a writer sends it (the footprint path moves its checksum).
                let id = ObjectID.make(entityTag: 1)
                let encoded = LogEntryCodec.encode(LogEntry(transactionID: head.next, schemaVersion: 2, timestampMs: 0,
                                                            author: "mine", metadata: [:],
                                                            changes: [.unlink(relationship: 1, from: id, to: id)]))
                let entries = [ReplicatedEntry(transactionID: head.next, bytes: encoded, author: "mine", timestampMs: 0,
                                               schemaVersion: 2)]
                return try appendOutcome(whileHeadRowHeldBy: holder, meanwhile: {
                    // Once the append waits for the row this transaction holds: its connection
                    // is ended under the statement.
                    let deadline = ContinuousClock.now + .seconds(30)
                    while ContinuousClock.now < deadline {
                        let waiting = try killer.run("""
                            SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid) AND wait_event_type = 'Lock'
                            """).first?.decode(Int64.self) ?? 0
                        if waiting > 0 { break }
                        usleep(2_000)
                    }
                    _ = try killer.run("SELECT pg_terminate_backend(\(pid))")
                }) {
                    byFootprint
                        ? try log.append(entries, validatedAt: head, footprint: ReplicationFootprint(keys: [1]))
                        : try log.append(entries, after: head)
                }
            }
            #expect(outcome == (committingProcedures ? "outcomeUnknown" : "unavailable"), "\(outcome)")
            let postgres = c.postgres, database = c.address.database
            let rows = try await onOwnThread {
                try postgres.sql("SELECT count(*) FROM strata_log WHERE author = 'mine'", database: database)
            }
            #expect(rows == "0")
        }
    }

    @Test func aReplicaThatKeepsLosingTheRaceWaitsItsTurnAndSaves() async throws {
        try await withCluster(replicas: 2) { c in
            // Before each of its appends another machine appends first: every race is lost, and
            // the turn starts behind.
            let r = try await replicaWithRival(c, name: "loser") { "Rival \($0)" }
            let (store, log, other) = (r.store, r.log, c.replicas[1].store)
            let before = try store.lastTransactionID
            let id = try await store.save { $0.insert(Genre(name: "Loser")) }
            #expect(log.races.load(ordering: .relaxed) == Writer.racesBeforeTurn)
            #expect(log.turns.load(ordering: .relaxed) == 1)
            #expect(store.statistics.sharedLogRacesLost == Writer.racesBeforeTurn)
            #expect(store.statistics.sharedLogAppends == 1, "the turn's append")
            // One rival save before each race and one before the turn.
            #expect(id == TransactionID(before.rawValue + UInt64(Writer.racesBeforeTurn) + 2),
                    "saved right after the rivals' saves it waited for")
            #expect(try await c.catchUpAll() == id)
            let names = (["Loser"] + (1...Writer.racesBeforeTurn + 1).map { "Rival \($0)" }).sorted()
            for s in [store, other, c.replicas[0].store] {
                #expect(try s.mainContext.fetch(Genre.self).map(\.name).sorted() == names)
            }
            await r.close()
        }
    }

    @Test func aKeyTakenBeforeAReplicasTurnIsRefusedInItAsOnOneMachine() async throws {
        try await withCluster(replicas: 2) { c in
            // Right before its turn another machine saves the very name this replica inserts.
            let r = try await replicaWithRival(c, name: "late") { n in
                n == Writer.racesBeforeTurn + 1 ? "Contested" : "Rival \(n)"
            }
            let (store, log) = (r.store, r.log)
            await #expect {
                _ = try await store.save { $0.insert(Genre(name: "Contested")) }
            } throws: { error in
                guard case StrataError.validation(let f) = error else { return false }
                return f.kind == .uniqueConstraint
            }
            #expect(log.races.load(ordering: .relaxed) == Writer.racesBeforeTurn)
            #expect(log.turns.load(ordering: .relaxed) == 1, "refused in its turn, not in a race")
            // Nothing of the refused save anywhere: the cluster holds the other machine's genre alone.
            _ = try await store.catchUpReplica()
            #expect(try store.mainContext.fetch(Genre.self).filter { $0.name == "Contested" }.count == 1)
            #expect(try await c.catchUpAll() == store.lastTransactionID)
            await r.close()
        }
    }

    @Test func aTurnPublishesWhatItCaughtUpBeforeItsOwnSaveEachOnce() async throws {
        try await withCluster(replicas: 2) { c in
            // No watch of other processes: the writer's own publication is all there is.
            var config = StoreConfiguration()
            config.otherProcessPollMilliseconds = 0
            let r = try await replicaWithRival(c, name: "published", configuration: config) { "Rival \($0)" }
            let (store, log) = (r.store, r.log)
            let stream = store.changes()
            let start = try store.lastTransactionID
            let id = try await store.save(author: "waiter") { $0.insert(Genre(name: "Waiter")) }
            #expect(log.turns.load(ordering: .relaxed) == 1)
            var seen: [(TransactionID, String)] = []
            for await event in stream {
                guard case .committed(let tx) = event else { continue }
                seen.append((tx.id, tx.author))
                if tx.id == id { break }
            }
            // Every transaction after the start, in order, once: the rivals' (three caught up
            // after lost races, one inside the turn), then the save itself.
            let expected = (start.rawValue + 1...id.rawValue).map { TransactionID($0) }
            #expect(seen.map(\.0) == expected)
            #expect(seen.map(\.1) == Array(repeating: "rival", count: expected.count - 1) + ["waiter"])
            stream.cancel()
            await r.close()
        }
    }
}

/// A replica joined to `c` whose appends race against the cluster's second replica, which
/// saves a genre named `rivalName(n)` (by author "rival") before each append and before each turn
/// (numbered from 1): the shared head then moves, so each race is lost as it would be to
/// another machine, and the turn starts behind. With `comparesFootprints` its groups go through
/// `ReplicationLog.append(_:validatedAt:footprint:)` (each outcome recorded); without, they
/// append only at the head they were validated at.
func replicaWithRival(_ c: ClusterFixture, name: String, configuration: StoreConfiguration = StoreConfiguration(),
                  comparesFootprints: Bool = false,
                  rivalName: @escaping @Sendable (Int) -> String) async throws -> RivalledReplica {
    let other = c.replicas[1].store
    let store = try await Cluster.join(at: c.root.appendingPathComponent(name), address: c.address,
                                       configuration: configuration)
    let session = PostgresSession(address: c.address, logger: .init(label: "test"))
    let log = RivalledLog(SharedLog(session: session, replica: name, layout: Int(ClusterSchema.layout)), comparesFootprints: comparesFootprints) { n in
        _ = try other.saveAndWait(author: "rival") { $0.insert(Genre(name: rivalName(n))) }
    }
    try store.attachReplication(log)
    try await store.catchUpReplica()
    return RivalledReplica(store: store, log: log, session: session)
}

/// A replica with a ``RivalledLog`` attached.
struct RivalledReplica {
    let store: Store
    let log: RivalledLog
    let session: PostgresSession

    func close() async {
        await store.detachReplication()
        session.close()
        store.close()
    }
}

/// The cluster's real log, with a rival's save made before each race for the head and before
/// each turn; with `comparesFootprints`, appends compare footprints and their outcomes are kept.
final class RivalledLog: ReplicationLog {
    let inner: SharedLog
    let comparesFootprints: Bool
    let rival: @Sendable (Int) throws -> Void
    let races = Atomic<Int>(0)
    let turns = Atomic<Int>(0)
    /// The outcomes of the appends that compared footprints, in order.
    let outcomes = Mutex<[ReplicationAppend]>([])

    init(_ inner: SharedLog, comparesFootprints: Bool = false, rival: @escaping @Sendable (Int) throws -> Void) {
        self.inner = inner
        self.comparesFootprints = comparesFootprints
        self.rival = rival
    }

    var takesCompressedEntries: Bool { inner.takesCompressedEntries }
    var readBytes: Int { inner.readBytes }

    func append(_ entries: [ReplicatedEntry], after head: TransactionID) throws -> ReplicationAppend {
        try rivalSaves()
        return try inner.append(entries, after: head)
    }

    func append(_ entries: [ReplicatedEntry], validatedAt head: TransactionID,
                footprint: ReplicationFootprint) throws -> ReplicationAppend {
        guard comparesFootprints else { return try append(entries, after: head) }
        try rivalSaves()
        let outcome = try inner.append(entries, validatedAt: head, footprint: footprint)
        outcomes.withLock { $0.append(outcome) }
        return outcome
    }

    /// The rival's save before a race.
    private func rivalSaves() throws {
        let race = races.add(1, ordering: .relaxed).newValue
        try rival(race + turns.load(ordering: .relaxed))
    }

    func appendInTurn(_ body: (TransactionID) throws -> [ReplicatedEntry]) throws {
        let turn = turns.add(1, ordering: .relaxed).newValue
        try rival(races.load(ordering: .relaxed) + turn)
        try inner.appendInTurn(body)
    }

    func entries(after position: TransactionID, limit: Int) throws -> [ReplicatedEntry] {
        try inner.entries(after: position, limit: limit)
    }
}
