import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Corruption: random byte flips in log entries and state records must be detected on read (an
/// error naming the transaction or object) and by verify(), never read back as a wrong value.
/// Truncated and garbage data files must be a clear error at open, never a crash.
/// The on-disk campaign over whole pages (Tools/reliability/flip-campaign) is the long run.
@Suite(.serialized) struct DataFileCorruptionTests {
    /// A store with a little of everything: 50 transactions of inserts, updates, deletes, links.
    func buildPristine(_ url: URL) async throws -> (transactions: [TransactionID], records: [ObjectID: Record]) {
        let store = try Store.open(at: url, schema: try librarySchema())
        defer { store.close() }
        var rng = SeededGenerator(seed: 31)
        let album = Album(mbid: UUID(), title: "A")
        let genre = Genre(name: "G")
        _ = try await store.save { $0.insert(album); $0.insert(genre) }
        var tracks: [ObjectID] = []
        for n in 0..<49 {
            var c = ChangeSet()
            switch n % 4 {
            case 3 where tracks.count > 2:
                c.delete(tracks.remove(at: Int.random(in: 0..<tracks.count, using: &rng)))
            case 2 where !tracks.isEmpty:
                let id = tracks[Int.random(in: 0..<tracks.count, using: &rng)]
                c.set(Track.rating, of: id, to: Double(n))
                c.set(Track.genre, of: id, to: genre.id)
            default:
                let t = makeTrack(title: "track \(n) " + String(repeating: "z", count: n), duration: n + 1)
                c.insert(t)
                c.set(Track.album, of: t.id, to: album.id)
                tracks.append(t.id)
            }
            _ = try await store.save(c)
        }
        let transactions = try store.transactions().map(\.transactionID)
        var records: [ObjectID: Record] = [:]
        for e in store.schema.entities {
            for r in try store.mainContext.fetch(Query(entity: e.name)) { records[r.id] = r }
        }
        return (transactions, records)
    }

    func copy(_ pristine: URL, to url: URL) throws {
        try FileManager.default.copyItem(at: pristine, to: url)
    }

    /// 200 flips (1–3 bytes XORed with random non-zero masks), half in log entries, half in state
    /// records, each on a fresh copy of the store.
    @Test func randomFlipsInLogEntriesAndRecordsAreAlwaysDetected() async throws {
        let dir = temporaryDirectory("flips")
        defer { try? FileManager.default.removeItem(at: dir) }
        let pristine = dir.appendingPathComponent("pristine")
        let (transactions, records) = try await buildPristine(pristine)
        let ids = records.keys.sorted()
        var rng = SeededGenerator(seed: 4242)
        var detectedOnRead = 0, detectedByVerify = 0, flips = 0
        for n in 0..<200 {
            let url = dir.appendingPathComponent("copy-\(n)")
            try copy(pristine, to: url)
            defer { try? FileManager.default.removeItem(at: url) }
            let store = try Store.open(at: url, schema: try librarySchema())
            defer { store.close() }
            let inLog = n % 2 == 0
            let tx = transactions.randomElement(using: &rng)!
            let id = ids.randomElement(using: &rng)!
            let (db, key): (DatabaseName, [UInt8]) = inLog ? (.log, tx.keyBytes) : (.objects, id.keyBytes)
            let flipped = Int.random(in: 1...3, using: &rng)
            var positions: [Int] = []
            let env = store.env
            try env.write { txn in
                var bytes = try #require(try txn.withValue(env[db], key: key) { Array($0) })
                for _ in 0..<flipped {
                    let at = Int.random(in: 0..<bytes.count, using: &rng)
                    bytes[at] ^= UInt8.random(in: 1...255, using: &rng)
                    positions.append(at)
                }
                try txn.put(env[db], key: key, value: bytes)
            }
            flips += 1
            let what = inLog ? "log entry \(tx)" : "record \(id)"
            // Reading it: an error naming it, never a value.
            if inLog {
                do {
                    let e = try store.changes(in: tx)
                    Issue.record("flip \(n) at \(positions) in \(what) read back without an error: \(e.changes.count) changes")
                } catch StrataError.corruptLogEntry(let t, _) {
                    #expect(t == tx)
                    detectedOnRead += 1
                }
            } else {
                do {
                    let r = try store.mainContext.record(id)
                    Issue.record("flip \(n) at \(positions) in \(what) read back without an error: \(String(describing: r)) (was \(records[id]!))")
                } catch StrataError.corruptRecord(let i, _) {
                    #expect(i == id)
                    detectedOnRead += 1
                }
                // A fetch that visits it fails too, instead of skipping it.
                let entity = try #require(store.schema.entity(tag: id.entityTag))
                #expect(throws: StrataError.self, "fetch of \(entity.name) skipped \(what)") { try store.mainContext.fetch(Query(entity: entity.name)) }
            }
            let report = try store.verify()
            if !report.ok { detectedByVerify += 1 }
            let named = inLog ? "transaction \(tx)" : "\(id)"
            #expect(report.problems.contains { $0.contains(named) }, "verify did not name \(what): \(report.problems)")
        }
        #expect(detectedOnRead == flips && detectedByVerify == flips)
        print("value flips: \(flips) flips, \(detectedOnRead) detected on read, \(detectedByVerify) by verify()")
    }

    /// A record moved to a key with one bit flipped (what a flip in the key bytes of an LMDB leaf
    /// node does) reads back as an object that was never created.
    @Test
    func flippedObjectKeyIsReportedOnRead() async throws {
        try await withLibraryStore { store in
            let t = makeTrack(title: "victim", duration: 10)
            _ = try await store.save { $0.insert(t) }
            var flippedKey = t.id.keyBytes
            flippedKey[15] ^= 0x01
            let env = store.env
            try env.write { txn in
                let value = try #require(try txn.withValue(env[.objects], key: t.id.keyBytes) { Array($0) })
                _ = try txn.delete(env[.objects], key: t.id.keyBytes)
                try txn.put(env[.objects], key: flippedKey, value: value)
            }
            #expect(throws: StrataError.self, "fetch returned a Track whose id was never created") {
                let tracks = try store.mainContext.fetch(Track.self)
                print("fetched \(tracks.map(\.id)), inserted \(t.id)")
            }
        }
    }

    /// A log entry moved to a key with one bit flipped reads back as another transaction.
    @Test
    func flippedLogKeyIsReportedOnRead() async throws {
        try await withLibraryStore { store in
            for i in 0..<3 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            let env = store.env
            try env.write { txn in
                let value = try #require(try txn.withValue(env[.log], key: TransactionID(2).keyBytes) { Array($0) })
                _ = try txn.delete(env[.log], key: TransactionID(2).keyBytes)
                try txn.put(env[.log], key: TransactionID(2 ^ 0x40).keyBytes, value: value)
            }
            #expect(throws: StrataError.self, "transaction 66 read back although it was never committed") {
                let e = try store.changes(in: TransactionID(66))
                print("changes(in: 66) returned \(e.changes)")
            }
        }
    }

    /// One byte of an object-id key in a branch page of the objects database changed (the last
    /// separator raised, as flip 48 of the seed-11 on-disk campaign did): point reads are routed to
    /// the wrong leaf and report existing objects absent (LMDB keys carry no checksum) while scans
    /// still see them. verify() must return and report the damage.
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first"))
    func corruptedBranchKeyIsReportedByVerify() async throws {
        let dir = temporaryDirectory("branch-flip")
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await runCrashChild("branch-flip", ["--workdir", dir.appendingPathComponent("w").path, "--tracks", "400", "--verify-timeout", "20"])
        let lines = r.stdout.split(separator: "\n").map(String.init)
        let reads = try #require(lines.first { $0.hasPrefix("READS") }, "\(r.stdout) \(r.stderr.suffix(300))")
        #expect(reads.contains("scanned=400"), "\(reads)")
        let verify = try #require(lines.first { $0.hasPrefix("VERIFY") }, "verify() did not return within 20 s (exit \(r.status)); \(reads)")
        #expect(verify != "VERIFY ok", "verify() passed a store whose point reads miss objects: \(reads)")
    }

    /// Truncated data files, cut at several points, each on a fresh copy, checked by the child
    /// program in its own process (a SIGBUS from reading past the end of the file is a crash).
    /// Cutting only unused trailing pages may read back complete; anything else must be an error.
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first"),
          arguments: ["8192", "16384", "half", "last page"])
    func truncatedDataFileIsAClearErrorNotACrash(cut: String) async throws {
        let dir = temporaryDirectory("truncated")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        let (transactions, records) = try await buildPristine(store)
        let file = dataFile(ofStore: store)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int)
        let at: Int = switch cut {
        case "half": size / 2 / 4096 * 4096
        case "last page": size - 4096
        default: Int(cut)!
        }
        let handle = try FileHandle(forWritingTo: file)
        try handle.truncate(atOffset: UInt64(at))
        try handle.close()
        let r = try await runCrashChild("read-all", ["--store", store.path])
        // The child answers every outcome on stdout and exits 0: any other status is a crash (a
        // signal's number, as the process runner reports it) or an unexpected end.
        #expect(r.status == 0 && !r.stderr.contains("Program crashed"),
                "truncated to \(at) of \(size) bytes: the process crashed (\(r.status)): \(r.stderr.split(separator: "\n").prefix(4).joined(separator: " / "))")
        let complete = "OK \(records.count) \(transactions.count)"
        #expect(r.stdout.hasPrefix("OPEN-ERROR") || r.stdout.hasPrefix("READ-ERROR") || r.stdout.hasPrefix("VERIFY-FAILED") || r.stdout.hasPrefix(complete),
                "truncated to \(at) of \(size) bytes, the store read back as: \(r.stdout) (complete would be \(complete))")
    }

    /// A data file emptied (truncated to 0 bytes) in an existing store must not open as a new,
    /// empty store: everything would be gone without a word.
    @Test
    func emptiedDataFileOfAnExistingStoreIsNotANewStore() async throws {
        let dir = temporaryDirectory("emptied")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        _ = try await buildPristine(store)
        let handle = try FileHandle(forWritingTo: dataFile(ofStore: store))
        try handle.truncate(atOffset: 0)
        try handle.close()
        do {
            let s = try Store.open(at: store, schema: try librarySchema())
            defer { s.close() }
            let head = try s.lastTransactionID
            Issue.record("a store whose data file was emptied opened as a new store (head \(head), \(try s.info().entities.values.reduce(0, +)) objects)")
        } catch let e as StrataError {
            #expect("\(e)".contains("data.mdb"), "\(e)")
        }
    }

    /// Garbage of several kinds in place of the data file: a clear error at open.
    @Test(arguments: ["zeros", "random", "text"])
    func garbageDataFileIsAClearErrorAtOpen(kind: String) async throws {
        let dir = temporaryDirectory("garbage")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        do {
            let s = try Store.open(at: store, schema: try librarySchema())
            _ = try await s.save { $0.insert(Genre(name: "x")) }
            s.close()
        }
        var rng = SeededGenerator(seed: 5)
        let bytes: [UInt8] = switch kind {
        case "zeros": [UInt8](repeating: 0, count: 65536)
        case "random": (0..<65536).map { _ in UInt8.random(in: 0...255, using: &rng) }
        default: Array(String(repeating: "not an lmdb file\n", count: 4000).utf8)
        }
        try Data(bytes).write(to: dataFile(ofStore: store))
        do {
            _ = try Store.open(at: store, schema: try librarySchema())
            Issue.record("garbage (\(kind)) opened as a store")
        } catch StrataError.notAStore(_, let reason) {
            #expect(reason.contains("LMDB") || reason.contains("data.mdb"), "\(reason)")
        }
    }
}
