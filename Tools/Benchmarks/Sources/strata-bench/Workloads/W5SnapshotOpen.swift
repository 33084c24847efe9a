import Foundation

/// W5: opening and closing a snapshot (opens/s): Strata `snapshot(label:)` + `close()`, LMDB
/// `mdb_txn_renew` + `mdb_txn_reset`, GRDB `dbPool.read { _ in }`. Each engine runs
/// ``BenchSizes/snapshotOpens`` at a time until ``BenchSizes/snapshotSeconds`` have been timed, so
/// every engine, however fast, is timed for at least that long.
enum W5SnapshotOpen {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let n = ctx.sizes.snapshotOpens
        precondition(n > 0 && ctx.sizes.snapshotSeconds > 0, "W5 needs opens to time and a time to time them for")
        await ctx.measureRounds("W5", keys: ["W5_snapshot_open"], &report) { engine in
            guard engine.measuresReads else { return [:] }
            let opensPerSecond = try await ctx.withSubject("W5", engine) { subject in
                _ = try await ctx.load(subject, 0..<ctx.sizes.batchSize)
                // Warm-up (first reader slot, first pooled connection), then the timed run.
                _ = try subject.timedSnapshotOpens(min(1000, n))
                var opens = 0, seconds = 0.0
                repeat {
                    seconds += try subject.timedSnapshotOpens(n)
                    opens += n
                } while seconds < ctx.sizes.snapshotSeconds
                return Double(opens) / seconds
            }
            return ["W5_snapshot_open": opensPerSecond]
        }
    }
}
