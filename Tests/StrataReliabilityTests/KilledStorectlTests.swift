import Foundation
import LibraryModel
import Testing
@testable import Strata

/// storectl killed with SIGKILL in the middle of a long command, then checked and run again:
/// a killed `compact` or `migrate` leaves the old or the new store (it verifies, its contents are
/// the same, a migration can be run to the end), and a killed `import` run again converges to the
/// whole library.
@Suite struct KilledStorectlTests {
    /// Kills `child` (SIGKILL) `microseconds` after it holds the store at `store` (its lock
    /// file), on a thread of its own with blocking sleeps: the test process's task sleeps were
    /// late by seconds while the other suites ran, and the kill then came after the child's work.
    static func killOnceHolding(_ store: URL, _ child: ChildProcess, after microseconds: UInt32) async throws {
        try await onOwnThread {
            let deadline = ContinuousClock.now + .seconds(60)
            while child.isRunning && !Store.processesHolding(at: store).contains(child.pid)
                    && ContinuousClock.now < deadline {
                usleep(500)
            }
            usleep(microseconds)
            child.kill()
        }
    }

    @Test func killedCompactionLeavesTheOldOrTheNewStore() async throws {
        let dir = temporaryDirectory("kill-compact")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("lib.ndjson").path
        let generator = URL(fileURLWithPath: storectlPath).deletingLastPathComponent().appendingPathComponent("strata-generate").path
        #expect(try await run(generator, ["20000", "--seed", "3", "--output", input]).status == 0)
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        #expect(try await storectl("import", store, input, "--batch", "1000", "--quiet").status == 0)
        let expected = try await storectl("export", store, "--entity", "Track").stdout
        var rng = SeededGenerator(seed: 5)
        var killedRunning = 0
        for iteration in 0..<6 {
            let p = try ChildProcess.start(storectlPath, ["compact", store, "--keep-last", "\(iteration % 3)", "--quiet"])
            // Killed once it holds the store (the compaction under way, which takes about a
            // tenth of a second here), a random moment later: a task sleep from the start was
            // late by more than the whole compaction while the other suites ran.
            try await Self.killOnceHolding(URL(fileURLWithPath: store), p, after: UInt32.random(in: 0...120_000, using: &rng))
            if !p.wait().exited { killedRunning += 1 }
            let v = try await storectl("verify", store, "--json")
            #expect(v.status == 0, "iteration \(iteration): \(v.stderr)")
            #expect(try await storectl("export", store, "--entity", "Track").stdout == expected, "iteration \(iteration): state changed")
        }
        print("compaction kills that landed running: \(killedRunning) of 6")
        #expect(killedRunning > 0, "every compaction had ended before its kill: the kills checked nothing")
        let names = try FileManager.default.contentsOfDirectory(atPath: store).filter { $0.hasPrefix("gen-") }
        #expect(names.count <= 2)
    }

    @Test func killedMigrationLeavesTheOldOrTheNewStore() async throws {
        let dir = temporaryDirectory("kill-migrate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let v1dir = dir.appendingPathComponent("schema-v1")
        try FileManager.default.createDirectory(at: v1dir, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: librarySchemaDirectory.appendingPathComponent("v1.json"), to: v1dir.appendingPathComponent("v1.json"))
        let store = dir.appendingPathComponent("s")
        try await makeV1TrackStore(at: store, schema: all[0])
        var rng = SeededGenerator(seed: 21)
        var sawOld = false, sawNew = false
        for iteration in 0..<6 {
            let p = try ChildProcess.start(storectlPath, ["migrate", store.path, "--schema", librarySchemaDirectory.path, "--quiet"])
            // Killed once it holds the store (the migration under way), a random moment later.
            try await Self.killOnceHolding(store, p, after: UInt32.random(in: 0...50_000, using: &rng))
            p.wait()
            let check = try await storectl("migrate", store.path, "--schema", librarySchemaDirectory.path, "--check")
            #expect(check.status == 0 || check.status == 10, "iteration \(iteration): \(check.stderr)")
            if check.status == 0 { sawNew = true } else { sawOld = true }
            let verify = try await storectl("verify", store.path)
            #expect(verify.status == 0, "iteration \(iteration): \(verify.stderr)")
            #expect(try await storectl("query", store.path, "--entity", "Track", "--count").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "10000")
            if check.status == 0 { break }
        }
        // At least one kill landed before the switch (the old store left), or the loop checked
        // only finished migrations.
        #expect(sawOld, "no kill left the old store: every migration had switched before its kill (new: \(sawNew))")
        // Whatever happened, running it to the end works.
        let finish = try await storectl("migrate", store.path, "--schema", librarySchemaDirectory.path, "--quiet")
        #expect(finish.status == 0 || finish.stderr.contains("nothing to do"), "\(finish.stderr)")
        #expect(try await storectl("migrate", store.path, "--schema", librarySchemaDirectory.path, "--check").status == 0)
    }

    /// An incremental import killed with SIGKILL part-way is simply run again and converges.
    @Test func killedImportRerunConverges() async throws {
        let dir = temporaryDirectory("kill-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("lib.ndjson").path
        let generator = URL(fileURLWithPath: storectlPath).deletingLastPathComponent().appendingPathComponent("strata-generate").path
        #expect(try await run(generator, ["30000", "--seed", "7", "--output", input]).status == 0)
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)

        // Two passes: batches committed as they go (one transaction: the test below).
        let importErrors = dir.appendingPathComponent("import.err")
        let p = try ChildProcess.start(storectlPath, ["import", store, input, "--batch", "500", "--quiet", "--mode", "incremental",
                                                      "--one-transaction-max-mb", "0"], stderr: .file(importErrors.path))
        // Wait until a few batches are committed, then kill -9 in the middle. Looked at by a
        // thread of its own, a read transaction every 2 ms: in a full `Tools/test` run a test's
        // task can wait seconds to be resumed, and a `storectl info` for each look took long
        // enough there that the import ended between two looks. The first commit comes after the
        // validation pass over the whole input.
        let reader = try Store.openReadOnly(at: URL(fileURLWithPath: store))
        let committed = try await onOwnThread { () throws -> UInt64 in
            var last: UInt64 = 0
            let deadline = Date().addingTimeInterval(300)
            while p.isRunning && Date() < deadline {
                last = try reader.lastTransactionID.rawValue
                if last >= 3 { break }
                usleep(2_000)
            }
            p.kill()
            return last
        }
        reader.close()
        let ended = p.wait()
        #expect(committed >= 1 && !ended.exited, """
            the import was not killed part-way: \(committed) transactions seen, then it ended with \(ended), \
            stderr \((try? String(contentsOf: importErrors, encoding: .utf8)) ?? "")
            """)

        let rerun = try await storectl("import", store, input, "--batch", "500", "--quiet")
        #expect(rerun.status == 0, "\(rerun.stderr)")
        let counts = try JSONValue.parse(try await storectl("info", store, "--json").stdout.trimmingCharacters(in: .whitespacesAndNewlines))["entities"]
        // 30000 records: 24 genres, 300 artists, 3000 albums, 30 playlists, the rest tracks.
        #expect(counts?["Genre"] == .int(24))
        #expect(counts?["Artist"] == .int(300))
        #expect(counts?["Album"] == .int(3000))
        #expect(counts?["Playlist"] == .int(30))
        #expect(counts?["Track"] == .int(30000 - 24 - 300 - 3000 - 30))
        // Every track got its album, whichever run wrote it.
        let orphans = try await storectl("query", store, "--entity", "Track", "--where", "album == null", "--count")
        #expect(orphans.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        // A third run changes nothing.
        let third = try await storectl("import", store, input, "--json", "--quiet")
        #expect(try JSONValue.parse(third.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["transactions"] == .int(0))
    }

    /// An incremental import in one transaction killed with SIGKILL at random moments leaves
    /// the store with none of it or all of it, and run again it converges.
    @Test func killedImportInOneTransactionLeavesNoneOrAllOfIt() async throws {
        let dir = temporaryDirectory("kill-import-one")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("lib.ndjson").path
        let generator = URL(fileURLWithPath: storectlPath).deletingLastPathComponent().appendingPathComponent("strata-generate").path
        #expect(try await run(generator, ["20000", "--seed", "8", "--output", input]).status == 0)
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        // A record in the store first, so that the import is incremental (`auto` would go bulk).
        let seed = dir.appendingPathComponent("seed.ndjson")
        try Data(#"{"entity":"Genre","name":"Seed"}"#.utf8).write(to: seed)
        #expect(try await storectl("import", store, seed.path, "--quiet").status == 0)
        func genres() async throws -> Int {
            let info = try JSONValue.parse(try await storectl("info", store, "--json").stdout
                .trimmingCharacters(in: .whitespacesAndNewlines))
            guard case .int(let n)? = info["entities"]?["Genre"] else { return -1 }
            return Int(n)
        }
        var rng = SeededGenerator(seed: 91)
        var outcomes: Set<Int> = []
        for _ in 0..<4 {
            let p = try ChildProcess.start(storectlPath, ["import", store, input, "--batch", "500", "--quiet", "--mode", "incremental"])
            // Killed once it holds the store (the import under way), a random moment later.
            try await Self.killOnceHolding(URL(fileURLWithPath: store), p, after: UInt32.random(in: 0...100_000, using: &rng))
            p.wait()
            // 20,000 records hold 24 genres (Tools/generate-library), besides the seed's.
            let n = try await genres()
            #expect(n == 1 || n == 25, "a killed import in one transaction left \(n) genres")
            outcomes.insert(n)
            #expect(try await storectl("verify", store).status == 0)
            if n == 25 { break }
        }
        #expect(outcomes.contains(1), "no kill landed before the import's commit: \(outcomes)")
        let rerun = try await storectl("import", store, input, "--batch", "500", "--json", "--quiet", "--mode", "incremental")
        #expect(rerun.status == 0, "\(rerun.stderr)")
        #expect(try JSONValue.parse(rerun.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["oneTransaction"]
                == .bool(true))
        #expect(try await genres() == 25)
        let orphans = try await storectl("query", store, "--entity", "Track", "--where", "album == null", "--count")
        #expect(orphans.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    /// A bulk import killed with SIGKILL at random moments (calibrated on an uninterrupted run:
    /// while reading, building, syncing or switching) leaves the store exactly as it was or with
    /// the whole import, never a part: it verifies, its track count is the old or the new one,
    /// and run again it converges, leaving only the live generation. Into a store with objects,
    /// the import saves through the new generation's B-trees (`--in-memory-max-mb 0`) or loads
    /// the store's state and resolves the records in memory; into an empty one it resolves them
    /// in memory. In memory, the generation is written at the end.
    @Test(arguments: [(false, false), (false, true), (true, true)])
    func killedBulkImportLeavesTheOldOrTheNewStore(intoEmptyStore: Bool, inMemory: Bool) async throws {
        let memoryLimit = ["--in-memory-max-mb", inMemory ? "256" : "0"]
        let dir = temporaryDirectory("kill-bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let generator = URL(fileURLWithPath: storectlPath).deletingLastPathComponent().appendingPathComponent("strata-generate").path
        let first = dir.appendingPathComponent("first.ndjson").path, input = dir.appendingPathComponent("lib.ndjson").path
        #expect(try await run(generator, ["2000", "--seed", "5", "--output", first]).status == 0)
        #expect(try await run(generator, ["20000", "--seed", "7", "--output", input]).status == 0)
        let template = dir.appendingPathComponent("template").path
        #expect(try await storectl("init", template, "--schema", librarySchemaDirectory.path).status == 0)
        if !intoEmptyStore { #expect(try await storectl("import", template, first, "--quiet").status == 0) }
        func tracks(_ store: String) async throws -> String {
            let r = try await storectl("query", store, "--entity", "Track", "--count")
            #expect(r.status == 0, "\(r.stderr)")
            return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let old = try await tracks(template)

        // The uninterrupted run: the new state, and how long a run takes.
        let whole = dir.appendingPathComponent("whole").path
        try FileManager.default.copyItem(atPath: template, toPath: whole)
        let started = Date()
        let clean = try await storectl(["import", whole, input, "--mode", "bulk", "--batch", "500", "--quiet"] + memoryLimit)
        let seconds = Date().timeIntervalSince(started)
        #expect(clean.status == 0, "\(clean.stderr)")
        #expect(clean.stdout.contains("in memory") == inMemory, "\(clean.stdout)")
        let new = try await tracks(whole)
        #expect(old != new)

        var rng = SeededGenerator(seed: 11)
        var outcomes: [String: Int] = [:]
        // Four kills in memory: the moments that matter (reading, writing the generation,
        // switching) are those of the B-trees' run, and `Tools/test` runs on two cores.
        for iteration in 0..<(inMemory ? 4 : 8) {
            let store = dir.appendingPathComponent("s\(iteration)").path
            try FileManager.default.copyItem(atPath: template, toPath: store)
            let p = try ChildProcess.start(storectlPath, ["import", store, input, "--mode", "bulk", "--batch", "500", "--quiet"]
                                                         + memoryLimit)
            // Even iterations kill in the first half of a clean run's time (before the switch,
            // which ends the import, unless this run is much faster than the clean one was),
            // odd ones anywhere up to 1.1 times it. The first kills as soon as storectl has its
            // input open, while it reads (the switch comes after the whole input is read).
            // The wait and the kill run on a thread of their own: a test's sleep on the shared
            // cooperative pool can wake long after it was due when the parallel suite keeps
            // those threads busy, and then every kill landed after the switch.
            let share = iteration.isMultiple(of: 2) ? 500_000 : 1_100_000
            let micros = UInt32.random(in: 1_000...UInt32(max(2_000, seconds * Double(share))), using: &rng)
            let firstKill = iteration == 0
            try await onOwnThread {
                if firstKill {
                    func reading() -> Bool {
                        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(p.pid)/fd")) ?? []
                        return fds.contains {
                            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(p.pid)/fd/\($0)")) == input
                        }
                    }
                    let deadline = ContinuousClock.now + .seconds(120)
                    while p.isRunning && ContinuousClock.now < deadline && !reading() { usleep(200) }
                } else {
                    usleep(micros)
                }
                p.kill()
            }
            p.wait()
            let count = try await tracks(store)
            #expect(count == old || count == new, "iteration \(iteration): \(count) tracks, neither \(old) nor \(new)")
            outcomes[count == new ? "new" : "old", default: 0] += 1
            let v = try await storectl("verify", store, "--quiet")
            #expect(v.status == 0, "iteration \(iteration): \(v.stderr)")
            // The next read-write open (the import run again) removes an unfinished generation.
            let again = try await storectl("import", store, input, "--mode", "bulk", "--batch", "500", "--quiet")
            #expect(again.status == 0, "iteration \(iteration): \(again.stderr)")
            #expect(try await tracks(store) == new)
            let generations = try FileManager.default.contentsOfDirectory(atPath: store).filter { $0.hasPrefix("gen-") }
            #expect(generations.count == 1, "iteration \(iteration): \(generations)")
        }
        #expect(outcomes["old", default: 0] > 0, "no kill landed before the switch: \(outcomes)")
    }
}
