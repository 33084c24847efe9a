import Foundation

/// W2: 10k one-record transactions, one after another (tx/s). Durable for every engine; then
/// relaxed: Strata `.relaxed`, LMDB `MDB_NOSYNC` (the same sync level), GRDB's default.
///
/// Every engine saves through a call that blocks until its transaction is committed (LMDB's
/// `mdb_txn_commit`, GRDB's `DatabasePool.write`, Strata's `saveAndWait`). Strata's `async`
/// `save` (a suspension while the writer's thread commits) is measured too, in the `_async` rows.
enum W2SmallTransactions {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        for (key, sync) in [("W2_small_tx", SyncLevel.durable), ("W2_small_tx_relaxed", .relaxed)] {
            let asyncKey = key + "_async"
            await ctx.measureRounds(key, keys: [key, asyncKey], &report) { engine in
                let n = ctx.sizes.smallTransactions
                var figures: [String: Double] = [:]
                let seconds = try await ctx.withSubject("W2", engine, variant: key, sync: sync) { subject in
                    var seconds = 0.0
                    for i in 0..<n {
                        let one = [TrackData.make(i)]
                        seconds += try MonotonicClock.measure { try subject.saveBlocking(one) }.seconds
                    }
                    try ctx.expectCount(subject, n)
                    return seconds
                }
                figures[key] = Double(n) / seconds
                if engine == .strata {
                    let asyncSeconds = try await ctx.withSubject("W2", engine, variant: asyncKey, sync: sync) { subject in
                        var seconds = 0.0
                        for i in 0..<n {
                            let one = [TrackData.make(i)]
                            seconds += try await MonotonicClock.measure { try await subject.save(one) }.seconds
                        }
                        try ctx.expectCount(subject, n)
                        return seconds
                    }
                    figures[asyncKey] = Double(n) / asyncSeconds
                }
                return figures
            }
        }
    }
}
