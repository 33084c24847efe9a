import Foundation
import LibraryModel
import Strata

/// `parent`: the kill -9 loop. Each iteration starts a child (`save`, or every `--import-every`th
/// time `import`), kills it with SIGKILL after a seeded random delay (up to `--max-delay-ms`, or
/// `--import-max-delay-ms` for imports), reopens the store and checks:
/// - every acknowledged transaction id is ≤ the head and is the child's transaction in the log;
/// - no transaction is partial (acknowledged or not), and the state invariant holds;
/// - `verify()` is ok; the store accepts a new save.
/// Recovery time is open + first read. Exit status 1 when there is any violation.
/// `--during compact|migrate` runs the loop during compaction or migration instead
/// (``MaintenanceKillLoop``).
enum KillLoop {
    struct Totals {
        var iterations = 0, saveIterations = 0, importIterations = 0
        var acknowledged = 0, importAcknowledgedBatches = 0
        var lost = 0, partial = 0, violations: [String] = []
        var committedUnacknowledged = 0
        var killedBeforeReady = 0, childExitedByItself = 0, importsCompleted = 0
        var transactions = 0, lmdbCommits = 0
        var recoveryMs: [Double] = []
        var verifyRuns = 0
        var maxHead: UInt64 = 0
    }

    static func run(_ o: Options) throws {
        if let operation = o.string("during") { return try MaintenanceKillLoop.run(o, operation: operation) }
        let iterations = o.int("iterations", default: 200)
        let seed = o.uint64("seed", default: 9)
        let importEvery = o.int("import-every", default: 5)
        let workers = o.int("workers", default: 4)
        // The save children's durability: `relaxed` checks that a killed process (not an OS
        // crash) loses no acknowledged save when commits skip fsync and flush in the background.
        let durability = o.string("durability") ?? "durable"
        guard durability == "durable" || durability == "relaxed" else {
            fail("--durability is durable or relaxed, not \(durability)", code: 2)
        }
        let maxDelayMs = o.int("max-delay-ms", default: 800)
        let rotateEvery = o.int("rotate-every", default: 100)
        let workdir = o.string("workdir") ?? FileManager.default.temporaryDirectory.appendingPathComponent("strata-kill-loop-\(getpid())").path
        let keep = o.string("keep") != nil
        let fm = FileManager.default
        try? fm.removeItem(atPath: workdir)
        try fm.createDirectory(atPath: workdir, withIntermediateDirectories: true)
        let schema = librarySchema()
        var rng = SplitMix64(seed: seed)
        var t = Totals()
        let started = Date()

        let importInput = workdir + "/import.ndjson"
        let importRecords = o.int("import-records", default: 12000)
        // An import of 12,000 records takes about a second here: twice the save delay lets some
        // runs finish (so convergence is checked) and kills most of them part-way.
        let importMaxDelayMs = o.int("import-max-delay-ms", default: 2 * maxDelayMs)
        var genRng = SplitMix64(seed: seed &+ 1)
        try GenerateMode.write(path: importInput, records: importRecords, rng: &genRng)
        let expected = GenerateMode.counts(records: importRecords)
        var saveStore = workdir + "/save-store-0"
        let importStore = workdir + "/import-store"

        for i in 0..<iterations {
            if rotateEvery > 0 && i > 0 && i % rotateEvery == 0 {
                try? fm.removeItem(atPath: saveStore)
                saveStore = workdir + "/save-store-\(i)"
            }
            let isImport = importEvery > 0 && i % importEvery == importEvery - 1
            let store = isImport ? importStore : saveStore
            let out = workdir + "/child.out", err = workdir + "/child.err"
            let args = isImport
                ? ["import", "--store", store, "--input", importInput, "--batch", "200", "--import-id", "kill-loop"]
                : ["save", "--store", store, "--workers", String(workers), "--run", "i\(i)", "--seed", String(rng.next() >> 1), "--durability", durability]
            let headBefore = try head(store, schema: schema)
            let delay = Double(10 + Int(rng.next() % UInt64(max(1, isImport ? importMaxDelayMs : maxDelayMs))))
            let child = Child.start(args, stdoutPath: out, stderrPath: err)
            let deadline = nowMs() + delay
            var status: (exited: Bool, code: Int32)?
            while nowMs() < deadline {
                if let s = child.poll() { status = s; break }
                sleepMs(min(5, deadline - nowMs()))
            }
            if status == nil {
                child.kill9()
                status = child.wait()
            }
            let lines = readLines(out)
            t.iterations += 1
            if !lines.contains(where: { $0.hasPrefix("READY") }) { t.killedBeforeReady += 1 }
            var problems: [String] = []
            let completedImport = isImport && lines.contains { $0.hasPrefix("DONE") }
            if let status, status.exited {
                t.childExitedByItself += 1
                if !(isImport && status.code == 0) {
                    let stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
                    problems.append("child exited with \(status.code) before being killed: \(stderr.suffix(500))")
                }
            }
            if let stats = lines.last(where: { $0.hasPrefix("STATS ") })?.split(separator: " "), stats.count == 3 {
                t.transactions += Int(stats[1]) ?? 0
                t.lmdbCommits += Int(stats[2]) ?? 0
            }

            // Recovery: open + first read.
            let t0 = nowMs()
            let reopened: Store
            do {
                reopened = try Store.open(at: URL(fileURLWithPath: store), schema: schema)
                _ = try reopened.mainContext.count(Genre.self)
            } catch {
                t.violations.append("iteration \(i): the store did not reopen: \(error)")
                continue
            }
            t.recoveryMs.append(nowMs() - t0)
            let headAfter = (try? reopened.lastTransactionID.rawValue) ?? 0
            t.maxHead = max(t.maxHead, headAfter)

            if isImport {
                t.importIterations += 1
                problems += checkImport(reopened, lines: lines, completed: completedImport, expected: expected, totals: &t)
            } else {
                t.saveIterations += 1
                let acks = lines.compactMap(Ack.init)
                t.acknowledged += acks.count
                let a = Checker.acknowledged(reopened, acks, head: headAfter)
                problems += a.violations
                t.lost += a.lost
                t.partial += a.partial
                let w = Checker.logWholeness(reopened, after: headBefore)
                problems += w.violations
                t.committedUnacknowledged += max(0, w.entries - acks.count)
                if ProcessInfo.processInfo.environment["KILL_LOOP_DEBUG"] != nil {
                    note("iteration \(i): head \(headBefore) → \(headAfter), \(acks.count) acks, \(w.entries) entries logged")
                }
                problems += Checker.groupsInvariant(reopened)
            }
            problems += Checker.verify(reopened)
            t.verifyRuns += 1
            problems += probe(reopened, i: i)
            reopened.close()
            if completedImport {
                t.importsCompleted += 1
                try? fm.removeItem(atPath: importStore)
            }
            for p in problems { t.violations.append("iteration \(i) (\(isImport ? "import" : "save")): \(p)") }
            if (i + 1) % 10 == 0 || !problems.isEmpty {
                note("kill-loop: \(i + 1)/\(iterations) iterations, \(t.acknowledged) acknowledged saves, \(t.violations.count) violation(s)")
            }
        }
        report(t, seed: seed, seconds: Date().timeIntervalSince(started), json: o.string("json"))
        if !keep { try? fm.removeItem(atPath: workdir) }
        exit(t.violations.isEmpty ? 0 : 1)
    }

    static func head(_ path: String, schema: Schema) throws -> UInt64 {
        guard FileManager.default.fileExists(atPath: path) else { return 0 }
        let s = try Store.open(at: URL(fileURLWithPath: path), schema: schema)
        defer { s.close() }
        return try s.lastTransactionID.rawValue
    }

    static func checkImport(_ store: Store, lines: [String], completed: Bool, expected: GenerateMode.Counts, totals t: inout Totals) -> [String] {
        var problems: [String] = []
        let acked = lines.compactMap { l -> Int? in
            let f = l.split(separator: " ")
            return f.count == 2 && f[0] == "ACK-IMPORT" ? Int(f[1]) : nil
        }
        t.importAcknowledgedBatches += acked.count
        do {
            let info = try store.info()
            let objects = info.entities.values.reduce(0, +)
            if let last = acked.last, objects < last {
                problems.append("import acknowledged \(last) records written, the store holds \(objects) objects")
                t.lost += 1
            }
            if completed {
                let want = ["Genre": expected.genres, "Artist": expected.artists, "Album": expected.albums, "Track": expected.tracks, "Playlist": 0]
                if info.entities != want { problems.append("completed import: counts \(info.entities), expected \(want)") }
                let orphans = try store.mainContext.count(Track.self, where: Track.album == nil)
                if orphans != 0 { problems.append("completed import: \(orphans) tracks without their album") }
            }
            // Every import transaction decodes and is tagged.
            try store.forEachTransaction(author: "import") { e in
                if e.metadata["importID"] != "kill-loop" { problems.append("import transaction \(e.transactionID) lacks its import id") }
                return true
            }
        } catch {
            problems.append("reading the import store: \(error)")
        }
        return problems
    }

    /// The store accepts a new save (and a delete, so the import counts stay exact).
    static func probe(_ store: Store, i: Int) -> [String] {
        do {
            let g = Genre(name: "probe \(i) \(UUID().uuidString.prefix(8))")
            let a = try blocking { try await store.save(author: "probe") { $0.insert(g) } }
            let b = try blocking { try await store.save(author: "probe") { $0.delete(g.id) } }
            guard b.rawValue == a.rawValue + 1 else { return ["probe saves got transactions \(a) and \(b)"] }
            return []
        } catch {
            return ["the store refused a new save after recovery: \(error)"]
        }
    }

    static func report(_ t: Totals, seed: UInt64, seconds: Double, json: String?) {
        let p50 = percentile(t.recoveryMs, 50), p99 = percentile(t.recoveryMs, 99), maxMs = t.recoveryMs.max() ?? 0
        let ratio = t.lmdbCommits > 0 ? Double(t.transactions) / Double(t.lmdbCommits) : 0
        print("""
        kill -9 loop: \(t.iterations) iterations (\(t.saveIterations) save, \(t.importIterations) import), seed \(seed), \(String(format: "%.0f", seconds)) s
          acknowledged saves:              \(t.acknowledged)
          acknowledged import commits:     \(t.importAcknowledgedBatches) (imports run to completion: \(t.importsCompleted))
          committed but not acknowledged:  \(t.committedUnacknowledged) (killed between commit and ack: allowed)
          lost acknowledged transactions:  \(t.lost)
          partial transactions:            \(t.partial)
          violations:                      \(t.violations.count)
          verify() runs:                   \(t.verifyRuns), highest head \(t.maxHead)
          killed before the store opened:  \(t.killedBeforeReady)
          group commit (children's stats): \(t.transactions) transactions in \(t.lmdbCommits) LMDB commits (\(String(format: "%.2f", ratio)) per commit)
          recovery (open + first read):    p50 \(String(format: "%.2f", p50)) ms, p99 \(String(format: "%.2f", p99)) ms, max \(String(format: "%.2f", maxMs)) ms
        """)
        for v in t.violations.prefix(20) { print("  VIOLATION \(v)") }
        guard let json else { return }
        let doc: [String: Any] = [
            "iterations": t.iterations, "saveIterations": t.saveIterations, "importIterations": t.importIterations, "seed": seed,
            "acknowledged": t.acknowledged, "importAcknowledgedBatches": t.importAcknowledgedBatches, "importsCompleted": t.importsCompleted,
            "committedUnacknowledged": t.committedUnacknowledged, "lost": t.lost, "partial": t.partial, "violations": t.violations,
            "killedBeforeReady": t.killedBeforeReady, "transactions": t.transactions, "lmdbCommits": t.lmdbCommits,
            "recoveryP50Ms": p50, "recoveryP99Ms": p99, "recoveryMaxMs": maxMs, "verifyRuns": t.verifyRuns, "seconds": seconds,
        ]
        if let data = try? JSONSerialization.data(withJSONObject: doc, options: [.prettyPrinted, .sortedKeys]) {
            try? data.write(to: URL(fileURLWithPath: json))
        }
    }
}
