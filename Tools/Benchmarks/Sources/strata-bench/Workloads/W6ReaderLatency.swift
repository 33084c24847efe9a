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
        for engine in ctx.engines {
            do {
                let (idle, busy) = try await ctx.withSubject("W6", engine) { subject in
                    _ = try await ctx.load(subject, 0..<preload)
                    _ = try subject.readerLatencies(Array(indexes.prefix(2_000)), until: nil)  // warm-up
                    let idle = LatencySummary(nanoseconds: try await runOnThread(name: "reader") { try subject.readerLatencies(indexes, until: nil) })
                    let busy = try await duringImport(ctx, subject, indexes)
                    try ctx.expectCount(subject, preload + ctx.sizes.latencyImportRecords)
                    return (idle, busy)
                }
                report.record("W6_reader_p50_idle_us", engine, idle.p50Micros)
                report.record("W6_reader_p99_idle_us", engine, idle.p99Micros)
                report.record("W6_reader_p50_import_us", engine, busy.p50Micros)
                report.record("W6_reader_p99_import_us", engine, busy.p99Micros)
                ctx.progress(String(format: "W6 %@: idle p50 %.2f p99 %.2f µs (%d reads); during import p50 %.2f p99 %.2f max %.0f µs (%d reads)",
                                    engine.rawValue, idle.p50Micros, idle.p99Micros, idle.count, busy.p50Micros, busy.p99Micros, busy.maxMicros, busy.count))
            } catch {
                ctx.progress("W6 \(engine.rawValue) failed: \(error)")
                report.fail(keys, error)
            }
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
