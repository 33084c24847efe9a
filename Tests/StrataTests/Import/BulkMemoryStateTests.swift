import Foundation
import LibraryModel
import StrataLMDB
import Testing
@testable import Strata

/// A bulk load from an empty store may resolve its saves in memory (``BulkMemoryState``) instead
/// of against its new generation's B-trees. The two must be indistinguishable: the same logged
/// changes, the same refusals, and byte for byte the same databases once the load is finished.
///
/// The differential test drives both with the same random change sets (inserts, upserts that
/// find or miss their key, updates that move unique keys, deletes with their rules, links and
/// unlinks of every relationship, ids that do not exist) over the library schema. A seed that
/// fails is printed with the line that replays it:
/// `STRATA_BULK_SEED=N swift test --skip-build --filter BulkMemoryStateTests`; a range
/// (`STRATA_BULK_SEED=1-5000`) makes a long run.
@Suite struct BulkMemoryStateTests {
    /// One save of each load: its logged changes (decoded, without the timestamp) or its refusal.
    private enum Outcome: Equatable {
        case logged
        case nothing
        case refused(String)
    }

    /// A random change set over the objects named in `pool` (some of them never inserted, some
    /// deleted since), with values drawn from ranges small enough that unique keys collide now
    /// and then.
    private static func changeSet(_ rng: inout SeededGenerator, schema: Schema, pool: inout [ObjectID]) -> ChangeSet {
        var c = ChangeSet()
        let entities = schema.entities
        func values(_ e: EntityDescription) -> [Value] {
            e.attributes.map { a -> Value in
                if a.isOptional && rng.next() % 3 == 0 { return .null }
                switch a.type {
                case .string: return .string("\(a.name)-\(rng.next() % 60)")
                case .int: return .int(Int64(rng.next() % 50))
                case .double: return .double(Double(rng.next() % 10) / 2)
                case .bool: return .bool(rng.next() % 2 == 0)
                case .date: return .date(Date(timeIntervalSince1970: Double(rng.next() % 1000)))
                case .bytes: return .bytes([UInt8(rng.next() % 256)])
                case .uuid: return .uuid(UUID(uuidString: "00000000-0000-4000-8000-\(String(format: "%012d", rng.next() % 60))")!)
                case .decimal: return .null
                }
            }
        }
        func anyID(_ tag: UInt16? = nil) -> ObjectID? {
            let candidates = tag.map { t in pool.filter { $0.entityTag == t } } ?? pool
            return candidates.isEmpty ? nil : candidates[Int(rng.next() % UInt64(candidates.count))]
        }
        for _ in 0..<(1 + Int(rng.next() % 6)) {
            let e = entities[Int(rng.next() % UInt64(entities.count))]
            switch rng.next() % 14 {
            case 0, 1, 2:
                let id = ObjectID.make(entityTag: e.tag)
                pool.append(id)
                c.append(.insert(id: id, values: values(e)))
            case 3, 4:
                let id = ObjectID.make(entityTag: e.tag)
                pool.append(id)
                c.append(.upsert(id: id, values: values(e), constraint: 0))
            case 5:
                guard let id = anyID(e.tag) else { continue }
                let v = values(e)
                let i = Int(rng.next() % UInt64(e.attributes.count))
                c.append(.update(id: id, attributes: [ChangeSet.AttributeValue(attribute: i, value: v[i])]))
            case 6, 7:
                guard let id = anyID() else { continue }
                c.append(.delete(id: id))
            case 8, 9, 10, 11, 12:
                guard !e.relationships.isEmpty else { continue }
                let r = e.relationships[Int(rng.next() % UInt64(e.relationships.count))]
                guard let from = anyID(e.tag), let target = schema.entity(named: r.destination),
                      let to = anyID(target.tag) else { continue }
                c.append(.link(relationship: r.tag, from: .id(from), to: .id(to)))
            default:
                guard !e.relationships.isEmpty else { continue }
                let r = e.relationships[Int(rng.next() % UInt64(e.relationships.count))]
                guard let from = anyID(e.tag), let target = schema.entity(named: r.destination) else { continue }
                let to = rng.next() % 4 == 0 && !r.isToMany ? nil : anyID(target.tag)
                if to == nil && r.isToMany { continue }
                c.append(.unlink(relationship: r.tag, from: .id(from), to: to.map { .id($0) }))
            }
        }
        return c
    }

    /// Every entry of the state databases and the counts, and each log entry's changes.
    private static func contents(_ store: Store) throws -> [String: [[UInt8]]] {
        try store.read { view in
            var out: [String: [[UInt8]]] = [:]
            for name in [DatabaseName.objects, .links, .indexes, .uniques] {
                var entries: [[UInt8]] = []
                try view.txn.scan(view.env[name]) { k, v in
                    entries.append(Array(k) + [0xFF] + Array(v))
                    return true
                }
                out[name.rawValue] = entries
            }
            var counts: [[UInt8]] = []
            try view.txn.scan(view.env[.counts], prefix: MetaKey.countPrefix) { k, v in
                counts.append(Array(k) + [0xFF] + Array(v))
                return true
            }
            out["counts"] = counts
            return out
        }
    }

    private static func loggedChanges(_ store: Store) throws -> [[LoggedChange]] {
        try store.read { view in
            var out: [[LoggedChange]] = []
            try view.txn.scan(view.env[.log]) { k, v in
                var r = ByteReader(k)
                out.append(try LogEntryCodec.decode(v, transactionID: TransactionID(try r.u64())).changes)
                return true
            }
            return out
        }
    }

    /// Runs `sets` through a bulk load of `store`, one save each: through the B-trees, each save
    /// `isolated` (a refused one leaves nothing and the load goes on); in memory, where a refusal
    /// ends the load (it cannot undo a save), the load is abandoned at the first one. Returns
    /// each save's outcome.
    private static func load(_ store: Store, _ sets: [ChangeSet], inMemory: Bool,
                             bigHeadLength: Int32 = BulkMemoryState.defaultBigHeadLength) async throws -> [Outcome] {
        let load = try await store.beginBulkLoad(inMemory: inMemory, bigHeadLength: bigHeadLength)
        #expect((load.memory != nil) == inMemory)
        var outcomes: [Outcome] = []
        for set in sets {
            do {
                let committed = try await load.write { w -> TransactionID? in
                    try w.save(set, author: "test", metadata: [:], isolated: !inMemory)
                }.committed
                outcomes.append(committed.isEmpty ? .nothing : .logged)
            } catch let e as StrataError {
                outcomes.append(.refused(e.description))
                if inMemory {
                    load.abandon()
                    return outcomes
                }
            }
        }
        _ = try await load.finish()
        return outcomes
    }

    /// Seeds 1–40, or `STRATA_BULK_SEED`: one seed (`17`) or a range (`1-5000`, a long run).
    static let seeds: [UInt64] = {
        guard let given = ProcessInfo.processInfo.environment["STRATA_BULK_SEED"] else { return Array(1...40) }
        let bounds = given.split(separator: "-").compactMap { UInt64($0) }
        if bounds.count == 2, bounds[0] <= bounds[1] { return Array(bounds[0]...bounds[1]) }
        return bounds.count == 1 ? bounds : Array(1...40)
    }()

    private static func sets(seed: UInt64, schema: Schema) -> [ChangeSet] {
        var rng = SeededGenerator(seed: seed)
        var pool: [ObjectID] = []
        return (0..<(10 + Int(rng.next() % 30))).map { _ in changeSet(&rng, schema: schema, pool: &pool) }
    }

    /// The sets the B-trees accepted, loaded in memory, leave the same log and the same databases;
    /// the first set they refused is refused in memory too, with the same error, at the same
    /// point. A state looks a link up in a set once its head has many entries and walks the
    /// head's list before: a third of the seeds make every head long from its first entry, a
    /// third from its second (its first entry then moves to the set).
    /// Serialized: each case maps three stores and their new generations, and thousands of them
    /// at once (a long run) ran out of address space for the maps.
    @Test(.serialized, arguments: seeds)
    func aLoadInMemoryWritesWhatTheBTreesWouldHave(seed: UInt64) async throws {
        let schema = try librarySchema()
        try await Self.compareLoads(Self.sets(seed: seed, schema: schema), seed: seed) { try Store.temporary(schema: schema) }
    }

    /// Objects, link entries and unique keys of `store`'s state.
    private static func stateSize(_ store: Store) throws -> (objects: Int, links: Int, uniques: Int) {
        try store.read { view in
            (try view.txn.entryCount(view.env[.objects]), try view.txn.entryCount(view.env[.links]),
             try view.txn.entryCount(view.env[.uniques]))
        }
    }

    /// As ``aLoadInMemoryWritesWhatTheBTreesWouldHave(seed:)``, from a store with objects: the
    /// first half of the seed's sets saved through the B-trees in both stores, the second half
    /// (which updates, deletes, links and unlinks those objects and takes their unique keys)
    /// loaded through the B-trees in one and in memory in the other, which loads the state first.
    @Test(.serialized, arguments: seeds)
    func aLoadInMemoryFromAStoreWithObjectsWritesWhatTheBTreesWouldHave(seed: UInt64) async throws {
        let schema = try librarySchema()
        let all = Self.sets(seed: seed, schema: schema)
        let before = Array(all[..<(all.count / 2)])
        try await Self.compareLoads(Array(all[(all.count / 2)...]), seed: seed) {
            let store = try Store.temporary(schema: schema)
            _ = try await Self.load(store, before, inMemory: false)
            return store
        }
    }

    /// The differential check of one seed: `sets` loaded through the B-trees into a store that
    /// `started` makes, and the sets accepted there loaded in memory into another (its heads
    /// long from the seed's length), give the same outcomes, logs and databases, and the store
    /// verifies; the first refusal, in memory into a third, after the sets accepted before it, is
    /// the same refusal.
    private static func compareLoads(_ sets: [ChangeSet], seed: UInt64,
                                     started: () async throws -> Store) async throws {
        let replay = "replay: STRATA_BULK_SEED=\(seed) swift test --skip-build --filter BulkMemoryStateTests"
        let inTrees = try await started()
        defer { inTrees.close() }
        let start = try stateSize(inTrees)
        let b = try await load(inTrees, sets, inMemory: false)
        let accepted = zip(sets, b).filter { if case .refused = $1 { false } else { true } }
        let inMemory = try await started()
        defer { inMemory.close() }
        #expect(try stateSize(inMemory) == start, "\(replay)")
        let long: Int32 = [BulkMemoryState.defaultBigHeadLength, 1, 2][Int(seed % 3)]
        let a = try await load(inMemory, accepted.map(\.0), inMemory: true, bigHeadLength: long)
        #expect(a == accepted.map(\.1), "the saves' outcomes differ; \(replay)")
        #expect(try loggedChanges(inMemory) == loggedChanges(inTrees), "the logs differ; \(replay)")
        let (x, y) = (try contents(inMemory), try contents(inTrees))
        for name in y.keys.sorted() {
            #expect(x[name] == y[name], "\(name) differs (\(x[name]?.count ?? 0) entries against \(y[name]?.count ?? 0)); \(replay)")
        }
        #expect(try inMemory.verify().ok, "\(replay)")
        if let first = b.firstIndex(where: { if case .refused = $0 { true } else { false } }) {
            let earlier = zip(sets[..<first], b[..<first]).filter { if case .refused = $1 { false } else { true } }
            let refusing = try await started()
            defer { refusing.close() }
            let c = try await load(refusing, earlier.map(\.0) + [sets[first]], inMemory: true, bigHeadLength: long)
            #expect(c == earlier.map(\.1) + [b[first]], "the first refusal differs; \(replay)")
        }
    }

    /// What the test from a store with objects covers: across the seeds, most start from objects,
    /// links and unique keys.
    @Test func theStoresTheLoadsStartFromHoldObjectsLinksAndKeys() async throws {
        let schema = try librarySchema()
        var withLinks = 0, withObjects = 0
        for seed in Self.seeds {
            let all = Self.sets(seed: seed, schema: schema)
            let store = try Store.temporary(schema: schema)
            defer { store.close() }
            _ = try await Self.load(store, Array(all[..<(all.count / 2)]), inMemory: false)
            let size = try Self.stateSize(store)
            if size.objects > 0 && size.uniques > 0 { withObjects += 1 }
            if size.links > 0 { withLinks += 1 }
        }
        #expect(withObjects >= Self.seeds.count * 3 / 4, "\(withObjects) of \(Self.seeds.count)")
        #expect(withLinks >= Self.seeds.count / 2, "\(withLinks) of \(Self.seeds.count)")
    }

    /// What the differential test covers, so that it cannot pass by never reaching a case: across
    /// the seeds, refusals, and logged inserts, updates, deletes, links and unlinks.
    @Test func theRandomSetsReachEveryOutcome() async throws {
        let schema = try librarySchema()
        var refused = 0
        var kinds: [String: Int] = [:]
        for seed in Self.seeds {
            let store = try Store.temporary(schema: schema)
            defer { store.close() }
            let outcomes = try await Self.load(store, Self.sets(seed: seed, schema: schema), inMemory: false)
            refused += outcomes.filter { if case .refused = $0 { true } else { false } }.count
            for change in try Self.loggedChanges(store).joined() {
                let kind: String
                switch change {
                case .insert: kind = "insert"
                case .update: kind = "update"
                case .delete: kind = "delete"
                case .link: kind = "link"
                case .unlink: kind = "unlink"
                }
                kinds[kind, default: 0] += 1
            }
        }
        #expect(refused >= Self.seeds.count / 2, "\(refused) refusals")
        for kind in ["insert", "update", "delete", "link", "unlink"] {
            #expect(kinds[kind, default: 0] >= 10, "\(kinds)")
        }
    }

    /// An entity whose objects a save inserts and deletes gets no count entry from that save (its
    /// count did not change), in memory as through the B-trees; a later save that leaves one
    /// object writes 1. (The in-memory state once wrote a count of 0 for every entity it touched.)
    @Test func aSaveThatLeavesACountAsItWasWritesNoCountEntry() async throws {
        let schema = try librarySchema()
        let genre = try #require(schema.entity(named: "Genre"))
        let (a, b) = (ObjectID.make(entityTag: genre.tag), ObjectID.make(entityTag: genre.tag))
        var both = ChangeSet()
        both.append(.insert(id: a, values: [.string("gone")]))
        both.append(.delete(id: a))
        var kept = ChangeSet()
        kept.append(.insert(id: b, values: [.string("kept")]))
        for inMemory in [true, false] {
            let store = try Store.temporary(schema: schema)
            defer { store.close() }
            #expect(try await Self.load(store, [both], inMemory: inMemory) == [.logged])
            #expect(try Self.contents(store)["counts"] == [], "inMemory \(inMemory)")
            let again = try Store.temporary(schema: schema)
            defer { again.close() }
            #expect(try await Self.load(again, [both, kept], inMemory: inMemory) == [.logged, .logged])
            #expect(try Self.contents(again)["counts"] == [MetaKey.count(genre.tag) + [0xFF] + MetaKey.countValue(1)],
                    "inMemory \(inMemory)")
        }
    }

    /// Runs `body` with the state, the generation and the store of a bulk load in memory of 8
    /// genres and `tracks` tracks (each linked to a genre), saved but not finished; the load is
    /// abandoned afterwards.
    private static func withLoadInMemory(tracks: Int,
                                         _ body: (BulkMemoryState, LMDBEnvironment, Store) throws -> Void) async throws {
        let store = try Store.temporary(schema: try librarySchema())
        defer { store.close() }
        let load = try await store.beginBulkLoad(inMemory: true)
        defer { load.abandon() }
        var c = ChangeSet()
        let genres = (0..<8).map { Genre(name: "g\($0)") }
        for g in genres { c.insert(g) }
        for i in 0..<tracks {
            let t = Track(mbid: UUID(), title: "t\(i)", durationSeconds: i % 600, addedAt: Date(timeIntervalSince1970: 0))
            c.insert(t)
            c.set(Track.genre, of: t.id, to: genres[i % genres.count].id)
        }
        let changes = c
        _ = try await load.write { w in try w.save(changes, author: "test", metadata: [:], isolated: false) }
        try body(try #require(load.memory), load.env, store)
    }

    /// Files whose name starts with `prefix` in `directory`.
    private static func files(_ prefix: String, in directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasPrefix(prefix) }
    }

    /// Writing the generation on two threads: when the side that appends the records fails (here
    /// its usability check, after the first batch), its failure is the one thrown, once the side
    /// that makes and sorts the keys has ended, and no run file is left (a tiny sort budget makes
    /// many).
    @Test func aFailureWritingTheRecordsIsThrownAndLeavesNoRunFile() async throws {
        struct Closed: Error {}
        try await Self.withLoadInMemory(tracks: 3_000) { memory, env, store in
            let checks = Locked(0)
            #expect(throws: Closed.self) {
                try memory.write(into: env, sortBudgetBytes: 4_096, permissions: .private, logger: store.logger,
                                 checkUsable: {
                                     if checks.withLock({ $0 += 1; return $0 }) > 1 { throw Closed() }
                                 })
            }
            #expect(Self.files("sort-run-", in: env.path).isEmpty)
        }
    }

    /// When the side that makes the keys fails (here its first unique run file cannot be
    /// created: a file of that name is there), that failure is the one thrown (not the stop it
    /// causes on the other side), and its other run files are removed.
    @Test func aFailureMakingTheKeysIsTheOneThrown() async throws {
        try await Self.withLoadInMemory(tracks: 3_000) { memory, env, store in
            let blocker = env.path + "/sort-run-unique-0.tmp"
            #expect(FileManager.default.createFile(atPath: blocker, contents: Data()))
            var thrown: Error?
            do {
                try memory.write(into: env, sortBudgetBytes: 4_096, permissions: .private, logger: store.logger,
                                 checkUsable: {})
            } catch { thrown = error }
            let error = try #require(thrown)
            #expect("\(error)".contains("sort-run-unique-0.tmp"), "\(error)")
            #expect(Self.files("sort-run-", in: env.path) == ["sort-run-unique-0.tmp"])
        }
    }

    /// The building progress of a load in memory climbs from the records to the keys and ends
    /// at the objects in all, never going back.
    @Test func theGenerationsProgressClimbsToTheObjectsInAll() async throws {
        let reports = Locked<[(Int, Int)]>([])
        try await Self.withLoadInMemory(tracks: 3_000) { memory, env, store in
            try memory.write(into: env, sortBudgetBytes: 1 << 20, permissions: .private, logger: store.logger,
                             checkUsable: {}, progress: { done, all in reports.withLock { $0.append((done, all)) } })
        }
        let seen = reports.withLock { $0 }
        #expect(seen.count > 2)
        #expect(seen.allSatisfy { $0.1 == 3_008 }, "\(seen)")
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.0 <= $1.0 }, "\(seen)")
        #expect(seen.last?.0 == 3_008)
        #expect(seen.contains { $0.0 > 0 && $0.0 < 3_008 }, "\(seen)")
    }

    /// A store with one object loads in memory, starting from that object; so does one whose
    /// state is empty after deletes (its log is not); an import with `continueOnError` never
    /// loads in memory, and `bulkInMemoryMaxInputBytes = 0` turns it off.
    @Test func whenALoadIsResolvedInMemory() async throws {
        try await withLibraryStore { store in
            let g = Genre(name: "Jazz")
            var insert = ChangeSet()
            insert.insert(g)
            _ = try await store.save(insert)
            var load = try await store.beginBulkLoad(inMemory: true)
            #expect(load.memory != nil && !load.startedEmpty)
            #expect(try load.memory.map { try BulkMemoryApplier(state: $0, transactionID: .zero).exists(g.id) } == true)
            load.abandon()
            var delete = ChangeSet()
            delete.delete(g.id)
            _ = try await store.save(delete)
            load = try await store.beginBulkLoad(inMemory: true)
            #expect(load.memory != nil && load.startedEmpty)
            load.abandon()
        }
        let dir = temporaryDirectory("bulk-memory")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(#"{"entity":"Genre","name":"Jazz"}"#.utf8).write(to: input)
        for (limit, continueOnError, expected) in [(128 << 20, false, true), (0, false, false), (128 << 20, true, false)] {
            try await withLibraryStore { store in
                var o = ImportOptions()
                o.mode = .bulk
                o.bulkInMemoryMaxInputBytes = limit
                o.continueOnError = continueOnError
                let summary = try await Importer(store: store, options: o).run(files: [input.path])
                #expect(summary.mode == .bulk)
                #expect(summary.inMemory == expected, "limit \(limit), continueOnError \(continueOnError)")
                #expect(try store.mainContext.count(Genre.self) == 1)
            }
        }
    }

    /// The store's state counts toward the limits of a load in memory, which loads it: its objects
    /// as records, and the bytes of the pages of its objects, links and unique keys. A bulk import
    /// of one line into a store of two objects is in memory with room for both, and through the
    /// B-trees a byte or a record short of it; either way the objects before it are kept.
    @Test func theStoresStateCountsTowardTheLimitsInMemory() async throws {
        let dir = temporaryDirectory("bulk-memory-limits")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson")
        let line = #"{"entity":"Genre","name":"Jazz"}"#
        try Data(line.utf8).write(to: input)
        for (spare, records, expected) in [(0, 3, true), (-1, 3, false), (0, 2, false)] {
            try await withLibraryStore { store in
                _ = try await store.save { $0.insert(Genre(name: "Blues")); $0.insert(Genre(name: "Soul")) }
                let stateBytes = try store.read { view in
                    try [DatabaseName.objects, .links, .uniques].reduce(0) { $0 + (try view.txn.pageBytes(view.env[$1])) }
                }
                #expect(stateBytes > 0)
                var o = ImportOptions()
                o.mode = .bulk
                o.bulkInMemoryMaxInputBytes = stateBytes + line.utf8.count + spare
                o.bulkInMemoryMaxRecords = records
                let summary = try await Importer(store: store, options: o).run(files: [input.path])
                #expect(summary.inMemory == expected, "\(spare) bytes spare, \(records) records")
                #expect(try store.mainContext.count(Genre.self) == 3)
                #expect(try store.verify().ok)
            }
        }
    }

    /// An `auto` import that would go into a new generation but finds no room for one beside the
    /// store imports batch by batch, which needs none; it failed with ENOSPC, though the user
    /// asked for no particular mode. Asked for (`bulk`), the refusal stands.
    @Test func anAutoImportWithoutRoomForANewGenerationImportsBatchByBatch() async throws {
        let dir = temporaryDirectory("bulk-no-room")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson")
        // Large next to the store, so that `auto` chooses a new generation.
        try Data((0..<5_000).map { #"{"entity":"Genre","name":"g\#($0)"}"# + "\n" }.joined().utf8).write(to: input)
        for (mode, full) in [(ImportMode.auto, false), (.auto, true), (.bulk, true)] {
            try await withLibraryStore { store in
                _ = try await store.save { $0.insert(Genre(name: "Blues")) }
                if full { LMDBEnvironment.freeBytesForTesting.withLock { $0[store.path] = 0 } }
                defer { _ = LMDBEnvironment.freeBytesForTesting.withLock { $0.removeValue(forKey: store.path) } }
                var o = ImportOptions()
                o.mode = mode
                if mode == .auto {
                    let summary = try await Importer(store: store, options: o).run(files: [input.path])
                    #expect(summary.mode == (full ? .incremental : .bulk), "\(summary)")
                    #expect(try store.mainContext.count(Genre.self) == 5_001)
                } else {
                    await #expect { _ = try await Importer(store: store, options: o).run(files: [input.path]) } throws: {
                        ($0 as? LMDBError)?.code == ENOSPC
                    }
                    #expect(try store.mainContext.count(Genre.self) == 1)
                }
            }
        }
    }

    /// A negative limit is an option error, named.
    @Test func aNegativeInMemoryLimitIsRefused() async throws {
        try await withLibraryStore { store in
            var o = ImportOptions()
            o.bulkInMemoryMaxInputBytes = -1
            let error = await #expect(throws: ImportFailed.self) { try await Importer(store: store, options: o).run(files: []) }
            #expect(error?.issues.first?.field == "bulkInMemoryMaxInputBytes")
        }
    }
}
