import Foundation
import LibraryModel
import Strata
import StrataCluster
import Synchronization

/// W12 (Strata only): a cluster of three replicas (three stores in this process, each with its
/// own connections) on a private PostgreSQL server started with `Tools/postgres` on loopback.
///
/// - `W12_visible_p50_ms`, `W12_visible_p99_ms`: a steady 1,000 transactions/s (one track each)
///   spread over the three replicas, paced (open loop); for each transaction, the time from its
///   save returning on the replica that made it to its commit event on each other replica.
/// - `W12_durable_16`: durable transactions/s of 16 savers spread over the three replicas (6, 5,
///   5), and `W12_durable_over_one_machine`: that over 16 savers on one plain store in the same
///   round (W3's measurement). Every save returns once PostgreSQL committed it (with
///   `synchronous_commit` on) and its replica applied it.
/// - `W12_durable_16_relaxed_replicas`, `W12_durable_relaxed_over_one_machine`: the same with
///   replicas opened with `durability = .relaxed` (their own LMDB commits unsynced; the saves
///   are as durable, in PostgreSQL, before they return).
/// - `W12_catchup_changes_per_s`: a replica that was closed while `clusterCatchUpTransactions`
///   transactions of 100 changes were saved elsewhere, reopened: changes applied per second.
/// - `W12_join_seconds`, `W12_join_mb`: a new replica made from the snapshot of a store of
///   `clusterJoinRecords` tracks (download, checks, open, catch-up) and the snapshot's size.
/// - `W12_replica_reads_ratio`: random point reads on that replica while it follows the cluster
///   (nothing to apply), over the same reads with the replica detached: W4 on a replica; and
///   `W12_replica_reads_under_load_ratio`, the same while another replica saves about 1,000
///   transactions/s that this one applies (on two cores, the applying and PostgreSQL take CPU
///   from the reader).
enum W12Cluster {
    static let keys = ["W12_visible_p50_ms", "W12_visible_p99_ms", "W12_durable_16", "W12_durable_over_one_machine",
                       "W12_durable_16_relaxed_replicas", "W12_durable_relaxed_over_one_machine",
                       "W12_catchup_changes_per_s", "W12_join_seconds", "W12_join_mb", "W12_replica_reads_ratio",
                       "W12_replica_reads_under_load_ratio"]

    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        await ctx.measureRounds("W12", keys: keys, &report) { engine in
            guard engine == .strata else { return [:] }
            let server = try PrivatePostgres(directory: try ctx.storeDirectory("W12", .strata, "postgres")
                .appendingPathComponent("server"))
            defer { server.stop() }
            var figures: [String: Double] = [:]
            try await steadyLoadAndSavers(ctx, server, &figures)
            try await catchUp(ctx, server, &figures)
            try await join(ctx, server, &figures)
            return figures
        }
    }

    /// A cluster of `count` replicas in `directory`: the first a new store, the others joined.
    static func makeCluster(_ ctx: WorkloadContext, _ address: ClusterAddress, in directory: URL,
                            count: Int = 3, first: Store? = nil,
                            durability: Durability = .durable) async throws -> [ClusterReplica] {
        try await makeCluster(address, in: directory, schema: ctx.setup.schema,
                              configuration: configuration(ctx, durability: durability), count: count, first: first)
    }

    /// ``makeCluster(_:_:in:count:first:durability:)`` with the stores' schema and configuration
    /// given; what was opened is closed again when a step fails.
    static func makeCluster(_ address: ClusterAddress, in directory: URL, schema: Schema,
                            configuration: StoreConfiguration, count: Int = 3,
                            first: Store? = nil) async throws -> [ClusterReplica] {
        let store = try first ?? Store.open(at: directory.appendingPathComponent("r0"), schema: schema,
                                            configuration: configuration)
        var replicas: [ClusterReplica] = []
        do {
            try await Cluster.initialize(store: store, address: address, name: "r0")
            replicas.append(try await ClusterReplica.open(store: store, address: address, name: "r0",
                                                          pollInterval: .milliseconds(100)))
            for i in 1..<count {
                let joined = try await Cluster.join(at: directory.appendingPathComponent("r\(i)"), address: address,
                                                    configuration: configuration)
                do {
                    replicas.append(try await ClusterReplica.open(store: joined, address: address, name: "r\(i)",
                                                                  pollInterval: .milliseconds(100)))
                } catch {
                    joined.close()
                    throw error
                }
            }
        } catch {
            // Closes the first replica's store with it; alone when it never became one.
            await close(replicas)
            if replicas.isEmpty { store.close() }
            throw error
        }
        return replicas
    }

    static func open(_ url: URL, _ ctx: WorkloadContext, durability: Durability = .durable) throws -> Store {
        try Store.open(at: url, schema: ctx.setup.schema, configuration: configuration(ctx, durability: durability))
    }

    static func configuration(_ ctx: WorkloadContext, durability: Durability) -> StoreConfiguration {
        var config = StoreConfiguration()
        config.initialMapSizeBytes = ctx.setup.mapSizeBytes
        config.maxMapSizeBytes = max(config.maxMapSizeBytes, ctx.setup.mapSizeBytes)
        config.durability = durability
        return config
    }

    /// Transactions/s of 16 savers spread over `replicas` (6, 5, 5), each saving one new track
    /// after another, numbered from `firstTrack`.
    /// Prints, through `progress`, where a group's time went (``groupBreakdown(_:before:after:)``).
    static func sixteenSavers(_ replicas: [ClusterReplica], perSaver: Int, firstTrack: Int, label: String,
                              progress: (String) -> Void) async throws -> Double {
        let before = replicas.map { $0.store.statistics }
        defer { progress(groupBreakdown(label, before: before, after: replicas.map { $0.store.statistics })) }
        let (seconds, _) = try await MonotonicClock.measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for s in 0..<16 {
                    let r = replicas[s % replicas.count]
                    group.addTask {
                        for k in 0..<perSaver {
                            _ = try await r.store.save {
                                $0.insert(TrackData.make(firstTrack + s * perSaver + k).track)
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        return Double(16 * perSaver) / seconds
    }

    /// Transactions/s of the same 16 savers on one machine's `store` (saver s saving tracks
    /// s·`perSaver` on); prints, through `progress`, its saves per commit and a commit's time.
    static func oneMachine(_ store: Store, perSaver: Int, progress: (String) -> Void) async throws -> Double {
        let (seconds, _) = try await MonotonicClock.measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for s in 0..<16 {
                    group.addTask {
                        for k in 0..<perSaver {
                            _ = try await store.save { $0.insert(TrackData.make(s * perSaver + k).track) }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        let counters = store.statistics
        if counters.lmdbCommits > 0 {
            progress(String(format: "  W12 one machine: %d saves in %d commits (%.1f a group); a group: %.2f ms",
                            counters.saves, counters.lmdbCommits, Double(counters.saves) / Double(counters.lmdbCommits),
                            Double(counters.commitNanoseconds) / Double(counters.lmdbCommits) / 1e6))
        }
        return Double(16 * perSaver) / seconds
    }

    /// Where a replica's group went, from the writers' counters over a case: saves per append,
    /// the share placed after other machines' entries, and a group's time waiting for
    /// PostgreSQL against the replica's own work (validating, applying, the local commit).
    static func groupBreakdown(_ label: String, before: [WriterStatistics], after: [WriterStatistics]) -> String {
        var saves = 0, appends = 0, moved = 0, lost = 0, commits = 0
        var waited: UInt64 = 0, total: UInt64 = 0
        for (b, a) in zip(before, after) {
            saves += a.saves - b.saves
            appends += a.sharedLogAppends - b.sharedLogAppends
            moved += a.sharedLogAppendsMoved - b.sharedLogAppendsMoved
            lost += a.sharedLogRacesLost - b.sharedLogRacesLost
            commits += a.lmdbCommits - b.lmdbCommits
            waited &+= a.sharedLogNanoseconds &- b.sharedLogNanoseconds
            total &+= a.commitNanoseconds &- b.commitNanoseconds
        }
        guard appends > 0 else { return "  W12 \(label): no appends" }
        func ms(_ nanos: UInt64) -> String { String(format: "%.2f ms", Double(nanos) / Double(appends) / 1e6) }
        return "  W12 \(label): \(saves) saves in \(appends) appends (\(String(format: "%.1f", Double(saves) / Double(appends))) "
            + "a group; \(moved * 100 / appends)% placed after other machines' entries, \(lost) races lost; "
            + "\(commits) local commits); a group: \(ms(waited)) waiting for PostgreSQL, "
            + "\(ms(total &- min(total, waited))) of the replica's own work"
    }

    static func close(_ replicas: [ClusterReplica]) async {
        for r in replicas {
            await r.close()
            r.store.close()
        }
    }

    static func steadyLoadAndSavers(_ ctx: WorkloadContext, _ server: PrivatePostgres,
                                    _ figures: inout [String: Double]) async throws {
        let dir = try ctx.storeDirectory("W12", .strata, "steady")
        defer { ctx.remove(dir) }
        let replicas = try await makeCluster(ctx, try server.database("steady"), in: dir)
        do {
            // Each replica's commit events, timed as they arrive.
            let seen = Seen()
            let watchers = replicas.enumerated().map { i, r in
                let stream = r.store.changes()
                return Task {
                    for await event in stream {
                        if case .committed(let tx) = event { seen.note(replica: i, tx: tx.id.rawValue, at: nanos()) }
                    }
                }
            }
            let perWriter = Int(ctx.sizes.clusterSteadySeconds * 1000 / 3)
            let start = nanos() + 50_000_000
            // Open loop: transaction k of writer w is started at start + (3k + w) ms.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (w, r) in replicas.enumerated() {
                    group.addTask {
                        try await withThrowingTaskGroup(of: Void.self) { saves in
                            for k in 0..<perWriter {
                                let due = start + UInt64(3 * k + w) * 1_000_000
                                let now = nanos()
                                if due > now { try await Task.sleep(for: .nanoseconds(Int(due - now))) }
                                let index = 10_000_000 + w * perWriter + k
                                saves.addTask {
                                    let tx = try await r.store.save(author: "w\(w)") {
                                        $0.insert(TrackData.make(index).track)
                                    }
                                    seen.acknowledge(replica: w, tx: tx.rawValue, at: nanos())
                                }
                            }
                            try await saves.waitForAll()
                        }
                    }
                }
                try await group.waitForAll()
            }
            // Until every replica has seen every transaction.
            let expected = perWriter * 3
            let deadline = nanos() + 30_000_000_000
            while seen.complete(replicas: 3) < expected, nanos() < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            for w in watchers { w.cancel() }
            let latencies = seen.latencies()
            guard latencies.count == expected * 2 else {
                throw ClusterBenchFailed("saw \(latencies.count) of \(expected * 2) commit events on other replicas")
            }
            figures["W12_visible_p50_ms"] = percentile(latencies, 0.50) / 1e6
            figures["W12_visible_p99_ms"] = percentile(latencies, 0.99) / 1e6

            // 16 durable savers over the three replicas.
            figures["W12_durable_16"] = try await sixteenSavers(replicas, perSaver: ctx.sizes.clusterSavesPerSaver,
                                                                firstTrack: 20_000_000, label: "synced replicas",
                                                                progress: ctx.progress)
        } catch {
            await close(replicas)
            throw error
        }
        await close(replicas)
        // The same over replicas whose own commits are not synced.
        let relaxedDir = try ctx.storeDirectory("W12", .strata, "relaxed")
        defer { ctx.remove(relaxedDir) }
        let relaxed = try await makeCluster(ctx, try server.database("relaxed"), in: relaxedDir, durability: .relaxed)
        do {
            figures["W12_durable_16_relaxed_replicas"] = try await sixteenSavers(
                relaxed, perSaver: ctx.sizes.clusterSavesPerSaver, firstTrack: 30_000_000, label: "relaxed replicas",
                progress: ctx.progress)
        } catch {
            await close(relaxed)
            throw error
        }
        await close(relaxed)
        try server.drop("steady")
        try server.drop("relaxed")
        // The same 16 savers on one machine's store, the same saves each.
        let alone = try ctx.storeDirectory("W12", .strata, "one-machine")
        defer { ctx.remove(alone) }
        let store = try open(alone.appendingPathComponent("store"), ctx)
        defer { store.close() }
        let oneMachine = try await oneMachine(store, perSaver: ctx.sizes.clusterSavesPerSaver, progress: ctx.progress)
        if let clustered = figures["W12_durable_16"] {
            figures["W12_durable_over_one_machine"] = clustered / oneMachine
        }
        if let clustered = figures["W12_durable_16_relaxed_replicas"] {
            figures["W12_durable_relaxed_over_one_machine"] = clustered / oneMachine
        }
    }

    static func catchUp(_ ctx: WorkloadContext, _ server: PrivatePostgres,
                        _ figures: inout [String: Double]) async throws {
        let dir = try ctx.storeDirectory("W12", .strata, "catch-up")
        defer { ctx.remove(dir) }
        let address = try server.database("catchup")
        let replicas = try await makeCluster(ctx, address, in: dir, count: 2)
        let behind = replicas[1]
        await behind.close()
        let transactions = ctx.sizes.clusterCatchUpTransactions
        do {
            for t in 0..<transactions {
                var changes = ChangeSet()
                for k in 0..<100 { changes.insert(TrackData.make(t * 100 + k).track) }
                _ = try await replicas[0].store.save(changes)
            }
        } catch {
            await close(replicas)
            throw error
        }
        let (seconds, again) = try await MonotonicClock.measure {
            try await ClusterReplica.open(store: behind.store, address: address, name: "r1 again")
        }
        let caughtUp = try again.store.lastTransactionID == replicas[0].store.lastTransactionID
        await again.close()
        await close(replicas)
        guard caughtUp else { throw ClusterBenchFailed("the replica did not catch up") }
        figures["W12_catchup_changes_per_s"] = Double(transactions * 100) / seconds
    }

    static func join(_ ctx: WorkloadContext, _ server: PrivatePostgres,
                     _ figures: inout [String: Double]) async throws {
        let dir = try ctx.storeDirectory("W12", .strata, "join")
        defer { ctx.remove(dir) }
        let address = try server.database("joining")
        let records = ctx.sizes.clusterJoinRecords
        let first = try open(dir.appendingPathComponent("r0"), ctx)
        var start = 0
        while start < records {
            let end = min(records, start + ctx.sizes.batchSize)
            var changes = ChangeSet()
            for t in TrackData.batch(start..<end) { changes.insert(t.track) }
            _ = try await first.save(changes)
            start = end
        }
        let origin = try await makeCluster(ctx, address, in: dir, count: 1, first: first)
        let (seconds, joined) = try await MonotonicClock.measure { () -> ClusterReplica in
            let store = try await Cluster.join(at: dir.appendingPathComponent("late"), address: address)
            return try await ClusterReplica.open(store: store, address: address, name: "late",
                                                 pollInterval: .milliseconds(100))
        }
        figures["W12_join_seconds"] = seconds
        let status = try await joined.status()
        figures["W12_join_mb"] = Double(status.snapshot?.bytes ?? 0) / 1_048_576
        // Point reads on the joined replica: following the cluster (idle, then under a steady load
        // from another replica), and detached.
        let indexes = SplitMix64.indexes(count: min(ctx.sizes.pointReads, 200_000), below: records, seed: 12)
        let idle = try timedReads(joined.store, indexes)
        let load = Task {
            var k = 0
            while !Task.isCancelled {
                _ = try? await origin[0].store.save { $0.insert(TrackData.make(30_000_000 + k).track) }
                k += 1
                try? await Task.sleep(for: .milliseconds(1))
            }
        }
        let following = try timedReads(joined.store, indexes)
        load.cancel()
        _ = await load.value
        await joined.close()
        let detached = try timedReads(joined.store, indexes)
        joined.store.close()
        await close(origin)
        figures["W12_replica_reads_ratio"] = detached / idle
        figures["W12_replica_reads_under_load_ratio"] = detached / following
    }

    static func timedReads(_ store: Store, _ indexes: [Int]) throws -> Double {
        let snapshot = try store.snapshot(label: "W12 reads")
        defer { snapshot.close() }
        return try MonotonicClock.measure {
            for i in indexes {
                guard try snapshot.object(Track.self, id: TrackData.id(i)) != nil else {
                    throw ClusterBenchFailed("track \(i) missing on the replica")
                }
            }
        }.seconds
    }

    static func percentile(_ sorted: [UInt64], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))])
    }
}

/// Acknowledgement and arrival times of the steady load's transactions.
final class Seen: Sendable {
    private struct State {
        var acknowledged: [UInt64: (replica: Int, at: UInt64)] = [:]
        var arrived: [UInt64: [Int: UInt64]] = [:]
    }
    private let state = Mutex(State())

    func acknowledge(replica: Int, tx: UInt64, at: UInt64) { state.withLock { $0.acknowledged[tx] = (replica, at) } }
    func note(replica: Int, tx: UInt64, at: UInt64) { state.withLock { $0.arrived[tx, default: [:]][replica] = at } }

    /// Transactions acknowledged and seen by every replica.
    func complete(replicas: Int) -> Int {
        state.withLock { s in s.acknowledged.keys.filter { (s.arrived[$0]?.count ?? 0) >= replicas }.count }
    }

    /// For each transaction and each replica that did not make it: arrival − acknowledgement
    /// (0 when it arrived first), sorted.
    func latencies() -> [UInt64] {
        state.withLock { s in
            var all: [UInt64] = []
            for (tx, ack) in s.acknowledged {
                for (replica, at) in s.arrived[tx] ?? [:] where replica != ack.replica {
                    all.append(at > ack.at ? at - ack.at : 0)
                }
            }
            return all.sorted()
        }
    }
}

/// A private PostgreSQL server (Tools/postgres) for one round of W12.
final class PrivatePostgres: Sendable {
    let directory: URL
    let port: Int
    let bin: String
    /// Its stop, registered for an interrupted run (``InterruptCleanup``).
    private let interruptKey: UUID

    init(directory: URL) throws {
        guard let root = Paths.repositoryRoot else { throw ClusterBenchFailed("repository root not found") }
        self.directory = directory
        let script = root.appendingPathComponent("Tools/postgres").path
        // Registered before it starts: an interrupt during the start stops it too (a stop of a
        // directory no server was started in does nothing).
        interruptKey = InterruptCleanup.onInterrupt { _ = try? runTool(script, ["stop", directory.path]) }
        let out = try runTool(script, ["start", directory.path])
        guard let port = URLComponents(string: out.trimmingCharacters(in: .whitespacesAndNewlines))?.port else {
            throw ClusterBenchFailed("Tools/postgres printed no URL")
        }
        self.port = port
        bin = try String(contentsOfFile: directory.appendingPathComponent("bin").path, encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A new database `name`.
    func database(_ name: String) throws -> ClusterAddress {
        _ = try runTool(bin + "/psql", ["-X", "-q", "-h", "127.0.0.1", "-p", "\(port)", "-U", "strata",
                                        "-d", "postgres", "-c", "CREATE DATABASE \(name)"])
        return ClusterAddress(host: "127.0.0.1", port: port, user: "strata", database: name)
    }

    /// Drops database `name` (its replicas closed), so that PostgreSQL's background work on its
    /// tables (autovacuum of the appended log) does not run beside the next measurements.
    /// `WITH (FORCE)` (PostgreSQL 13 or later; `Tools/postgres` installs Debian's 15) ends the
    /// sessions of closed replicas whose backends have not yet gone.
    func drop(_ name: String) throws {
        _ = try runTool(bin + "/psql", ["-X", "-q", "-h", "127.0.0.1", "-p", "\(port)", "-U", "strata",
                                        "-d", "postgres", "-c", "DROP DATABASE \(name) WITH (FORCE)"])
    }

    func stop() {
        InterruptCleanup.remove(interruptKey)
        if let root = Paths.repositoryRoot {
            _ = try? runTool(root.appendingPathComponent("Tools/postgres").path, ["stop", directory.path])
        }
    }
}

/// Runs a tool with posix_spawn and waitpid (the server it may start outlives it), returning its
/// standard output; throws on a non-zero exit.
func runTool(_ executable: String, _ arguments: [String]) throws -> String {
    let out = FileManager.default.temporaryDirectory.appendingPathComponent("strata-bench-\(UUID().uuidString)").path
    defer { unlink(out) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    defer { for a in argv { free(a) } }
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, executable, &actions, nil, argv, environ)
    guard rc == 0 else { throw ClusterBenchFailed("cannot run \(executable): \(String(cString: strerror(rc)))") }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    guard status == 0 else { throw ClusterBenchFailed("\(executable) \(arguments.first ?? "") failed (\(status))") }
    return (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
}

func nanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

struct ClusterBenchFailed: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
