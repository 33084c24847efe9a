import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Store formats 2 and 3 keep the per-entity counts in LMDB's main database, whose leaf every
/// commit rewrites anyway (format 1 kept them in `meta`: one more page a commit); format 3 may
/// hold compressed log entries, formats 1 and 2 never do. Stores of formats 1 and 2 still open,
/// save, verify and read; compaction and migration write format 3.
@Suite struct StoreFormatTests {
    /// The counts a store holds, read straight from `database` of its environment.
    private func storedCounts(_ env: LMDBEnvironment, in database: LMDBDatabase) throws -> [[UInt8]: [UInt8]] {
        try env.read { txn in
            var found: [[UInt8]: [UInt8]] = [:]
            try txn.scan(database, prefix: MetaKey.countPrefix) { k, v in
                found[Array(k)] = Array(v)
                return true
            }
            return found
        }
    }

    /// Sets the stored `format` value of `store` (what a store of that format holds).
    private func writeStoredFormat(_ store: Store, _ format: UInt32) throws {
        let env = store.env
        try env.write { txn in
            var w = ByteWriter(capacity: 4)
            w.u32(format)
            try txn.put(env[.meta], key: MetaKey.format, value: w.bytes)
        }
    }

    /// The stored `format` value.
    private func storedFormat(_ env: LMDBEnvironment) throws -> UInt32? {
        try env.read { try MetaKey.storedFormat($0, meta: env[.meta]) }
    }

    /// The live count of every entity, as a context reads it.
    private func counts(_ store: Store) throws -> [String: Int] {
        var result: [String: Int] = [:]
        for e in store.schema.entities { result[e.name] = try store.mainContext.count(Query(entity: e.name)) }
        #expect(try store.info().entities == result)
        return result
    }

    /// Rewrites the closed store at `url` as format 1 with raw LMDB: its counts moved from the main
    /// database into `meta`, and `format` set to 1 (what a store written before format 2 holds).
    private func rewriteAsFormat1(_ url: URL) throws {
        let path = url.appendingPathComponent("current").resolvingSymlinksInPath().path
        let env = try LMDBEnvironment(path: path, options: LMDBOptions(
            mapSizeBytes: 64 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: false, noLock: false))
        defer { env.close() }
        #expect(env[.counts].name == "main")
        let moved = try storedCounts(env, in: env[.counts])
        try #require(!moved.isEmpty)
        try env.write { txn in
            for (k, v) in moved {
                try txn.put(env[.meta], key: k, value: v)
                #expect(try txn.delete(env[.counts], key: k))
            }
            var format = ByteWriter(capacity: 4)
            format.u32(1)
            try txn.put(env[.meta], key: MetaKey.format, value: format.bytes)
        }
    }

    /// A store at `dir` with a seeded history of `saves` saves, rewritten as format 1; returns
    /// its live counts per entity.
    private func makeFormat1Store(at dir: URL, seed: UInt64, saves: Int) async throws -> [String: Int] {
        let store = try Store.open(at: dir, schema: try librarySchema())
        _ = try await randomTrackHistory(store, seed: seed, saves: saves)
        let before = try counts(store)
        store.close()
        try rewriteAsFormat1(dir)
        return before
    }

    @Test(arguments: [UInt16(0), 1, 7, 0x00FF, 0x0100, 0xABCD, 0xFFFF])
    func theStackCountKeyIsTheCountKey(tag: UInt16) {
        #expect(MetaKey.withCountKey(tag) { Array($0) } == MetaKey.count(tag))
        #expect(MetaKey.isCount(MetaKey.count(tag)))
    }

    @Test func aNewStoreIsOfTheCurrentFormatWithItsCountsInTheMainDatabase() async throws {
        try await withLibraryStore { store in
            _ = try await randomTrackHistory(store, seed: 4, saves: 25)
            let env = store.env
            #expect(env[.counts].name == "main")
            #expect(env[.counts].dbi != env[.meta].dbi)
            #expect(try storedFormat(env) == 3 && MetaKey.storeFormat == 3)
            #expect(try store.info().storeFormat == 3)
            let inMain = try storedCounts(env, in: env[.counts])
            #expect(try storedCounts(env, in: env[.meta]).isEmpty)
            // Every entity with objects has its count there, equal to what a scan finds.
            let expected = try counts(store)
            for e in store.schema.entities where expected[e.name]! > 0 {
                #expect(inMain[MetaKey.count(e.tag)] == MetaKey.countValue(expected[e.name]!))
                let scanned = try store.mainContext.fetch(Query(entity: e.name)).count
                #expect(scanned == expected[e.name]!)
            }
            // The named databases are still LMDB's records in the main database, untouched.
            let names = try env.read { txn in
                var names: [String] = []
                try txn.scan(env[.counts], prefix: nil) { k, _ in
                    if !k.starts(with: MetaKey.countPrefix) { names.append(String(decoding: k, as: UTF8.self)) }
                    return true
                }
                return names
            }
            #expect(names == DatabaseName.named.map(\.rawValue).sorted())
            #expect(try store.verify().ok)
            #expect(try store.verify(rebuild: true).ok)
        }
    }

    @Test func aFormat1StoreOpensSavesVerifiesAndCompactsToTheCurrentFormat() async throws {
        let dir = temporaryDirectory("format-1")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let before = try await makeFormat1Store(at: dir, seed: 11, saves: 40)

        // storectl says which format it is, and what rewrites it.
        let text = try await storectl("info", dir.path)
        #expect(text.status == 0 && text.stdout.contains("store format:     1 (counts in meta, log entries plain; storectl compact --horizon 0 rewrites it in format 3)"), "\(text.stdout)\(text.stderr)")
        let json = try JSONValue.parse(try await storectl("info", dir.path, "--json").stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(json["format"] == .int(1))
        #expect(json["entities"]?["Track"] == .int(Int64(before["Track"]!)))

        // Read-only: the counts are read from `meta`.
        do {
            let reader = try Store.openReadOnly(at: dir)
            defer { reader.close() }
            #expect(reader.env[.counts].name == "meta")
            #expect(try reader.info().storeFormat == 1)
            #expect(try counts(reader) == before)
        }

        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        #expect(store.env[.counts].name == "meta")
        #expect(try store.info().storeFormat == 1)
        #expect(try counts(store) == before)
        // Saves keep the counts where the format keeps them.
        let a = makeTrack(title: "format one a", duration: 100), b = makeTrack(title: "format one b", duration: 200)
        _ = try await store.save { $0.insert(a); $0.insert(b) }
        _ = try await store.save { $0.delete(a.id) }
        var after = before
        after["Track", default: 0] += 1
        #expect(try counts(store) == after)
        #expect(try storedCounts(store.env, in: store.env[.meta])[MetaKey.count(Track.entityTag)] == MetaKey.countValue(after["Track"]!))
        #expect(try storedFormat(store.env) == 1)
        // Verify reads the counts from `meta` here and from the main database of its rebuild.
        let inMemory = try store.verify()
        #expect(inMemory.ok && inMemory.method == .inMemory, "\(inMemory.problems)")
        let rebuilt = try store.verify(rebuild: true)
        #expect(rebuilt.ok, "\(rebuilt.problems)")

        // Compaction writes the new generation in format 3.
        _ = try await store.compact()
        #expect(store.env[.counts].name == "main")
        #expect(try storedFormat(store.env) == 3)
        #expect(try store.info().storeFormat == 3)
        #expect(try storedCounts(store.env, in: store.env[.meta]).isEmpty)
        #expect(try counts(store) == after)
        #expect(try store.verify().ok)
        #expect(try store.verify(rebuild: true).ok)
        let c = makeTrack(title: "format two", duration: 300)
        _ = try await store.save { $0.insert(c) }
        after["Track", default: 0] += 1
        #expect(try counts(store) == after)
    }

    @Test func aDamagedCountOfAFormat1StoreIsReportedByVerify() async throws {
        let dir = temporaryDirectory("format-1-damaged")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        _ = try await makeFormat1Store(at: dir, seed: 5, saves: 20)
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        #expect(try store.verify().ok)
        let env = store.env
        try env.write { txn in
            var w = ByteWriter(capacity: 8)
            w.u64(999)
            try txn.put(env[.meta], key: MetaKey.count(Track.entityTag), value: w.bytes)
        }
        #expect(try store.mainContext.count(Query(entity: "Track")) == 999)
        let report = try store.verify()
        #expect(!report.ok && report.method == .rebuild)
        #expect(report.problems.contains { $0.hasPrefix("counts: count/Track differs from the log") }, "\(report.problems)")
    }

    @Test(.timeLimit(.minutes(15))) func aFormat1StoreCompactedWhileSavingCatchesUpInTheCurrentFormat() async throws {
        let dir = temporaryDirectory("format-1-catch-up")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let before = try await makeFormat1Store(at: dir, seed: 6, saves: 30)
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        // Saves committed to the format-1 generation while the format-3 one is built: the
        // catch-up replays them into the new generation's counts.
        let saved = Locked(0)
        let phases = Locked<[CompactionProgress.Phase]>([])
        _ = try await store.compact { p in
            phases.withLock { $0.append(p.phase) }
            guard p.phase == .copying, saved.withLock({ $0 }) < 3 else { return }
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                _ = try? store.saveAndWait { $0.insert(Genre(name: "during the build \(UUID())")) }
                saved.withLock { $0 += 1 }
                done.signal()
            }
            done.wait()
        }
        #expect(saved.withLock { $0 } > 0)
        #expect(phases.withLock { $0 }.contains(.catchingUp), "\(phases.withLock { $0 })")
        var after = before
        after["Genre", default: 0] += saved.withLock { $0 }
        #expect(try storedFormat(store.env) == 3)
        #expect(try counts(store) == after)
        #expect(try storedCounts(store.env, in: store.env[.meta]).isEmpty)
        #expect(try store.verify(rebuild: true).ok)
    }

    @Test func aCompactedFormat1StoreVerifiesAndMigrates() async throws {
        let dir = temporaryDirectory("format-1-horizon")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        try await makeV1TrackStore(at: dir, schema: all[0])
        // A store an older Strata compacted part of the way: a horizon inside the log.
        do {
            let store = try Store.open(at: dir, schema: all[0])
            _ = try await store.compact(horizon: TransactionID(10))
            store.close()
        }
        try rewriteAsFormat1(dir)
        let tracks: Int
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            #expect(try store.info().storeFormat == 1)
            #expect(try store.read { try $0.horizon() } == TransactionID(10))
            tracks = try store.mainContext.count(Query(entity: "Track"))
            #expect(tracks > 0)
            let report = try store.verify(rebuild: true)
            #expect(report.ok, "\(report.problems)")
        }
        _ = try await Store.migrate(at: dir, schemas: all, registry: libraryMigrations)
        let store = try Store.open(at: dir, schema: all[1])
        defer { store.close() }
        #expect(try store.info().storeFormat == 3)
        #expect(try store.mainContext.count(Query(entity: "Track")) == tracks)
        #expect(try store.read { try $0.horizon() } == TransactionID(10))
        let report = try store.verify(rebuild: true)
        #expect(report.ok, "\(report.problems)")
    }

    /// What the README tells an operator: `storectl compact --horizon 0` rewrites a format-1 store
    /// in format 3 and squashes nothing.
    @Test func storectlCompactWithHorizonZeroUpgradesAndKeepsTheLog() async throws {
        let dir = temporaryDirectory("format-1-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let before = try await makeFormat1Store(at: dir, seed: 12, saves: 15)
        func info() async throws -> JSONValue {
            let r = try await storectl("info", dir.path, "--json")
            #expect(r.status == 0, "\(r.stderr)")
            return try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let old = try await info()
        #expect(old["format"] == .int(1))
        let r = try await storectl("compact", dir.path, "--horizon", "0", "--quiet")
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        let new = try await info()
        #expect(new["format"] == .int(3))
        #expect(new["logEntries"] == old["logEntries"] && new["lastTransaction"] == old["lastTransaction"])
        for (name, n) in before { #expect(new["entities"]?[name] == .int(Int64(n))) }
        let verify = try await storectl("verify", dir.path)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }

    @Test func migratingAFormat1StoreWritesTheCurrentFormat() async throws {
        let dir = temporaryDirectory("format-1-migrate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        try await makeV1TrackStore(at: dir, schema: all[0])
        try rewriteAsFormat1(dir)
        let before: Int
        do {
            let v1 = try Store.openReadOnly(at: dir)
            defer { v1.close() }
            #expect(try v1.info().storeFormat == 1)
            before = try v1.mainContext.count(Query(entity: "Track"))
            #expect(before > 0)
        }
        _ = try await Store.migrate(at: dir, schemas: all, registry: libraryMigrations)
        let store = try Store.open(at: dir, schema: all[1])
        defer { store.close() }
        #expect(try store.info().storeFormat == 3)
        #expect(store.env[.counts].name == "main")
        #expect(try storedCounts(store.env, in: store.env[.meta]).isEmpty)
        #expect(try store.mainContext.count(Query(entity: "Track")) == before)
        let report = try store.verify(rebuild: true)
        #expect(report.ok, "\(report.problems)")
    }

    /// The format byte of log entry `tx` as stored.
    private func storedEntryFormat(_ store: Store, _ tx: TransactionID) throws -> UInt8? {
        let env = store.env
        return try env.read { txn in try txn.withValue(env[.log], key: tx.keyBytes) { $0.first } } ?? nil
    }

    /// A format-2 store (made before compressed log entries) keeps its log readable by the Strata
    /// that made it: its large entries are written plain, also another machine's that a replica
    /// applies; `storectl compact --horizon 0` rewrites it in format 3, after which they are
    /// compressed.
    @Test func aFormat2StoreKeepsItsLogPlainUntilCompacted() async throws {
        let dir = temporaryDirectory("format-2")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        func tracks(_ prefix: String) -> ChangeSet {
            var c = ChangeSet()
            for i in 0..<500 { c.insert(makeTrack(title: "\(prefix) \(i)", duration: 100 + i)) }
            return c
        }
        do {
            let store = try Store.open(at: dir, schema: schema)
            try writeStoredFormat(store, 2)
            store.close()
        }
        let text = try await storectl("info", dir.path)
        #expect(text.stdout.contains("store format:     2 (log entries plain; storectl compact --horizon 0 rewrites it in format 3)"),
                "\(text.stdout)\(text.stderr)")
        let store = try Store.open(at: dir, schema: schema)
        let saved = try await store.save(tracks("saved"))
        #expect(try storedEntryFormat(store, saved) == LogEntryCodec.format)
        // Another machine's compressed entry, applied as a replica applies it: stored plain.
        let writer = try #require(store.writer)
        let track = try #require(schema.entity(named: "Track"))
        let changes: [LoggedChange] = (0..<300).map { i in
            var values = [Value](repeating: .null, count: track.attributes.count)
            values[track.attributeIndex["title"]!] = .string("from another machine, track \(i)")
            values[track.attributeIndex["durationSeconds"]!] = .int(Int64(i + 1))
            values[track.attributeIndex["addedAt"]!] = .date(Date(timeIntervalSince1970: 1_700_000_000))
            values[track.attributeIndex["mbid"]!] = .uuid(UUID())
            values[track.attributeIndex["discNumber"]!] = .int(1)
            values[track.attributeIndex["explicit"]!] = .bool(false)
            values[track.attributeIndex["playCount"]!] = .int(0)
            return .insert(id: ObjectID.make(entityTag: track.tag), values: values)
        }
        let shared = LogEntry(transactionID: saved.next, schemaVersion: schema.version, timestampMs: 1_700_000_000_000,
                              author: "elsewhere", metadata: [:], changes: changes)
        let bytes = LogEntryCodec.encode(shared)
        #expect(bytes.first == LogEntryCodec.compressedFormat)
        let head = try await writer.exclusive {
            try writer.applyReplicated([ReplicatedEntry(transactionID: shared.transactionID, bytes: bytes, author: "elsewhere",
                                                        timestampMs: shared.timestampMs, schemaVersion: schema.version)])
        }
        #expect(head == shared.transactionID)
        #expect(try storedEntryFormat(store, shared.transactionID) == LogEntryCodec.format)
        #expect(try store.changes(in: shared.transactionID).changes.count == 300)
        #expect(try store.verify().ok)
        store.close()

        let compacted = try await storectl("compact", dir.path, "--horizon", "0")
        #expect(compacted.status == 0, "\(compacted.stderr)")
        let after = try Store.open(at: dir, schema: schema)
        defer { after.close() }
        #expect(try after.info().storeFormat == 3)
        #expect(try storedEntryFormat(after, saved) == LogEntryCodec.format)
        let later = try await after.save(tracks("later"))
        #expect(try storedEntryFormat(after, later) == LogEntryCodec.compressedFormat)
        let report = try after.verify()
        #expect(report.ok && report.method == .inMemory, "\(report.problems)")
    }

    /// A bulk import builds a new generation, as compaction does: a format-2 store comes out of
    /// it in format 3, its import entries compressed.
    @Test func aBulkImportIntoAFormat2StoreWritesFormat3() async throws {
        let dir = temporaryDirectory("format-2-bulk")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        do {
            let store = try Store.open(at: dir, schema: schema)
            _ = try await store.save { $0.insert(Genre(name: "before")) }
            try writeStoredFormat(store, 2)
            store.close()
        }
        let input = dir.appendingPathComponent("genres.ndjson")
        try Data((0..<400).map { #"{"entity": "Genre", "name": "imported genre number \#($0)"}"# }
            .joined(separator: "\n").utf8).write(to: input)
        let r = try await storectl("import", dir.path, input.path, "--mode", "bulk", "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        #expect(try store.info().storeFormat == 3)
        #expect(try storedEntryFormat(store, TransactionID(1)) == LogEntryCodec.format)
        #expect(try storedEntryFormat(store, TransactionID(2)) == LogEntryCodec.compressedFormat)
        #expect(try store.mainContext.count(Query(entity: "Genre")) == 401)
        #expect(try store.verify().ok)
    }

    /// A `format` that is not four bytes is a damaged store, refused as one (it threw a bare
    /// decoding error before).
    @Test(arguments: [[UInt8](), [2], [0, 0, 0, 0, 2]])
    func anUnreadableFormatIsRefused(value: [UInt8]) throws {
        let dir = temporaryDirectory("format-unreadable")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        do {
            let store = try Store.open(at: dir, schema: schema)
            let env = store.env
            try env.write { try $0.put(env[.meta], key: MetaKey.format, value: value) }
            store.close()
        }
        let opens: [() throws -> Store] = [{ try Store.open(at: dir, schema: schema) }, { try Store.openReadOnly(at: dir) }]
        for open in opens {
            do {
                let store = try open()
                store.close()
                Issue.record("a store whose format is \(value) opened")
            } catch StrataError.notAStore(_, let reason) {
                #expect(reason.contains("the stored store format is unreadable") && reason.contains("not 4"), "\(reason)")
            }
        }
    }

    @Test(arguments: [UInt32(0), 4, 1000])
    func aFormatThisStrataDoesNotReadIsRefused(format: UInt32) async throws {
        let dir = temporaryDirectory("format-unknown")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        do {
            let store = try Store.open(at: dir, schema: schema)
            _ = try await store.save { $0.insert(makeTrack(title: "x", duration: 1)) }
            try writeStoredFormat(store, format)
            store.close()
        }
        let opens: [() throws -> Store] = [{ try Store.open(at: dir, schema: schema) }, { try Store.openReadOnly(at: dir) }]
        for open in opens {
            do {
                let store = try open()
                store.close()
                Issue.record("a store of format \(format) opened")
            } catch StrataError.notAStore(_, let reason) {
                #expect(reason.contains("store format \(format)") && reason.contains("1–3"), "\(reason)")
            }
        }
    }
}
