import Foundation
import LibraryModel
import Testing
@testable import Strata
import CLMDB
@testable import StrataLMDB

/// Saves never wait for readers, map growth included. A growth takes the map lock exclusively,
/// and long readers (exports, transaction visits, a compaction's copy) hold it shared for one
/// chunk at a time and never while user code runs: so a save that must grow the map completes
/// while a slow consumer of a long read is still stalled, and the read's output is the same as
/// without the growth.
@Suite(.serialized) struct MapGrowthTests {
    /// A map that starts at 8 MiB (the store of 2,000 tracks fits; 40,000 more do not).
    static var smallMap: StoreConfiguration {
        var config = StoreConfiguration()
        config.initialMapSizeBytes = 8 << 20
        return config
    }

    /// How long a stalled consumer waits for the save before it gives up and goes on. Not what
    /// is asserted (that is whether the save was done while the consumer was stalled): with the
    /// fix the consumer is released as soon as the save is done, a second or two; without it the
    /// save cannot be done before the consumer gives up, and the test fails after this long.
    /// Generous, so that a save slowed down by other tests running at the same time is not
    /// mistaken for one that waits.
    static let stallSeconds = 30.0

    static func seed(_ store: Store, tracks n: Int = 2_000) async throws {
        _ = try await store.save { c in
            for i in 0..<n { c.insert(makeTrack(title: "seed \(i)", duration: i % 600 + 1, rating: i.isMultiple(of: 3) ? Double(i % 5) : nil)) }
        }
    }

    /// 40,000 tracks: more than the 8 MiB map holds with the seed.
    static func growingSave(_ tag: String) -> ChangeSet {
        var changes = ChangeSet()
        for i in 0..<40_000 { changes.insert(makeTrack(title: "\(tag) \(i) " + String(repeating: "g", count: 40), duration: i % 600 + 1)) }
        return changes
    }

    /// A consumer's stall: it signals `stalled` and then waits until the save is done (`saved`)
    /// or ``stallSeconds`` passed, and records which.
    final class Stall: Sendable {
        let stalled = DispatchSemaphore(value: 0)
        let saved = DispatchSemaphore(value: 0)
        /// Whether the save was done while the consumer was stalled (nil: not stalled yet).
        let savedWhileStalled = Locked<Bool?>(nil)

        func stall() {
            stalled.signal()
            let done = saved.wait(timeout: .now() + MapGrowthTests.stallSeconds) == .success
            savedWhileStalled.withLock { $0 = done }
        }

        /// Once the consumer is stalled, saves `changes` with `saveAndWait` on a thread of its own
        /// and then releases the consumer: neither side needs a thread of Swift's cooperative
        /// pool (which other tests running meanwhile may have busy) to go on.
        func saveWhenStalled(_ store: Store, _ changes: ChangeSet) -> Locked<Result<TransactionID, Error>?> {
            MapGrowthTests.onThread { [self] in
                guard stalled.wait(timeout: .now() + 120) == .success else { throw StallNeverCame() }
                defer { saved.signal() }
                return try store.saveAndWait(changes)
            }
        }

        struct StallNeverCame: Error {}
    }

    /// Runs `body` on a thread of its own; the outcome is set when it returns.
    static func onThread<R: Sendable>(_ body: @escaping @Sendable () throws -> R) -> Locked<Result<R, Error>?> {
        let outcome = Locked<Result<R, Error>?>(nil)
        Thread { let r = Result { try body() }; outcome.withLock { $0 = r } }.start()
        return outcome
    }

    static func outcome<R>(_ outcome: Locked<Result<R, Error>?>) async throws -> R {
        let deadline = Date().addingTimeInterval(120)
        while true {
            if let r = outcome.withLock({ $0 }) { return try r.get() }
            try #require(Date() < deadline, "the reader never returned")
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// The defect this suite is about: an export whose consumer is slow held the map lock for
    /// its whole length, so a save that needed the map to grow (and every save queued behind it)
    /// waited for the consumer. The consumer here stalls on its first line until the save is
    /// done (or gives up after ``stallSeconds``): the save must be done while it is stalled.
    @Test func aSaveThatGrowsTheMapDoesNotWaitForASlowExport() async throws {
        try await withLibraryStore(Self.smallMap) { store in
            try await Self.seed(store)
            let growthsBefore = store.statistics.mapGrowths
            let stall = Stall()
            let export = Self.onThread {
                var lines = 0
                return try Exporter(store: store).export(Query(entity: "Track"), format: .ndjson) { _ in
                    lines += 1
                    if lines == 1 { stall.stall() }
                }.records
            }
            let save = stall.saveWhenStalled(store, Self.growingSave("during export"))
            let tx = try await Self.outcome(save)
            let records = try await Self.outcome(export)
            #expect(stall.savedWhileStalled.withLock { $0 } == true, "the save waited for the export's stalled consumer")
            #expect(store.statistics.mapGrowths > growthsBefore, "the save did not grow the map")
            #expect(records == 2_000, "the export reads its snapshot, from before the save")
            #expect(tx > .zero)
            #expect(try store.mainContext.count(Track.self) == 42_000)
        }
    }

    /// What an export covers, each in a store of its own (a growth per store).
    enum ExportCase: String, CaseIterable, Sendable {
        /// Every track: a scan of the entity, resumed by key after each chunk.
        case scan
        /// A filter on an indexed attribute: a list of ids from the index, read a chunk at a time.
        case index
        /// A sorted export: fetched in one read, relationships and lines a chunk at a time.
        case sorted
        /// CSV of a filtered scan (the header first).
        case csv

        var query: Query {
            switch self {
            case .scan: Query(entity: "Track")
            // `rating` (6) has no index: a scan that keeps some of what it reads.
            case .csv: Query(entity: "Track", predicate: .compare(attribute: 6, .greaterOrEqual, .double(0)))
            // `durationSeconds` (2) is indexed.
            case .index: Query(entity: "Track", predicate: .compare(attribute: 2, .greaterOrEqual, .int(30)))
            case .sorted: Query(entity: "Track", sort: [SortKey(attribute: 1, ascending: false)])
            }
        }
        var format: ImportFormat { self == .csv ? .csv : .ndjson }
    }

    /// An export during which the map grows (between its first and second chunk) writes the same
    /// lines as the same export with nothing going on: every chunk after the growth is read
    /// through a new cursor positioned by key, in the remapped map.
    @Test(arguments: ExportCase.allCases)
    func anExportAcrossAMapGrowthWritesTheSameLines(_ which: ExportCase) async throws {
        try await withLibraryStore(Self.smallMap) { store in
            try await Self.seed(store)
            let exporter = Exporter(store: store)
            var quiet: [String] = []
            try exporter.export(which.query, format: which.format) { quiet.append($0) }
            #expect(quiet.count > Exporter.chunkRecords, "the export must take several chunks")
            let growthsBefore = store.statistics.mapGrowths
            let stall = Stall()
            let export = Self.onThread {
                var lines: [String] = []
                try exporter.export(which.query, format: which.format) { line in
                    lines.append(line)
                    if lines.count == 2 { stall.stall() }
                }
                return lines
            }
            _ = try await Self.outcome(stall.saveWhenStalled(store, Self.growingSave("during \(which)")))
            let lines = try await Self.outcome(export)
            #expect(stall.savedWhileStalled.withLock { $0 } == true, "the save waited for the export's stalled consumer")
            #expect(store.statistics.mapGrowths > growthsBefore)
            #expect(lines == quiet)
        }
    }

    /// `forEachTransaction`'s body runs between reads as an export's `emit` does: a save that
    /// grows the map completes while the body is stalled, and the visit then goes on to the end
    /// of its snapshot.
    @Test func aSaveThatGrowsTheMapDoesNotWaitForASlowTransactionVisit() async throws {
        try await withLibraryStore(Self.smallMap) { store in
            for i in 0..<5 { try await Self.seed(store, tracks: 400 + i) }
            let growthsBefore = store.statistics.mapGrowths
            let stall = Stall()
            let visit = Self.onThread {
                var seen: [TransactionID] = []
                try store.forEachTransaction { entry in
                    seen.append(entry.transactionID)
                    if seen.count == 1 { stall.stall() }
                    return true
                }
                return seen
            }
            _ = try await Self.outcome(stall.saveWhenStalled(store, Self.growingSave("during visit")))
            let seen = try await Self.outcome(visit)
            #expect(stall.savedWhileStalled.withLock { $0 } == true, "the save waited for the visit's stalled body")
            #expect(store.statistics.mapGrowths > growthsBefore)
            #expect(seen == (1...5).map { TransactionID(UInt64($0)) })
        }
    }

    /// A compaction reads its snapshot a buffer at a time and calls `progress` between reads: a
    /// save that grows the map completes while `progress` is stalled (after the objects were
    /// copied, before the rest), is caught up before the switch, and the compacted store is
    /// consistent.
    @Test func aSaveThatGrowsTheMapDoesNotWaitForACompactionsCopy() async throws {
        try await withLibraryStore(Self.smallMap) { store in
            try await Self.seed(store)
            let growthsBefore = store.statistics.mapGrowths
            let stall = Stall()
            let compaction = Task {
                try await store.compact { p in
                    if p.phase == .copying, p.done > 0, stall.savedWhileStalled.withLock({ $0 }) == nil { stall.stall() }
                }
            }
            // The stalled `progress` holds a thread of the pool until the save, on a thread of its
            // own, releases it.
            _ = try await Self.outcome(stall.saveWhenStalled(store, Self.growingSave("during compaction")))
            let report = try await compaction.value
            #expect(stall.savedWhileStalled.withLock { $0 } == true, "the save waited for the compaction's copy")
            #expect(store.statistics.mapGrowths > growthsBefore)
            #expect(report.objects == 2_000, "the build copies its snapshot")
            #expect(try store.mainContext.count(Track.self) == 42_000, "the save was caught up before the switch")
            let verified = try store.verify()
            #expect(verified.ok, "\(verified.problems)")
        }
    }

    /// A growth reserves its address space before LMDB unmaps the old map, and grows by a large
    /// step (address space, not disk): one growth takes 8 MiB past what 40,000 tracks need.
    @Test func aGrowthTakesALargeStepOfAddressSpaceNotDisk() async throws {
        try await withLibraryStore(Self.smallMap) { store in
            try await Self.seed(store)
            #expect(try store.info().mapSizeBytes == 8 << 20)
            _ = try await store.save(Self.growingSave("one growth"))
            let info = try store.info()
            #expect(store.statistics.mapGrowths == 1)
            #expect(info.mapSizeBytes == (8 << 20) + LMDBEnvironment.growthStepBytes)
            #expect(info.fileBytes < info.mapSizeBytes / 8, "the file grows with the data, not with the map")
        }
    }

    /// The default map reserves 64 GiB of address space (no disk), clamped to the maximum.
    @Test func theDefaultMapIsALargeReservationClampedToTheMaximum() async throws {
        try await withLibraryStore { store in
            let info = try store.info()
            #expect(info.mapSizeBytes == 64 << 30)
            #expect(info.fileBytes < 1 << 20)
        }
        var config = StoreConfiguration()
        config.maxMapSizeBytes = 32 << 20
        try await withLibraryStore(config) { store in
            let info = try store.info()
            #expect(info.mapSizeBytes == 32 << 20, "an initial map above the maximum is lowered to it")
        }
    }

    /// Under an address-space limit (`ulimit -v`) the map takes at most half of what is left, so
    /// the heap and the threads' stacks have room: an import (in both modes) and a compaction
    /// finish, and the map leaves as much again. The map took nearly all of it: an import ended
    /// on a failed allocation (exit 139), a bulk import waited forever for a thread that could
    /// not be started (holding the store), a compaction did both.
    @Test(arguments: ["incremental", "bulk"])
    func underAnAddressSpaceLimitTheMapLeavesRoomForTheProcess(mode: String) async throws {
        let dir = temporaryDirectory("map-address-limit")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let library = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path
        for kilobytes in [2_300_000, 1_000_000] {
            func limited(_ arguments: [String]) async throws -> ProcessResult {
                try await run("/bin/sh", ["-c", "ulimit -v \(kilobytes) && exec timeout -s KILL 120 \"$@\"", "sh",
                                          storectlPath] + arguments)
            }
            let imported = try await limited(["import", store, library, "--mode", mode, "--quiet"])
            #expect(imported.status == 0, "ulimit -v \(kilobytes): exit \(imported.status): \(imported.stderr.suffix(600))")
            let compacted = try await limited(["compact", store, "--dry-run"])
            #expect(compacted.status == 0, "ulimit -v \(kilobytes): exit \(compacted.status): \(compacted.stderr.suffix(600))")
        }
        #expect(try await storectl("verify", store, "--quiet").status == 0)
    }

    /// The address-space probe a growth makes first: a reservation that fits is granted and
    /// given back; one larger than any address space is refused, and the map left alone.
    @Test func theAddressSpaceProbeRefusesTheImpossible() throws {
        #expect(try LMDBEnvironment.canReserveAddressSpace(1 << 30))
        #expect(try !LMDBEnvironment.canReserveAddressSpace(1 << 60))
        #expect(try LMDBEnvironment.reservableMapSize(1 << 60) < 1 << 60)
        #expect(try LMDBEnvironment.reservableMapSize(8 << 20) == 8 << 20)
    }
    /// A read begun inside another read of the same thread, after another process grew the map
    /// past this process's: it fails with `MDB_MAP_RESIZED`, naming why, where it waited for
    /// the map lock its own outer read held, for ever, and every later read and save of the
    /// process with it. The outer read goes on, and once it ended the next read maps the larger
    /// file.
    @Test func aNestedReadAfterAnotherProcessGrewTheMapFailsInsteadOfWaitingForItself() async throws {
        let dir = temporaryDirectory("map-resized-nested")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("s")
        let store = try Store.open(at: url, schema: try librarySchema(), configuration: Self.smallMap)
        defer { store.close() }
        _ = try await store.save { $0.insert(Genre(name: "before")) }
        // 12 MiB in another database, written by mdb_load with a 64 MiB map: past the 8 MiB one.
        let value = String(repeating: "ab", count: 1 << 20)
        var dump = "VERSION=3\nformat=bytevalue\ndatabase=filler\ntype=btree\nmapsize=67108864\nHEADER=END\n"
        for i in 0..<12 { dump += " \(String(format: "%02x", i))\n \(value)\n" }
        dump += "DATA=END\n"
        let input = dir.appendingPathComponent("filler.txt")
        try Data(dump.utf8).write(to: input)
        let generation = dataFile(ofStore: url).deletingLastPathComponent().path
        let env = store.env
        let outcome = Self.onThread { () throws -> String in
            try env.read { _ -> String in
                let load = Process()
                load.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                load.arguments = ["mdb_load", "-f", input.path, "-s", "filler", generation]
                try load.run()
                load.waitUntilExit()
                guard load.terminationStatus == 0 else { return "mdb_load exited \(load.terminationStatus)" }
                do {
                    try env.read { _ in }
                    return "the nested read began"
                } catch let e as LMDBError {
                    return e.code == MDB_MAP_RESIZED && e.operation.contains("inside another read") ? "refused" : "\(e)"
                }
            }
        }
        #expect(try await Self.outcome(outcome) == "refused")
        #expect(try store.mainContext.count(Genre.self) == 1, "the next read maps the larger file")
        _ = try await store.save { $0.insert(Genre(name: "after")) }
        #expect(try store.mainContext.count(Genre.self) == 2)
    }

    /// A damaged meta page whose last page number is the largest there is gives no size (it
    /// trapped adding one to it).
    @Test func aLastPageNumberAtTheLimitGivesNoSize() {
        var info = MDB_envinfo()
        info.me_last_pgno = Int.max
        var stat = MDB_stat()
        stat.ms_psize = 4096
        #expect(LMDBEnvironment.bytesInUse(info, stat) == nil)
        info.me_last_pgno = 9
        #expect(LMDBEnvironment.bytesInUse(info, stat) == 40_960)
    }
}
