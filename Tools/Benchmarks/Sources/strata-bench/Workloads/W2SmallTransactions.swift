import Foundation

/// W2: 10k one-record transactions, one after another (tx/s). Durable for every engine; then
/// relaxed: Strata `.relaxed`, LMDB `MDB_NOSYNC` (the same sync level), GRDB's default.
enum W2SmallTransactions {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        for (key, sync) in [("W2_small_tx", SyncLevel.durable), ("W2_small_tx_relaxed", .relaxed)] {
            await ctx.measureRounds(key, keys: [key], &report) { engine in
                let n = ctx.sizes.smallTransactions
                let seconds = try await ctx.withSubject("W2", engine, variant: key, sync: sync) { subject in
                    var seconds = 0.0
                    for i in 0..<n {
                        let one = [TrackData.make(i)]
                        seconds += try await MonotonicClock.measure { try await subject.save(one) }.seconds
                    }
                    try ctx.expectCount(subject, n)
                    return seconds
                }
                return [key: Double(n) / seconds]
            }
        }
    }
}
