import Foundation
import LibraryModel
import Strata

/// W8 (Strata only): `verify()` on a store of `verifyRecords` inserted tracks plus one update
/// of each (so replay applies inserts and updates): changes replayed and compared per second.
/// Also: opening an as-of snapshot 100 transactions back (100 one-object saves made
/// last) and reading through it, in milliseconds.
enum W8Verify {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        await ctx.measureRounds("W8", keys: ["W8_verify", "W8_asof_100_back_ms"], &report) { engine in
            guard engine == .strata else { return [:] }
            let n = ctx.sizes.verifyRecords
            return try await ctx.withSubject("W8", .strata, sync: .relaxed) { subject in
                guard let store = (subject as? StrataSubject)?.store else { return [:] }
                _ = try await ctx.load(subject, 0..<n)
                var start = 0
                while start < n {
                    let end = min(n, start + ctx.sizes.batchSize)
                    _ = try await store.save { c in for i in start..<end { c.set(Track.playCount, of: TrackData.id(i), to: i) } }
                    start = end
                }
                let report = try store.verify()
                guard report.ok else { throw VerifyFailed(problems: report.problems) }
                for i in 0..<100 { _ = try await store.save { $0.set(Track.playCount, of: TrackData.id(i), to: -i) } }
                let head = try store.lastTransactionID
                let asOf = try MonotonicClock.measure {
                    let past = try store.snapshot(asOf: TransactionID(head.rawValue - 100))
                    defer { past.close() }
                    guard try past.object(Track.self, id: TrackData.id(0)) != nil else { throw VerifyFailed(problems: ["as-of read found nothing"]) }
                }.seconds
                return ["W8_verify": Double(report.changes) / report.seconds, "W8_asof_100_back_ms": asOf * 1000]
            }
        }
    }

    struct VerifyFailed: Error, CustomStringConvertible {
        let problems: [String]
        var description: String { "verify failed: \(problems.prefix(3).joined(separator: "; "))" }
    }
}
