import Foundation
import CLMDBReliability
import Glibc
import LibraryModel
import Strata

/// `flips`: the on-disk byte-flip campaign. Builds a small store, records what every read must
/// return, then for each flip copies `data.mdb` into a fresh directory, XORs one byte with a
/// random non-zero mask and runs `flip-check` on the copy in a child process (so a crash inside
/// liblmdb is counted, not fatal). Targets, seeded:
/// - `record`: within a few bytes of a stored track title (the record or log value holding it);
/// - `page`: anywhere in the 4 KiB page holding such a title (header, node array, free gap, keys);
/// - `file`: anywhere in data.mdb (meta pages, branch pages, freelist, stale pages).
/// Each flip is classified by what the reads and `verify()` saw:
/// - `open-error`: the store refused to open with an error;
/// - `detected`: a read threw or `verify()` reported a problem, and no read returned a wrong value;
/// - `wrong-value`: some read returned a value (or absence) that differs from the truth without
///   an error — the outcome that must not happen silently; whether `verify()` caught it is noted;
/// - `no-effect`: every read returned the truth and `verify()` passed: the byte was unused
///   (a page's free gap, a free or stale copy-on-write page, padding);
/// - `crash`/`hang`: the checking process died on a signal or did not finish in 60 s.
enum FlipCampaign {
    static let pageSize = 4096

    /// The live generation's data file (`STORE/current/data.mdb`; older layouts: `STORE/data.mdb`).
    static func dataFile(_ store: String) -> String {
        let layered = store + "/current/data.mdb"
        return FileManager.default.fileExists(atPath: layered) ? layered : store + "/data.mdb"
    }

    static func run(_ o: Options) throws {
        let flips = o.int("flips", default: 200)
        let seed = o.uint64("seed", default: 11)
        let workdir = o.string("workdir") ?? FileManager.default.temporaryDirectory.appendingPathComponent("strata-flips-\(getpid())").path
        let fm = FileManager.default
        try? fm.removeItem(atPath: workdir)
        try fm.createDirectory(atPath: workdir, withIntermediateDirectories: true)
        let pristine = workdir + "/pristine"
        let built = workdir + "/built"
        let titles = try build(built)
        // A compacted copy has no free or stale copy-on-write pages: every page is live, so a flip
        // that has no effect landed in bytes that are really unused (a page's free gap, padding).
        try compactCopy(from: built, to: pristine)
        let expectedPath = workdir + "/expected.json"
        try writeExpected(pristine, to: expectedPath)
        let file = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dataFile(pristine))))
        var occurrences: [Int] = []
        for t in titles { occurrences += find(Array(t.utf8), in: file) }
        guard !occurrences.isEmpty else { fail("no title found in data.mdb") }
        var rng = SplitMix64(seed: seed)
        var outcomes: [String: Int] = [:]
        var byLocation: [String: [String: Int]] = [:]
        var wrongDetails: [String] = []
        var readErrorKinds: [String: Int] = [:]
        var wrongCaughtByVerify = 0
        for n in 0..<flips {
            let target: String
            let offset: Int
            let occ = occurrences[Int(rng.next() % UInt64(occurrences.count))]
            switch rng.next() % 10 {
            case 0..<4:
                target = "record"
                offset = max(0, occ - 48) + Int(rng.next() % 112)
            case 4..<8:
                target = "page"
                offset = occ / pageSize * pageSize + Int(rng.next() % UInt64(pageSize))
            default:
                target = "file"
                offset = Int(rng.next() % UInt64(file.count))
            }
            let mask = UInt8(1 + rng.next() % 255)
            let location = describe(offset, in: file)
            let dir = workdir + "/flip-\(n)"
            try? fm.removeItem(atPath: dir)
            try fm.copyItem(atPath: pristine, toPath: dir)
            var copy = file
            copy[min(offset, copy.count - 1)] ^= mask
            try Data(copy).write(to: URL(fileURLWithPath: dataFile(dir)))
            let child = Child.start(["flip-check", "--store", dir, "--expected", expectedPath], stdoutPath: dir + "/out", stderrPath: dir + "/err")
            let deadline = nowMs() + 60_000
            var status: (exited: Bool, code: Int32)?
            while status == nil && nowMs() < deadline {
                status = child.poll()
                if status == nil { sleepMs(2) }
            }
            var outcome: String
            var result: [String: Any] = [:]
            if status == nil {
                child.kill9()
                _ = child.wait()
                outcome = "hang"
            } else if !status!.exited {
                outcome = "crash (signal \(status!.code))"
            } else if let line = readLines(dir + "/out").last, let data = line.data(using: .utf8),
                      let obj = try? JSONSerialization.jsonObject(with: data) as? [String: Any] {
                result = obj
                outcome = classify(obj)
            } else {
                outcome = "crash (exit \(status!.code))"
            }
            outcomes[outcome, default: 0] += 1
            byLocation[location, default: [:]][outcome, default: 0] += 1
            if let e = result["firstError"] as? String { readErrorKinds[errorKind(e), default: 0] += 1 }
            if outcome == "wrong-value" {
                if (result["verifyOK"] as? Bool) == false || result["verifyError"] != nil { wrongCaughtByVerify += 1 }
                wrongDetails.append("flip \(n) (\(target), offset \(offset), \(location), mask 0x\(String(mask, radix: 16))): \(result["firstWrong"] as? String ?? "?"); verify: \((result["verifyOK"] as? Bool) == true ? "passed" : "detected")")
            }
            if outcome.hasPrefix("crash") || outcome == "hang" {
                wrongDetails.append("flip \(n) (\(target), offset \(offset), \(location), mask 0x\(String(mask, radix: 16))): \(outcome); stderr: \(((try? String(contentsOfFile: dir + "/err", encoding: .utf8)) ?? "").suffix(300))")
            }
            if outcome == "no-effect" || outcome == "detected" || outcome == "open-error" { try? fm.removeItem(atPath: dir) }
            if (n + 1) % 25 == 0 { note("flips: \(n + 1)/\(flips): \(outcomes.sorted { $0.key < $1.key })") }
        }
        print("on-disk byte-flip campaign: \(flips) flips, seed \(seed), data.mdb \(file.count) bytes, \(occurrences.count) title occurrences")
        for (k, v) in outcomes.sorted(by: { $0.key < $1.key }) { print("  \(k): \(v)") }
        print("  wrong values caught by verify(): \(wrongCaughtByVerify)")
        print("  by location:")
        for (loc, m) in byLocation.sorted(by: { $0.key < $1.key }) { print("    \(loc): \(m.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))") }
        print("  first read error, by kind: \(readErrorKinds.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        for d in wrongDetails.prefix(40) { print("  \(d)") }
        if let json = o.string("json") {
            let doc: [String: Any] = ["flips": flips, "seed": seed, "outcomes": outcomes, "byLocation": byLocation,
                                      "wrongCaughtByVerify": wrongCaughtByVerify, "details": wrongDetails, "readErrorKinds": readErrorKinds]
            try JSONSerialization.data(withJSONObject: doc, options: [.prettyPrinted, .sortedKeys]).write(to: URL(fileURLWithPath: json))
        }
        if o.string("keep") == nil { try? fm.removeItem(atPath: workdir) }
    }

    static func classify(_ r: [String: Any]) -> String {
        if r["open"] as? String != "ok" { return "open-error" }
        let wrong = (r["wrong"] as? Int ?? 0) + (r["missing"] as? Int ?? 0) + (r["extra"] as? Int ?? 0) + (r["wrongCounts"] as? Int ?? 0)
        if wrong > 0 { return "wrong-value" }
        if (r["readErrors"] as? Int ?? 0) > 0 || (r["verifyOK"] as? Bool) != true { return "detected" }
        return "no-effect"
    }

    static func errorKind(_ e: String) -> String {
        if e.hasPrefix("corrupt state record") { return "corruptRecord" }
        if e.hasPrefix("corrupt log entry") { return "corruptLogEntry" }
        if e.hasPrefix("LMDB:") { return "lmdb(" + (e.range(of: "MDB_[A-Z_]+", options: .regularExpression).map { String(e[$0]) } ?? "other") + ")" }
        return "other"
    }

    /// Where `offset` falls: meta page, or the page type from its LMDB header, and for leaf and
    /// branch pages whether the byte is in the header, the node-pointer array, the free gap or the nodes.
    static func describe(_ offset: Int, in file: [UInt8]) -> String {
        let page = offset / pageSize
        if page < 2 { return "meta page" }
        let base = page * pageSize
        guard base + 16 <= file.count else { return "past the end" }
        let flags = UInt16(file[base + 10]) | UInt16(file[base + 11]) << 8
        let lower = Int(UInt16(file[base + 12]) | UInt16(file[base + 13]) << 8)
        let upper = Int(UInt16(file[base + 14]) | UInt16(file[base + 15]) << 8)
        let kind: String
        if flags & 0x04 != 0 { return "overflow page" }
        else if flags & 0x01 != 0 { kind = "branch page" }
        else if flags & 0x02 != 0 { kind = "leaf page" }
        else { return "other page (flags \(flags))" }
        let at = offset - base
        if at < 16 { return kind + ": header" }
        if at < lower { return kind + ": node pointers" }
        if at < upper { return kind + ": free gap" }
        return kind + ": nodes"
    }

    static func find(_ needle: [UInt8], in hay: [UInt8]) -> [Int] {
        guard let first = needle.first, needle.count <= hay.count else { return [] }
        var out: [Int] = []
        var i = 0
        while i <= hay.count - needle.count {
            if hay[i] == first && Array(hay[i..<i + needle.count]) == needle { out.append(i) }
            i += 1
        }
        return out
    }

    /// Copies the store with `mdb_env_copy2(MDB_CP_COMPACT)` into the same directory layout.
    static func compactCopy(from source: String, to destination: String) throws {
        let fm = FileManager.default
        try fm.copyItem(atPath: source, toPath: destination)
        let sourceEnv = (try? fm.destinationOfSymbolicLink(atPath: source + "/current")).map { source + "/" + $0 } ?? source
        let destEnv = (try? fm.destinationOfSymbolicLink(atPath: destination + "/current")).map { destination + "/" + $0 } ?? destination
        let scratch = destination + ".compact"
        try fm.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        var env: OpaquePointer?
        func check(_ rc: Int32, _ what: String) throws {
            if rc != 0 { throw NSError(domain: "lmdb", code: Int(rc), userInfo: [NSLocalizedDescriptionKey: "\(what): \(String(cString: mdb_strerror(rc)))"]) }
        }
        try check(mdb_env_create(&env), "mdb_env_create")
        defer { mdb_env_close(env) }
        try check(mdb_env_set_maxdbs(env, 16), "mdb_env_set_maxdbs")
        try check(mdb_env_open(env, sourceEnv, UInt32(MDB_RDONLY), 0o644), "mdb_env_open")
        try check(mdb_env_copy2(env, scratch, UInt32(MDB_CP_COMPACT)), "mdb_env_copy2")
        try? fm.removeItem(atPath: destEnv + "/data.mdb")
        try? fm.removeItem(atPath: destEnv + "/lock.mdb")
        try fm.moveItem(atPath: scratch + "/data.mdb", toPath: destEnv + "/data.mdb")
        try? fm.removeItem(atPath: scratch)
    }

    /// A small store: albums, genres, groups of tracks in playlists, updates and deletes.
    static func build(_ path: String) throws -> [String] {
        let store = try Store.open(at: URL(fileURLWithPath: path), schema: librarySchema())
        defer { store.close() }
        var rng = SplitMix64(seed: 3)
        var titles: [String] = []
        var groups: [(ObjectID, [ObjectID])] = []
        let created = Date(timeIntervalSince1970: 1_700_000_000)
        let genre = Genre(name: "Flip Jazz"), album = Album(mbid: UUID(), title: "Flip Album")
        _ = try blocking { try await store.save { $0.insert(genre); $0.insert(album) } }
        for n in 0..<40 {
            var c = ChangeSet()
            switch n % 5 {
            case 3 where !groups.isEmpty:
                let g = groups[Int(rng.next() % UInt64(groups.count))]
                c.set(Track.rating, of: g.1[0], to: Double(n) / 2)
                c.set(Track.genre, of: g.1[0], to: genre.id)
            case 4 where groups.count > 3:
                let g = groups.remove(at: 0)
                c.delete(g.0)
                for t in g.1 { c.delete(t) }
            default:
                let p = Playlist(name: "flip playlist \(n)", createdAt: created, notes: "k=3")
                c.insert(p)
                var ids: [ObjectID] = []
                for i in 0..<3 {
                    let title = "flipT-\(n)-\(i)-" + String(repeating: "abcdefgh", count: 4)
                    let t = Track(mbid: UUID(), title: title, durationSeconds: 100 + n, trackNumber: i, addedAt: created)
                    c.insert(t)
                    c.add(t.id, to: Playlist.tracks, of: p.id)
                    c.set(Track.album, of: t.id, to: album.id)
                    ids.append(t.id)
                    titles.append(title)
                }
                groups.append((p.id, ids))
            }
            _ = try blocking { [c] in try await store.save(c) }
        }
        return titles
    }

    // MARK: What every read must return

    static func canonical(_ e: LogEntry) -> String {
        "\(e.author)|\(e.schemaVersion)|\(e.timestampMs)|\(e.metadata.sorted { $0.key < $1.key })|\(e.changes.map { "\($0)" }.joined(separator: ";"))"
    }

    static func canonical(_ r: Record) -> String { "\(r) v\(r.version)" }

    /// The title in a canonical Track record (`Track(id, mbid: …, title: flipT-…, …)`).
    static func titleOf(_ canonical: String) -> String? {
        guard canonical.hasPrefix("Track("), let r = canonical.range(of: "title: ") else { return nil }
        let quoted = canonical[r.upperBound...].prefix { $0 != "," }
        return String(quoted.dropFirst().dropLast())
    }

    static func snapshotOf(_ store: Store) throws -> [String: Any] {
        var log: [String: String] = [:]
        try store.forEachTransaction { e in
            log[String(e.transactionID.rawValue)] = canonical(e)
            return true
        }
        let context = try store.newViewContext(label: "flip-truth")
        defer { context.close() }
        var objects: [String: String] = [:]
        var links: [String: [String]] = [:]
        var counts: [String: Int] = [:]
        for e in store.schema.entities {
            let records = try context.fetch(Query(entity: e.name))
            counts[e.name] = records.count
            for r in records {
                objects[r.id.description] = canonical(r)
                for rel in e.relationships {
                    let ids = try context.relatedIDs(rel, of: r.id).map(\.description).sorted()
                    if !ids.isEmpty { links[r.id.description + "." + rel.name] = ids }
                }
            }
        }
        return ["head": Int(try store.lastTransactionID.rawValue), "log": log, "objects": objects, "links": links, "counts": counts]
    }

    static func writeExpected(_ path: String, to file: String) throws {
        let store = try Store.open(at: URL(fileURLWithPath: path), schema: librarySchema())
        defer { store.close() }
        let doc = try snapshotOf(store)
        try JSONSerialization.data(withJSONObject: doc, options: [.sortedKeys]).write(to: URL(fileURLWithPath: file))
    }

    /// `flip-check`: opens the flipped copy, compares every read with the truth, runs verify().
    /// Prints one JSON line.
    static func check(_ o: Options) throws {
        let path = o.require("store")
        let expected = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: o.require("expected")))) as! [String: Any]
        var r: [String: Any] = ["open": "ok"]
        var readErrors = 0, wrong = 0, missing = 0, extra = 0, wrongCounts = 0
        var firstError: String?, firstWrong: String?
        func readFailed(_ e: Error) {
            readErrors += 1
            if firstError == nil { firstError = "\(e)" }
        }
        func wrongValue(_ what: String) {
            wrong += 1
            if firstWrong == nil { firstWrong = what }
        }
        defer {
            r["readErrors"] = readErrors; r["wrong"] = wrong; r["missing"] = missing; r["extra"] = extra; r["wrongCounts"] = wrongCounts
            if let firstError { r["firstError"] = firstError }
            if let firstWrong { r["firstWrong"] = firstWrong }
            if let data = try? JSONSerialization.data(withJSONObject: r, options: [.sortedKeys]) { emit(String(decoding: data, as: UTF8.self)) }
        }
        let store: Store
        do {
            store = try Store.open(at: URL(fileURLWithPath: path), schema: librarySchema())
        } catch {
            r["open"] = "error"
            r["openError"] = "\(error)"
            return
        }
        defer { store.close() }
        let log = expected["log"] as! [String: String]
        let objects = expected["objects"] as! [String: String]
        let links = expected["links"] as! [String: [String]]
        let counts = expected["counts"] as! [String: Int]
        do {
            let head = try store.lastTransactionID.rawValue
            if head != UInt64(expected["head"] as! Int) { wrongValue("head is \(head), expected \(expected["head"]!)") }
        } catch { readFailed(error) }
        for (tx, want) in log {
            do {
                let e = try store.changes(in: TransactionID(UInt64(tx)!))
                if canonical(e) != want { wrongValue("transaction \(tx) reads differently") }
            } catch StrataError.noSuchTransaction {
                missing += 1
                if firstWrong == nil { firstWrong = "transaction \(tx) is missing" }
            } catch { readFailed(error) }
        }
        guard let context = try? store.newViewContext(label: "flip-check") else {
            readFailed(StrataError.closed(path: path))
            return
        }
        defer { context.close() }
        for e in store.schema.entities {
            do {
                let records = try context.fetch(Query(entity: e.name))
                var seen = Set<String>()
                for rec in records {
                    let id = rec.id.description
                    seen.insert(id)
                    if let want = objects[id] {
                        if canonical(rec) != want { wrongValue("fetch \(e.name) \(id): \(canonical(rec)) instead of \(want)") }
                    } else {
                        extra += 1
                        if firstWrong == nil { firstWrong = "fetch \(e.name) returned \(id), which does not exist" }
                    }
                }
                let want = counts[e.name] ?? 0
                if records.count != want && firstWrong == nil { firstWrong = "fetch \(e.name) returned \(records.count) records, expected \(want)" }
                missing += objects.keys.filter { $0.hasPrefix("") && !seen.contains($0) && ObjectID(string: $0)?.entityTag == e.tag }.count
            } catch { readFailed(error) }
            do {
                let n = try context.count(Query(entity: e.name))
                if n != counts[e.name] ?? 0 {
                    wrongCounts += 1
                    if firstWrong == nil { firstWrong = "count(\(e.name)) is \(n), expected \(counts[e.name] ?? 0)" }
                }
            } catch { readFailed(error) }
        }
        for (id, want) in objects {
            do {
                if let rec = try context.record(ObjectID(string: id)!) {
                    if canonical(rec) != want { wrongValue("record \(id): \(canonical(rec)) instead of \(want)") }
                } else {
                    missing += 1
                    if firstWrong == nil { firstWrong = "record \(id) reads as absent" }
                }
            } catch { readFailed(error) }
            guard let oid = ObjectID(string: id), let entity = store.schema.entity(tag: oid.entityTag) else { continue }
            // Queries answered from the title and duration indexes find exactly the objects the truth has.
            if entity.name == "Track", let title = titleOf(want) {
                do {
                    let byTitle = try context.fetch(Track.self, where: Track.title == title).map(\.id.description)
                    let expectedIDs = objects.filter { titleOf($0.value) == title }.map(\.key).sorted()
                    if byTitle.sorted() != expectedIDs { wrongValue("query title == \(title) returned \(byTitle), expected \(expectedIDs)") }
                } catch { readFailed(error) }
            }
            for rel in entity.relationships {
                do {
                    let ids = try context.relatedIDs(rel, of: oid).map(\.description).sorted()
                    if ids != (links[id + "." + rel.name] ?? []) { wrongValue("\(entity.name).\(rel.name) of \(id) differs") }
                } catch { readFailed(error) }
            }
        }
        do {
            let info = try store.info()
            if info.entities != counts {
                wrongCounts += 1
                if firstWrong == nil { firstWrong = "info() counts \(info.entities), expected \(counts)" }
            }
        } catch { readFailed(error) }
        do {
            let report = try store.verify()
            r["verifyOK"] = report.ok
            if !report.ok { r["verifyProblems"] = Array(report.problems.prefix(3)) }
        } catch {
            r["verifyOK"] = false
            r["verifyError"] = "\(error)"
        }
    }
}

extension FlipCampaign {
    /// `branch-flip`: a store of `--tracks` tracks (enough for the objects database to have a
    /// branch page), compacted; one byte of an object-id key in a branch page is changed, as a
    /// flip would. Then: how many tracks does a point read (`record(id)`) report absent, how many
    /// does a scan find, does `verify()` notice? Prints `READS absent=… scanned=… of=…`, then `VERIFY ok|<first problem>` (or the
    /// process ends on SIGALRM when verify() does not return within `--verify-timeout` seconds),
    /// or `NO-BRANCH` when the objects database fits in one leaf.
    static func branchFlip(_ o: Options) throws {
        let workdir = o.require("workdir")
        let n = o.int("tracks", default: 400)
        let fm = FileManager.default
        try? fm.removeItem(atPath: workdir)
        try fm.createDirectory(atPath: workdir, withIntermediateDirectories: true)
        let built = workdir + "/built", store = workdir + "/store"
        var ids: [ObjectID] = []
        do {
            let s = try Store.open(at: URL(fileURLWithPath: built), schema: librarySchema())
            var c = ChangeSet()
            for i in 0..<n {
                let t = Track(mbid: UUID(), title: "branch \(i)", durationSeconds: i + 1, addedAt: Date(timeIntervalSince1970: 1_700_000_000))
                c.insert(t)
                ids.append(t.id)
            }
            _ = try blocking { [c] in try await s.save(c) }
            s.close()
        }
        try compactCopy(from: built, to: store)
        let path = dataFile(store)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        var flipped = false
        pages: for page in 2..<(bytes.count / pageSize) {
            let base = page * pageSize
            let flags = UInt16(bytes[base + 10]) | UInt16(bytes[base + 11]) << 8
            guard flags & 0x01 != 0 else { continue }
            let lower = Int(UInt16(bytes[base + 12]) | UInt16(bytes[base + 13]) << 8)
            let count = (lower - 16) / 2
            // Node 0 of a branch page has an empty key; a node is [lo u16][hi u16][flags u16][ksize u16][key].
            // The last separator is raised (as flip 48 of the seed-11 campaign did): keys of the last
            // child below the new value are now routed to the previous child, where a lookup does
            // not find them, while the order of the separators, and so every cursor walk, stays intact.
            guard count >= 2 else { continue }
            let ptr = Int(UInt16(bytes[base + 16 + 2 * (count - 1)]) | UInt16(bytes[base + 17 + 2 * (count - 1)]) << 8)
            let node = base + ptr
            let ksize = Int(UInt16(bytes[node + 6]) | UInt16(bytes[node + 7]) << 8)
            if ksize == 16 && bytes[node + 8] == 0 && bytes[node + 9] == UInt8(Track.entityTag) {
                bytes[node + 8 + 2] = 0xFF
                flipped = true
                break pages
            }
        }
        guard flipped else {
            emit("NO-BRANCH")
            return
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let s = try Store.open(at: URL(fileURLWithPath: store), schema: librarySchema())
        defer { s.close() }
        var absent = 0
        for id in ids where try s.mainContext.record(id) == nil { absent += 1 }
        let scanned = try s.mainContext.fetch(Query(entity: "Track")).count
        emit("READS absent=\(absent) scanned=\(scanned) of=\(n)")
        // verify() is bounded: SIGALRM ends the process if it does not return.
        alarm(UInt32(o.int("verify-timeout", default: 20)))
        do {
            let report = try s.verify()
            emit("VERIFY \(report.ok ? "ok" : report.problems.first ?? "failed")")
        } catch {
            emit("VERIFY \(error)")
        }
    }
}
