import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `verify()`'s two methods: the in-memory check (log folded, states compared by digest) and the
/// rebuild on disk it falls back to. Both must agree on every healthy store, and every damage the
/// rebuild names must also make the in-memory check fall back to it.
@Suite struct VerifyTests {
    /// The scratch environment of a `verify --rebuild` killed in the middle (twice the store's
    /// size) is removed by the next one, while a scratch some other process has open (stopped,
    /// its locks held) is left alone however old, as is an unlocked one made a moment ago (its
    /// process may be about to lock it). Killed runs left one each, for good, where no
    /// read-write open came to sweep them (a read-only store's go to the temporary directory).
    @Test(.timeLimit(.minutes(15))) func aKilledRebuildsScratchIsRemovedByTheNextOne() async throws {
        let dir = temporaryDirectory("verify-scratch")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            defer { store.close() }
            for batch in 0..<4 {
                _ = try await store.save { c in for i in 0..<10_000 { c.insert(Genre(name: "g\(batch)-\(i)")) } }
            }
        }
        func scratches() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix(StoreDirectory.scratchPrefix) }.sorted()
        }
        func backdate(_ name: String) {
            var times = [timeval(tv_sec: time(nil) - 600, tv_usec: 0), timeval(tv_sec: time(nil) - 600, tv_usec: 0)]
            #expect(utimes(dir.path + "/" + name, &times) == 0)
        }
        // A rebuild caught with its scratch open: stopped, it still holds liblmdb's lock on it. It
        // runs in slices of a millisecond between stops, so it cannot finish between two looks
        // however loaded the machine is (a verify of these 40,000 objects takes about 0.4 s).
        let dirPath = dir.path
        let caught: (ChildProcess, String)? = try await onOwnThread {
            func state(_ pid: pid_t) -> Character? {
                (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8))
                    .flatMap { $0.split(separator: ")").last?.dropFirst().first }
            }
            for _ in 0..<3 {
                let child = try ChildProcess.start(storectlPath, ["verify", dirPath, "--rebuild", "--quiet"])
                while state(child.pid) != "Z" {
                    child.kill(SIGSTOP)
                    while let s = state(child.pid), s != "T", s != "Z" { usleep(100) }
                    let names = ((try? FileManager.default.contentsOfDirectory(atPath: dirPath)) ?? [])
                        .filter { $0.hasPrefix(StoreDirectory.scratchPrefix) }
                    if let name = names.first, StoreLock.holders(ofLockFile: dirPath + "/" + name + "/lock.mdb") == [child.pid] {
                        return (child, name)
                    }
                    child.kill(SIGCONT)
                    usleep(1_000)
                }
                _ = child.wait()
            }
            return nil
        }
        let (child, held) = (caught?.0, caught?.1)
        let name = try #require(held, "the rebuild's scratch was never seen open")
        backdate(name)
        ScratchDirectories.removeAbandoned(in: dir.path)
        #expect(try scratches() == [name], "a scratch another process has open was removed")
        child?.kill(SIGKILL)
        _ = try await child?.finished()
        // Abandoned now; a moment old, it stays until it is old enough.
        #expect(utimes(dir.path + "/" + name, nil) == 0)
        ScratchDirectories.removeAbandoned(in: dir.path)
        #expect(try scratches() == [name])
        backdate(name)
        let again = try await storectl("verify", dir.path, "--rebuild", "--quiet")
        #expect(again.status == 0, "\(again.stderr)")
        let left = try scratches()
        #expect(left == [], "left behind: \(left)")
    }

    /// Random histories (inserts, updates, relationship changes, deletes with their nullify rule)
    /// verify in memory, with the same counts as the rebuild.
    @Test(arguments: [1, 2, 3, 4, 5] as [UInt64])
    func inMemoryAgreesWithTheRebuildOnRandomHistories(seed: UInt64) async throws {
        try await withLibraryStore { store in
            _ = try await randomTrackHistory(store, seed: seed, saves: 60)
            let fast = try store.verify()
            let rebuilt = try store.verify(rebuild: true)
            #expect(fast.ok && rebuilt.ok, "\(fast.problems) \(rebuilt.problems)")
            #expect(fast.method == .inMemory && rebuilt.method == .rebuild)
            #expect(fast.head == rebuilt.head && fast.transactions == rebuilt.transactions && fast.changes == rebuilt.changes)
            #expect(fast.entriesCompared == rebuilt.entriesCompared && fast.entriesCompared > 0)
        }
    }

    /// Enough objects that the digests are split into several parts and the log is read in
    /// several batches.
    @Test func inMemoryHandlesALargerStoreInBatches() async throws {
        try await withLibraryStore { store in
            var start = 0
            while start < 30_000 {
                let range = start..<start + 10_000
                _ = try await store.save { c in for i in range { c.insert(makeTrack(title: "t\(i)", duration: i % 900 + 1)) } }
                start += 10_000
            }
            let tracks = try store.mainContext.fetch(Track.self, limit: 5_000)
            _ = try await store.save { c in for t in tracks { c.set(Track.durationSeconds, of: t.id, to: 7) } }
            _ = try await store.save { c in for t in tracks.prefix(100) { c.delete(t.id) } }
            let report = try store.verify()
            #expect(report.ok && report.method == .inMemory, "\(report.problems)")
            // Setting a value an object already has is no change.
            #expect(report.changes == 30_000 + tracks.filter { $0.durationSeconds != 7 }.count + 100)
        }
    }

    @Test func aStoreOverTheObjectLimitIsRebuiltOnDisk() async throws {
        var config = StoreConfiguration()
        config.verifyInMemoryObjectLimit = 3
        try await withLibraryStore(config) { store in
            _ = try await store.save { c in for i in 0..<4 { c.insert(makeTrack(title: "t\(i)", duration: 1)) } }
            let report = try store.verify()
            #expect(report.ok && report.method == .rebuild, "\(report.problems)")
        }
        config.verifyInMemoryObjectLimit = 0
        try await withLibraryStore(config) { store in
            _ = try await store.save { $0.insert(makeTrack(title: "t", duration: 1)) }
            #expect(try store.verify().method == .rebuild)
        }
    }

    /// The fold holds at most `LogFold.linksPerObject` link entries (both directions of each
    /// edge) per object of the limit: a store of few objects and many edges is rebuilt on disk.
    @Test func theFoldsLinksAreBoundedByTheObjectLimit() async throws {
        var config = StoreConfiguration()
        config.verifyInMemoryObjectLimit = 20
        try await withLibraryStore(config) { store in
            let playlists = (0..<10).map { Playlist(name: "p\($0)", createdAt: Date(timeIntervalSince1970: 0)) }
            let tracks = (0..<10).map { makeTrack(title: "t\($0)", duration: 1) }
            _ = try await store.save { c in
                for p in playlists { c.insert(p) }
                for t in tracks { c.insert(t) }
            }
            // 70 edges: 140 entries, within the limit of 160.
            _ = try await store.save { c in
                for p in playlists.prefix(7) { for t in tracks { c.add(t.id, to: Playlist.tracks, of: p.id) } }
            }
            let within = try store.verify()
            #expect(within.ok && within.method == .inMemory, "\(within.problems)")
            // 100 edges: 200 entries, over it.
            _ = try await store.save { c in
                for p in playlists.suffix(3) { for t in tracks { c.add(t.id, to: Playlist.tracks, of: p.id) } }
            }
            #expect(LogFold.linksPerObject * config.verifyInMemoryObjectLimit < 200)
            let over = try store.verify()
            #expect(over.ok && over.method == .rebuild, "\(over.problems)")
            #expect(over.entriesCompared == within.entriesCompared + 60)
        }
    }

    @Test func anEmptyStoreVerifiesInMemory() async throws {
        try await withLibraryStore { store in
            let report = try store.verify()
            #expect(report.ok && report.method == .inMemory && report.transactions == 0 && report.entriesCompared == 0)
        }
    }

    /// Damage the digests see that no checksum does: a count, a unique key pointing at another
    /// object, an index entry with a value, an extra index entry. Each is reported by the
    /// rebuild (the in-memory check fell back to it).
    @Test(arguments: ["count", "unique", "indexValue", "extraIndex", "missingUnique"])
    func damageOnlyTheDigestsCatchIsNamedByTheRebuild(kind: String) async throws {
        try await withLibraryStore { store in
            _ = try await randomTrackHistory(store, seed: 9, saves: 30)
            let tracks = try store.mainContext.fetch(Track.self, limit: 2)
            try #require(tracks.count == 2)
            let env = store.env
            try env.write { txn in
                switch kind {
                case "count":
                    var w = ByteWriter(capacity: 8)
                    w.u64(999)
                    try txn.put(env[.counts], key: MetaKey.count(Track.entityTag), value: w.bytes)
                case "unique", "missingUnique":
                    var key: [UInt8]?
                    try txn.scan(env[.uniques]) { k, v in
                        if v.elementsEqual(tracks[0].id.keyBytes) { key = Array(k); return false }
                        return true
                    }
                    let k = try #require(key)
                    if kind == "unique" {
                        try txn.put(env[.uniques], key: k, value: tracks[1].id.keyBytes)
                    } else {
                        _ = try txn.delete(env[.uniques], key: k)
                    }
                case "indexValue":
                    var first: [UInt8]?
                    try txn.scan(env[.indexes]) { k, _ in first = Array(k); return false }
                    try txn.put(env[.indexes], key: try #require(first), value: [1])
                default:
                    var first: [UInt8]?
                    try txn.scan(env[.indexes]) { k, _ in first = Array(k); return false }
                    // One byte longer than an existing key: no entry has it.
                    try txn.put(env[.indexes], key: try #require(first) + [0], value: [])
                }
            }
            let report = try store.verify()
            #expect(!report.ok && report.method == .rebuild)
            let database = ["count": "counts", "unique": "uniques", "missingUnique": "uniques", "indexValue": "indexes", "extraIndex": "indexes"][kind]!
            #expect(report.problems.contains { $0.hasPrefix("\(database):") }, "\(report.problems)")
        }
    }

    @Test func aCompactedStoreIsRebuiltOnDisk() async throws {
        try await withLibraryStore { store in
            _ = try await randomTrackHistory(store, seed: 4, saves: 20)
            _ = try await store.compact(horizon: try store.lastTransactionID)
            _ = try await store.save { $0.insert(makeTrack(title: "after", duration: 3)) }
            let report = try store.verify()
            #expect(report.ok && report.method == .rebuild, "\(report.problems)")
        }
    }

    /// Saves committed while verify runs do not disturb it: it verifies the head it started at.
    /// A save is made from another thread while each verify reports its first progress (the
    /// verify waits for it there), so every run has a save landing during it.
    @Test func verifyWhileSavingChecksTheHeadItStartedAt() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { c in for i in 0..<20_000 { c.insert(makeTrack(title: "t\(i)", duration: 1)) } }
            for round in 0..<3 {
                let start = try store.lastTransactionID
                let saved = Locked<Result<TransactionID, Error>?>(nil)
                let once = Locked(false)
                let report = try store.verify(rebuild: round == 2) { _ in
                    guard once.withLock({ first in defer { first = true }; return !first }) else { return }
                    let done = DispatchSemaphore(value: 0)
                    Thread {
                        let r = Result { try store.saveAndWait { $0.insert(makeTrack(title: "late\(round)", duration: 2)) } }
                        saved.withLock { $0 = r }
                        done.signal()
                    }.start()
                    _ = done.wait(timeout: .now() + 60)
                }
                let landed = try #require(saved.withLock { $0 }, "no save was made while verify ran").get()
                #expect(landed > start)
                #expect(report.ok, "\(report.problems)")
                #expect(report.head == start, "verified \(report.head), started at \(start), a save landed at \(landed)")
            }
            #expect(try store.verify().head == (try store.lastTransactionID))
        }
    }

    /// The on-disk rebuild asks for room for the state it rebuilds, not for twice the file: a
    /// store that is mostly log (objects inserted and deleted again) was refused for want of
    /// room (`ENOSPC`) it did not need.
    @Test func theRebuildAsksForRoomForTheStateNotForTheWholeFile() async throws {
        try await withLibraryStore { store in
            for round in 0..<6 {
                let tracks = (0..<6_000).map { makeTrack(title: "r\(round) t\($0)", duration: 1) }
                _ = try await store.save { c in for t in tracks { c.insert(t) } }
                _ = try await store.save { c in for t in tracks { c.delete(t.id) } }
            }
            _ = try await store.save { $0.insert(Genre(name: "kept")) }
            let file = store.env.fileBytes
            #expect(file > 2 << 20, "a file of \(file) bytes: the test needs one over twice the smallest scratch")
            // The store's directory has room for the state twice over, not for the file twice: the
            // scratch goes there (with too little room it would go to the temporary directory,
            // whose room other tests share, and which is not changed here).
            LMDBEnvironment.freeBytesForTesting.withLock { $0[store.path] = file }
            defer { _ = LMDBEnvironment.freeBytesForTesting.withLock { $0.removeValue(forKey: store.path) } }
            let path = store.path
            let inStoreDirectory = Locked(false)
            let report = try store.verify(rebuild: true) { _ in
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                if names.contains(where: { $0.hasPrefix(".scratch-") }) { inStoreDirectory.withLock { $0 = true } }
            }
            #expect(report.ok && report.method == .rebuild, "\(report.problems)")
            #expect(inStoreDirectory.withLock { $0 }, "the scratch went elsewhere: its room was asked for the whole file (\(file) bytes)")
            let left = try FileManager.default.contentsOfDirectory(atPath: store.path).filter { $0.hasPrefix(".scratch-") }
            #expect(left.isEmpty, "\(left)")
        }
    }

    /// With no snapshot slot for the second thread, one thread does both sides in turn.
    @Test func withOneSnapshotSlotVerifyRunsOnOneThread() async throws {
        var config = StoreConfiguration()
        config.maxOpenSnapshots = 1
        try await withLibraryStore(config) { store in
            _ = try await randomTrackHistory(store, seed: 21, saves: 30)
            let report = try store.verify()
            #expect(report.ok && report.method == .inMemory, "\(report.problems)")
            #expect(report.entriesCompared == (try store.verify(rebuild: true)).entriesCompared)
        }
    }

    /// What the fold must get exactly as the writer did: an object deleted and inserted again
    /// under its id (a context that wins over a delete), an insert and a delete in one
    /// transaction, to-many edges added and removed, and index and unique strings with NUL
    /// bytes, several scripts and more bytes than an index keeps.
    @Test func unusualHistoriesVerifyInMemory() async throws {
        try await withLibraryStore { store in
            let t = makeTrack(title: "kept", duration: 5)
            let p = Playlist(name: "p", createdAt: Date(timeIntervalSince1970: 0))
            _ = try await store.save { $0.insert(t); $0.insert(p) }
            // Reinsert: a child edits the track, the store deletes it, the child wins.
            let child = store.mainContext.newChild(label: "editor", mergePolicy: .contextWins)
            try child.set(Track.title, of: t.id, to: "edited")
            _ = try await store.save { $0.delete(t.id) }
            try await child.commit()
            #expect(try store.mainContext.record(t.id)?["title"] == .string("edited"))
            // Insert and delete in one transaction.
            let gone = makeTrack(title: "gone", duration: 6)
            _ = try await store.save { $0.insert(gone); $0.delete(gone.id) }
            // To-many edges, added then one removed.
            let others = (0..<3).map { makeTrack(title: "o\($0)", duration: 7) }
            _ = try await store.save { c in for o in others { c.insert(o); c.add(o.id, to: Playlist.tracks, of: p.id) } }
            _ = try await store.save { $0.remove(others[1].id, from: Playlist.tracks, of: p.id) }
            // Strings the sortable encoding escapes or truncates.
            let long = String(repeating: "ü", count: 300)
            _ = try await store.save { c in
                c.set(Track.title, of: others[0].id, to: "a\u{0}b\u{0}")
                c.set(Track.title, of: others[2].id, to: long)
                c.insert(Genre(name: "n\u{0}ul"))
                c.insert(Genre(name: String(repeating: "g", count: 400)))
            }
            let fast = try store.verify()
            let rebuilt = try store.verify(rebuild: true)
            #expect(fast.ok && fast.method == .inMemory, "\(fast.problems)")
            #expect(rebuilt.ok, "\(rebuilt.problems)")
            #expect(fast.entriesCompared == rebuilt.entriesCompared && fast.changes == rebuilt.changes)
        }
    }

    /// The fold keeps where each object's insert put its values and the values its updates set
    /// since, newest first, and decodes them only to digest: the same attribute set again and
    /// again (in separate saves and twice in one), several attributes per object, a value set
    /// back to null, an object deleted, inserted again under its id and updated.
    @Test func repeatedUpdatesOfTheSameObjectsVerifyInMemory() async throws {
        try await withLibraryStore { store in
            let tracks = (0..<20).map { makeTrack(title: "t\($0)", duration: $0 + 1, rating: 1) }
            _ = try await store.save { c in for t in tracks { c.insert(t) } }
            for round in 0..<5 {
                _ = try await store.save { c in
                    for (i, t) in tracks.enumerated() where i % (round + 1) == 0 {
                        c.set(Track.title, of: t.id, to: "r\(round)-\(i)")
                        c.set(Track.playCount, of: t.id, to: round * 10 + i)
                    }
                }
            }
            _ = try await store.save { c in
                c.set(Track.durationSeconds, of: tracks[0].id, to: 11)
                c.set(Track.durationSeconds, of: tracks[0].id, to: 12)
                c.set(Track.rating, of: tracks[2].id, to: nil)
            }
            _ = try await store.save { $0.delete(tracks[1].id) }
            // Inserted again with other values (a fold keeping the first insert's would differ).
            var again = makeTrack(title: "reborn", duration: 777, rating: 2)
            again = Track(id: tracks[1].id, mbid: again.mbid, title: again.title, durationSeconds: again.durationSeconds,
                          rating: again.rating, addedAt: again.addedAt)
            _ = try await store.save { $0.insert(again) }
            _ = try await store.save { $0.set(Track.title, of: tracks[1].id, to: "again") }
            let fast = try store.verify()
            let rebuilt = try store.verify(rebuild: true)
            #expect(fast.ok && fast.method == .inMemory, "\(fast.problems)")
            #expect(rebuilt.ok && fast.entriesCompared == rebuilt.entriesCompared && fast.changes == rebuilt.changes)
            // What was compared are the latest values.
            let first = try #require(try store.mainContext.object(Track.self, id: tracks[0].id))
            #expect(first.durationSeconds == 12 && first.title == "r4-0" && first.playCount == 40)
            let reborn = try #require(try store.mainContext.object(Track.self, id: tracks[1].id))
            #expect(reborn.title == "again" && reborn.durationSeconds == 777 && reborn.playCount == 0)
            #expect(try store.mainContext.object(Track.self, id: tracks[2].id)?.rating == nil)
        }
    }

    /// Attribute positions from 64 on (past what one machine word of flags would cover), each set
    /// several times, in separate saves and twice in one, one of them indexed.
    @Test func updatesOfAttributesPast64VerifyInMemory() async throws {
        let attributes = (0..<70).map { #"{"name":"a\#($0)","type":"int","optional":true}"# }.joined(separator: ",")
        let json = #"{"model":"wide","version":1,"entities":[{"name":"Wide","attributes":[\#(attributes)],"indexes":[["a66"]]}]}"#
        let schema = try Schema.parse(Array(json.utf8), source: "wide.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let e = try #require(schema.entity(named: "Wide"))
        var ids: [ObjectID] = []
        _ = try await store.save { c in
            for i in 0..<10 {
                var r = Record(entity: e)
                r["a0"] = .int(Int64(i))
                r["a66"] = .int(1)
                ids.append(r.id)
                c.insert(r)
            }
        }
        for round in 1...4 {
            _ = try await store.save { c in
                for id in ids {
                    c.update(id, [.init(attribute: 66, value: .int(Int64(round * 10))), .init(attribute: 69, value: .int(Int64(round)))])
                }
            }
        }
        _ = try await store.save { c in
            c.update(ids[0], [.init(attribute: 65, value: .int(5))])
            c.update(ids[0], [.init(attribute: 65, value: .int(6)), .init(attribute: 3, value: .int(3))])
        }
        let fast = try store.verify()
        let rebuilt = try store.verify(rebuild: true)
        #expect(fast.ok && fast.method == .inMemory, "\(fast.problems)")
        #expect(rebuilt.ok && fast.entriesCompared == rebuilt.entriesCompared)
        let first = try #require(try store.mainContext.record(ids[0]))
        #expect(first["a65"] == .int(6) && first["a66"] == .int(40) && first["a69"] == .int(4) && first["a3"] == .int(3))
    }

    /// The fold keeps one patch per attribute an update set (a value set again replaces it), and
    /// at most `LogFold.patchesPerObject` × the object limit: past that, verify rebuilds on disk.
    @Test func theFoldsPatchesAreBoundedByTheObjectLimit() async throws {
        var config = StoreConfiguration()
        config.verifyInMemoryObjectLimit = 2
        try await withLibraryStore(config) { store in
            let t = makeTrack(title: "t", duration: 1, rating: 1)
            _ = try await store.save { $0.insert(t) }
            // Two attributes set twenty times: two patches, within the limit of 8.
            for i in 1...20 {
                _ = try await store.save { c in
                    c.set(Track.playCount, of: t.id, to: i)
                    c.set(Track.title, of: t.id, to: "t\(i)")
                }
            }
            let within = try store.verify()
            #expect(within.ok && within.method == .inMemory, "\(within.problems)")
            // Seven more distinct attributes: nine patches, over it.
            _ = try await store.save { c in
                c.set(Track.durationSeconds, of: t.id, to: 2)
                c.set(Track.trackNumber, of: t.id, to: 3)
                c.set(Track.discNumber, of: t.id, to: 4)
                c.set(Track.explicit, of: t.id, to: true)
                c.set(Track.rating, of: t.id, to: 5)
                c.set(Track.isrc, of: t.id, to: "ISRC")
                c.set(Track.addedAt, of: t.id, to: Date(timeIntervalSince1970: 9))
            }
            #expect(LogFold.patchesPerObject * config.verifyInMemoryObjectLimit < 9)
            let over = try store.verify()
            #expect(over.ok && over.method == .rebuild, "\(over.problems)")
        }
    }

    /// A map that starts small (4 MiB): the first few thousand tracks fit, and the saves made
    /// while verify runs grow it (a growth takes the map to 1 GiB at once, so the store must
    /// fit the initial map before verify starts).
    static var smallGrowingMap: StoreConfiguration {
        var config = StoreConfiguration()
        config.initialMapSizeBytes = 4 << 20
        config.maxMapSizeBytes = 1 << 30
        return config
    }

    /// Saves that grow the map while verify runs. The fold reads values through places in the
    /// map, so verify holds the map lock from the first place it makes until its fold is done:
    /// a growth waits for that, and every verify still finds the store consistent in memory.
    @Test func mapGrowthsWhileVerifyRunsWaitForIt() async throws {
        try await withLibraryStore(Self.smallGrowingMap) { store in
            _ = try await store.save { c in for i in 0..<3_000 { c.insert(makeTrack(title: "t\(i)", duration: i % 600 + 1)) } }
            let growthsBefore = store.statistics.mapGrowths
            let saving = Task {
                for i in 0..<60 {
                    _ = try await store.save { c in
                        for j in 0..<200 { c.insert(makeTrack(title: "late \(i) \(j) " + String(repeating: "x", count: 100), duration: 2)) }
                    }
                }
            }
            var reports: [VerifyReport] = []
            for _ in 0..<12 { reports.append(try store.verify()) }
            try await saving.value
            for r in reports { #expect(r.ok && r.method == .inMemory, "\(r.problems)") }
            #expect(store.statistics.mapGrowths > growthsBefore)
        }
    }

    /// The moment the in-memory check is most exposed: its reading thread may have read the
    /// whole (small) log, and handed over every place in the map, before the folding thread starts.
    /// A hook stops the fold there while another thread saves enough to grow the map. The growth
    /// must wait for the fold (the reading thread holds the map lock until the fold releases it);
    /// had the map moved, the fold would read unmapped memory.
    @Test func aMapGrowthJustBeforeTheFoldWaitsForIt() async throws {
        try await withLibraryStore(Self.smallGrowingMap) { store in
            _ = try await store.save { c in for i in 0..<2_000 { c.insert(makeTrack(title: "t\(i)", duration: i % 600 + 1)) } }
            let growthsBefore = store.statistics.mapGrowths
            let saved = DispatchSemaphore(value: 0)
            let outcome = Locked<Result<TransactionID, Error>?>(nil)
            VerifyTestHooks.beforeFold.withLock {
                $0[store.path] = {
                    Thread.detachNewThread {
                        let r = Result {
                            try store.saveAndWait { c in
                                for i in 0..<20_000 { c.insert(makeTrack(title: "grow \(i) " + String(repeating: "g", count: 200), duration: 3)) }
                            }
                        }
                        outcome.withLock { $0 = r }
                        saved.signal()
                    }
                    // Long enough for the save to reach its map growth.
                    Thread.sleep(forTimeInterval: 0.5)
                }
            }
            defer { _ = VerifyTestHooks.beforeFold.withLock { $0.removeValue(forKey: store.path) } }
            let report = try store.verify()
            saved.wait()
            #expect(report.ok && report.method == .inMemory, "\(report.problems)")
            _ = try #require(outcome.withLock { $0 }).get()
            #expect(store.statistics.mapGrowths > growthsBefore)
        }
    }

    /// Two index entries swapped inside their leaf page (the page's node pointers exchanged, as a
    /// flipped pointer byte can do): every entry is still there, so a digest alone would match,
    /// but range seeks over the index now miss. verify's page check, which runs before anything
    /// else, finds the keys out of order and names the database, page and key.
    @Test func indexEntriesOutOfOrderInTheirPageAreFound() async throws {
        let dir = temporaryDirectory("verify-order")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("store")
        do {
            let store = try Store.open(at: url, schema: try librarySchema())
            _ = try await store.save { c in for i in 0..<50 { c.insert(makeTrack(title: "order \(1000 + i)", duration: i + 1)) } }
            #expect(try store.verify().method == .inMemory)
            store.close()
        }
        let file = dataFile(ofStore: url)
        var bytes = [UInt8](try Data(contentsOf: file))
        let pageSize = 4096, marker = Array("order 1".utf8)
        var swapped = false
        pages: for page in 2..<(bytes.count / pageSize) {
            let base = page * pageSize
            let flags = UInt16(bytes[base + 10]) | UInt16(bytes[base + 11]) << 8
            guard flags & 0x02 != 0 else { continue }   // P_LEAF
            let lower = Int(UInt16(bytes[base + 12]) | UInt16(bytes[base + 13]) << 8)
            // Leaf node: [lo u16][hi u16][flags u16][ksize u16][key]...; an index key of the title
            // index is [tag u16][0x01][title bytes]…
            var indexNodes: [Int] = []
            for n in 0..<(lower - 16) / 2 {
                let ptr = Int(UInt16(bytes[base + 16 + 2 * n]) | UInt16(bytes[base + 17 + 2 * n]) << 8)
                let key = base + ptr + 8
                if key + 3 + marker.count < bytes.count, bytes[key + 2] == 0x01, Array(bytes[key + 3..<key + 3 + marker.count]) == marker {
                    indexNodes.append(n)
                }
            }
            guard indexNodes.count >= 2 else { continue }
            let a = base + 16 + 2 * indexNodes[0], b = base + 16 + 2 * indexNodes[1]
            (bytes[a], bytes[a + 1], bytes[b], bytes[b + 1]) = (bytes[b], bytes[b + 1], bytes[a], bytes[a + 1])
            swapped = true
            break pages
        }
        try #require(swapped, "no leaf page of the title index found")
        try Data(bytes).write(to: file)
        let store = try Store.open(at: url, schema: try librarySchema())
        defer { store.close() }
        do {
            let report = try store.verify()
            Issue.record("verify returned a report for a page with keys out of order: \(report.ok) \(report.problems)")
        } catch StrataError.damagedStore(_, let reason) {
            #expect(reason.contains("database 'indexes'") && reason.contains("keys out of order"), "\(reason)")
        }
    }

    /// The block-copy fast path of the sortable string encoding gives the bytes of the plain
    /// byte-by-byte rule (0x00 → 0x00 0xFF, then 0x00 0x01), truncation included.
    @Test func sortableStringEncodingMatchesTheByteRule() {
        func reference(_ s: String, _ limit: Int) -> [UInt8] {
            var out: [UInt8] = [0x01]
            for b in s.utf8.prefix(limit) {
                out.append(b)
                if b == 0 { out.append(0xFF) }
            }
            return out + [0x00, 0x01]
        }
        let samples = ["", "a", "\u{0}", "a\u{0}", "\u{0}\u{0}b", "short", "exactly fifteen", "a longer string on the heap\u{0}!",
                       "Norðurljós", "日本語のタイトル", String(repeating: "é", count: 40), "🎵\u{0}🎶"]
        for s in samples {
            for limit in [Int.max, 0, 1, 3, 7, 16] {
                var out: [UInt8] = []
                SortableEncoding.encode(.string(s), into: &out, truncateBytes: limit)
                #expect(out == reference(s, limit), "\(s.debugDescription) limit \(limit)")
            }
        }
    }

    /// The block encodings the writer uses: integers big-endian, and a record encoded after other
    /// bytes in a buffer is the record encoded alone (its checksum covers only its own bytes).
    @Test func fixedWidthIntegersAndRecordsEncodeAsBefore() throws {
        var w = ByteWriter()
        w.u32(0x0102_0304)
        w.u64(0x1122_3344_5566_7788)
        #expect(w.bytes == [1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88])
        let schema = try librarySchema()
        var r = Record(entity: try #require(schema.entity(named: "Track")))
        r["title"] = .string("Norðurljós")
        r["durationSeconds"] = .int(196)
        r.version = TransactionID(42)
        let alone = RecordCodec.encode(r)
        var after = ByteWriter()
        after.append([9, 9, 9])
        RecordCodec.encode(r, into: &after)
        #expect(Array(after.bytes.dropFirst(3)) == alone)
        let decoded = try alone.withUnsafeBytes { try RecordCodec.decode($0, id: r.id, schema: schema) }
        #expect(decoded == r)
    }

    @Test func digestIgnoresOrderAndSeesEveryByte() {
        let entries: [([UInt8], [UInt8])] = (0..<50).map { i in (Array("key\(i)".utf8), Array(repeating: UInt8(i), count: i % 13)) }
        var forward = EntryDigest(), backward = EntryDigest()
        for (k, v) in entries { forward.add(key: k, value: v) }
        for (k, v) in entries.reversed() { backward.add(key: k, value: v) }
        #expect(forward == backward && forward.count == 50)
        // One bit anywhere, a byte moved from key to value, an entry twice: all different.
        for (i, (k, v)) in entries.enumerated() where !v.isEmpty {
            var flipped = EntryDigest()
            for (j, (k2, v2)) in entries.enumerated() {
                var v3 = v2
                if j == i { v3[v3.count - 1] ^= 0x80 }
                flipped.add(key: k2, value: v3)
            }
            #expect(flipped != forward, "flip in entry \(i) unseen")
            var moved = EntryDigest()
            for (j, (k2, v2)) in entries.enumerated() {
                if j == i { moved.add(key: k + [v[0]], value: Array(v.dropFirst())) } else { moved.add(key: k2, value: v2) }
            }
            #expect(moved != forward, "byte moved across the key boundary of entry \(i) unseen")
        }
        var twice = forward
        twice.add(key: entries[0].0, value: entries[0].1)
        #expect(twice != forward)
        // Trailing zero bytes count.
        var a = EntryDigest(), b = EntryDigest()
        a.add(key: [1], value: [0])
        b.add(key: [1], value: [0, 0])
        #expect(a != b)
        // An empty value hashes alike with or without an address.
        var withAddress = EntryDigest(), without = EntryDigest()
        let storage: [UInt8] = [7]
        storage.withUnsafeBytes { raw in withAddress.add(key: UnsafeRawBufferPointer(start: raw.baseAddress, count: 1),
                                                          value: UnsafeRawBufferPointer(start: raw.baseAddress, count: 0)) }
        without.add(key: [7], value: UnsafeRawBufferPointer(start: nil, count: 0))
        #expect(withAddress == without)
        var split = EntryDigest(), whole = EntryDigest()
        split.add(key: [1], value: [])
        split.formUnion({ var d = EntryDigest(); d.add(key: [2], value: []); return d }())
        whole.add(key: [2], value: [])
        whole.add(key: [1], value: [])
        #expect(split == whole)
    }
}
