import ArgumentParser
import Foundation
import Synchronization
import LibraryModel
import Strata

/// Diagnostic measurements behind BENCHMARKS.md's explanations (not workloads, no targets):
/// the pieces of one workload's time that the table does not show.
///
/// - `group-commit`: saves per LMDB commit and the writer's commit and gather time, for 1, 4, 16
///   and 64 concurrent savers of one-track durable saves, with and without gathering;
///   `--savers 1 --records-per-save 16` commits what a perfect 16-save group writes, as one save.
/// - `child`: 10k tracks saved directly, then through a child context (its inserts and its
///   commit timed apart), then applied to a child as one change set.
/// - `child-inserts`: `--count` inserts into a child context of an empty store, then discarded,
///   21 times: the child's own cost per insert (W7's numerator less the commit), its minimum and
///   median, steadier than `child` for an A/B of the child's insert path (nothing is committed, so
///   every repetition sees the same empty store).
/// - `verify`: W8's store (`--count` tracks inserted, then each updated once) verified five
///   times, in memory and by the on-disk rebuild, with the peak RSS after each.
/// - `compaction`: W9's store (`--count` tracks inserted, then each updated once) compacted
///   four times (the first squashes the log, the later ones copy the state alone), each
///   timed with its copy phase apart.
/// - `small-saves`: W2's relaxed saves (`--count` one-track `saveAndWait` calls), three runs,
///   with the time per save and its percentiles (a loop to profile with `perf record` or
///   `strace -c`), then a fourth run with the background flush put off past the run.
/// - `migration`: W10's store (`--count` tracks saved in library v1, 10k per transaction)
///   migrated to v2, with each phase's time and the steps' estimated times.
/// - `fsync-placement`: what `fdatasync` costs after writing 1, 13 or 60 pages at random places
///   or side by side (`--count` rounds each; see `ProbePlacement.swift`).
/// - `page-placement`: the equal-work floor's durable one-track commits (`--count`) with LMDB's
///   page reuse as it is, and with a read transaction held to make every commit's pages new
///   pages side by side at the end of the file.
/// - `cluster-savers`: W12's 16 durable savers (`--count` saves in all) over a cluster's three
///   replicas and then on one of them alone, over synced and over relaxed replicas, on a private
///   PostgreSQL, and on one machine's store: transactions/s and where a group's time went (see
///   `ProbeCluster.swift`).
struct ProbeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "probe", abstract: "Diagnostic breakdowns behind BENCHMARKS.md (group-commit, child, child-inserts, verify, compaction, small-saves, migration, fsync-placement, page-placement, cluster-savers).")

    enum Kind: String, ExpressibleByArgument, CaseIterable { case groupCommit = "group-commit", child, childInserts = "child-inserts", verify, compaction, smallSaves = "small-saves", migration
        case fsyncPlacement = "fsync-placement", pagePlacement = "page-placement", clusterSavers = "cluster-savers" }

    @Argument(help: "What to measure: group-commit, child, child-inserts, verify, compaction, small-saves, migration, fsync-placement, page-placement or cluster-savers.") var kind: Kind
    @Option(help: "Empty scratch directory (removed afterwards).") var dir: String
    @Option(help: "Schema directory (Schemas/library).") var schema: String
    @Option(help: "Transactions (group-commit), inserts (child, child-inserts), tracks (verify, compaction, migration), saves (small-saves), rounds (fsync-placement), commits (page-placement) or saves in all (cluster-savers).") var count: Int = 2_048
    @Option(help: "group-commit only: just this number of concurrent savers (with gathering), e.g. to profile it.") var savers: Int?
    @Option(help: "group-commit only: tracks inserted by each save (1; 16 with --savers 1 is what a perfect 16-save group writes).") var recordsPerSave: Int = 1

    func validate() throws {
        guard count > 0 else { throw ValidationError("--count must be positive") }
        if let savers, savers <= 0 || kind != .groupCommit { throw ValidationError("--savers is a positive number, for group-commit") }
        if recordsPerSave <= 0 || (recordsPerSave != 1 && kind != .groupCommit) { throw ValidationError("--records-per-save is a positive number, for group-commit") }
    }

    func run() async throws {
        let schema = try Schema.load(directory: URL(fileURLWithPath: self.schema))
        let root = URL(fileURLWithPath: dir)
        defer { try? FileManager.default.removeItem(at: root) }
        switch kind {
        case .groupCommit: try await groupCommit(schema, root)
        case .child: try await child(schema, root)
        case .childInserts: try childInserts(schema, root)
        case .verify: try await verify(schema, root)
        case .compaction: try await compaction(schema, root)
        case .smallSaves: try smallSaves(schema, root)
        case .migration: try await migration(URL(fileURLWithPath: self.schema), root)
        case .fsyncPlacement: try fsyncPlacement(root)
        case .pagePlacement: try pagePlacement(schema, root)
        case .clusterSavers: try await clusterSavers(schema, root)
        }
    }

    private func groupCommit(_ schema: Schema, _ root: URL) async throws {
        for savers in self.savers.map({ [$0] }) ?? [1, 4, 16, 64] {
            for gather in self.savers == nil ? [0, 1_000] : [1_000] {
                var config = StoreConfiguration()
                config.groupCommitGatherMicroseconds = gather
                let dir = root.appendingPathComponent("gc-\(savers)-\(gather)")
                let store = try Store.open(at: dir, schema: schema, configuration: config)
                let perSaver = max(1, count / savers)
                let per = recordsPerSave
                // Adjacent ids for records saved at the same moment, as in W3 (see W3GroupCommit).
                let work = (0..<savers).map { s in (0..<perSaver).map { TrackData.make($0 * savers + s).track } }
                let seconds = try await MonotonicClock.measure {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for tracks in work {
                            group.addTask {
                                for start in stride(from: 0, to: tracks.count, by: per) {
                                    _ = try await store.save { c in for t in tracks[start..<min(start + per, tracks.count)] { c.insert(t) } }
                                }
                            }
                        }
                        try await group.waitForAll()
                    }
                }.seconds
                let st = store.statistics
                print(String(format: "savers %2d%@ gather %4d µs: %7.0f tx/s, %.1f saves per commit, commit %.3f ms each, gather %.3f ms each",
                             savers, per == 1 ? "" : " (\(per) tracks per save, tx/s counts tracks)", gather, Double(savers * perSaver) / seconds, Double(st.transactions) / Double(st.lmdbCommits),
                             Double(st.commitNanoseconds) / Double(st.lmdbCommits) / 1e6, Double(st.gatherNanoseconds) / Double(st.lmdbCommits) / 1e6))
                store.close()
                try? FileManager.default.removeItem(at: dir)
            }
        }
    }

    private func child(_ schema: Schema, _ root: URL) async throws {
        let store = try Store.open(at: root.appendingPathComponent("child"), schema: schema)
        defer { store.close() }
        for round in 0..<3 {
            let base = round * 3 * count
            let direct = try await MonotonicClock.measure {
                var c = ChangeSet()
                for i in base..<base + count { c.insert(TrackData.make(i).track) }
                _ = try await store.save(c)
            }.seconds
            let child = store.mainContext.newChild(label: "probe")
            let inserts = try MonotonicClock.measure {
                for i in base + count..<base + 2 * count { try child.insert(TrackData.make(i).track) }
            }.seconds
            let commit = try await MonotonicClock.measure { try await child.commit() }.seconds
            let whole = store.mainContext.newChild(label: "probe-one-apply")
            let oneApply = try MonotonicClock.measure {
                try whole.change { c in for i in base + 2 * count..<base + 3 * count { c.insert(TrackData.make(i).track) } }
            }.seconds
            whole.discard()
            // Making the tracks (strings, a Track) is inside every figure above, as in W7.
            var sink = 0
            let making = MonotonicClock.measure {
                for i in base + count..<base + 2 * count { sink &+= TrackData.make(i).track.title.utf8.count }
            }.seconds
            print(String(format: "direct save %.1f ms; child: %d inserts %.1f ms + commit %.1f ms = ratio %.2f; the same inserts as one change set %.1f ms; making the tracks alone %.1f ms (%d)",
                         direct * 1e3, count, inserts * 1e3, commit * 1e3, (inserts + commit) / direct, oneApply * 1e3, making * 1e3, sink % 10))
        }
    }

    private func childInserts(_ schema: Schema, _ root: URL) throws {
        let store = try Store.open(at: root.appendingPathComponent("child-inserts"), schema: schema)
        defer { store.close() }
        let repetitions = 21
        var perInsert: [Double] = []
        for _ in 0..<repetitions {
            let child = store.mainContext.newChild(label: "probe-inserts")
            let seconds = try MonotonicClock.measure {
                for i in 0..<count { try child.insert(TrackData.make(i).track) }
            }.seconds
            child.discard()
            perInsert.append(seconds / Double(count))
            // The discarded changes are freed on a background queue: let that finish, so the
            // next repetition's inserts do not share the allocator with it.
            usleep(200_000)
        }
        perInsert.sort()
        var sink = 0
        let making = MonotonicClock.measure { for i in 0..<count { sink &+= TrackData.make(i).track.title.utf8.count } }.seconds
        print(String(format: "child inserts: min %.0f ns, median %.0f ns, max %.0f ns per insert (%d inserts, %d times); making a track alone %.0f ns (%d)",
                     perInsert[0] * 1e9, perInsert[repetitions / 2] * 1e9, perInsert[repetitions - 1] * 1e9, count, repetitions,
                     making / Double(count) * 1e9, sink % 10))
    }

    /// A relaxed store of `count` tracks, each inserted then updated once (W8's and W9's).
    private func insertedAndUpdated(_ schema: Schema, _ dir: URL) async throws -> Store {
        var config = StoreConfiguration()
        config.durability = .relaxed
        config.initialMapSizeBytes = 8 << 30
        let store = try Store.open(at: dir, schema: schema, configuration: config)
        var start = 0
        while start < count {
            let end = min(count, start + 10_000)
            _ = try await store.save { c in for i in start..<end { c.insert(TrackData.make(i).track) } }
            start = end
        }
        start = 0
        while start < count {
            let end = min(count, start + 10_000)
            _ = try await store.save { c in for i in start..<end { c.set(Track.playCount, of: TrackData.id(i), to: i) } }
            start = end
        }
        return store
    }

    private func verify(_ schema: Schema, _ root: URL) async throws {
        let store = try await insertedAndUpdated(schema, root.appendingPathComponent("verify"))
        defer { store.close() }
        for rebuild in [false, false, false, false, false, true] {
            let heapBefore = ProcessMemory.residentAnonymousBytes() ?? 0
            let sampler = MemorySampler()
            let report = try store.verify(rebuild: rebuild)
            let heapPeak = sampler.stop()
            print(String(format: "verify %@: %.3f s, %.0f changes/s, %d entries, ok %@; heap %d MB before, %d MB at the peak",
                         report.method.rawValue, report.seconds, Double(report.changes) / report.seconds, report.entriesCompared,
                         report.ok ? "yes" : "NO", heapBefore >> 20, heapPeak >> 20))
        }
    }

    private func compaction(_ schema: Schema, _ root: URL) async throws {
        let store = try await insertedAndUpdated(schema, root.appendingPathComponent("compaction"))
        defer { store.close() }
        FileHandle.standardError.write(Data("loaded; compacting in 2 s (pid \(getpid()), for perf record -p)\n".utf8))
        try await Task.sleep(for: .seconds(2))
        for _ in 0..<4 {
            sync()
            var before = rusage()
            getrusage(RUSAGE_SELF.rawValue, &before)
            let started = MonotonicClock.nanoseconds()
            let catchUpAt = Mutex<UInt64?>(nil)
            let r = try await store.compact { p in
                if p.phase == .catchingUp { catchUpAt.withLock { $0 = MonotonicClock.nanoseconds() } }
            }
            let copy = Double((catchUpAt.withLock { $0 } ?? started) - started) / 1e9
            var after = rusage()
            getrusage(RUSAGE_SELF.rawValue, &after)
            func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
            let user = seconds(after.ru_utime) - seconds(before.ru_utime), system = seconds(after.ru_stime) - seconds(before.ru_stime)
            print(String(format: "compaction: %.3f s (copy %.3f s; process CPU %.3f s user + %.3f s system), %d MB before, %d MB after, %d log entries kept, %.0f MB/s of the store before",
                         r.seconds, copy, user, system, r.bytesBefore >> 20, r.bytesAfter >> 20, r.logEntriesAfter,
                         Double(r.bytesBefore) / 1_048_576 / r.seconds))
        }
    }

    /// Three runs with the default background flush (every `relaxedSyncIntervalMs` under load),
    /// then one with the flush put off past the run, to tell the flush's share of the slow saves.
    private func smallSaves(_ schema: Schema, _ root: URL) throws {
        for run in 0..<4 {
            var config = StoreConfiguration()
            config.durability = .relaxed
            config.initialMapSizeBytes = 8 << 30
            let flushes = run < 3
            if !flushes { config.relaxedSyncIntervalMs = 3_600_000 }
            let dir = root.appendingPathComponent("small-\(run)")
            let store = try Store.open(at: dir, schema: schema, configuration: config)
            let tracks = (0..<count).map { TrackData.make($0).track }
            var each: [UInt64] = []
            each.reserveCapacity(count)
            let seconds = try MonotonicClock.measure {
                for t in tracks {
                    let started = MonotonicClock.nanoseconds()
                    _ = try store.saveAndWait { $0.insert(t) }
                    each.append(MonotonicClock.nanoseconds() &- started)
                }
            }.seconds
            each.sort()
            func µs(_ q: Double) -> Double { Double(each[min(each.count - 1, Int(Double(each.count) * q))]) / 1_000 }
            let over1ms = each.reduce(0) { $0 + ($1 > 1_000_000 ? 1 : 0) }
            print(String(format: "%d relaxed saves%@: %.1f µs each (%.0f tx/s); p50 %.1f µs, p99 %.1f µs, p99.9 %.1f µs, max %.1f µs, %d over 1 ms",
                         count, flushes ? "" : " (no flush during the run)", seconds / Double(count) * 1e6, Double(count) / seconds,
                         µs(0.5), µs(0.99), µs(0.999), Double(each.last ?? 0) / 1_000, over1ms))
            store.close()
            try? FileManager.default.removeItem(at: dir)
        }
    }

    private func migration(_ schemaDirectory: URL, _ root: URL) async throws {
        let schemas = try Schema.loadAll(directory: schemaDirectory)
        guard schemas.count >= 2 else { throw ValidationError("migration needs library v1 and v2") }
        let dir = root.appendingPathComponent("migration")
        try await W10Migration.makeV1Store(at: dir, schema: schemas[0], tracks: count, batch: 10_000, mapSizeBytes: 8 << 30)
        sync()
        FileHandle.standardError.write(Data("loaded; migrating in 2 s (pid \(getpid()), for perf record -p)\n".utf8))
        try await Task.sleep(for: .seconds(2))
        let phases = Mutex<[(String, UInt64)]>([])
        let r = try await Store.migrate(at: dir, schemas: schemas, registry: libraryMigrations) { p in
            phases.withLock { list in if list.last?.0 != p.phase.rawValue { list.append((p.phase.rawValue, MonotonicClock.nanoseconds())) } }
        }
        let ended = MonotonicClock.nanoseconds()
        let marks = phases.withLock { $0 }
        for (i, (name, at)) in marks.enumerated() {
            let next = i + 1 < marks.count ? marks[i + 1].1 : ended
            print(String(format: "  %@: %.3f s", name, Double(next - at) / 1e9))
        }
        for s in r.stepSeconds { print(String(format: "  step %@: %.3f s (estimate)", s.step, s.seconds)) }
        print(String(format: "migration of %d objects: %.3f s (%.0f objects/s), %d transactions upcast, %d MB before, %d MB after",
                     r.objects, r.seconds, Double(r.objects) / r.seconds, r.transactionsUpcast, r.bytesBefore >> 20, r.bytesAfter >> 20))
    }
}
