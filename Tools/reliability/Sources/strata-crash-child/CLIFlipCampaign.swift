import Foundation
import Glibc
import Strata

/// `cli-flips`: the byte-flip campaign against `storectl`. Builds the campaign's small store
/// (``FlipCampaign/build(_:)``, compacted so every page is live), records what each read command
/// prints on it, then for each flip copies the store, XORs one byte with a random non-zero mask
/// and runs every read command on the copy: `info`, `verify`, `query` (an index lookup and a
/// scan), `export` (two entities) and `log`, each its own process.
///
/// Targets, seeded: a meta page (page 0 or 1), `lock.mdb`, or a page of one database (the free
/// pages, the main database, each named database, overflow pages), the database chosen evenly so
/// that every one is covered; within the page the header and node-pointer array (first 64 bytes)
/// in a third of the flips, any byte otherwise.
///
/// Per command run:
/// - `crash`: ended by a signal, did not finish in 60 s, or exited with a code outside
///   storectl's documented set (0, 64, 65, 66, 70, 73, 74, 75);
/// - `wrong`: exit 0 with output that differs from the undamaged store's (for `info`, `query`,
///   `export`, `log`); counted as `wrong, verify passed` when `verify` exited 0 on that copy.
/// The goal: no crash, no wrong answer that `verify` passes.
enum CLIFlipCampaign {
    static let documentedExits: Set<Int32> = [0, 64, 65, 66, 70, 73, 74, 75]

    static func commands(_ store: String) -> [(String, [String])] {
        [("info", ["info", store]),
         ("verify", ["verify", store, "--quiet"]),
         ("query-index", ["query", store, "--entity", "Track", "--where", "title prefix 'flipT-1'", "--json"]),
         ("query-scan", ["query", store, "--entity", "Playlist", "--where", "name contains 'playlist'", "--json"]),
         ("export-tracks", ["export", store, "--entity", "Track"]),
         ("export-playlists", ["export", store, "--entity", "Playlist"]),
         ("log", ["log", store, "--json"])]
    }

    static func run(_ o: Options) throws {
        let flips = o.int("flips", default: 1000)
        let seed = o.uint64("seed", default: 21)
        let storectl = o.require("storectl")
        let workdir = o.string("workdir") ?? FileManager.default.temporaryDirectory.appendingPathComponent("strata-cli-flips-\(getpid())").path
        let fm = FileManager.default
        try? fm.removeItem(atPath: workdir)
        try fm.createDirectory(atPath: workdir, withIntermediateDirectories: true)
        let built = workdir + "/built", pristine = workdir + "/pristine"
        _ = try FlipCampaign.build(built)
        try FlipCampaign.compactCopy(from: built, to: pristine)
        // The truth: each command's output on the undamaged store (this also creates lock.mdb).
        var truth: [String: (Int32, String)] = [:]
        for (name, args) in commands(pristine) {
            let r = runCommand(storectl, args, dir: workdir, tag: "truth-\(name)")
            guard r.exited && r.code == 0 else { fail("\(name) fails on the undamaged store: \(r.code) \(r.stderr)") }
            truth[name] = (r.code, r.stdout.replacingOccurrences(of: pristine, with: "STORE"))
        }
        let dataPath = FlipCampaign.dataFile(pristine)
        let envDir = (dataPath as NSString).deletingLastPathComponent
        let data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dataPath)))
        let lock = [UInt8](try Data(contentsOf: URL(fileURLWithPath: envDir + "/lock.mdb")))
        let owners = pageOwners(data)
        var pagesOf: [String: [Int]] = [:]
        for (page, owner) in owners { pagesOf[owner, default: []].append(page) }
        let databases = pagesOf.keys.sorted()
        note("cli-flips: data.mdb \(data.count) bytes, pages by database: \(databases.map { "\($0) \(pagesOf[$0]!.count)" }.joined(separator: ", "))")
        var rng = SplitMix64(seed: seed)
        var runs: [String: [String: Int]] = [:]        // command → outcome → count
        var targets: [String: [String: Int]] = [:]     // target → flip outcome → count
        var crashes: [String] = [], wrongPassed: [String] = []
        var wrongCaught = 0
        for n in 0..<flips {
            let target: String, file: String, offset: Int
            switch rng.next() % 20 {
            case 0..<2:
                target = "meta page"
                file = "data.mdb"
                offset = Int(rng.next() % 2) * FlipCampaign.pageSize + Int(rng.next() % 256)
            case 2:
                target = "lock.mdb"
                file = "lock.mdb"
                offset = Int(rng.next() % UInt64(min(lock.count, 8192)))
            default:
                let db = databases[Int(rng.next() % UInt64(databases.count))]
                let pages = pagesOf[db]!
                let page = pages[Int(rng.next() % UInt64(pages.count))]
                target = db
                file = "data.mdb"
                let within = rng.next() % 3 == 0 ? Int(rng.next() % 64) : Int(rng.next() % UInt64(FlipCampaign.pageSize))
                offset = page * FlipCampaign.pageSize + within
            }
            let mask = UInt8(1 + rng.next() % 255)
            let dir = workdir + "/flip-\(n)"
            try? fm.removeItem(atPath: dir)
            try fm.copyItem(atPath: pristine, toPath: dir)
            let copyEnv = (FlipCampaign.dataFile(dir) as NSString).deletingLastPathComponent
            var bytes = file == "data.mdb" ? data : lock
            bytes[min(offset, bytes.count - 1)] ^= mask
            try Data(bytes).write(to: URL(fileURLWithPath: copyEnv + "/" + file))
            let what = "flip \(n) (\(target), \(file) offset \(offset), mask 0x\(String(mask, radix: 16)))"
            var results: [String: RunResult] = [:]
            for (name, args) in commands(dir) { results[name] = runCommand(storectl, args, dir: dir, tag: name) }
            let verifyPassed = results["verify"]!.exited && results["verify"]!.code == 0
            var flipOutcome = "no effect"
            for (name, _) in commands(dir) {
                let r = results[name]!
                let outcome: String
                if !r.exited || !documentedExits.contains(r.code) {
                    outcome = "crash"
                    crashes.append("\(what): \(name) \(r.exited ? "exit \(r.code)" : r.code == 0 ? "hang" : "signal \(r.code)"): \(r.stderr.suffix(300))")
                } else if r.code != 0 {
                    outcome = "exit \(r.code)"
                } else if name != "verify" && r.stdout.replacingOccurrences(of: dir, with: "STORE") != truth[name]!.1 {
                    outcome = verifyPassed ? "wrong, verify passed" : "wrong, verify detected"
                    if verifyPassed { wrongPassed.append("\(what): \(name) printed other output and verify passed") } else { wrongCaught += 1 }
                } else {
                    outcome = "ok"
                }
                runs[name, default: [:]][outcome, default: 0] += 1
                if outcome == "crash" || outcome == "wrong, verify passed" { flipOutcome = outcome }
                else if flipOutcome == "no effect" && outcome != "ok" { flipOutcome = "detected" }
            }
            targets[target, default: [:]][flipOutcome, default: 0] += 1
            if flipOutcome != "crash" && flipOutcome != "wrong, verify passed" { try? fm.removeItem(atPath: dir) }
            if (n + 1) % 50 == 0 { note("cli-flips: \(n + 1)/\(flips): crashes \(crashes.count), wrong answers verify passed \(wrongPassed.count)") }
        }
        print("storectl byte-flip campaign: \(flips) flips, seed \(seed), data.mdb \(data.count) bytes, lock.mdb \(lock.count) bytes")
        print("  crashes (signal, hang or undocumented exit code): \(crashes.count)")
        print("  wrong answers verify passed: \(wrongPassed.count)")
        print("  wrong answers verify detected: \(wrongCaught)")
        print("  by command:")
        for (name, _) in commands("") {
            print("    \(name): \((runs[name] ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        }
        print("  by target (flips):")
        for (t, m) in targets.sorted(by: { $0.key < $1.key }) {
            print("    \(t): \(m.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        }
        for d in (crashes + wrongPassed).prefix(40) { print("  \(d)") }
        if o.string("keep") == nil { try? fm.removeItem(atPath: workdir) }
        if !crashes.isEmpty || !wrongPassed.isEmpty { exit(1) }
    }

    struct RunResult {
        var exited: Bool
        var code: Int32
        var stdout: String
        var stderr: String
    }

    static func runCommand(_ storectl: String, _ args: [String], dir: String, tag: String) -> RunResult {
        let out = dir + ".\(tag).out", err = dir + ".\(tag).err"
        let child = Child.start(args, stdoutPath: out, stderrPath: err, executable: storectl)
        let deadline = nowMs() + 60_000
        var status: (exited: Bool, code: Int32)?
        while status == nil && nowMs() < deadline {
            status = child.poll()
            if status == nil { sleepMs(1) }
        }
        defer { unlink(out); unlink(err) }
        let stdout = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        let stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        guard let status else {
            child.kill9()
            _ = child.wait()
            return RunResult(exited: false, code: 0, stdout: stdout, stderr: stderr)
        }
        return RunResult(exited: status.exited, code: status.code, stdout: stdout, stderr: stderr)
    }

    /// Which database each page of an undamaged data file belongs to (its tree's branch and leaf
    /// pages, and `<name> overflow` for its big values), from the newest meta page down.
    static func pageOwners(_ b: [UInt8]) -> [Int: String] {
        let ps = FlipCampaign.pageSize
        func u16(_ o: Int) -> Int { Int(b[o]) | Int(b[o + 1]) << 8 }
        func u64(_ o: Int) -> Int { var v = 0; for i in 0..<8 { v |= Int(b[o + i]) << (8 * i) }; return v }
        let meta = u64(144) >= u64(ps + 144) ? 0 : ps
        var owners: [Int: String] = [:]
        var named: [(String, Int)] = []
        func walk(_ page: Int, _ name: String, isMain: Bool) {
            guard page >= 2, (page + 1) * ps <= b.count, owners[page] == nil else { return }
            owners[page] = name
            let base = page * ps
            let flags = u16(base + 10)
            let count = (u16(base + 12) - 16) / 2
            for i in 0..<max(0, count) {
                let node = base + u16(base + 16 + 2 * i)
                let ksize = u16(node + 6)
                if flags & 0x01 != 0 {
                    walk(u16(node) | u16(node + 2) << 16 | u16(node + 4) << 32, name, isMain: isMain)
                } else if u16(node + 4) & 0x01 != 0 {
                    let size = u16(node) | u16(node + 2) << 16
                    let first = u64(node + 8 + ksize)
                    for p in first..<(first + (16 + size + ps - 1) / ps) { owners[p] = name + " overflow" }
                } else if isMain && u16(node + 4) & 0x02 != 0 {
                    named.append((String(decoding: b[(node + 8)..<(node + 8 + ksize)], as: UTF8.self), u64(node + 8 + ksize + 40)))
                }
            }
        }
        let freeRoot = u64(meta + 40 + 40), mainRoot = u64(meta + 88 + 40)
        if freeRoot != -1 { walk(freeRoot, "free pages", isMain: false) }
        if mainRoot != -1 { walk(mainRoot, "main", isMain: true) }
        for (name, root) in named where root != -1 { walk(root, name, isMain: false) }
        return owners
    }
}
