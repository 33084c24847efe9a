import Foundation
import LibraryModel
import Logging
import Strata
import StrataTestSupport
import Synchronization
import Testing
@testable import StrataCluster

/// Replicas of one cluster in one process, each a store of its own directory, against a real
/// PostgreSQL: saves on any replica, read on all; the follower; one total order.
@Suite(.serialized) struct ClusterReplicationTests {
    @Test func savesOnOneReplicaAreReadOnTheOthersUnderTheSameIDs() async throws {
        try await withCluster(replicas: 3, seed: { store in
            _ = try await store.save { $0.insert(Genre(name: "Seeded")) }
        }) { c in
            let (a, b, d) = (c.replicas[0], c.replicas[1], c.replicas[2])
            let t1 = newTrack("from a"), t2 = newTrack("from b")
            let id1 = try await a.store.save { $0.insert(t1) }
            // The save returns once PostgreSQL committed it and this replica applied it.
            #expect(try a.store.mainContext.object(Track.self, id: t1.id)?.title == "from a")
            let id2 = try await b.store.save { $0.insert(t2) }
            #expect(id2 > id1, "b's save is ordered after a's: b caught up before appending")
            #expect(try b.store.mainContext.object(Track.self, id: t1.id)?.title == "from a")
            let head = try await c.catchUpAll()
            #expect(head == id2)
            for r in [a, b, d] {
                #expect(try r.store.lastTransactionID == head)
                #expect(try r.store.mainContext.object(Track.self, id: t2.id)?.title == "from b")
                #expect(try r.store.changes(in: id1).author == "main")
                #expect(try r.store.verify().ok)
            }
            let exports = try [a, b, d].map { try ClusterFixture.exported($0.store) }
            #expect(exports[0] == exports[1] && exports[1] == exports[2])
            #expect(exports[0].contains("Seeded"))
        }
    }

    /// PostgreSQL's text holds no NUL character: an author with one is saved, replicated with
    /// its author exact (from the entry's bytes), and shown in the log table with U+FFFD; the
    /// saves grouped with it are not failed by it.
    @Test func anAuthorWithANulCharacterIsSavedAndReplicatedExactly() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            let odd = "tool\u{0}run"
            async let plain = a.store.save(author: "plain") { $0.insert(Genre(name: "Beside it")) }
            async let nul = a.store.save(author: odd) { $0.insert(Genre(name: "With a NUL author")) }
            let (p, n) = try await (plain, nul)
            try await b.catchUp(to: max(p, n))
            for r in [a, b] {
                #expect(try r.store.changes(in: n).author == odd)
                #expect(try r.store.changes(in: p).author == "plain")
                #expect(try r.store.mainContext.count(Genre.self) == 2)
            }
            let shown = try await onOwnThread {
                try c.postgres.sql("SELECT author FROM strata_log WHERE id = \(n.rawValue)", database: c.address.database)
            }
            #expect(shown.trimmingCharacters(in: .whitespacesAndNewlines) == "tool\u{FFFD}run")
            // A NUL followed by a combining mark (one Character with it, not "\u{0}") too: it went
            // to PostgreSQL as it was, which refused the whole group's append.
            let marked = "tool\u{0}\u{301}run"
            let m = try await a.store.save(author: marked) { $0.insert(Genre(name: "With a marked NUL")) }
            try await b.catchUp(to: m)
            #expect(try b.store.changes(in: m).author == marked)
        }
    }

    /// A save whose append PostgreSQL rolls back at its commit (here a deferred check that fails
    /// there) fails, and the replica holds nothing of it. The append ran as one statement
    /// committed implicitly, whose answer arrives before the commit: the save was acknowledged
    /// and applied locally while the cluster's log did not hold it.
    @Test func aSaveWhoseAppendFailsAtPostgreSQLsCommitIsNotAcknowledged() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            let before = try a.store.lastTransactionID
            let postgres = c.postgres, database = c.address.database
            _ = try await onOwnThread {
                try postgres.sql("""
                    CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS                     $$BEGIN RAISE EXCEPTION 'refused at commit'; END$$;                     CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON strata_log                     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()
                    """, database: database)
            }
            do {
                let id = try await a.store.save { $0.insert(Genre(name: "rolled back")) }
                Issue.record("a save PostgreSQL rolled back was acknowledged as transaction \(id)")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .unavailable, "\(e)")
                #expect(e.reason.contains("refused at commit"), "\(e)")
            }
            #expect(try a.store.lastTransactionID == before)
            #expect(try a.store.mainContext.count(Genre.self) == 0)
            let logged = try await onOwnThread {
                try postgres.sql("SELECT count(*) FROM strata_log WHERE id > \(before.rawValue)", database: database)
            }
            #expect(logged == "0")
            _ = try await onOwnThread {
                try postgres.sql("DROP TRIGGER refuse_at_commit ON strata_log", database: database)
            }
            let saved = try await a.store.save { $0.insert(Genre(name: "kept")) }
            #expect(saved == before.next)
            try await b.catchUp(to: saved)
            #expect(try b.store.mainContext.count(Genre.self) == 1)
        }
    }

    @Test func theFollowerPublishesOtherMachinesCommitsToChangeStreams() async throws {
        try await withCluster(replicas: 2) { c in
            let stream = c.replicas[1].store.changes()
            let t = newTrack("published")
            let id = try await c.replicas[0].store.save(author: "machine a") { $0.insert(t) }
            // No catch-up by hand: the follower (notification or poll) applies and publishes it.
            var seen: CommittedTransaction?
            for await event in stream {
                if case .committed(let tx) = event, tx.id == id {
                    seen = tx
                    break
                }
            }
            #expect(seen?.author == "machine a")
            #expect(seen?.changedObjects["Track"] == [t.id])
            #expect(try c.replicas[1].store.mainContext.object(Track.self, id: t.id)?.title == "published")
        }
    }

    @Test func aLiveQueryOnOneReplicaFollowsAnotherMachinesSaves() async throws {
        try await withCluster(replicas: 2) { c in
            let live = c.replicas[1].store.mainContext.observe(Query(entity: "Genre"))
            let reached = Task { () -> Bool in
                for await results in live where results.records.count == 3 { return true }
                return false
            }
            for name in ["Ambient", "Blues", "Cumbia"] {
                _ = try await c.replicas[0].store.save { $0.insert(Genre(name: name)) }
            }
            // No catch-up by hand: the follower applies the saves and the query re-evaluates.
            let deadline = Task {
                try? await Task.sleep(for: .seconds(20))
                reached.cancel()
            }
            #expect(await reached.value, "the live query never showed the three genres")
            deadline.cancel()
        }
    }

    @Test func oneUniqueKeyContestedByThreeReplicasHasExactlyOneWinner() async throws {
        // What one machine answers to the second insert of a unique name.
        let alone = try await withLibraryStore { store -> ValidationFailure.Kind? in
            _ = try await store.save { $0.insert(Genre(name: "Contested")) }
            do {
                _ = try await store.save { $0.insert(Genre(name: "Contested")) }
                return nil
            } catch StrataError.validation(let f) { return f.kind }
        }
        #expect(alone == .uniqueConstraint)
        try await withCluster(replicas: 3) { c in
            for round in 0..<5 {
                let name = "Contested \(round)"
                let outcomes = await withTaskGroup(of: Result<TransactionID, Error>.self) { group in
                    for r in c.replicas {
                        group.addTask {
                            await Result(catching: { try await r.store.save { $0.insert(Genre(name: name)) } })
                        }
                    }
                    var all: [Result<TransactionID, Error>] = []
                    for await o in group { all.append(o) }
                    return all
                }
                let won = outcomes.filter { if case .success = $0 { true } else { false } }
                #expect(won.count == 1, "round \(round): \(outcomes)")
                for case .failure(let error) in outcomes {
                    guard case StrataError.validation(let f) = error else {
                        Issue.record("round \(round): \(error)")
                        continue
                    }
                    #expect(f.kind == alone)
                }
            }
            try await c.catchUpAll()
            for r in c.replicas {
                #expect(try r.store.mainContext.count(Query(entity: "Genre")) == 5)
            }
        }
    }

    @Test func aConflictingEditAcrossMachinesFollowsTheMergePolicy() async throws {
        let policies: [(String, MergePolicy)] = [
            ("fail", .fail), ("store", .storeWins), ("context", .contextWins),
            ("merge-context", .propertyMerge(preferring: .context)),
            ("merge-store", .propertyMerge(preferring: .store)),
        ]
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            for (name, policy) in policies {
                let t = newTrack("base")
                _ = try await a.store.save { $0.insert(t) }
                try await b.catchUp()
                // b's editor reads the track, then a changes it on the other machine.
                let child = b.store.mainContext.newChild(label: "editor", mergePolicy: policy)
                try child.set(Track.title, of: t.id, to: "mine")
                try child.set(Track.durationSeconds, of: t.id, to: 200)
                _ = try await a.store.save { changes in
                    changes.set(Track.rating, of: t.id, to: 5.0)
                    changes.set(Track.durationSeconds, of: t.id, to: 300)
                }
                // b has not applied a's save yet (or has: either way the commit is judged at the
                // cluster's head).
                do {
                    try await child.commit()
                    #expect(name != "fail", "a conflicting commit succeeded under .fail")
                } catch StrataError.conflict(let list) {
                    #expect(name == "fail")
                    #expect(list.map(\.objectID) == [t.id])
                }
                try await c.catchUpAll()
                for r in [a, b] {
                    let track = try #require(try r.store.mainContext.object(Track.self, id: t.id))
                    let got = (track.title, track.durationSeconds, track.rating)
                    switch name {
                    case "fail": #expect(got == ("base", 300, 5), "\(name)")
                    case "store": #expect(got == ("base", 300, 5), "\(name)")
                    case "context", "merge-context": #expect(got == ("mine", 200, 5), "\(name)")
                    default: #expect(got == ("mine", 300, 5), "\(name)")
                    }
                }
            }
        }
    }

    @Test func aReplicaWithoutItsClusterRefusesSavesAndBulkImports() async throws {
        try await withCluster(replicas: 1) { c in
            let replica = c.replicas[0]
            await replica.close()
            do {
                _ = try await replica.store.save { $0.insert(newTrack("lost")) }
                Issue.record("a detached replica saved locally")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .notAttached)
            }
            let input = c.root.appendingPathComponent("one.ndjson")
            try Data(#"{"entity":"Genre","name":"Bulk"}"#.utf8 + [10]).write(to: input)
            var options = ImportOptions()
            options.mode = .bulk
            await #expect(throws: StrataError.self) {
                _ = try await Importer(store: replica.store, options: options).run(files: [input.path])
            }
            #expect(try replica.store.mainContext.count(Query(entity: "Genre")) == 0)
        }
    }

    /// `storectl cluster join` that cannot write the snapshot it downloads (a file-size limit:
    /// a full disk) exits 74 with the system's words (it was exit 65, "downloading the snapshot"
    /// with a Foundation error, as if the snapshot were damaged) and leaves neither the replica
    /// nor its scratch directory; a join onto a path that exists exits 73, as `init` onto a
    /// store does (it was 66); without the limit the join succeeds.
    @Test func aJoinThatCannotWriteTheSnapshotIsAnIOErrorAndLeavesNothing() async throws {
        try await withCluster(replicas: 1) { c in
            let path = c.root.appendingPathComponent("limited").path
            // 8 blocks: 4 or 8 KiB (dash or bash), below any store's snapshot.
            let r = try await run("/bin/sh", ["-c", "ulimit -f 8 && exec \"$0\" cluster join \"$1\" --postgres \"$2\"",
                                              storectlPath, path, c.url])
            #expect(r.status == 74, "exit \(r.status): \(r.stderr)")
            #expect(r.stderr.contains("writing the snapshot") && r.stderr.contains("File too large"), "\(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: path))
            let scratch = try FileManager.default.contentsOfDirectory(atPath: c.root.path)
                .filter { $0.hasPrefix(".strata-cluster-") }
            #expect(scratch.isEmpty, "\(scratch)")
            // Nor the directories it made above the replica (they were left).
            let deep = c.root.appendingPathComponent("new/a/limited").path
            let failedDeep = try await run("/bin/sh", ["-c", "ulimit -f 8 && exec \"$0\" cluster join \"$1\" --postgres \"$2\"",
                                                       storectlPath, deep, c.url])
            #expect(failedDeep.status == 74, "exit \(failedDeep.status): \(failedDeep.stderr)")
            #expect(!FileManager.default.fileExists(atPath: c.root.appendingPathComponent("new").path))
            let existing = try await storectl(["cluster", "join", c.storePath(0), "--postgres", c.url])
            #expect(existing.status == 73, "exit \(existing.status): \(existing.stderr)")
            #expect(existing.stderr.contains("a replica is made in a new directory"), "\(existing.stderr)")
            let joined = try await storectl(["cluster", "join", path, "--postgres", c.url])
            #expect(joined.status == 0, "exit \(joined.status): \(joined.stderr)")
        }
    }

    /// A poll interval outside 1 ms to a day (a huge one overflowed the follower's conversion to
    /// milliseconds), or a name with a NUL character (PostgreSQL's text holds none, and every
    /// append failed), is refused before anything is attached; the store can be attached after.
    @Test func aBadPollIntervalOrNameIsRefusedBeforeAttaching() async throws {
        try await withCluster(replicas: 1) { c in
            let replica = c.replicas[0]
            await replica.close()
            for bad: Duration in [.zero, .microseconds(999), .seconds(86_401), .seconds(Int64.max)] {
                do {
                    _ = try await ClusterReplica.open(store: replica.store, address: c.address, pollInterval: bad)
                    Issue.record("poll interval \(bad) accepted")
                } catch let e as ClusterError {
                    #expect(e.kind == .badArgument && e.reason.hasPrefix("pollInterval"), "\(e)")
                }
            }
            do {
                _ = try await ClusterReplica.open(store: replica.store, address: c.address, name: "r\u{0}0")
                Issue.record("a replica name with a NUL character accepted")
            } catch let e as ClusterError {
                #expect(e.kind == .badArgument && e.reason.contains("NUL"), "\(e)")
            }
            // Names people read in `status`: none empty, none with control characters.
            for bad in ["", "r\u{1B}[31m0", "r\n0"] {
                do {
                    _ = try await ClusterReplica.open(store: replica.store, address: c.address, name: bad)
                    Issue.record("replica name \(bad.debugDescription) accepted")
                } catch let e as ClusterError {
                    #expect(e.kind == .badArgument && e.reason.contains("control characters"), "\(e)")
                    // Echoed as every value is: escaped, never raw.
                    #expect(!e.reason.contains("\u{1B}") && !e.reason.contains("\n"), "\(e)")
                }
            }
            let again = try await ClusterReplica.open(store: replica.store, address: c.address,
                                                      pollInterval: ClusterReplica.maxPollInterval)
            _ = try await again.store.save { $0.insert(Genre(name: "After")) }
            await again.close()
        }
    }

    /// `cluster init` of a store whose default replica name (`host:path`) holds a control
    /// character is refused before anything is made, as `join` refuses it: the cluster was made,
    /// and every later command on the replica refused its name.
    @Test func aDefaultNameWithAControlCharacterIsRefusedByInit() async throws {
        let address = try await TestPostgres.shared().freshDatabase()
        let url = "postgres://\(address.user)@\(address.host):\(address.port)/\(address.database)"
        let dir = temporaryDirectory("cluster-name")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("line\nbreak").path
        #expect(try await storectl(["init", path, "--schema", librarySchemaDirectory.path]).status == 0)
        let r = try await storectl(["cluster", "init", path, "--postgres", url])
        #expect(r.status == 64 && r.stderr.contains("must not be empty or hold control characters"), "\(r.status) \(r.stderr)")
        let server = try await TestPostgres.shared()
        let tables = try await onOwnThread {
            try server.sql("SELECT to_regclass('strata_cluster') IS NULL", database: address.database)
        }
        #expect(tables == "t", "a cluster was made: \(tables)")
        let store = try Store.openReadOnly(at: URL(fileURLWithPath: path))
        defer { store.close() }
        #expect(try store.replicaClusterID == nil)
    }

    @Test func aReplicaDownFor10000TransactionsCatchesUp() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            await b.close()
            // 16 savers: group commit appends many saves in one PostgreSQL statement.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for saver in 0..<16 {
                    group.addTask {
                        for i in 0..<625 { _ = try await a.store.save { $0.insert(newTrack("t\(saver)-\(i)")) } }
                    }
                }
                try await group.waitForAll()
            }
            let head = try a.store.lastTransactionID
            #expect(head.rawValue >= 10_000)
            let again = try await ClusterReplica.open(store: b.store, address: c.address, name: "r1 again")
            #expect(try again.store.lastTransactionID == head)
            #expect(try again.store.mainContext.count(Query(entity: "Track")) == 10_000)
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(again.store))
            await again.close()
        }
    }

    @Test func aLateReplicaJoinsFromTheLatestSnapshotAndOneBehindTheHorizonIsResetFromIt() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            await b.close()
            for i in 0..<50 { _ = try await a.store.save { $0.insert(newTrack("before \(i)")) } }
            let status = try await Cluster.compact(replica: a)
            #expect(status.horizon == status.head && status.snapshot?.position == status.head)
            for i in 0..<10 { _ = try await a.store.save { $0.insert(newTrack("after \(i)")) } }
            // b is behind the new horizon: a clear error, nothing applied.
            do {
                _ = try await ClusterReplica.open(store: b.store, address: c.address, name: "r1")
                Issue.record("a replica behind the horizon caught up")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .behindRetention)
                #expect(e.reason.contains("cluster reset"))
            }
            // A new replica joins from the snapshot and applies the ten after it.
            let late = try await Cluster.join(at: c.root.appendingPathComponent("late"), address: c.address)
            let replica = try await ClusterReplica.open(store: late, address: c.address, name: "late")
            #expect(try late.lastTransactionID == a.store.lastTransactionID)
            #expect(try late.mainContext.count(Query(entity: "Track")) == 60)
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(late))
            await replica.close()
            late.close()
            // b starts again from the snapshot (a client reset) and catches up.
            let path = b.store.path
            b.store.close()
            let reset = try await Cluster.reset(at: URL(fileURLWithPath: path), address: c.address)
            let again = try await ClusterReplica.open(store: reset, address: c.address, name: "r1 reset")
            #expect(try reset.lastTransactionID == a.store.lastTransactionID)
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(reset))
            #expect(try reset.verify().ok)
            _ = try await reset.save { $0.insert(newTrack("after the reset")) }
            await again.close()
            reset.close()
        }
    }

    /// A replica's row that its last report did not reach (PostgreSQL was down) is brought up to
    /// date by the replica's own status: the status showed the replica behind its own position.
    @Test func aReplicasStatusShowsItsOwnRowUpToDate() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            for i in 0..<3 { _ = try await a.store.save { $0.insert(newTrack("t \(i)")) } }
            let session = PostgresSession(address: c.address, logger: Logger(label: "test"))
            defer { session.close() }
            _ = try session.run("UPDATE strata_replicas SET applied = 0")
            let status = try await a.status()
            let own = try #require(status.replicas.first { $0.name == a.name })
            #expect(own.applied == (try a.store.lastTransactionID).rawValue)
        }
    }

    /// `forget` leaves a running replica's row alone (it reports every second and would write it
    /// again) unless forced; a replica not seen for longer than ``Cluster/recentlySeenSeconds``
    /// is forgotten, and its name is then free. It removed a running replica's row, which came
    /// back a second later.
    @Test func forgettingARunningReplicaIsRefusedUnlessForced() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            await #expect { try await Cluster.forget(replica: a.name, address: c.address) } throws: { error in
                (error as? ClusterError)?.kind == .replicaActive
            }
            #expect(try await b.status().replicas.contains { $0.name == a.name })
            let forced = try await Cluster.forget(replica: a.name, address: c.address, force: true)
            #expect(forced.name == a.name)
            // B's row, its last report made to look a minute old, is removed without force.
            let session = PostgresSession(address: c.address, logger: Logger(label: "test"))
            defer { session.close() }
            await b.close()
            _ = try session.run("UPDATE strata_replicas SET last_seen = now() - interval '1 minute'")
            let old = try await Cluster.forget(replica: b.name, address: c.address)
            #expect(old.name == b.name && old.secondsSinceSeen >= 60)
            await #expect { try await Cluster.forget(replica: b.name, address: c.address) } throws: { error in
                (error as? ClusterError)?.kind == .noSuchReplica
            }
        }
    }

    /// A compaction elsewhere publishes a newer snapshot and trims the log behind it while a join
    /// downloads the one before (made here to happen right after the download): the join makes
    /// the replica again from the newer snapshot, which then catches up; it failed as behind the
    /// horizon and left the replica it had made in the way of a second join.
    @Test func aJoinRacingACompactionStartsFromTheNewerSnapshot() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            for i in 0..<20 { _ = try await a.store.save { $0.insert(newTrack("before \(i)")) } }
            let compactions = Atomic<Int>(0)
            let late = try await Cluster.join(at: c.root.appendingPathComponent("late"), address: c.address,
                                              configuration: StoreConfiguration()) {
                // Only the first download is overtaken: the second is of the newer snapshot.
                guard compactions.add(1, ordering: .relaxed).newValue == 1 else { return }
                _ = try await a.store.save { $0.insert(newTrack("meanwhile")) }
                _ = try await Cluster.compact(replica: a)
            }
            #expect(compactions.load(ordering: .relaxed) == 2)
            let replica = try await ClusterReplica.open(store: late, address: c.address, name: "late")
            #expect(try late.lastTransactionID == a.store.lastTransactionID)
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(late))
            await replica.close()
            late.close()
        }
    }

    @Test func aCatchUpThatFillsTheMapGrowsItAndCountsTheGrowth() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            var small = StoreConfiguration()
            small.initialMapSizeBytes = 256 << 10
            let late = try await Cluster.join(at: c.root.appendingPathComponent("late"), address: c.address,
                                              configuration: small)
            let mapBefore = late.statistics.mapGrowths
            // About 2 MB of tracks the late replica has not applied: more than its map holds.
            for i in 0..<40 {
                _ = try await a.store.save { ctx in
                    for j in 0..<100 { ctx.insert(newTrack("t\(i)-\(j)")) }
                }
            }
            let replica = try await ClusterReplica.open(store: late, address: c.address, name: "late")
            #expect(try late.lastTransactionID == a.store.lastTransactionID)
            #expect(late.statistics.mapGrowths > mapBefore)
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(late))
            await replica.close()
            late.close()
        }
    }

    @Test func aJoinDoesNotReplaceAnEmptyDirectoryMadeAtItsPathDuringTheDownload() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            _ = try await a.store.save { $0.insert(newTrack("before")) }
            let path = c.root.appendingPathComponent("late")
            do {
                _ = try await Cluster.join(at: path, address: c.address, configuration: StoreConfiguration()) {
                    // Someone else claims the path after the join checked it was free.
                    try FileManager.default.createDirectory(at: path, withIntermediateDirectories: false)
                }
                Issue.record("the join replaced the directory made at its path")
            } catch let e as ClusterError {
                #expect(e.kind == .storeExists, "\(e)")
            }
            var isDirectory: ObjCBool = false
            #expect(FileManager.default.fileExists(atPath: path.path, isDirectory: &isDirectory) && isDirectory.boolValue)
            #expect(try FileManager.default.contentsOfDirectory(atPath: path.path).isEmpty,
                    "the other directory is left as it was")
        }
    }

    @Test func aReplicaCompactsItsOwnLogAndGoesOnReplicatingButDoesNotMigrateAlone() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            for i in 0..<20 { _ = try await a.store.save { $0.insert(newTrack("t\(i)")) } }
            let report = try await a.store.compact()
            // Everything squashed but the entry of its last transaction, which the open's history
            // check compares with the cluster's.
            #expect(report.logEntriesAfter == 1 && report.horizon.rawValue == report.head.rawValue - 1, "\(report)")
            _ = try await b.store.save { $0.insert(newTrack("after the compaction")) }
            let id = try await a.store.save { $0.insert(newTrack("from the compacted replica")) }
            let head = try await c.catchUpAll()
            #expect(id == head)
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(b.store))
            #expect(try a.store.verify().ok)
            do {
                _ = try await a.store.migrate(schemas: try Schema.loadAll(directory: librarySchemaDirectory))
                Issue.record("a replica migrated alone")
            } catch let e as MigrationError {
                #expect(e.reason.contains("replica of a cluster"))
            }
        }
    }

    @Test func aSaveRefusedAtAStaleHeadIsJudgedAgainAtTheClustersHead() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            let first = Genre(name: "Unique")
            _ = try await b.store.save { $0.insert(first) }
            // A second store of a's directory's kind: a replica with no follower, so nothing but its
            // own writer brings it up to date.
            let stale = try await Cluster.join(at: c.root.appendingPathComponent("stale"), address: c.address)
            let session = PostgresSession(address: c.address, logger: .init(label: "test"))
            try stale.attachReplication(SharedLog(session: session, replica: "stale", layout: Int(ClusterSchema.layout)))
            try await stale.catchUpReplica()
            #expect(try stale.mainContext.count(Query(entity: "Genre")) == 1)
            // b deletes the genre; the stale replica has not applied that when it inserts the name.
            _ = try await b.store.save { $0.delete(first.id) }
            let deleted = try b.store.lastTransactionID
            let id = try await stale.save { $0.insert(Genre(name: "Unique")) }
            #expect(id == deleted.next, "the insert is ordered right after the delete it was judged against")
            try await c.catchUpAll()
            #expect(try a.store.mainContext.fetch(Genre.self).map(\.name) == ["Unique"])
            await stale.detachReplication()
            session.close()
            stale.close()
        }
    }

    @Test func aReplicasCountersTellAppendsMovedAppendsAndLostRacesApart() async throws {
        try await withCluster(replicas: 2) { c in
            let b = c.replicas[1]
            // A replica with no follower: only its own writer brings it up to date.
            let stale = try await Cluster.join(at: c.root.appendingPathComponent("stale"), address: c.address)
            let session = PostgresSession(address: c.address, logger: .init(label: "test"))
            try stale.attachReplication(SharedLog(session: session, replica: "stale", layout: Int(ClusterSchema.layout)))
            try await stale.catchUpReplica()
            #expect(stale.statistics.sharedLogAppends == 0)
            // Another machine's save it has not applied touches nothing of its own: placed after it.
            _ = try await b.store.save { $0.insert(Genre(name: "Jazz")) }
            _ = try await stale.save { $0.insert(Genre(name: "Blues")) }
            var counters = stale.statistics
            #expect(counters.sharedLogAppends == 1)
            #expect(counters.sharedLogAppendsMoved == 1)
            #expect(counters.sharedLogRacesLost == 0)
            // At the cluster's head: appended where it was validated.
            _ = try await stale.save { $0.insert(Genre(name: "Soul")) }
            counters = stale.statistics
            #expect(counters.sharedLogAppends == 2)
            #expect(counters.sharedLogAppendsMoved == 1)
            // Another machine took the very name first: the race is lost, and the save is judged
            // again at the new head, where the name is taken.
            _ = try await b.store.save { $0.insert(Genre(name: "Funk")) }
            await #expect(throws: StrataError.self) { _ = try await stale.save { $0.insert(Genre(name: "Funk")) } }
            counters = stale.statistics
            #expect(counters.sharedLogRacesLost == 1)
            #expect(counters.sharedLogAppends == 2, "a refused save appends nothing")
            #expect(counters.failedSaves == 1)
            #expect(counters.sharedLogNanoseconds > 0)
            // A save its own replica refuses, behind the cluster's head, is judged again at the
            // head without appending: no race was run, none lost.
            _ = try await b.store.save { $0.insert(Genre(name: "Gospel")) }
            await #expect(throws: StrataError.self) { _ = try await stale.save { $0.insert(Genre(name: "Soul")) } }
            counters = stale.statistics
            #expect(counters.sharedLogRacesLost == 1)
            #expect(counters.sharedLogAppends == 2)
            #expect(counters.failedSaves == 2)
            #expect(try stale.lastTransactionID == b.store.lastTransactionID, "caught up to judge it again")
            #expect(b.store.statistics.sharedLogAppends == 3, "the other machine's three saves")
            await stale.detachReplication()
            session.close()
            stale.close()
        }
    }

    @Test func aLaggingReplicaCannotMoveTheHorizonBackOrRemoveTheNewestSnapshot() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            // A replica with no follower: it stays where it was until it saves.
            let lagging = try await Cluster.join(at: c.root.appendingPathComponent("lagging"), address: c.address)
            defer { lagging.close() }
            for i in 0..<5 { _ = try await a.store.save { $0.insert(newTrack("t\(i)")) } }
            let compacted = try await Cluster.compact(replica: a)
            #expect(compacted.horizon == 5)
            do {
                _ = try await Cluster.compact(store: lagging, address: c.address, name: "lagging")
                Issue.record("a replica behind the horizon compacted")
            } catch let e as ClusterError {
                #expect(e.reason.contains("behind the cluster's horizon 5"))
            }
            // Compacting again at the horizon changes nothing and is no error (an idle cluster's
            // periodic compaction failed with exit 65).
            let again = try await Cluster.compact(replica: a)
            #expect(again.horizon == 5 && again.snapshot?.position == 5)
            let status = try await Cluster.status(address: c.address)
            #expect(status.horizon == 5 && status.snapshot?.position == 5)
            // A replica still joins from the kept snapshot.
            let late = try await Cluster.join(at: c.root.appendingPathComponent("late"), address: c.address)
            #expect(try late.lastTransactionID == TransactionID(5))
            late.close()
        }
    }

    /// A compaction uploads its snapshot before it locks the cluster's row, which every append
    /// needs: another replica saves meanwhile without waiting (it waited for the whole upload,
    /// and past PostgreSQL's statement timeout its saves failed), and the compaction then trims
    /// the log behind its horizon, in batches, after its commit.
    @Test(.timeLimit(.minutes(15))) func anotherReplicaSavesWhileACompactionUploadsItsSnapshot() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            for i in 0..<5 { _ = try await a.store.save { $0.insert(newTrack("t\(i)")) } }
            let saved = Locked<(Result<TransactionID, Error>, Duration)?>(nil)
            let store = b.store, compacted = a.store.path
            Cluster.uploadedForTesting.withLock { hook in
                hook[compacted] = {
                    // On the compaction's thread, with its upload uncommitted: a save of b.
                    let start = ContinuousClock.now
                    let result = Result { try store.saveAndWait { $0.insert(newTrack("during the upload")) } }
                    saved.withLock { $0 = (result, ContinuousClock.now - start) }
                }
            }
            defer { Cluster.uploadedForTesting.withLock { $0[compacted] = nil } }
            let status = try await Cluster.compact(replica: a)
            let (result, took) = try #require(saved.withLock { $0 })
            let id = try result.get()
            #expect(took < .seconds(5), "the save waited \(took)")
            // The snapshot is of a's state before b's save, which stays in the log after it.
            #expect(status.horizon == 5 && status.snapshot?.position == 5 && id == TransactionID(6))
            let postgres = c.postgres, database = c.address.database
            let rows = try await onOwnThread {
                try postgres.sql("SELECT count(*), min(id) FROM strata_log; SELECT count(*) FROM strata_snapshots",
                                 database: database)
            }
            #expect(rows == "1|6\n1", "\(rows)")
        }
    }

    /// Trimming the log behind a new horizon goes a batch at a time (each statement within
    /// PostgreSQL's statement timeout however long the log), and a trim left unfinished (the
    /// compacting process killed after its commit) is finished by the next compaction; entries
    /// left behind the horizon meanwhile are never read.
    @Test func entriesLeftBehindTheHorizonAreNeverReadAndTheNextCompactionTrimsThem() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            for i in 0..<7 { _ = try await a.store.save { $0.insert(newTrack("t\(i)")) } }
            let postgres = c.postgres, database = c.address.database
            func sql(_ statement: String) async throws -> String {
                try await onOwnThread { try postgres.sql(statement, database: database) }
            }
            _ = try await sql("CREATE TABLE kept AS SELECT * FROM strata_log")
            #expect(try await Cluster.compact(replica: a).horizon == 7)
            #expect(try await sql("SELECT count(*) FROM strata_log") == "0")
            // As a compaction killed after its commit leaves them: entries at or before the horizon.
            _ = try await sql("INSERT INTO strata_log SELECT * FROM kept")
            for i in 0..<3 { _ = try await a.store.save { $0.insert(newTrack("u\(i)")) } }
            let late = try await Cluster.join(at: c.root.appendingPathComponent("late"), address: c.address)
            let replica = try await ClusterReplica.open(store: late, address: c.address, name: "late")
            #expect(try late.lastTransactionID == TransactionID(10))
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(late))
            await replica.close()
            late.close()
            // Two entries a statement: four statements for the seven.
            let session = PostgresSession(address: c.address, logger: .init(label: "test"))
            defer { session.close() }
            try await onOwnThread { try Cluster.removeBehindHorizon(session, horizon: 4, batch: 2) }
            #expect(try await sql("SELECT min(id), max(id), count(*) FROM strata_log") == "5|10|6")
            let status = try await Cluster.compact(replica: a)
            #expect(status.horizon == 10)
            #expect(try await sql("SELECT count(*) FROM strata_log") == "0")
            #expect(try await sql("SELECT count(*), min(position) FROM strata_snapshots") == "1|10")
            #expect(try await sql("SELECT count(*) FROM strata_snapshot_chunks WHERE snapshot_id NOT IN (SELECT id FROM strata_snapshots)") == "0")
            // Left unfinished again, and compacted again with nothing new to publish (the
            // replica at the horizon): the trim is finished all the same. It waited for a
            // compaction that moved the horizon.
            _ = try await sql("INSERT INTO strata_log SELECT * FROM kept")
            #expect(try await Cluster.compact(replica: a).horizon == 10)
            #expect(try await sql("SELECT count(*) FROM strata_log") == "0")
        }
    }

    /// A replica past the cluster's head (its database restored from an older backup, and the
    /// replica open across it) cannot publish its state as the cluster's snapshot: the horizon
    /// went past the head, and every replica then refused the cluster.
    @Test func aReplicaPastTheClustersHeadCannotCompactTheCluster() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            for i in 0..<3 { _ = try await a.store.save { $0.insert(newTrack("t\(i)")) } }
            let postgres = c.postgres, database = c.address.database
            _ = try await onOwnThread {
                try postgres.sql("DELETE FROM strata_log WHERE id > 2; UPDATE strata_cluster SET head = 2",
                                 database: database)
            }
            do {
                _ = try await Cluster.compact(replica: a)
                Issue.record("a replica past the head compacted the cluster")
            } catch let e as ClusterError {
                #expect(e.kind == .badSnapshot && e.reason.contains("past the cluster's head 2"), "\(e)")
            }
            let status = try await Cluster.status(address: c.address)
            #expect(status.horizon == 0 && status.head == 2 && status.snapshot?.position == 0)
        }
    }

    @Test func aReplicaAheadOfTheClustersHeadIsToldItsHistoryDiverged() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            for i in 0..<3 { _ = try await a.store.save { $0.insert(newTrack("t\(i)")) } }
            // The database loses its last two transactions (a backup restored, say).
            let postgres = c.postgres, database = c.address.database
            _ = try await onOwnThread {
                try postgres.sql("DELETE FROM strata_log WHERE id > 1; UPDATE strata_cluster SET head = 1",
                                 database: database)
            }
            do {
                _ = try await a.store.save { $0.insert(newTrack("after the loss")) }
                Issue.record("a replica ahead of the cluster saved")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .rejectedEntry)
                #expect(e.reason.contains("past the cluster's head"))
            }
        }
    }

    /// A cluster database damaged by hand is refused with a clear error, never a trap or a
    /// hang: a head moved past the log's last entry (every save went round the catch-up for
    /// ever), a head past the largest transaction id (a migration's marker id overflowed), and a
    /// snapshot that declares a negative number of chunks (`join` trapped on the range) or a
    /// negative position (`join` trapped once it had downloaded it).
    @Test(.timeLimit(.minutes(15))) func aDamagedClusterDatabaseIsRefusedNotATrapOrAHang() async throws {
        try await withCluster(replicas: 1) { c in
            let a = c.replicas[0]
            _ = try await a.store.save { $0.insert(newTrack("before")) }
            let postgres = c.postgres, database = c.address.database
            func sql(_ statement: String) async throws {
                _ = try await onOwnThread { try postgres.sql(statement, database: database) }
            }
            // Negative whatever it was (-p - 1), and back afterwards.
            try await sql("UPDATE strata_snapshots SET position = -position - 1")
            do {
                _ = try await Cluster.join(at: c.root.appendingPathComponent("early"), address: c.address)
                Issue.record("joined from a snapshot at a negative position")
            } catch let e as ClusterError {
                #expect(e.kind == .badSnapshot && e.reason.contains("declares the position -"), "\(e)")
            }
            #expect(!FileManager.default.fileExists(atPath: c.root.appendingPathComponent("early").path))
            try await sql("UPDATE strata_snapshots SET position = -(position + 1)")
            try await sql("UPDATE strata_cluster SET head = head + 5000")
            do {
                _ = try await a.store.save { $0.insert(newTrack("into the gap")) }
                Issue.record("a save went into a log whose head is past its entries")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .rejectedEntry && e.reason.contains("has no entry after"), "\(e)")
            }
            try await sql("UPDATE strata_cluster SET head = 9223372036854775807")
            await a.close()
            await #expect(throws: ClusterError.self) {
                _ = try await ClusterReplica.open(store: a.store, address: c.address)
            }
            try await sql("UPDATE strata_snapshots SET chunks = -1")
            do {
                _ = try await Cluster.join(at: c.root.appendingPathComponent("late"), address: c.address)
                Issue.record("joined from a snapshot of -1 chunks")
            } catch let e as ClusterError {
                #expect(e.kind == .badSnapshot || e.kind == .noCluster, "\(e)")
            }
        }
    }

    @Test func saveAndWaitOnAReplicaCommitsOnTheWritersQueue() async throws {
        try await withCluster(replicas: 2) { c in
            let store = c.replicas[0].store
            let id: TransactionID = try await withCheckedThrowingContinuation { k in
                Thread {
                    k.resume(with: Result { try store.saveAndWait(author: "blocking") { $0.insert(newTrack("sync")) } })
                }.start()
            }
            try await c.replicas[1].catchUp(to: id)
            #expect(try c.replicas[1].store.changes(in: id).author == "blocking")
        }
    }

    /// A replica, the first (which made the cluster) or a joined one, is never made into a
    /// second cluster in another database: both clusters would have its id, and its history
    /// would fork between them. (It was made, and `verify` passed on replicas that had forked.)
    @Test func aReplicaIsNeverMadeIntoASecondCluster() async throws {
        try await withCluster(replicas: 2) { c in
            _ = try await c.replicas[0].store.save { $0.insert(newTrack("before")) }
            let other = try await TestPostgres.shared().freshDatabase()
            for r in c.replicas {
                await r.close()
                #expect(try r.store.clusterBeingMadeIn == nil)
                do {
                    try await Cluster.initialize(store: r.store, address: other)
                    Issue.record("\(r.store.path): a replica made into a second cluster")
                } catch let e as ClusterError {
                    #expect(e.kind == .wrongStore, "\(e)")
                    #expect(e.reason.contains("already a replica of cluster"), "\(e)")
                }
                #expect(try r.store.replicaClusterID == c.replicas[0].clusterID)
            }
            let postgres = c.postgres, database = other.database
            let tables = try await onOwnThread {
                try postgres.sql("SELECT count(*) FROM pg_tables WHERE tablename = 'strata_cluster'", database: database)
            }
            #expect(tables.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "nothing made in the other database")
        }
    }

    /// The name a cluster is made with is its first replica's: listed in `status` from the start
    /// at the snapshot's position, kept in the store for its later opens (no second row under
    /// `host:path`), and not inherited by a replica joined from the snapshot. (It was stored only
    /// with the snapshot, and the replica appeared, under `host:path`, once it had saved.)
    @Test func theNameAClusterIsMadeWithIsItsFirstReplicasFromTheStart() async throws {
        let server = try await TestPostgres.shared()
        let address = try await server.freshDatabase()
        let root = temporaryDirectory("strata-cluster")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try Store.open(at: root.appendingPathComponent("first"), schema: try librarySchema())
        defer { store.close() }
        _ = try await store.save { $0.insert(newTrack("before")) }
        let made = try await Cluster.initialize(store: store, address: address, name: "primary")
        #expect(made.replicas.map(\.name) == ["primary"], "\(made.replicas)")
        #expect(made.replicas.first?.applied == made.head)
        #expect(try store.replicaName == "primary")
        let replica = try await ClusterReplica.open(store: store, address: address)
        _ = try await store.save { $0.insert(newTrack("after")) }
        await replica.close()
        let joined = try await Cluster.join(at: root.appendingPathComponent("second"), address: address)
        defer { joined.close() }
        #expect(try joined.replicaName == nil)
        let status = try await Cluster.status(address: address)
        #expect(status.replicas.map(\.name).filter { !$0.hasSuffix("/second") } == ["primary"], "\(status.replicas)")
        #expect(status.replicas.first { $0.name == "primary" }?.applied == status.head)
        // A reset from the snapshot keeps the replica's own name.
        store.close()
        let reset = try await Cluster.reset(at: root.appendingPathComponent("first"), address: address)
        #expect(try reset.replicaName == "primary")
        reset.close()
    }

    /// A replica given another cluster's database: `migrate` and `reset` refuse it as every other
    /// command does (ClusterError.wrongStore, exit 66) before reading or downloading anything
    /// (`migrate` said "temporary failure", 75; `reset` first downloaded the other cluster's
    /// whole snapshot, then refused it by its name inside the scratch directory).
    @Test func migrateAndResetRefuseAReplicaOfAnotherClusterBeforeMovingAnything() async throws {
        try await withCluster(replicas: 1) { c in
            let other = try await TestPostgres.shared().freshDatabase()
            let second = try Store.open(at: c.root.appendingPathComponent("second"), schema: try librarySchema())
            try await Cluster.initialize(store: second, address: other)
            second.close()
            let r = c.replicas[0]
            await r.close()
            r.store.close()
            let url = URL(fileURLWithPath: c.storePath(0))
            func refused(_ what: String, _ error: Error?) throws {
                guard let e = error as? ClusterError else {
                    Issue.record("\(what): \(error.map { "\($0)" } ?? "went on with another cluster's database")")
                    return
                }
                #expect(e.kind == .wrongStore, "\(what): \(e)")
                #expect(e.reason.contains("holds cluster"), "\(what): \(e)")
                let scratch = try FileManager.default.contentsOfDirectory(atPath: c.root.path)
                    .filter { $0.hasPrefix(".strata-cluster-") }
                #expect(scratch.isEmpty, "\(what): \(scratch)")
            }
            do {
                _ = try await Cluster.migrate(at: url, address: other,
                                              schemas: try Schema.loadAll(directory: librarySchemaDirectory))
                try refused("migrate", nil)
            } catch { try refused("migrate", error) }
            do {
                try await Cluster.reset(at: url, address: other).close()
                try refused("reset", nil)
            } catch { try refused("reset", error) }
        }
    }

    /// A cluster database restored from an older backup, after which another machine appended as
    /// many transactions as a replica had beyond the backup: the replica's last transaction is
    /// not the cluster's of that id, and opening it is refused (it went on, silently holding
    /// another history, `verify` passing on both). Also when the replica compacted its own log
    /// to its head meanwhile, as operators do: the compaction keeps the entry of its last
    /// transaction (it squashed it, and the replica then forked from the cluster unnoticed).
    @Test(arguments: [false, true])
    func aReplicaWhoseHistoryDivergedIsRefusedEvenWhenTheClusterCaughtUpWithIt(compactedFirst: Bool) async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            await b.close()
            let lost = try await a.store.save { $0.insert(newTrack("lost in the restore")) }
            await a.close()
            if compactedFirst {
                let report = try await a.store.compact()
                #expect(report.horizon.rawValue == lost.rawValue - 1 && report.head == lost, "\(report)")
            }
            let postgres = c.postgres, database = c.address.database
            _ = try await onOwnThread {
                try postgres.sql("DELETE FROM strata_log WHERE id >= \(lost.rawValue); "
                                 + "UPDATE strata_cluster SET head = \(lost.rawValue - 1)", database: database)
            }
            let reopened = try await ClusterReplica.open(store: b.store, address: c.address)
            #expect(try await b.store.save { $0.insert(newTrack("after the restore")) } == lost)
            await reopened.close()
            do {
                let r = try await ClusterReplica.open(store: a.store, address: c.address)
                await r.close()
                Issue.record("a replica with another transaction \(lost) was opened")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .rejectedEntry, "\(e)")
                #expect(e.reason.contains("history diverged"), "\(e)")
            }
            // `status` says which history is not the cluster's.
            #expect(try await Cluster.status(address: c.address, store: a.store).historyDiverged == true)
            #expect(try await Cluster.status(address: c.address, store: b.store).historyDiverged == false)
            // The replica with the cluster's history opens.
            let again = try await ClusterReplica.open(store: b.store, address: c.address)
            await again.close()
        }
    }

    /// `migrate` of a replica whose history diverged is refused as its open is: it caught the
    /// replica up first, applying the cluster's later transactions on the other history, after
    /// which the replica's last entry was the cluster's and every later open and `status` took
    /// it for a healthy replica holding a record the cluster never had.
    @Test func migrateOfAReplicaWhoseHistoryDivergedIsRefusedBeforeItAppliesAnything() async throws {
        try await withCluster(replicas: 2) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            await b.close()
            let lost = try await a.store.save { $0.insert(newTrack("lost in the restore")) }
            await a.close()
            a.store.close()
            let postgres = c.postgres, database = c.address.database
            _ = try await onOwnThread {
                try postgres.sql("DELETE FROM strata_log WHERE id >= \(lost.rawValue); "
                                 + "UPDATE strata_cluster SET head = \(lost.rawValue - 1)", database: database)
            }
            let reopened = try await ClusterReplica.open(store: b.store, address: c.address)
            #expect(try await b.store.save { $0.insert(newTrack("after the restore")) } == lost)
            _ = try await b.store.save { $0.insert(newTrack("and one more")) }
            await reopened.close()
            let url = URL(fileURLWithPath: c.storePath(0))
            do {
                let report = try await Cluster.migrate(at: url, address: c.address,
                                                       schemas: try Schema.loadAll(directory: librarySchemaDirectory))
                Issue.record("a replica with another history was migrated (\(String(describing: report)))")
            } catch StrataError.replication(let e) {
                #expect(e.kind == .rejectedEntry, "\(e)")
                #expect(e.reason.contains("history diverged"), "\(e)")
            }
            let after = try Store.openExisting(at: url)
            defer { after.close() }
            #expect(try after.lastTransactionID == lost, "nothing of the cluster's was applied on the other history")
            #expect(try await Cluster.status(address: c.address, store: after).historyDiverged == true)
        }
    }

    /// Every storectl command on a store whose `cluster init` did not finish says how to finish
    /// it: `cluster status` and `cluster reset` said the database held no cluster, an import
    /// without a URL asked for one, and the reading commands said nothing at all.
    @Test func everyCommandOnAStoreWhoseClusterInitDidNotFinishSaysHowToFinishIt() async throws {
        let server = try await TestPostgres.shared()
        let address = try await server.freshDatabase()
        let root = temporaryDirectory("strata-cluster")
        defer { try? FileManager.default.removeItem(at: root) }
        let url = root.appendingPathComponent("r0")
        let store = try Store.open(at: url, schema: try librarySchema())
        try await store.markAsReplica(clusterID: "left-by-a-dead-init", makingClusterIn: address.identity)
        store.close()
        let postgres = "postgres://\(address.user)@\(address.host):\(address.port)/\(address.database)"
        let finishing = "storectl cluster init \(url.path) --postgres postgres://USER@\(address.identity)` again"
        let input = root.appendingPathComponent("in.ndjson")
        try Data(#"{"entity":"Genre","name":"g"}"#.utf8).write(to: input)
        for (arguments, status) in [(["cluster", "status", url.path, "--postgres", postgres], Int32(66)),
                                    (["cluster", "reset", url.path, "--postgres", postgres], 66),
                                    (["import", url.path, input.path], 66),
                                    (["info", url.path], 0), (["verify", url.path], 0), (["log", url.path], 0),
                                    (["query", url.path, "--entity", "Genre", "--count"], 0),
                                    (["export", url.path, "--entity", "Genre"], 0)] {
            let r = try await run(storectlPath, arguments, environment: ProcessInfo.processInfo.environment
                .filter { $0.key != "STRATA_POSTGRES_URL" })
            #expect(r.status == status, "\(arguments): \(r.stderr)")
            #expect(r.stderr.contains(finishing), "\(arguments): \(r.stderr)")
        }
    }

    @Test func initializeResumesForAStoreMarkedByAnInitThatDiedBeforeItsCommit() async throws {
        let server = try await TestPostgres.shared()
        let address = try await server.freshDatabase()
        let root = temporaryDirectory("strata-cluster")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try Store.open(at: root.appendingPathComponent("r0"), schema: try librarySchema())
        defer { store.close() }
        try await store.markAsReplica(clusterID: "left-by-a-dead-init", makingClusterIn: address.identity)
        // Only in the database that making was started in: a mark that outlived its making (a
        // generation built from an earlier snapshot brings it back) never lets the replica be
        // made into a cluster elsewhere under the same id.
        let elsewhere = try await server.freshDatabase()
        // Both refusals say what finishes it: the init again, with the database it was making
        // the cluster in (they said the store was a replica of a cluster no database holds).
        let finishing = "run `storectl cluster init \(store.path) --postgres postgres://USER@\(address.identity)` again"
        do {
            try await Cluster.initialize(store: store, address: elsewhere)
            Issue.record("a store being made into a cluster in one database was made into one in another")
        } catch let e as ClusterError {
            #expect(e.kind == .wrongStore && e.reason.contains(finishing), "\(e)")
        }
        do {
            _ = try await ClusterReplica.open(store: store, address: address)
            Issue.record("a replica of a cluster not made yet was opened")
        } catch let e as ClusterError {
            #expect(e.kind == .noCluster && e.reason.contains(finishing), "\(e)")
        }
        let status = try await Cluster.initialize(store: store, address: address)
        #expect(status.clusterID == "left-by-a-dead-init")
        #expect(try store.clusterBeingMadeIn == nil, "made: a replica of a cluster that exists")
        let replica = try await ClusterReplica.open(store: store, address: address)
        _ = try await store.save { $0.insert(newTrack("saved")) }
        await replica.close()
    }

    /// A store whose `cluster init` into a database was cut short, when another store's cluster
    /// has been made in that database since: its cluster can never be made there, so the init
    /// run again undoes the mark (the store is one machine's again, and saves) and says why. It
    /// was refused as "already holds a cluster" for good, and every save refused with it.
    @Test func anUnfinishedInitIntoADatabaseThatAnotherClusterTookIsUndone() async throws {
        let server = try await TestPostgres.shared()
        let address = try await server.freshDatabase()
        let root = temporaryDirectory("strata-cluster")
        defer { try? FileManager.default.removeItem(at: root) }
        let cut = root.appendingPathComponent("cut")
        do {
            let store = try Store.open(at: cut, schema: try librarySchema())
            defer { store.close() }
            try await store.markAsReplica(clusterID: "left-by-a-dead-init", makingClusterIn: address.identity)
        }
        do {
            let other = try Store.open(at: root.appendingPathComponent("other"), schema: try librarySchema())
            defer { other.close() }
            try await Cluster.initialize(store: other, address: address)
        }
        let url = "postgres://\(address.user)@\(address.host):\(address.port)/\(address.database)"
        let r = try await storectl(["cluster", "init", cut.path, "--postgres", url])
        #expect(r.status == 73 && r.stderr.contains("that init is undone") && r.stderr.contains("store of one machine again"),
                "\(r.status) \(r.stderr)")
        let input = root.appendingPathComponent("in.ndjson")
        try Data(#"{"entity":"Genre","name":"g"}"#.utf8).write(to: input)
        let imported = try await run(storectlPath, ["import", cut.path, input.path, "--quiet"],
                                     environment: ProcessInfo.processInfo.environment.filter { $0.key != "STRATA_POSTGRES_URL" })
        #expect(imported.status == 0, "\(imported.stderr)")
        let store = try Store.openReadOnly(at: cut)
        defer { store.close() }
        #expect(try store.replicaClusterID == nil && store.clusterBeingMadeIn == nil)
    }

    @Test func concurrentAppendsAtOneHeadLeaveGapFreeIDsInCommitOrder() async throws {
        let server = try await TestPostgres.shared()
        try await withCluster(replicas: 1, postgres: server) { c in
            await c.replicas[0].close()
            // Eight threads append raw entries as fast as they can, each at the head it last read.
            let appended = Appended()
            let rounds = 40
            let done = DispatchGroup()
            for t in 0..<8 {
                done.enter()
                DispatchQueue.global().async {
                    defer { done.leave() }
                    let session = PostgresSession(address: c.address, logger: .init(label: "test"))
                    defer { session.close() }
                    let log = SharedLog(session: session, replica: "thread \(t)", layout: Int(ClusterSchema.layout))
                    var mine = 0
                    while mine < rounds {
                        guard let head = try? Cluster.readCluster(session).head else { continue }
                        let entries = (1...3).map { k in
                            ReplicatedEntry(transactionID: TransactionID(head + UInt64(k)), bytes: [UInt8(t), UInt8(k)],
                                            author: "thread \(t)", timestampMs: 0, schemaVersion: 2)
                        }
                        if (try? log.append(entries, after: TransactionID(head))) == .appended {
                            appended.starts.withLock { $0.append(head + 1) }
                            mine += 1
                        }
                    }
                }
            }
            await withCheckedContinuation { (k: CheckedContinuation<Void, Never>) in
                done.notify(queue: .global()) { k.resume() }
            }
            let starts = appended.starts.withLock { $0 }.sorted()
            let expected: [UInt64] = (0..<(8 * rounds)).map { UInt64(1 + 3 * $0) }
            #expect(starts.count == 8 * rounds)
            #expect(starts == expected, "every append starts right after the last")
            let postgres = c.postgres, database = c.address.database
            let ids = try await onOwnThread {
                try postgres.sql("SELECT count(*), min(id), max(id) FROM strata_log", database: database)
            }
            #expect(ids == "\(8 * rounds * 3)|1|\(8 * rounds * 3)")
            // Stale heads are refused without appending.
            let session = PostgresSession(address: c.address, logger: .init(label: "test"))
            defer { session.close() }
            let stale = ReplicatedEntry(transactionID: TransactionID(1), bytes: [0], author: "x", timestampMs: 0,
                                        schemaVersion: 2)
            #expect(try SharedLog(session: session, replica: "x", layout: Int(ClusterSchema.layout)).append([stale], after: TransactionID(0)) == .behind)
        }
    }
}

final class Appended: Sendable {
    let starts = Locked<[UInt64]>([])
}

extension Result where Failure == Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
