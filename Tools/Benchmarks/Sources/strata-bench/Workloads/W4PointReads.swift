import Foundation

/// W4: 1M random fetches by id from one snapshot, each decoded to a Swift value (reads/s).
enum W4PointReads {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let records = ctx.sizes.pointReadRecords
        let indexes = SplitMix64.indexes(count: ctx.sizes.pointReads, below: records, seed: 4)
        var checksums: [Engine: Int] = [:]
        for engine in ctx.engines {
            do {
                let (seconds, checksum) = try await ctx.withSubject("W4", engine) { subject in
                    _ = try await ctx.load(subject, 0..<records)
                    try ctx.expectCount(subject, records)
                    return try subject.timedPointReads(indexes)
                }
                checksums[engine] = checksum
                report.record("W4_point_reads", engine, Double(indexes.count) / seconds)
                ctx.progress(String(format: "W4 %@: %.0f reads/s", engine.rawValue, Double(indexes.count) / seconds))
            } catch {
                ctx.progress("W4 \(engine.rawValue) failed: \(error)")
                report.fail(["W4_point_reads"], error)
            }
        }
        // Every engine read the same records: the same durations and title lengths.
        if Set(checksums.values).count > 1 {
            report.fail(["W4_point_reads"], ChecksumMismatch(checksums: checksums))
        }
    }

    struct ChecksumMismatch: Error, CustomStringConvertible {
        let checksums: [Engine: Int]
        var description: String { "engines read different data: \(checksums.map { "\($0.key.rawValue)=\($0.value)" }.sorted())" }
    }
}
