import Foundation
import Strata

/// `parent --during compact|migrate|import`: the kill -9 loop during compaction, migration or a
/// bulk import (afterwards the store is the old or the new one, never a mix).
///
/// Setup: a template store (an import and a history of small transactions) is built once per
/// variant; compaction runs with two horizons (the head: all history squashed; half the head),
/// migration (library v1 → v2 with the model's custom step) from two templates (plain; already
/// compacted at half its history, so the migration starts from a squashed base), a bulk import
/// (`Importer` with `mode = .bulk`) of an exported library, with its ids, into a store holding the
/// first part of it and a history of small transactions. Each variant
/// is run to completion `--calibration-runs` times on fresh copies: that gives the time line of
/// the operation (when the catch-up and switch start, when it is done) and the fingerprint of
/// the new store (for compaction it must equal the one computed from the old store; for
/// migration and import all runs must agree, and a migration's result is checked against the old
/// store).
///
/// Each iteration copies a template, starts the child, kills it with SIGKILL at a seeded moment
/// (70 %: anywhere in [0, 1.1 × the operation's time]; 30 %: once the child reports the start
/// of the catch-up, after up to the time the uninterrupted run took from there to the return,
/// + 20 ms: catch-up, sync, the `current` switch, the return), then reopens the store (timed:
/// open + first read) and checks that it is exactly the old store (same fingerprint, old
/// generation) or exactly the new one (new fingerprint, another generation), that only the live
/// generation is left in the directory after the open, `verify()`, and that a new save is
/// accepted. Exit status 1 on any violation.
enum MaintenanceKillLoop {
    struct Variant {
        let name: String
        let template: String
        let oldGeneration: String
        let old: Fingerprint
        var new = Fingerprint()
        let childArgs: [String]
        /// The child's line that starts the catch-up, sync and switch (the aimed kills' mark).
        var switchLine = "PHASE catchingUp"
        /// Median milliseconds from spawn: the operation started, the catch-up began, it returned.
        var readyMs = 0.0, switchMs = 0.0, doneMs = 0.0
        var iterations = 0, oldOutcomes = 0, newOutcomes = 0
    }

    struct Totals {
        var iterations = 0, old = 0, new = 0, completedBeforeKill = 0, violations: [String] = []
        var byPhase: [String: (old: Int, new: Int)] = [:]
        var aimedAtSwitch = 0
        /// Kills of a child held in its first progress event (`--hold-first-ms`).
        var heldKills = 0
        var unfinishedGenerations = 0, oldGenerationsLeft = 0, temporaryLinks = 0
        var scratchLeft = 0, scratchBytes = 0
        var recoveryMs: [Double] = []
        var verifyRuns = 0, probes = 0
    }

    static func run(_ o: Options, operation: String) throws {
        guard ["compact", "migrate", "import"].contains(operation) else {
            fail("--during must be compact, migrate or import, got '\(operation)'", code: 64)
        }
        let iterations = o.int("iterations", default: 200)
        // Checked before the templates are built (that can take minutes).
        let holdFirstMs = o.int("hold-first-ms", default: 0)
        guard holdFirstMs >= 0, holdFirstMs <= MaintenanceModes.maxHoldMs else {
            fail("--hold-first-ms must be from 0 to \(MaintenanceModes.maxHoldMs), got \(holdFirstMs)", code: 64)
        }
        if holdFirstMs > 0, operation == "import" {
            fail("--hold-first-ms is for --during compact or migrate (a bulk import's child cannot be held)", code: 64)
        }
        let seed = o.uint64("seed", default: 9)
        let workdir = o.string("workdir") ?? FileManager.default.temporaryDirectory.appendingPathComponent("strata-kill-\(operation)-\(getpid())").path
        let fm = FileManager.default
        try? fm.removeItem(atPath: workdir)
        try fm.createDirectory(atPath: workdir + "/child-tmp", withIntermediateDirectories: true)
        let started = Date()
        note("kill-loop --during \(operation): building the templates…")
        var variants = switch operation {
        case "compact": try compactionVariants(o, workdir: workdir, seed: seed)
        case "migrate": try migrationVariants(o, workdir: workdir, seed: seed)
        default: try importVariants(o, workdir: workdir, seed: seed)
        }
        let calibrationRuns = o.int("calibration-runs", default: 3)
        for i in variants.indices { try calibrate(&variants[i], runs: calibrationRuns, workdir: workdir) }
        let setupSeconds = Date().timeIntervalSince(started)

        var rng = SplitMix64(seed: seed)
        var t = Totals()
        for i in 0..<iterations {
            let v = i % variants.count
            let hold = holdFirstMs > 0 && variants[v].iterations == 0 ? holdFirstMs : 0
            let problems = try iteration(i, variant: &variants[v], totals: &t, rng: &rng, workdir: workdir,
                                         keep: o.string("keep-failures") != nil, holdMs: hold)
            for p in problems { t.violations.append("iteration \(i) (\(variants[v].name)): \(p)") }
            if (i + 1) % 10 == 0 || !problems.isEmpty {
                note("kill-loop --during \(operation): \(i + 1)/\(iterations), old \(t.old), new \(t.new), \(t.violations.count) violation(s)")
            }
        }
        report(t, variants: variants, operation: operation, seed: seed, setupSeconds: setupSeconds,
               seconds: Date().timeIntervalSince(started), json: o.string("json"))
        if o.string("keep") == nil { try? fm.removeItem(atPath: workdir) }
        exit(t.violations.isEmpty ? 0 : 1)
    }

    // MARK: Variants

    static func compactionVariants(_ o: Options, workdir: String, seed: UInt64) throws -> [Variant] {
        let template = workdir + "/template-v2"
        // Compaction copies databases wholesale: 100,000 records make it last a few hundred ms.
        try StoreTemplate.build(path: template, schema: librarySchema(), records: o.int("records", default: 100_000),
                                history: o.int("history", default: 10_000), seed: seed, scratch: workdir)
        let old = try fingerprint(template)
        let generation = try liveGeneration(template)
        return [old.head, old.head / 2].map { h in
            var v = Variant(name: h == old.head ? "horizon=head (\(h))" : "horizon=\(h)", template: template, oldGeneration: generation, old: old,
                            childArgs: ["compact", "--horizon", String(h)])
            v.new = old.compacted(horizon: h)
            return v
        }
    }

    static func migrationVariants(_ o: Options, workdir: String, seed: UInt64) throws -> [Variant] {
        let v1 = try schemas()[0]
        let plain = workdir + "/template-v1"
        // Migration transforms every record and upcasts every log entry: 40,000 records and 6,000
        // transactions take about a second.
        try StoreTemplate.build(path: plain, schema: v1, records: o.int("records", default: 40_000),
                                history: o.int("history", default: 6_000), seed: seed, scratch: workdir)
        // The same history, compacted at half of it: the migration starts from a squashed base.
        let compacted = workdir + "/template-v1-compacted"
        try FileManager.default.copyItem(atPath: plain, toPath: compacted)
        do {
            let store = try Store.open(at: URL(fileURLWithPath: compacted), schema: v1)
            defer { store.close() }
            let head = try store.lastTransactionID.rawValue
            _ = try blocking { try await store.compact(horizon: TransactionID(head / 2)) }
        }
        return try [plain, compacted].map { path in
            Variant(name: path == plain ? "v1 → v2" : "v1 compacted at head/2 → v2", template: path, oldGeneration: try liveGeneration(path),
                    old: try fingerprint(path), childArgs: ["migrate"])
        }
    }

    /// A library exported with its ids (so every run writes the same objects): a store holding
    /// it, changed by a history of small transactions (updates, deletes, new objects, links and
    /// unlinks), into which the export is bulk-imported again (updated objects are put back,
    /// deleted ones inserted again under their ids).
    static func importVariants(_ o: Options, workdir: String, seed: UInt64) throws -> [Variant] {
        let source = workdir + "/import-source"
        try StoreTemplate.build(path: source, schema: librarySchema(), records: o.int("records", default: 20_000),
                                history: 0, seed: seed, scratch: workdir)
        let export = workdir + "/import.ndjson"
        var lines: [String] = []
        do {
            let store = try openAny(source)
            defer { store.close() }
            for e in store.schema.entities {
                try Exporter(store: store).export(Query(entity: e.name), format: .ndjson) { lines.append($0) }
            }
        }
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: export))
        let template = workdir + "/template-import"
        do {
            let store = try Store.open(at: URL(fileURLWithPath: template), schema: librarySchema())
            defer { store.close() }
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 500
            options.importID = "template"
            let importer = Importer(store: store, options: options)
            _ = try blocking { try await importer.run(files: [export]) }
            var history = History(store: store, schema: store.schema, seed: seed &+ 29)
            try history.run(transactions: o.int("history", default: 1_000))
        }
        var v = Variant(name: "bulk import of \(lines.count) records", template: template,
                        oldGeneration: try liveGeneration(template), old: try fingerprint(template),
                        childArgs: ["import-bulk", "--input", export])
        v.switchLine = "PHASE switching"
        return [v]
    }

    static func schemas() throws -> [Schema] {
        try Schema.loadAll(directory: repositoryRoot.appendingPathComponent("Schemas/library"))
    }

    /// Opens the store with the schema it holds (as the loop must: it may be either version).
    static func openAny(_ path: String) throws -> Store {
        try Store.openExisting(at: URL(fileURLWithPath: path))
    }

    static func fingerprint(_ path: String) throws -> Fingerprint {
        let store = try openAny(path)
        defer { store.close() }
        return try Fingerprint.of(store)
    }

    static func liveGeneration(_ path: String) throws -> String {
        try FileManager.default.destinationOfSymbolicLink(atPath: path + "/current")
    }

    // MARK: Calibration

    /// Runs the operation to completion on fresh copies: its time line, and the new store.
    static func calibrate(_ v: inout Variant, runs: Int, workdir: String) throws {
        var ready: [Double] = [], switching: [Double] = [], done: [Double] = []
        for run in 0..<max(1, runs) {
            let store = workdir + "/calibration"
            try? FileManager.default.removeItem(atPath: store)
            try FileManager.default.copyItem(atPath: v.template, toPath: store)
            let out = workdir + "/child.out", err = workdir + "/child.err"
            let spawned = nowMs()
            let child = Child.start(v.childArgs + ["--store", store], stdoutPath: out, stderrPath: err, environment: ["TMPDIR": workdir + "/child-tmp"])
            let status = child.wait()
            guard status.exited && status.code == 0 else {
                fail("calibration of \(v.name): the child failed (\(status)): \((try? String(contentsOfFile: err, encoding: .utf8)) ?? "")")
            }
            let lines = readLines(out)
            func at(_ prefix: String, field: Int) -> Double? {
                lines.first { $0.hasPrefix(prefix) }.flatMap { $0.split(separator: " ").dropFirst(field).first.flatMap { Double($0) } }.map { $0 - spawned }
            }
            guard let r = at("READY", field: 1), let s = at(v.switchLine, field: 3), let d = at("DONE", field: 1) else {
                fail("calibration of \(v.name): unexpected output \(lines)")
            }
            ready.append(r); switching.append(s); done.append(d)
            let f = try fingerprint(store)
            if v.childArgs[0] == "compact" {
                guard f == v.new else { fail("calibration of \(v.name): the compacted store is not the expected one: \(f.differences(from: v.new))") }
            } else if run == 0 {
                if v.childArgs[0] == "migrate" { try checkMigrated(old: v.template, new: store, name: v.name) }
                v.new = f
            } else {
                guard f == v.new else { fail("calibration of \(v.name): run \(run) differs from run 0: \(f.differences(from: v.new))") }
            }
            try FileManager.default.removeItem(atPath: store)
            note("calibration \(v.name) run \(run): started \(Int(r)) ms, catch-up + switch at \(Int(s)) ms, done at \(Int(d)) ms after spawn")
        }
        v.readyMs = percentile(ready, 50)
        v.switchMs = percentile(switching, 50)
        v.doneMs = percentile(done, 50)
    }

    /// Checks a migrated store against its v1 original without the library's migration code:
    /// same objects per entity, every artist's foundedYear is its formedYear as text and it has a
    /// sort name, every log entry is in v2, the last one is the migration marker.
    static func checkMigrated(old oldPath: String, new newPath: String, name: String) throws {
        let old = try openAny(oldPath), new = try openAny(newPath)
        defer { old.close(); new.close() }
        guard old.schema.version == 1, new.schema.version == 2 else { fail("\(name): versions \(old.schema.version) → \(new.schema.version)") }
        guard try old.info().entities == new.info().entities else { fail("\(name): counts changed: \(try old.info().entities) → \(try new.info().entities)") }
        let oldArtists = Dictionary(uniqueKeysWithValues: try old.mainContext.fetch(Query(entity: "Artist")).map { ($0.id, $0) })
        for a in try new.mainContext.fetch(Query(entity: "Artist")) {
            guard let before = oldArtists[a.id] else { fail("\(name): artist \(a.id) is new") }
            let expected: Value = if case .int(let y) = before["formedYear"] { .string(String(y)) } else { .null }
            guard a["foundedYear"] == expected, !a["sortName"].isNull, a["name"] == before["name"] else {
                fail("\(name): artist \(a.id) migrated to \(a), from \(before)")
            }
        }
        let head = try new.lastTransactionID
        guard head.rawValue == (try old.lastTransactionID.rawValue) + 1 else { fail("\(name): head \(head), was \(try old.lastTransactionID)") }
        try new.forEachTransaction { e in
            if e.schemaVersion != 2 { fail("\(name): transaction \(e.transactionID) is still v\(e.schemaVersion)") }
            if e.transactionID == head && (e.author != "migration" || e.metadata["migrationFrom"] != "1" || e.metadata["migrationTo"] != "2") {
                fail("\(name): the last transaction is not the migration marker: \(e.author) \(e.metadata)")
            }
            return true
        }
    }

    // MARK: One iteration

    /// With `holdMs`, the child waits that long in its first progress event and is killed as soon
    /// as it reports it: a kill that lands while the operation runs however fast the machine is
    /// (the random moment is still drawn, so the seed gives the same moments to the others).
    static func iteration(_ i: Int, variant v: inout Variant, totals t: inout Totals, rng: inout SplitMix64, workdir: String, keep: Bool,
                          holdMs: Int = 0) throws -> [String] {
        let fm = FileManager.default
        let store = workdir + "/store"
        try? fm.removeItem(atPath: store)
        let copyStart = nowMs()
        try fm.copyItem(atPath: v.template, toPath: store)
        if ProcessInfo.processInfo.environment["KILL_LOOP_DEBUG"] != nil { note("  copy: \(Int(nowMs() - copyStart)) ms") }
        // Aimed kills wait for the child's catch-up line (the start of catch-up, sync and switch),
        // then up to the uninterrupted time from there to the return, plus 20 ms; the others
        // anywhere from the spawn to 1.1 × the uninterrupted time.
        let aimed = rng.next() % 100 < 30
        let delay: Double = aimed
            ? Double(rng.next() % UInt64(max(1, Int(v.doneMs - v.switchMs) + 20)))
            : Double(rng.next() % UInt64(max(1, Int(v.doneMs * 1.1))))
        let held = holdMs > 0
        if !held, aimed { t.aimedAtSwitch += 1 }
        let out = workdir + "/child.out", err = workdir + "/child.err"
        let spawned = nowMs()
        let child = Child.start(v.childArgs + ["--store", store] + (held ? ["--hold-ms", String(holdMs)] : []),
                                stdoutPath: out, stderrPath: err, environment: ["TMPDIR": workdir + "/child-tmp"])
        var status: (exited: Bool, code: Int32)?
        var deadline: Double? = aimed || held ? nil : spawned + delay
        let mark = held ? "PHASE" : v.switchLine
        while nowMs() < deadline ?? spawned + 120_000 {
            if let s = child.poll() { status = s; break }
            if deadline == nil && readLines(out).contains(where: { $0.hasPrefix(mark) }) { deadline = nowMs() + (held ? 0 : delay) }
            sleepMs(min(deadline == nil ? 0.5 : 1, (deadline ?? .infinity) - nowMs()))
        }
        if status == nil {
            child.kill9()
            status = child.wait()
            // Counted once the kill found it held (its first progress line written, not done).
            if held, readLines(out).contains(where: { $0.hasPrefix("PHASE") }) { t.heldKills += 1 }
        }
        var problems: [String] = []
        let lines = readLines(out)
        let phase = lastPhase(lines)
        if let status, status.exited {
            t.completedBeforeKill += 1
            if status.code != 0 { problems.append("child exited with \(status.code): \(((try? String(contentsOfFile: err, encoding: .utf8)) ?? "").suffix(400))") }
        }
        t.iterations += 1
        v.iterations += 1
        problems += try recoverAndCheck(store: store, variant: &v, phase: phase, totals: &t)
        problems += scratchLeftovers(workdir + "/child-tmp", totals: &t)
        if !problems.isEmpty && keep { try? fm.moveItem(atPath: store, toPath: workdir + "/failed-\(i)") }
        try? fm.removeItem(atPath: store)
        return problems
    }

    /// The child's last progress line: where the kill landed.
    static func lastPhase(_ lines: [String]) -> String {
        guard let last = lines.last(where: { $0.hasPrefix("READY") || $0.hasPrefix("PHASE") || $0.hasPrefix("DONE") || $0.hasPrefix("CLOSED") }) else {
            return "0 starting (before READY)"
        }
        let f = last.split(separator: " ")
        switch f[0] {
        case "READY": return "1 started"
        case "PHASE": return f[1] == "catchingUp" || f[1] == "switching" ? "3 catch-up/sync/switch" : "2 \(f[1])"
        case "DONE": return "4 returned"
        default: return "5 closed"
        }
    }

    /// Generation directories and temporary `current` links in the store directory.
    static func listing(_ store: String) -> (generations: [String], links: [String]) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: store)) ?? []
        return (names.filter { $0.hasPrefix("gen-") }.sorted(), names.filter { $0.hasPrefix(".current-") })
    }

    static func recoverAndCheck(store: String, variant v: inout Variant, phase: String, totals t: inout Totals) throws -> [String] {
        var problems: [String] = []
        let before = listing(store)
        let currentBefore = try? liveGeneration(store)
        t.unfinishedGenerations += before.generations.filter { $0 != currentBefore && $0 > v.oldGeneration }.count
        if currentBefore != v.oldGeneration && before.generations.contains(v.oldGeneration) { t.oldGenerationsLeft += 1 }
        t.temporaryLinks += before.links.count

        let t0 = nowMs()
        let reopened: Store
        do {
            reopened = try openAny(store)
            _ = try reopened.mainContext.count(Query(entity: "Genre"))
        } catch {
            return ["the store did not reopen: \(error)"]
        }
        t.recoveryMs.append(nowMs() - t0)
        defer { reopened.close() }
        let after = listing(store)
        let current = try? liveGeneration(store)
        if after.generations != [current ?? "?"] || !after.links.isEmpty {
            problems.append("after the open the directory holds \(after.generations) and links \(after.links); current → \(current ?? "nil")")
        }
        let debug = ProcessInfo.processInfo.environment["KILL_LOOP_DEBUG"] != nil
        var mark = nowMs()
        func lap(_ what: String) {
            if debug { note("  \(what): \(Int(nowMs() - mark)) ms") }
            mark = nowMs()
        }
        let f: Fingerprint
        do { f = try Fingerprint.of(reopened) } catch { return problems + ["reading the store: \(error)"] }
        lap("fingerprint")
        var outcome: String?
        if f == v.old && current == v.oldGeneration {
            outcome = "old"
        } else if f == v.new && current != v.oldGeneration {
            outcome = "new"
        } else {
            problems.append("neither the old nor the new store (generation \(current ?? "nil"), old \(v.oldGeneration)): vs old: \(f.differences(from: v.old)); vs new: \(f.differences(from: v.new))")
        }
        problems += horizonCheck(reopened, f)
        var counts = t.byPhase[phase] ?? (0, 0)
        if outcome == "old" { t.old += 1; v.oldOutcomes += 1; counts.old += 1 }
        if outcome == "new" { t.new += 1; v.newOutcomes += 1; counts.new += 1 }
        t.byPhase[phase] = counts
        lap("as-of checks")
        problems += Checker.verify(reopened)
        t.verifyRuns += 1
        lap("verify")
        problems += probe(reopened, head: f.head)
        t.probes += 1
        lap("probe")
        return problems
    }

    /// As-of reads agree with the log: one just before the first logged transaction is refused
    /// as before the horizon (reading at the horizon itself would rebuild the whole state: too
    /// slow to do every iteration).
    static func horizonCheck(_ store: Store, _ f: Fingerprint) -> [String] {
        let horizon = f.firstLogged == 0 ? f.head : f.firstLogged - 1
        guard horizon >= 1 else { return [] }
        do {
            let before = try store.snapshot(asOf: TransactionID(horizon - 1))
            before.close()
            return ["as-of \(horizon - 1) works, but the log starts after \(horizon)"]
        } catch StrataError.beforeHorizon(_, let h) where h.rawValue == horizon {
            return []
        } catch {
            return ["as-of \(horizon - 1) (horizon \(horizon)): \(error)"]
        }
    }

    /// The store accepts a new save, as the next transaction (an insert, then its delete).
    static func probe(_ store: Store, head: UInt64) -> [String] {
        guard let genre = store.schema.entity(named: "Genre") else { return ["no Genre entity"] }
        var g = Record(entity: genre)
        g["name"] = .string("probe \(UUID().uuidString.prefix(8))")
        let id = g.id
        do {
            let a = try blocking { [g] in try await store.save(author: "probe") { $0.insert(g) } }
            let b = try blocking { try await store.save(author: "probe") { $0.delete(id) } }
            guard a.rawValue == head + 1, b.rawValue == head + 2 else { return ["probe saves got transactions \(a) and \(b) after head \(head)"] }
            return []
        } catch {
            return ["the store refused a new save after recovery: \(error)"]
        }
    }

    /// Scratch environments (`strata-scratch-…`) a killed child left in its TMPDIR: counted and
    /// removed. Not a violation of old-or-new, but disk a user never gets back.
    static func scratchLeftovers(_ dir: String, totals t: inout Totals) -> [String] {
        let fm = FileManager.default
        for name in (try? fm.contentsOfDirectory(atPath: dir)) ?? [] {
            let path = dir + "/" + name
            t.scratchLeft += 1
            for file in (try? fm.contentsOfDirectory(atPath: path)) ?? [] {
                t.scratchBytes += ((try? fm.attributesOfItem(atPath: path + "/" + file))?[.size] as? Int) ?? 0
            }
            try? fm.removeItem(atPath: path)
        }
        return []
    }

    // MARK: Report

    static func report(_ t: Totals, variants: [Variant], operation: String, seed: UInt64, setupSeconds: Double, seconds: Double, json: String?) {
        let p50 = percentile(t.recoveryMs, 50), p99 = percentile(t.recoveryMs, 99), maxMs = t.recoveryMs.max() ?? 0
        var lines = ["kill -9 during \(["compact": "compaction", "migrate": "migration"][operation] ?? "a bulk import"): \(t.iterations) iterations, seed \(seed), \(String(format: "%.0f", seconds)) s (setup \(String(format: "%.0f", setupSeconds)) s)"]
        for v in variants {
            lines.append("  \(v.name): \(v.iterations) iterations, old \(v.oldOutcomes), new \(v.newOutcomes); template \(v.old.objects) objects, head \(v.old.head), log \(v.old.logHashes.count) entries; uninterrupted: started \(Int(v.readyMs)) ms, catch-up/switch \(Int(v.switchMs)) ms, returned \(Int(v.doneMs)) ms after spawn")
        }
        lines.append("  outcome:                         old \(t.old), new \(t.new) (child finished before the kill: \(t.completedBeforeKill))")
        lines.append("  violations:                      \(t.violations.count)")
        lines.append("  kills aimed at the switch window: \(t.aimedAtSwitch) (after the child's catch-up line)")
        if t.heldKills > 0 { lines.append("  kills of a child held in its first progress event: \(t.heldKills)") }
        lines.append("  by the child's last progress line (old / new):")
        for (phase, c) in t.byPhase.sorted(by: { $0.key < $1.key }) { lines.append("    \(phase.dropFirst(2)): \(c.old) / \(c.new)") }
        lines.append("  left by the kill, removed at the next open: \(t.unfinishedGenerations) unfinished generation(s), \(t.oldGenerationsLeft) old generation(s) beside the new one, \(t.temporaryLinks) temporary link(s)")
        lines.append("  scratch environments left in the child's TMPDIR: \(t.scratchLeft) (\(t.scratchBytes / 1024) KiB; the next scratch made there removes them once a minute old)")
        lines.append("  verify() runs: \(t.verifyRuns); new saves accepted after recovery: \(t.probes)")
        lines.append("  recovery (open + first read):    p50 \(String(format: "%.2f", p50)) ms, p99 \(String(format: "%.2f", p99)) ms, max \(String(format: "%.2f", maxMs)) ms")
        print(lines.joined(separator: "\n"))
        for v in t.violations.prefix(20) { print("  VIOLATION \(v)") }
        guard let json else { return }
        let doc: [String: Any] = [
            "operation": operation, "iterations": t.iterations, "seed": seed, "old": t.old, "new": t.new,
            "completedBeforeKill": t.completedBeforeKill, "violations": t.violations, "aimedAtSwitch": t.aimedAtSwitch,
            "heldKills": t.heldKills,
            "byPhase": Dictionary(uniqueKeysWithValues: t.byPhase.map { ($0.key, ["old": $0.value.old, "new": $0.value.new]) }),
            "unfinishedGenerations": t.unfinishedGenerations, "oldGenerationsLeft": t.oldGenerationsLeft, "temporaryLinks": t.temporaryLinks,
            "scratchLeft": t.scratchLeft, "scratchBytes": t.scratchBytes, "verifyRuns": t.verifyRuns, "probes": t.probes,
            "recoveryP50Ms": p50, "recoveryP99Ms": p99, "recoveryMaxMs": maxMs, "seconds": seconds, "setupSeconds": setupSeconds,
            "variants": variants.map { ["name": $0.name, "iterations": $0.iterations, "old": $0.oldOutcomes, "new": $0.newOutcomes,
                                        "readyMs": $0.readyMs, "switchMs": $0.switchMs, "doneMs": $0.doneMs, "objects": $0.old.objects, "head": $0.old.head] },
        ]
        if let data = try? JSONSerialization.data(withJSONObject: doc, options: [.prettyPrinted, .sortedKeys]) {
            try? data.write(to: URL(fileURLWithPath: json))
        }
    }
}
