import Foundation

/// W6: latency of a reader operation (open a snapshot, fetch one record by id, close), p50/p99
/// in µs, first with nothing else running, then while a W1-style import (durable, 10k-record
/// transactions) runs in the same process.
///
/// The reader is a dedicated OS thread looping as fast as it can; the import runs at the same
/// time (Strata: a task awaiting saves, its writer on its own queue; LMDB and GRDB: another thread).
enum W6ReaderLatency {
    static let keys = ["W6_reader_p50_idle_us", "W6_reader_p99_idle_us", "W6_reader_p50_import_us", "W6_reader_p99_import_us"]

    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let preload = ctx.sizes.latencyPreload
        let indexes = SplitMix64.indexes(count: ctx.sizes.latencyReads, below: preload, seed: 6)
        await ctx.measureRounds("W6", keys: keys, &report) { engine in
            guard engine.measuresReads else { return [:] }
            let (idle, busy) = try await ctx.withSubject("W6", engine) { subject in
                _ = try await ctx.load(subject, 0..<preload)
                _ = try subject.readerLatencies(Array(indexes.prefix(2_000)), until: nil)  // warm-up
                let idle = LatencySummary(nanoseconds: try await runOnThread(name: "reader") { try subject.readerLatencies(indexes, until: nil) })
                let busy = try await duringImport(ctx, subject, indexes)
                try ctx.expectCount(subject, preload + ctx.sizes.latencyImportRecords)
                return (idle, busy)
            }
            ctx.progress(String(format: "  W6 %@: idle %d reads, max %.0f µs; during import %d reads, max %.0f µs",
                                engine.rawValue, idle.count, idle.maxMicros, busy.count, busy.maxMicros))
            return ["W6_reader_p50_idle_us": idle.p50Micros, "W6_reader_p99_idle_us": idle.p99Micros,
                    "W6_reader_p50_import_us": busy.p50Micros, "W6_reader_p99_import_us": busy.p99Micros]
        }
    }

    private static func duringImport(_ ctx: WorkloadContext, _ subject: any BenchSubject, _ indexes: [Int]) async throws -> LatencySummary {
        let stop = StopFlag()
        let started = StopFlag()
        async let latencies = runOnThread(name: "reader") { () throws -> [UInt64] in
            started.raise()
            return try subject.readerLatencies(indexes, until: stop)
        }
        while !started.isRaised { await Task.yield() }
        let range = ctx.sizes.latencyPreload..<(ctx.sizes.latencyPreload + ctx.sizes.latencyImportRecords)
        do {
            if subject.savesBlockThread {
                let batch = ctx.sizes.batchSize
                try await runOnThread(name: "importer") {
                    var start = range.lowerBound
                    while start < range.upperBound {
                        let end = min(range.upperBound, start + batch)
                        try subject.saveBlocking(TrackData.batch(start..<end))
                        start = end
                    }
                }
            } else {
                _ = try await ctx.load(subject, range)
            }
        } catch {
            stop.raise()
            _ = try? await latencies
            throw error
        }
        stop.raise()
        return LatencySummary(nanoseconds: try await latencies)
    }
}
