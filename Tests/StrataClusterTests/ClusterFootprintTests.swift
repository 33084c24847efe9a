import Foundation
import LibraryModel
@testable import Strata
import StrataTestSupport
import Synchronization
import Testing
@testable import StrataCluster

/// Appending after a later head: a group validated at head H goes into the shared log after the
/// entries other machines appended since H when none of them touches its footprint (what it read
/// and wrote), with its checksums moved to the ids it takes; otherwise nothing is appended and the
/// replica validates it again, as on one machine.
@Suite(.serialized) struct ClusterFootprintTests {
    /// An entry encoded for `tx`, as a replica's writer sends it.
    private func entry(_ tx: TransactionID, author: String) -> ReplicatedEntry {
        let id = ObjectID.make(entityTag: 1)
        let log = LogEntry(transactionID: tx, schemaVersion: 2, timestampMs: 1_000, author: author, metadata: [:],
                           changes: [.unlink(relationship: 1, from: id, to: id)])
        return ReplicatedEntry(transactionID: tx, bytes: LogEntryCodec.encode(log), author: author, timestampMs: 1_000,
                               schemaVersion: 2)
    }

    private func footprint(_ keys: Int64...) -> ReplicationFootprint { ReplicationFootprint(keys: keys) }

    /// Appends group "a" right after the head, then group "b" validated at the same head (other
    /// footprints): "b" goes in after "a", and the log holds both in that order.
    private func expectASecondGroupMovesAfterTheFirst(_ c: ClusterFixture) async throws {
        let (outcomes, stored, head) = try await withLog(c) { log, _, head in
            let first = try log.append([entry(head.next, author: "a")], validatedAt: head, footprint: footprint(1))
            let second = try log.append([entry(head.next, author: "b")], validatedAt: head, footprint: footprint(2))
            return ([first, second], try log.entries(after: head, limit: 10), head)
        }
        #expect(outcomes == [.appended, .appendedLater(first: TransactionID(head.rawValue + 2))])
        #expect(stored.map(\.author) == ["a", "b"])
    }

    /// `strata_commit_append_after`'s name and parameters, for ``replaceProcedure(_:_:body:)``.
    private static let commitAppendAfter = """
        strata_commit_append_after(expected bigint, p_entries bytea[],
            p_checksums bytea[], p_authors text[], p_saved bigint[], p_versions integer[],
            p_footprint bigint[], p_replica text, p_run_bytes bigint,
            INOUT o_first bigint DEFAULT NULL, INOUT o_ids bigint[] DEFAULT NULL,
            INOUT o_entries bytea[] DEFAULT NULL, INOUT o_authors text[] DEFAULT NULL,
            INOUT o_saved bigint[] DEFAULT NULL, INOUT o_versions integer[] DEFAULT NULL)
        """

    /// Replaces one of the committing procedures (`signature`: its name and parameters) by one
    /// whose PL/pgSQL body is `body`.
    private func replaceProcedure(_ c: ClusterFixture, _ signature: String, body: String) async throws {
        let postgres = c.postgres, database = c.address.database
        _ = try await onOwnThread {
            try postgres.sql("""
                CREATE OR REPLACE PROCEDURE \(signature)
                LANGUAGE plpgsql AS $$
                BEGIN
                    \(body)
                END $$
                """, database: database)
        }
    }

    /// Runs `body` with a session on the cluster's database and the shared head, off the pool.
    private func withLog<R: Sendable>(_ c: ClusterFixture,
                                      _ body: @escaping @Sendable (SharedLog, PostgresSession, TransactionID) throws -> R)
        async throws -> R {
        for r in c.replicas { await r.close() }
        let address = c.address
        return try await onOwnThread {
            let session = PostgresSession(address: address, logger: .init(label: "test"))
            defer { session.close() }
            let head = TransactionID(UInt64(try Cluster.readCluster(session).head))
            return try body(SharedLog(session: session, replica: "test", layout: Int(ClusterSchema.layout)), session, head)
        }
    }

    @Test func anEntryGoesAfterOthersThatTouchNoneOfItsFootprintWithItsChecksumMoved() async throws {
        try await withCluster(replicas: 1) { c in
            let (outcomes, stored, head) = try await withLog(c) { log, _, head in
                let first = try log.append([entry(head.next, author: "a")], validatedAt: head, footprint: footprint(1, 2))
                let second = try log.append([entry(head.next, author: "b"), entry(head.next.next, author: "b")],
                                            validatedAt: head, footprint: footprint(3))
                return ([first, second], try log.entries(after: head, limit: 10), head)
            }
            #expect(outcomes == [.appended, .appendedLater(first: TransactionID(head.rawValue + 2))])
            #expect(stored.map(\.transactionID.rawValue) == [1, 2, 3].map { head.rawValue + $0 })
            // Each stored entry reads at its id: the moved ones are what an encoding there gives.
            for e in stored {
                let decoded = try e.bytes.withUnsafeBytes { try LogEntryCodec.decode($0, transactionID: e.transactionID) }
                #expect(LogEntryCodec.encode(decoded) == e.bytes)
            }
            #expect(stored.map(\.author) == ["a", "b", "b"])
        }
    }

    /// A replica's head may stop inside another machine's group (the follower applies the log a
    /// batch at a time): every entry of a group carries the group's footprint, so a group
    /// validated there still meets it.
    @Test func anEntryValidatedInsideAnotherGroupMeetsThatGroupsFootprint() async throws {
        try await withCluster(replicas: 1) { c in
            let outcomes = try await withLog(c) { log, _, head in
                let group = [entry(head.next, author: "a"), entry(head.next.next, author: "a")]
                return [try log.append(group, validatedAt: head, footprint: footprint(5)),
                        try log.append([entry(head.next.next, author: "b")], validatedAt: head.next,
                                       footprint: footprint(5))]
            }
            #expect(outcomes == [.appended, .behind])
        }
    }

    /// A cluster whose database was made before `strata_append_after` existed (and the
    /// procedures that call it): saves go in through `strata_append`, right after the head they
    /// were validated at.
    @Test func aClusterMadeBeforeFootprintsStillTakesSaves() async throws {
        try await withCluster(replicas: 1) { c in
            let postgres = c.postgres, database = c.address.database
            _ = try await onOwnThread {
                try postgres.sql("""
                    DROP PROCEDURE strata_commit_append_after; DROP PROCEDURE strata_commit_append;
                    DROP FUNCTION strata_append_after
                    """, database: database)
            }
            let store = c.replicas[0].store
            let first = try await store.save { $0.insert(Genre(name: "Old")) }
            let second = try await store.save { $0.insert(Genre(name: "Older")) }
            #expect(second == first.next)
            let rows = try await onOwnThread {
                try postgres.sql("SELECT count(*) FROM strata_log WHERE footprint IS NULL AND id >= \(first.rawValue)",
                                 database: database)
            }
            #expect(rows == "2", "both appended by strata_append, without a footprint")
        }
    }

    /// A cluster whose database was made before the committing procedures existed: appends run
    /// between BEGIN and COMMIT, and groups still go in after other machines' entries.
    @Test func aClusterMadeBeforeCommittingProceduresStillTakesSaves() async throws {
        try await withCluster(replicas: 2) { c in
            try await c.dropCommittingProcedures()
            let postgres = c.postgres, database = c.address.database
            let first = try await c.replicas[0].store.save { $0.insert(Genre(name: "Old")) }
            // Unless the second replica has applied the first's save by then, its group moves after it.
            let second = try await c.replicas[1].store.save { $0.insert(Genre(name: "Older")) }
            #expect(second == first.next)
            let rows = try await onOwnThread {
                try postgres.sql("SELECT count(*) FROM strata_log WHERE footprint IS NOT NULL AND id >= \(first.rawValue)",
                                 database: database)
            }
            #expect(rows == "2", "both appended by strata_append_after, with their footprints")
            #expect(try await c.catchUpAll() == second)
        }
    }

    /// Without the committing procedures, the BEGIN … COMMIT path moves a group as the `CALL`
    /// does: after an entry that shares no hash with its footprint, answering the run.
    @Test func withoutTheProceduresAGroupStillMovesAfterAnotherMachinesEntry() async throws {
        try await withCluster(replicas: 1) { c in
            try await c.dropCommittingProcedures()
            try await expectASecondGroupMovesAfterTheFirst(c)
        }
    }

    /// A moved group whose run is larger than what a read takes (``SharedLog/readBytes``) is
    /// answered with its first entries only (here one of three), which are not kept: the
    /// replica reads the run from the log, as much as a read takes (two).
    @Test func aMovedRunPastWhatAReadTakesIsReadFromTheLog() async throws {
        try await withCluster(replicas: 1) { c in
            // Over one entry, under two (the entries below are all of this size).
            let budget = entry(TransactionID(1), author: "a").bytes.count + 1
            SharedLog.readBytesForTesting.withLock { $0[c.address.database] = budget }
            defer { SharedLog.readBytesForTesting.withLock { $0[c.address.database] = nil } }
            let (outcomes, firstRead, stored, head) = try await withLog(c) { log, _, head in
                let first = try log.append([entry(head.next, author: "a"), entry(head.next.next, author: "a")],
                                           validatedAt: head, footprint: footprint(1))
                let second = try log.append([entry(head.next, author: "b")], validatedAt: head, footprint: footprint(2))
                let firstRead = try log.entries(after: head, limit: 10).count
                var stored: [ReplicatedEntry] = []
                while stored.count < 3, let more = Optional(try log.entries(after: stored.last?.transactionID ?? head,
                                                                            limit: 10)), !more.isEmpty {
                    stored += more
                }
                return ([first, second], firstRead, stored, head)
            }
            #expect(outcomes == [.appended, .appendedLater(first: TransactionID(head.rawValue + 3))])
            #expect(firstRead == 2, "read from the log (the answer's one entry was not kept)")
            #expect(stored.map(\.author) == ["a", "a", "b"])
            #expect(stored.map(\.transactionID.rawValue) == [1, 2, 3].map { head.rawValue + $0 })
        }
    }

    /// A `CALL` that PostgreSQL refuses after the procedure committed (here a procedure made to
    /// raise an error right after its COMMIT) appended the group: the replica finds it in the
    /// log and reports where, not that nothing was appended.
    @Test func aCallRefusedAfterItsCommitIsFoundInTheLog() async throws {
        try await withCluster(replicas: 1) { c in
            try await replaceProcedure(c, Self.commitAppendAfter, body: """
                PERFORM * FROM strata_append_after(expected, p_entries, p_checksums, p_authors, p_saved,
                                                   p_versions, p_footprint, p_replica);
                COMMIT;
                RAISE EXCEPTION 'refused after its commit';
                """)
            try await expectASecondGroupMovesAfterTheFirst(c)
        }
    }

    /// An append answered with a position the protocol cannot give (past the ids a group may
    /// move, here near the largest id PostgreSQL holds: a procedure replaced in the database)
    /// leaves the outcome unknown; the replica neither traps nor builds the range up to it.
    @Test func anAppendAnsweredPastWhereAGroupCanMoveIsAnUnknownOutcome() async throws {
        try await withCluster(replicas: 1) { c in
            // Just past the ids a group may move (it carries checksums for `appendWindow` of
            // them), then near the largest id.
            for answer in ["expected + 1 + \(SharedLog.appendWindow)", "9223372036854775000"] {
                try await replaceProcedure(c, Self.commitAppendAfter, body: """
                    o_first := \(answer);
                    COMMIT;
                    """)
                let outcome = try await withLog(c) { log, _, head -> String in
                    do {
                        return "returned \(try log.append([entry(head.next, author: "a")], validatedAt: head, footprint: footprint(1)))"
                    } catch StrataError.replication(let e) {
                        return "\(e.kind)"
                    }
                }
                #expect(outcome == "outcomeUnknown", "answered \(answer)")
            }
        }
    }

    /// A `CALL` of `strata_commit_append` (a group that may not move) refused after its COMMIT is
    /// found in the log too; one refused before its COMMIT (a procedure made to raise an error
    /// first) appended nothing and says so (`unavailable`).
    @Test func aCallRefusedBeforeOrAfterItsCommitIsToldApart() async throws {
        try await withCluster(replicas: 1) { c in
            let postgres = c.postgres, database = c.address.database
            let signature = """
                strata_commit_append(expected bigint, ids bigint[], entries bytea[], authors text[],
                    saved bigint[], versions integer[], replica text, INOUT o_done boolean DEFAULT NULL)
                """
            try await replaceProcedure(c, signature, body: """
                o_done := strata_append(expected, ids, entries, authors, saved, versions, replica);
                COMMIT;
                RAISE EXCEPTION 'refused after its commit';
                """)
            let (after, head) = try await withLog(c) { log, _, head in
                (try log.append([entry(head.next, author: "a")], after: head), head)
            }
            #expect(after == .appended)
            try await replaceProcedure(c, signature, body: "RAISE EXCEPTION 'refused before its commit';")
            let before = try await withLog(c) { log, _, head -> String in
                do {
                    return "returned \(try log.append([entry(head.next, author: "b")], after: head))"
                } catch StrataError.replication(let e) {
                    return "\(e.kind)"
                }
            }
            #expect(before == "unavailable")
            let rows = try await onOwnThread {
                try postgres.sql("SELECT string_agg(author, ',' ORDER BY id) FROM strata_log WHERE id > \(head.rawValue)",
                                 database: database)
            }
            #expect(rows == "a")
        }
    }

    /// A `CALL` cancelled while it waits for the head row (`statement_timeout`, here 1 s on
    /// the session) appended nothing: the replica finds nothing in the log and catches up
    /// (`behind`). The procedure's own `lock_timeout` ends with its transaction.
    @Test func aCallCancelledWhileItWaitsAppendedNothing() async throws {
        try await withCluster(replicas: 1) { c in
            for r in c.replicas { await r.close() }
            let address = c.address
            let (outcome, lockTimeout, head) = try await onOwnThread { () -> (String, String, TransactionID) in
                let mine = PostgresSession(address: address, logger: .init(label: "test"))
                let holder = PostgresSession(address: address, logger: .init(label: "test"))
                defer {
                    mine.close()
                    holder.close()
                }
                let head = TransactionID(UInt64(try Cluster.readCluster(mine).head))
                let log = SharedLog(session: mine, replica: "mine", layout: Int(ClusterSchema.layout))
                // Appended and committed by a CALL: the procedure's lock_timeout did not stay.
                #expect(try log.append([entry(head.next, author: "first")], validatedAt: head,
                                       footprint: footprint(1)) == .appended)
                let lockTimeout = try mine.run("SHOW lock_timeout").first?.decode(String.self) ?? "?"
                _ = try mine.run("SET statement_timeout = 1000")
                let second = entry(head.next.next, author: "mine"), keys = footprint(2)
                let outcome = try appendOutcome(whileHeadRowHeldBy: holder) {
                    try log.append([second], validatedAt: head.next, footprint: keys)
                }
                return (outcome, lockTimeout, head)
            }
            #expect(outcome == "returned behind", "\(outcome)")
            #expect(lockTimeout == "0")
            let postgres = c.postgres, database = c.address.database
            let rows = try await onOwnThread {
                try postgres.sql("SELECT count(*) FROM strata_log WHERE id > \(head.rawValue)", database: database)
            }
            #expect(rows == "1", "the first append only")
        }
    }

    /// A child context's commit in which two genres exchange their names (judged on its result)
    /// is applied by the other replicas too.
    @Test func anExchangeOfUniqueValuesOnOneReplicaIsAppliedOnTheOthers() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b, tx) = try await exchangeGenreNames(c.replicas[0].store)
            #expect(try await c.catchUpAll() == tx)
            for replica in c.replicas {
                #expect(try replica.store.mainContext.object(Genre.self, id: a)?.name == "Blues")
                #expect(try replica.store.mainContext.object(Genre.self, id: b)?.name == "Jazz")
            }
        }
    }

    @Test func anEntryIsRefusedWhenALaterOneSharesAHashHasNoFootprintOrIsTooFarOn() async throws {
        try await withCluster(replicas: 1) { c in
            let (outcomes, count, head) = try await withLog(c) { log, _, head in
                var outcomes: [ReplicationAppend] = []
                outcomes.append(try log.append([entry(head.next, author: "a")], validatedAt: head, footprint: footprint(1, 7)))
                // Shares 7 with the entry after `head`.
                outcomes.append(try log.append([entry(head.next, author: "b")], validatedAt: head, footprint: footprint(7)))
                // An entry appended without a footprint shares everything.
                let plain = head.next
                outcomes.append(try log.append([entry(plain.next, author: "c")], after: plain))
                outcomes.append(try log.append([entry(plain.next, author: "d")], validatedAt: plain, footprint: footprint(9)))
                // More than the window of moved checksums on.
                var at = plain.next
                for _ in 0..<SharedLog.appendWindow {
                    outcomes.append(try log.append([entry(at.next, author: "e")], validatedAt: at, footprint: footprint(100)))
                    at = at.next
                }
                outcomes.append(try log.append([entry(plain.next.next, author: "f")], validatedAt: plain.next,
                                               footprint: footprint(200)))
                return (outcomes, try log.entries(after: head, limit: 1_000).count, head)
            }
            #expect(outcomes == [.appended, .behind, .appended, .behind]
                    + Array(repeating: .appended, count: SharedLog.appendWindow) + [.behind])
            #expect(count == 2 + SharedLog.appendWindow, "nothing of a refused append is in the log")
            _ = head
        }
    }

    @Test func aSaveAboutOtherObjectsThanAnotherMachinesGoesInAfterItWithoutValidatingAgain() async throws {
        try await withCluster(replicas: 2) { c in
            let r = try await replicaWithRival(c, name: "mover", comparesFootprints: true) { "Rival \($0)" }
            let (store, log) = (r.store, r.log)
            let before = try store.lastTransactionID
            let stream = store.changes()
            let id = try await store.save(author: "mover") { $0.insert(Genre(name: "Mover")) }
            #expect(log.outcomes.withLock { $0 } == [.appendedLater(first: TransactionID(before.rawValue + 2))])
            #expect(id == TransactionID(before.rawValue + 2), "after the rival's save, in one append")
            // Both transactions published here once, in the log's order.
            var seen: [(TransactionID, String)] = []
            for await event in stream {
                guard case .committed(let tx) = event else { continue }
                seen.append((tx.id, tx.author))
                if tx.id == id { break }
            }
            stream.cancel()
            #expect(seen.map(\.0) == [before.next, id])
            #expect(seen.map(\.1) == ["rival", "mover"])
            #expect(try await c.catchUpAll() == id)
            let exported = try ClusterFixture.exported(store)
            for s in [c.replicas[0].store, c.replicas[1].store] {
                #expect(try s.mainContext.fetch(Genre.self).map(\.name).sorted() == ["Mover", "Rival 1"])
                #expect(try ClusterFixture.exported(s) == exported)
            }
            await r.close()
        }
    }

    @Test func aConflictWithAnEarlierSaveOfTheGroupNamesTheVersionTheLogHolds() async throws {
        try await withCluster(replicas: 2) { c in
            let r = try await replicaWithRival(c, name: "edits", comparesFootprints: true) { "Rival \($0)" }
            let (store, log) = (r.store, r.log)
            let genre = Genre(name: "Jazz")
            _ = try await store.save { $0.insert(genre) }
            let base = try #require(try store.mainContext.record(genre.id))
            func edit(_ name: String) -> (changes: ChangeSet, metadata: [String: String]) {
                var changes = ChangeSet()
                changes.set(Genre.name, of: genre.id, to: name)
                changes.baseVersions = [genre.id: BaseVersion(version: base.version, values: base.values)]
                changes.mergePolicy = .fail
                return (changes, [:])
            }
            // Queued together: one group, in which the second edit conflicts with the first. The
            // rival's save lands before the group's append.
            log.outcomes.withLock { $0.removeAll() }
            let results = await store.saveInOrder([edit("Bebop"), edit("Swing")], author: "edits",
                                                  stopAtFailure: false)
            let first = try results[0].get()
            guard case .failure(StrataError.conflict(let conflicts)) = results[1] else {
                Issue.record("the second edit was not refused: \(results[1])")
                await r.close()
                return
            }
            #expect(try store.mainContext.record(genre.id)?.version == first)
            #expect(conflicts.map(\.storeVersion) == [first],
                    "the refusal names the transaction that changed the genre, as the log holds it")
            #expect(!log.outcomes.withLock { $0 }.contains { if case .appendedLater = $0 { true } else { false } },
                    "a group whose refusal names one of its own ids is not moved after the rival's saves")
            #expect(try await c.catchUpAll() == store.lastTransactionID)
            await r.close()
        }
    }

    @Test func aSaveTakingAKeyAnotherMachineTookIsValidatedAgainAndRefusedAsOnOneMachine() async throws {
        try await withCluster(replicas: 2) { c in
            let r = try await replicaWithRival(c, name: "loser", comparesFootprints: true) { _ in "Contested" }
            let (store, log) = (r.store, r.log)
            await #expect {
                _ = try await store.save { $0.insert(Genre(name: "Contested")) }
            } throws: { error in
                guard case StrataError.validation(let f) = error else { return false }
                return f.kind == .uniqueConstraint
            }
            #expect(log.outcomes.withLock { $0 } == [.behind], "the one append shared the key's hash and moved nothing")
            _ = try await store.catchUpReplica()
            #expect(try store.mainContext.fetch(Genre.self).filter { $0.name == "Contested" }.count == 1)
            #expect(try await c.catchUpAll() == store.lastTransactionID)
            await r.close()
        }
    }
}
