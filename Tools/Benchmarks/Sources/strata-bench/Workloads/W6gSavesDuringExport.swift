import Foundation
import LibraryModel
import Strata

/// W6g: latency of saves that grow the map, p50/p99/max in ms, while a slow export reads the
/// same store, against the same saves with nothing else running (Strata only).
///
/// Each phase opens a fresh store whose map starts small (`exportGrowthMapBytes`), preloads
/// `exportGrowthPreload` tracks (which fit it: a growth during the preload fails the workload),
/// then times `exportGrowthSaves` durable saves of `exportGrowthBatch` tracks each, one after
/// another, which take the store past its map (a phase whose saves did not grow it fails too).
/// In the export phase the saves start once an `Exporter` export of every track, on a thread of
/// its own, has written its first line; its consumer is paced so that the export lasts about
/// `exportSeconds`. A save that grows the map takes the map lock exclusively: the figure shows
/// whether it waits for the export (the consumer's whole length) or only for a chunk's read.
enum W6gSavesDuringExport {
    static let keys = ["W6g_save_p50_idle_ms", "W6g_save_p99_idle_ms", "W6g_save_max_idle_ms",
                       "W6g_save_p50_export_ms", "W6g_save_p99_export_ms", "W6g_save_max_export_ms"]

    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        await ctx.measureRounds("W6g", keys: keys, &report) { engine in
            guard engine == .strata else { return [:] }
            let idle = try await phase(ctx, duringExport: false)
            let busy = try await phase(ctx, duringExport: true)
            ctx.progress(String(format: "  W6g strata: idle %d saves, %d growth(s), max %.1f ms; during export %d saves, %d growth(s), max %.1f ms, "
                                    + "export %.1f s%@", idle.saves.count, idle.growths, idle.saves.maxMicros / 1000,
                                busy.saves.count, busy.growths, busy.saves.maxMicros / 1000, busy.exportSeconds ?? 0,
                                busy.exportOutlastedSaves ? "" : " (ended before the last save)"))
            return ["W6g_save_p50_idle_ms": idle.saves.p50Micros / 1000, "W6g_save_p99_idle_ms": idle.saves.p99Micros / 1000,
                    "W6g_save_max_idle_ms": idle.saves.maxMicros / 1000,
                    "W6g_save_p50_export_ms": busy.saves.p50Micros / 1000, "W6g_save_p99_export_ms": busy.saves.p99Micros / 1000,
                    "W6g_save_max_export_ms": busy.saves.maxMicros / 1000]
        }
    }

    struct Phase {
        let saves: LatencySummary
        let growths: Int
        let exportSeconds: Double?
        /// Whether the export was still running when the last save returned.
        let exportOutlastedSaves: Bool
    }

    private static func phase(_ ctx: WorkloadContext, duringExport: Bool) async throws -> Phase {
        let s = ctx.sizes
        let dir = try ctx.storeDirectory("W6g", .strata, duringExport ? "export" : "idle")
        defer { ctx.remove(dir) }
        var config = StoreConfiguration()
        config.initialMapSizeBytes = s.exportGrowthMapBytes
        let store = try Store.open(at: dir, schema: ctx.setup.schema, entities: [Track.self], configuration: config)
        defer { store.close() }
        var start = 0
        while start < s.exportGrowthPreload {
            let end = min(s.exportGrowthPreload, start + s.batchSize)
            var changes = ChangeSet()
            for t in TrackData.batch(start..<end) { changes.insert(t.track) }
            _ = try await store.save(changes, author: "bench")
            start = end
        }
        guard store.statistics.mapGrowths == 0 else {
            throw BenchSetupError("W6g: the preload of \(s.exportGrowthPreload) tracks grew the \(s.exportGrowthMapBytes >> 20) MiB map")
        }
        // The saves' batches, made before anything is timed.
        let batches: [ChangeSet] = (0..<s.exportGrowthSaves).map { i in
            let first = s.exportGrowthPreload + i * s.exportGrowthBatch
            var changes = ChangeSet()
            for t in TrackData.batch(first..<(first + s.exportGrowthBatch)) { changes.insert(t.track) }
            return changes
        }
        let started = StopFlag(), finished = StopFlag()
        var export: Task<(records: Int, seconds: Double), Error>?
        if duringExport {
            let lines = s.exportGrowthPreload
            let perLineNanos = UInt64(s.exportSeconds * 1e9) / UInt64(max(1, lines))
            export = Task {
                defer { finished.raise() }
                return try await runOnThread(name: "export") {
                    let begin = MonotonicClock.nanoseconds()
                    var n: UInt64 = 0
                    let records = try Exporter(store: store).export(Query(entity: "Track"), format: .ndjson) { _ in
                        n += 1
                        if n == 1 { started.raise() }
                        // A slow consumer: line n is taken no earlier than n × the pace.
                        let due = begin + n * perLineNanos, now = MonotonicClock.nanoseconds()
                        if due > now { var ts = timespec(tv_sec: Int((due - now) / 1_000_000_000), tv_nsec: Int((due - now) % 1_000_000_000)); nanosleep(&ts, nil) }
                    }.records
                    return (records, Double(MonotonicClock.nanoseconds() - begin) / 1e9)
                }
            }
            while !started.isRaised && !finished.isRaised { try await Task.sleep(for: .milliseconds(1)) }
        }
        var latencies: [UInt64] = []
        latencies.reserveCapacity(batches.count)
        for changes in batches {
            let t0 = MonotonicClock.nanoseconds()
            _ = try await store.save(changes, author: "bench")
            latencies.append(MonotonicClock.nanoseconds() - t0)
        }
        let outlasted = duringExport && !finished.isRaised
        let growths = store.statistics.mapGrowths
        var exportSeconds: Double?
        if let export {
            let (records, seconds) = try await export.value
            guard records == s.exportGrowthPreload else {
                throw BenchSetupError("W6g: the export wrote \(records) records, expected \(s.exportGrowthPreload)")
            }
            exportSeconds = seconds
        }
        guard growths > 0 else {
            throw BenchSetupError("W6g: \(s.exportGrowthSaves) saves of \(s.exportGrowthBatch) tracks did not grow the \(s.exportGrowthMapBytes >> 20) MiB map")
        }
        let expected = s.exportGrowthPreload + s.exportGrowthSaves * s.exportGrowthBatch
        let count = try store.mainContext.count(Track.self)
        guard count == expected else { throw BenchSetupError("W6g: the store holds \(count) tracks, expected \(expected)") }
        return Phase(saves: LatencySummary(nanoseconds: latencies), growths: growths, exportSeconds: exportSeconds,
                     exportOutlastedSaves: outlasted)
    }
}
