import Foundation

/// W5: opening and closing a snapshot (opens/s): Strata `snapshot(label:)` + `close()`, LMDB
/// `mdb_txn_renew` + `mdb_txn_reset`, GRDB `dbPool.read { _ in }`.
enum W5SnapshotOpen {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let n = ctx.sizes.snapshotOpens
        for engine in ctx.engines {
            do {
                let seconds = try await ctx.withSubject("W5", engine) { subject in
                    _ = try await ctx.load(subject, 0..<min(ctx.sizes.batchSize, ctx.sizes.latencyPreload))
                    // Warm-up (first reader slot, first pooled connection), then the timed run.
                    _ = try subject.timedSnapshotOpens(min(1000, n))
                    return try subject.timedSnapshotOpens(n)
                }
                report.record("W5_snapshot_open", engine, Double(n) / seconds)
                ctx.progress(String(format: "W5 %@: %.0f opens/s", engine.rawValue, Double(n) / seconds))
            } catch {
                ctx.progress("W5 \(engine.rawValue) failed: \(error)")
                report.fail(["W5_snapshot_open"], error)
            }
        }
    }
}
