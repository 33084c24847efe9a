import Foundation

/// W3: 1, 4, 16 and 64 concurrent savers of one-record durable transactions (total tx/s).
///
/// Strata's savers are tasks awaiting `save` (its writer groups what is waiting into one LMDB
/// commit). Raw LMDB and GRDB have one writer at a time, so their savers are OS threads that block
/// on the engine's write lock and commit one by one, as an application's would.
enum W3GroupCommit {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        for savers in ctx.sizes.saverCounts {
            let key = "W3_group_commit_\(savers)"
            await ctx.measureRounds(key, keys: [key], &report) { engine in
                let perSaver = max(1, ctx.sizes.groupCommitTransactions / savers)
                let total = perSaver * savers
                // Records are generated before the clock starts: it measures commits, not string
                // formatting. Saver s's k-th record is record k·savers + s, so the records saved at
                // the same moment have adjacent ids, as new objects made at the same moment have
                // in Strata (its ids are time-prefixed) and as the ceiling's 16-record commits
                // have. (With a block of ids per saver, s·perSaver + k, a group's 16 records
                // would fall on 16 leaves of the id-keyed B-trees: ~15 % more page writes per
                // commit than the ceiling's, `strace -c`.)
                let work = (0..<savers).map { s in (0..<perSaver).map { [TrackData.make($0 * savers + s)] } }
                let seconds = try await ctx.withSubject("W3", engine, variant: String(savers)) { subject in
                    let (seconds, _) = try await MonotonicClock.measure { try await saveConcurrently(subject, work) }
                    try ctx.expectCount(subject, total)
                    return seconds
                }
                return [key: Double(total) / seconds]
            }
        }
        await runCommitsOf16(ctx, &report)
    }

    /// The ceiling of the 16-saver target: the same records committed 16 per transaction by one
    /// saver (what a perfect group commit of 16 savers writes, without any coordination), in
    /// tx/s counting each record as one saver's transaction. Its ratio to `W3_group_commit_1` is
    /// the most 16 savers can gain from grouping on this disk, for each engine.
    static func runCommitsOf16(_ ctx: WorkloadContext, _ report: inout Report) async {
        let key = "W3_commits_of_16"
        await ctx.measureRounds(key, keys: [key], &report) { engine in
            let total = ctx.sizes.groupCommitTransactions
            let records = (0..<total).map { TrackData.make($0) }
            let batches = stride(from: 0, to: total, by: 16).map { Array(records[$0..<min($0 + 16, total)]) }
            let seconds = try await ctx.withSubject("W3", engine, variant: "commits-of-16") { subject in
                let (seconds, _) = try await MonotonicClock.measure { try await saveConcurrently(subject, [batches]) }
                try ctx.expectCount(subject, total)
                return seconds
            }
            return [key: Double(total) / seconds]
        }
    }

    /// Each element of `work` is one saver's transactions, each a batch of records, saved one
    /// after another.
    static func saveConcurrently(_ subject: any BenchSubject, _ work: [[[TrackData]]]) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for transactions in work {
                if subject.savesBlockThread {
                    group.addTask {
                        try await runOnThread(name: "saver") {
                            for t in transactions { try subject.saveBlocking(t) }
                        }
                    }
                } else {
                    group.addTask {
                        for t in transactions { try await subject.save(t) }
                    }
                }
            }
            try await group.waitForAll()
        }
    }
}
