import Foundation
import Logging
import LibraryModel
import Strata
import StrataTestSupport
import Testing
@testable import StrataCluster

/// Replicas as separate processes (strata-cluster-child and storectl) writing concurrently,
/// killed with SIGKILL around their commit, and PostgreSQL restarted under them; afterwards every
/// replica holds the same state and the recorded history passes ``ClusterHistory``'s checks.
@Suite(.serialized) struct ClusterProcessTests {
    static let child = URL(fileURLWithPath: storectlPath).deletingLastPathComponent()
        .appendingPathComponent("strata-cluster-child").path

    /// Runs the writer process to completion (on a thread of its own) and returns its status.
    static func runChild(_ c: ClusterFixture, replica: Int, name: String, count: Int, history: URL,
                         kill: String? = nil) async throws -> ProcessResult {
        let arguments = [c.storePath(replica), c.url, name, "\(count)", history.path] + (kill.map { [$0] } ?? [])
        return try await withCheckedThrowingContinuation { k in
            DispatchQueue.global().async { k.resume(with: Result { try spawn(child, arguments) }) }
        }
    }

    /// Opens every replica again in this process, catches all up, and checks that they agree:
    /// one head, equal exports, a clean verify. Returns the first store (closed by `body`'s end).
    static func reopenAndCompare<R>(_ c: ClusterFixture, _ body: (Store) throws -> R) async throws -> R {
        var replicas: [ClusterReplica] = []
        for i in c.replicas.indices {
            let store = try Store.openExisting(at: URL(fileURLWithPath: c.storePath(i)))
            replicas.append(try await ClusterReplica.open(store: store, address: c.address, name: "check r\(i)"))
        }
        let head = TransactionID(try await Cluster.status(address: c.address).head)
        var exports: [String] = []
        for r in replicas {
            try await r.catchUp(to: head)
            #expect(try r.store.lastTransactionID == head)
            #expect(try r.store.verify().ok)
            exports.append(try ClusterFixture.exported(r.store))
        }
        #expect(Set(exports).count == 1, "the replicas' states differ")
        let result = Result { try body(replicas[0].store) }
        for r in replicas {
            await r.close()
            r.store.close()
        }
        return try result.get()
    }

    @Test func threeReplicaProcessesSavingAndImportingAgreeOnOneOrder() async throws {
        try await withCluster(replicas: 3) { c in
            await c.release()
            let histories = (0..<3).map { c.root.appendingPathComponent("history-\($0)") }
            // An import into the third replica, beside the savers: it writes through the cluster.
            let input = c.root.appendingPathComponent("import.ndjson")
            let titles = (0..<300).map { "imported \($0)" }
            let lines = titles.enumerated().map { i, title in
                #"{"entity":"Track","mbid":"\#(UUID().uuidString.lowercased())","title":"\#(title)","# +
                    #""durationSeconds":\#(i),"addedAt":"2026-01-01T00:00:00Z"}"#
            }
            try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: input)
            async let importer: ProcessResult = withCheckedThrowingContinuation { k in
                DispatchQueue.global().async {
                    k.resume(with: Result {
                        try spawn(storectlPath, ["import", c.storePath(2), input.path, "--batch", "10", "--quiet",
                                                 "--postgres", c.url])
                    })
                }
            }
            async let r0 = Self.runChild(c, replica: 0, name: "p0", count: 150, history: histories[0])
            async let r1 = Self.runChild(c, replica: 1, name: "p1", count: 150, history: histories[1])
            async let r2 = Self.runChild(c, replica: 2, name: "p2", count: 150, history: histories[2])
            let results = try await [r0, r1, r2, importer]
            for r in results { #expect(r.status == 0, "\(r.stderr)") }
            let history = try ClusterHistory(files: histories)
            #expect(history.acknowledged.count == 450)
            let problems = try await Self.reopenAndCompare(c) { store in
                try history.problems(in: store, others: Set(titles))
            }
            #expect(problems.isEmpty, "\(problems.prefix(10))")
        }
    }

    /// The `turn-` points lose every race, so that each save waits its turn, and kill the process
    /// inside the turn: before its append (holding the cluster's head row, which goes with its
    /// connection, so the other replica saves at once) or after PostgreSQL committed it.
    @Test(arguments: ["before-append", "after-append", "after-ack", "turn-before-append", "turn-after-append"])
    func aReplicaKilledAroundItsCommitRecovers(point: String) async throws {
        try await withCluster(replicas: 2) { c in
            await c.release()
            let history = c.root.appendingPathComponent("history")
            let killed = try await Self.runChild(c, replica: 0, name: "k", count: 10, history: history,
                                                 kill: "\(point):3")
            #expect(killed.status == 128 + SIGKILL, "\(killed.stderr)")
            // The other replica saves meanwhile; then the killed one starts again and saves on.
            let other = try await Self.runChild(c, replica: 1, name: "o", count: 5, history: history)
            let again = try await Self.runChild(c, replica: 0, name: "k2", count: 5, history: history)
            #expect(other.status == 0 && again.status == 0, "\(other.stderr) \(again.stderr)")
            let h = try ClusterHistory(files: [history])
            let problems = try await Self.reopenAndCompare(c) { store -> [String] in
                let found = try store.mainContext.fetch(Track.self).filter { $0.title == "k-3" }.count
                switch point {
                case "before-append", "turn-before-append":
                    #expect(found == 0, "killed before its append, yet applied")
                default: #expect(found == 1, "in PostgreSQL before the kill, found \(found) time(s)")
                }
                return try h.problems(in: store)
            }
            #expect(problems.isEmpty, "\(problems)")
            #expect(h.acknowledged.count == (point == "after-ack" ? 4 : 3) + 10)
        }
    }

    @Test(.timeLimit(.minutes(15))) func postgresRestartedInTheMiddleOfARun() async throws {
        let server = try await TestPostgres.start()
        defer { try? server.stop() }
        try await withCluster(replicas: 2, postgres: server) { c in
            await c.release()
            let histories = (0..<2).map { c.root.appendingPathComponent("history-\($0)") }
            async let r0 = Self.runChild(c, replica: 0, name: "p0", count: 300, history: histories[0])
            async let r1 = Self.runChild(c, replica: 1, name: "p1", count: 300, history: histories[1])
            // Restarted once both writers are well under way.
            while histories.contains(where: { file in
                let text = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
                return text.components(separatedBy: "\nok ").count < 30
            }) {
                try await Task.sleep(for: .milliseconds(20))
            }
            try await server.restart()
            let restarted = monotonicNanoseconds()
            let results = try await [r0, r1]
            for r in results { #expect(r.status == 0, "\(r.stderr)") }
            let h = try ClusterHistory(files: histories)
            let after = h.acknowledged.filter { $0.called > restarted }.count
            #expect(after > 0, "no save was acknowledged after the restart")
            #expect(h.operations.count == 600)
            let problems = try await Self.reopenAndCompare(c) { try h.problems(in: $0) }
            #expect(problems.isEmpty, "\(problems.prefix(10))")
        }
    }

    /// Randomized runs: three replica processes with random numbers of saves, half of them (and
    /// at least one a run, at a point every save meets) planned to be killed at a random point of
    /// a random save (then started again), PostgreSQL restarted in some runs; each run checked.
    /// `STRATA_CLUSTER_RUNS` (default 3; `Tools/cluster-loop` runs 100) and `STRATA_CLUSTER_SEED`
    /// (default: random, printed) replay a run exactly as far as the choices go (the processes'
    /// timing is the machine's).
    @Test func randomizedRunsWithKillsAndRestarts() async throws {
        let environment = ProcessInfo.processInfo.environment
        let runs = Int(environment["STRATA_CLUSTER_RUNS"] ?? "") ?? 3
        let seed = UInt64(environment["STRATA_CLUSTER_SEED"] ?? "") ?? UInt64.random(in: 0..<1_000_000)
        let server = try await TestPostgres.start()
        defer { try? server.stop() }
        var totals = (acknowledged: 0, failed: 0, unknown: 0, kills: 0, restarts: 0)
        // Whether a run without a restart of PostgreSQL was planned: its kill (every run plans
        // one at a point every save meets) must have happened.
        var plansKill = false
        // Whether `kill` is at a point every save meets (a point inside a turn may never be met).
        func meetsEverySave(_ kill: String?) -> Bool { kill.map { !$0.hasPrefix("turn-") } ?? false }
        for run in 0..<runs {
            var rng = SeededGenerator(seed: seed &+ UInt64(run))
            let points = ["before-append", "after-append", "after-ack", "turn-before-append", "turn-after-append"]
            var plans = (0..<3).map { _ -> (count: Int, kill: String?) in
                let count = Int.random(in: 10...40, using: &rng)
                let kill = Bool.random(using: &rng)
                    ? "\(points.randomElement(using: &rng)!):\(Int.random(in: 0..<count, using: &rng))" : nil
                return (count, kill)
            }
            let restartAfter: Int? = Int.random(in: 0..<10, using: &rng) < 3 ? Int.random(in: 5...15, using: &rng) : nil
            // Every run plans a kill at a point every save meets (a point inside a turn may never
            // be met), so that each run without a restart of PostgreSQL checks a recovery. Drawn
            // after the other choices, so that a seed replays them as it did before.
            if !plans.contains(where: { meetsEverySave($0.kill) }) {
                let victim = Int.random(in: 0..<plans.count, using: &rng)
                let point = points.filter { meetsEverySave($0) }.randomElement(using: &rng)!
                plans[victim].kill = "\(point):\(Int.random(in: 0..<plans[victim].count, using: &rng))"
            }
            if restartAfter == nil { plansKill = true }
            let label = "seed \(seed), run \(run) (STRATA_CLUSTER_SEED=\(seed &+ UInt64(run)) STRATA_CLUSTER_RUNS=1)"
            let killed = Locked(0)
            try await withCluster(replicas: 3, postgres: server) { c in
                await c.release()
                let histories = (0..<3).map { c.root.appendingPathComponent("history-\($0)") }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (i, plan) in plans.enumerated() {
                        group.addTask {
                            let first = try await Self.runChild(c, replica: i, name: "r\(run)p\(i)", count: plan.count,
                                                                history: histories[i], kill: plan.kill)
                            if plan.kill == nil {
                                #expect(first.status == 0, "\(label): \(first.stderr)")
                                return
                            }
                            // Killed at its point, or (PostgreSQL restarted meanwhile) ended
                            // with a temporary failure before it got there, or went on past the
                            // save planned for the kill because that save failed before its
                            // append (the server down: the history says so); counted as it ended.
                            // A point inside a turn is met only by a save that goes in turn, which
                            // may not happen: then the process ends normally.
                            if first.status == 128 + SIGKILL {
                                killed.withLock { $0 += 1 }
                            } else {
                                let turn = plan.kill?.hasPrefix("turn-") == true
                                let index = plan.kill?.split(separator: ":").last.map(String.init) ?? ""
                                let lines = ((try? String(contentsOf: histories[i], encoding: .utf8)) ?? "")
                                    .split(separator: "\n")
                                let plannedSaveFailed = lines.contains { $0.hasPrefix("fail r\(run)p\(i) \(index) ") }
                                #expect((turn && first.status == 0)
                                        || (restartAfter != nil && (first.status == 75 || (first.status == 0 && plannedSaveFailed))),
                                        "\(label): planned to be killed (\(plan.kill ?? "")), ended \(first.status): \(first.stderr)")
                            }
                            let again = try await Self.runChild(c, replica: i, name: "r\(run)p\(i)b", count: 5,
                                                                history: histories[i])
                            #expect(again.status == 0, "\(label): \(again.stderr)")
                        }
                    }
                    if let restartAfter {
                        try await Task.sleep(for: .milliseconds(restartAfter * 20))
                        try await server.restart()
                    }
                    try await group.waitForAll()
                }
                let h = try ClusterHistory(files: histories)
                let problems = try await Self.reopenAndCompare(c) { try h.problems(in: $0) }
                #expect(problems.isEmpty, "\(label): \(problems.prefix(10))")
                totals.acknowledged += h.acknowledged.count
                totals.failed += h.operations.filter { if case .failed = $0.outcome { true } else { false } }.count
                totals.unknown += h.operations.filter { $0.outcome == .unknown }.count
            }
            totals.kills += killed.withLock { $0 }
            totals.restarts += restartAfter == nil ? 0 : 1
        }
        #expect(totals.kills > 0 || !plansKill, "no process was killed: the runs checked no recovery")
        print("""
            cluster runs: \(runs) (seed \(seed)); saves acknowledged \(totals.acknowledged), failed \(totals.failed), \
            outcome unknown \(totals.unknown); processes killed \(totals.kills); PostgreSQL restarts \(totals.restarts)
            """)
    }

    /// `storectl cluster join` killed (SIGKILL) at moments spread over its run: afterwards the
    /// path holds nothing or a whole replica that opens, and the join run again (when nothing is
    /// there) makes one; no scratch directory of a killed join is left once a join ran. (A kill
    /// while the snapshot was copied left a directory that was no store and that every later
    /// join refused as existing.)
    @Test func aJoinKilledAtAnyMomentLeavesNothingOrAWholeReplica() async throws {
        try await withCluster(replicas: 1) { c in
            // A snapshot of a few MB, so that copying it into the replica takes a while.
            _ = try await c.replicas[0].store.save { c in for i in 0..<30_000 { c.insert(newTrack("t\(i)")) } }
            for (n, delay) in [5, 30, 60, 90, 120, 150, 180, 220, 270, 330, 400, 500].enumerated() {
                let path = c.root.appendingPathComponent("killed-\(n)").path
                let child = try ChildProcess.start(storectlPath, ["cluster", "join", path, "--postgres", c.url],
                                                   stdout: .null, stderr: .null)
                try await Task.sleep(for: .milliseconds(delay))
                child.kill()
                _ = try await child.finished()
                if FileManager.default.fileExists(atPath: path) {
                    let info = try await storectl(["info", path])
                    #expect(info.status == 0, "after a kill at \(delay) ms: \(info.stderr)")
                } else {
                    let again = try await storectl(["cluster", "join", path, "--postgres", c.url])
                    #expect(again.status == 0, "after a kill at \(delay) ms: \(again.stderr)")
                    let scratch = try FileManager.default.contentsOfDirectory(atPath: c.root.path)
                        .filter { $0.hasPrefix(".strata-cluster-") }
                    #expect(scratch.isEmpty, "after a kill at \(delay) ms and a join: \(scratch)")
                }
            }
            // A refused join (the path exists) removes what killed joins left too: a scratch
            // directory whose owner file nobody holds, not one whose maker is at work (here, this
            // process holds it, as a join of another PID namespace would).
            func scratch(_ tag: String) throws -> (dir: URL, owner: String) {
                let dir = c.root.appendingPathComponent(".strata-cluster-\(Int32.max - 7)-\(tag)")
                try FileManager.default.createDirectory(at: dir.appendingPathComponent("replica"),
                                                        withIntermediateDirectories: true)
                let owner = dir.appendingPathComponent(Cluster.scratchOwnerFile).path
                #expect(FileManager.default.createFile(atPath: owner, contents: nil))
                return (dir, owner)
            }
            let left = try scratch("deadbeef"), working = try scratch("at-work")
            let held = open(working.owner, O_RDONLY)
            defer { close(held) }
            #expect(flock(held, LOCK_EX) == 0)
            let refused = try await storectl(["cluster", "join", c.storePath(0), "--postgres", c.url])
            #expect(refused.status == 73, "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: left.dir.path))
            #expect(FileManager.default.fileExists(atPath: working.dir.path), "a scratch directory at work was removed")
        }
    }

    /// A join whose replica would take the name another replica goes by (here `cluster init
    /// --name` gave the first one the name a join at `second` takes by default) is refused with
    /// exit 73 and nothing made; `cluster forget` removes the row of a replica that is gone (one
    /// seen in the last 10 s only with --force), and the join then goes through. The two shared one row, and the status showed them as one.
    @Test func aJoinTakingAnotherReplicasNameIsRefusedUntilThatOneIsForgotten() async throws {
        let address = try await TestPostgres.shared().freshDatabase()
        let root = temporaryDirectory("strata-cluster-names")
        defer { try? FileManager.default.removeItem(at: root) }
        let c = (root: root, url: "\(address)")
        do {
            let first = c.root.appendingPathComponent("first").path
            let second = c.root.appendingPathComponent("second")
            let secondName = ClusterReplica.defaultName(forStoreAt: second)
            #expect(try spawn(storectlPath, ["init", first, "--schema", librarySchemaDirectory.path]).status == 0)
            let made = try await storectl(["cluster", "init", first, "--postgres", c.url, "--name", secondName])
            #expect(made.status == 0, "\(made.stderr)")
            let refused = try await storectl(["cluster", "join", second.path, "--postgres", c.url])
            #expect(refused.status == 73, "\(refused.stderr)")
            #expect(refused.stderr.contains("is in the cluster already")
                    && refused.stderr.contains("storectl cluster forget '\(secondName)'"), "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: second.path))
            let unknown = try await storectl(["cluster", "forget", "nobody", "--postgres", c.url])
            #expect(unknown.status == 66, "\(unknown.stderr)")
            // The first replica reported moments ago (its `cluster init`): it may be running, and
            // is left alone without --force.
            let recent = try await storectl(["cluster", "forget", secondName, "--postgres", c.url])
            #expect(recent.status == 75 && recent.stderr.contains("s ago (process ")
                    && recent.stderr.contains("--force"), "\(recent.stderr)")
            let forgot = try await storectl(["cluster", "forget", secondName, "--postgres", c.url, "--json", "--force"])
            #expect(forgot.status == 0 && forgot.stdout.contains(#""forgot":"#), "\(forgot.stderr)")
            let joined = try await storectl(["cluster", "join", second.path, "--postgres", c.url])
            #expect(joined.status == 0, "\(joined.stderr)")
        }
    }

    /// `cluster join` and `cluster reset` with `--shared-with-group` give the replica's file the
    /// shared mode (0660) whatever the umask, as `init` does: the snapshot's copy took the
    /// process's umask (0640 under 022, 0600 under 077), and the group could not open the store.
    @Test func aSharedReplicaFromASnapshotIsTheGroupsWhateverTheUmask() async throws {
        try await withCluster(replicas: 1) { c in
            let path = c.root.appendingPathComponent("shared").path
            func dataMode() -> mode_t {
                var st = stat()
                return stat(path + "/current/data.mdb", &st) == 0 ? st.st_mode & 0o7777 : 0
            }
            for command in ["join", "reset"] {
                let shell = ["-c", "umask 077 && exec \"$0\" \"$@\"", storectlPath, "cluster", command, path,
                             "--shared-with-group", "--postgres", c.url]
                let r = try await run("/bin/sh", shell)
                #expect(r.status == 0, "\(command): \(r.stderr)")
                #expect(dataMode() == 0o660, "\(command): data.mdb is \(String(dataMode(), radix: 8))")
            }
        }
    }

    /// `cluster join` at a path no replica name can hold (a replica is named `host:path`, and a
    /// name holds no control character): refused before anything is made (exit 64). The replica
    /// was made, then refused when attached, and left at the path, where every command failed.
    /// A join through a symbolic link to a directory makes the replica where the link leads.
    @Test func aJoinAtAPathNoNameCanHoldMakesNothingAndOneThroughALinkWorks() async throws {
        try await withCluster(replicas: 1) { c in
            let path = c.root.appendingPathComponent("tab\there").path
            let r = try await storectl(["cluster", "join", path, "--postgres", c.url])
            #expect(r.status == 64 && r.stderr.contains("join at another path") && !r.stderr.contains("\t"), "\(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: path))
            // Through a symbolic link to its directory, a join makes the replica where the link
            // leads and opens it (it made it, then failed to sync the link as a directory, exit 70,
            // and left it).
            let real = c.root.appendingPathComponent("real")
            try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
            let link = c.root.appendingPathComponent("link")
            try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
            let through = try await storectl(["cluster", "join", link.appendingPathComponent("rep").path, "--postgres", c.url])
            #expect(through.status == 0, "\(through.status) \(through.stderr)")
            #expect(try await storectl(["info", real.appendingPathComponent("rep").path]).status == 0)
        }
    }

    /// `storectl import --postgres` into a store of one machine: refused (exit 66) with nothing
    /// written, since the write would stay local (it imported locally and exited 0, so whoever
    /// forgot `cluster init` believed the records were in the cluster).
    @Test func anImportWithAClusterURLIntoAStoreOfOneMachineIsRefused() async throws {
        try await withCluster(replicas: 1) { c in
            let store = c.root.appendingPathComponent("alone").path
            #expect(try spawn(storectlPath, ["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
            let input = c.root.appendingPathComponent("genres.ndjson")
            try Data((#"{"entity":"Genre","name":"Folk"}"# + "\n").utf8).write(to: input)
            let r = try spawn(storectlPath, ["import", store, input.path, "--quiet", "--postgres", c.url])
            #expect(r.status == 66, "\(r.status) \(r.stderr)")
            #expect(r.stderr.contains("is not a replica of a cluster"), "\(r.stderr)")
            let count = try spawn(storectlPath, ["query", store, "--entity", "Genre", "--count"])
            #expect(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "\(count.stdout)")
            // Without the URL it imports, as a store of one machine does.
            #expect(try spawn(storectlPath, ["import", store, input.path, "--quiet"]).status == 0)
        }
    }

    /// `cluster init` refused by PostgreSQL for a reason a retry does not change (a table of the
    /// cluster's name in the way) exits 73 naming the database, and leaves a store of one machine;
    /// two inits racing on one database end with one cluster and a 73 ("already holds a
    /// cluster"). Both exited 75 with PostgreSQL's message alone, inviting a retry.
    @Test func anInitPostgresRefusesOrAnotherInitWinsIsNoTemporaryFailure() async throws {
        let root = temporaryDirectory("strata-cluster-init")
        defer { try? FileManager.default.removeItem(at: root) }
        func newStore(_ name: String) throws -> String {
            let path = root.appendingPathComponent(name).path
            #expect(try spawn(storectlPath, ["init", path, "--schema", librarySchemaDirectory.path]).status == 0)
            return path
        }
        func url(_ a: ClusterAddress) -> String { "postgres://\(a.user)@\(a.host):\(a.port)/\(a.database)" }
        let blocked = try await TestPostgres.shared().freshDatabase()
        let session = PostgresSession(address: blocked, logger: Logger(label: "test"))
        _ = try await offPool("test") { try session.run("CREATE TABLE strata_log (x int)") }
        session.close()
        let store = try newStore("blocked")
        let r = try await storectl(["cluster", "init", store, "--postgres", url(blocked)])
        #expect(r.status == 73 && r.stderr.contains("refused") && r.stderr.contains(blocked.database), "\(r.status) \(r.stderr)")
        let info = try await storectl(["cluster", "status", store, "--postgres", url(blocked)])
        #expect(info.status != 0)
        #expect(try Store.replicaCluster(at: URL(fileURLWithPath: store)) == nil, "the store stayed marked")

        for round in 0..<3 {
            let database = try await TestPostgres.shared().freshDatabase()
            let (a, b) = (try newStore("race-a-\(round)"), try newStore("race-b-\(round)"))
            async let first = storectl(["cluster", "init", a, "--postgres", url(database)])
            async let second = storectl(["cluster", "init", b, "--postgres", url(database)])
            let results = try await [first, second]
            #expect(results.map(\.status).sorted() == [0, 73], "\(results.map { "\($0.status) \($0.stderr)" })")
            #expect(results.allSatisfy { $0.status == 0 || $0.stderr.contains("already holds a cluster") })
        }
    }

    /// `storectl migrate --postgres` of a store of one machine: refused (exit 66) with the store
    /// left at its version, as an import is; it migrated the store locally and exited 0.
    @Test func aMigrationWithAClusterURLOfAStoreOfOneMachineIsRefused() async throws {
        try await withCluster(replicas: 1) { c in
            let v1 = c.root.appendingPathComponent("v1")
            try FileManager.default.createDirectory(at: v1, withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: librarySchemaDirectory.appendingPathComponent("v1.json"),
                                             to: v1.appendingPathComponent("v1.json"))
            let store = c.root.appendingPathComponent("alone").path
            #expect(try spawn(storectlPath, ["init", store, "--schema", v1.path]).status == 0)
            let r = try spawn(storectlPath, ["migrate", store, "--schema", librarySchemaDirectory.path, "--postgres", c.url])
            #expect(r.status == 66 && r.stderr.contains("would not be used"), "\(r.status) \(r.stderr)")
            // `--check` too (it ignored the URL, and answered for the store alone).
            let check = try spawn(storectlPath, ["migrate", store, "--schema", librarySchemaDirectory.path, "--check",
                                                 "--postgres", c.url])
            #expect(check.status == 66 && check.stderr.contains("would not be used"), "\(check.status) \(check.stderr)")
            let info = try spawn(storectlPath, ["info", store, "--json"])
            #expect(info.stdout.contains("\"schema\":{\"model\":\"library\",\"version\":1}"), "\(info.stdout)")
        }
    }
}

/// CLOCK_MONOTONIC, as the writer processes stamp their history.
func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}
