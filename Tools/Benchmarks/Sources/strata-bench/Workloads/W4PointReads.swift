import Foundation

/// W4: 1M random fetches by id from one snapshot, each decoded to a Swift value (reads/s).
/// The store is loaded first (durable, 10k-record transactions; not timed).
enum W4PointReads {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let records = ctx.sizes.pointReadRecords
        let indexes = SplitMix64.indexes(count: ctx.sizes.pointReads, below: records, seed: 4)
        var checksums: [Engine: Int] = [:]
        await ctx.measureRounds("W4", keys: ["W4_point_reads"], &report) { engine in
            guard engine.measuresReads else { return [:] }
            let (seconds, checksum) = try await ctx.withSubject("W4", engine) { subject in
                _ = try await ctx.load(subject, 0..<records)
                try ctx.expectCount(subject, records)
                return try subject.timedPointReads(indexes)
            }
            // Every engine must read the same records: the same durations and title lengths.
            if let other = checksums.first(where: { $0.value != checksum }) {
                throw ChecksumMismatch(engine: engine, checksum: checksum, other: other.key, otherChecksum: other.value)
            }
            checksums[engine] = checksum
            return ["W4_point_reads": Double(indexes.count) / seconds]
        }
    }

    struct ChecksumMismatch: Error, CustomStringConvertible {
        let engine: Engine
        let checksum: Int
        let other: Engine
        let otherChecksum: Int
        var description: String { "read different data: checksum \(checksum), \(other.rawValue) read \(otherChecksum)" }
    }
}
