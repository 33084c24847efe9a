import Foundation
import Synchronization
import LibraryModel
import Strata

/// W9: `compactionObjects` tracks, each updated once (half the log entries are superseded
/// versions), compacted to the head. Strata column: file size after / live bytes (every key and
/// value the compacted store holds: records, index, unique and link entries, counts; the
/// B-tree's overhead), also over the records' bytes alone (`W9_size_over_record_bytes`), and
/// MB/s (bytes before over seconds); LMDB column of the MB/s row: `mdb_copy -c` of the same
/// environment, timed as a process. Each copy starts after a `sync(2)`: of the loaded store
/// (loaded without fsync) before `mdb_copy`, and after `mdb_copy` before compaction, so neither
/// competes with the writeback of work done before it. Compaction's own time includes the sync
/// of its new generation. `mdb_copy` never calls fsync, but liblmdb writes the copy with
/// `O_DIRECT` (set by `fcntl` after opening it), past the page cache:
/// `W9_mdb_copy_synced_mb_per_s`, for information, times `mdb_copy -c` and an `fdatasync` of
/// its copy together, and comes out the same.
enum W9Compaction {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let keys = ["W9_compaction_size_ratio", "W9_size_over_record_bytes", "W9_compaction_mb_per_s", "W9_mdb_copy_mb_per_s",
                    "W9_mdb_copy_synced_mb_per_s"]
        await ctx.measureRounds("W9", keys: keys, &report) { engine in
            guard engine == .strata else { return [:] }
            let n = ctx.sizes.compactionObjects
            return try await ctx.withSubject("W9", .strata, sync: .relaxed) { subject in
                guard let store = (subject as? StrataSubject)?.store else { return [:] }
                _ = try await ctx.load(subject, 0..<n)
                var start = 0
                while start < n {
                    let end = min(n, start + ctx.sizes.batchSize)
                    _ = try await store.save { c in for i in start..<end { c.set(Track.playCount, of: TrackData.id(i), to: i + 1) } }
                    start = end
                }
                // The store was loaded in relaxed mode: flush its dirty pages first, so neither
                // timed copy shares the disk with the kernel writing back this setup's data.
                sync()
                let mdbCopy = try timeMdbCopy(store, ctx)
                // mdb_copy leaves its copy in the page cache, unsynced (then removed): let that
                // settle too before compaction is timed.
                sync()
                // Phase times, printed (not reported): where a slow run loses its time.
                let catchUpAt = Mutex<UInt64?>(nil)
                let startedAt = MonotonicClock.nanoseconds()
                let r = try await store.compact { p in
                    if p.phase == .catchingUp { catchUpAt.withLock { $0 = MonotonicClock.nanoseconds() } }
                }
                let endedAt = MonotonicClock.nanoseconds()
                if let c = catchUpAt.withLock({ $0 }) {
                    ctx.progress(String(format: "  W9 compaction: copy %.3f s, then catch-up, sync and switch %.3f s",
                                        Double(c - startedAt) / 1e9, Double(endedAt - c) / 1e9))
                }
                let megabytes = Double(r.bytesBefore) / 1_048_576
                var figures = ["W9_compaction_size_ratio": Double(r.bytesAfter) / Double(max(1, r.liveEntryBytes)),
                               "W9_size_over_record_bytes": Double(r.bytesAfter) / Double(max(1, r.liveDataBytes)),
                               "W9_compaction_mb_per_s": megabytes / r.seconds]
                if let mdbCopy {
                    figures["W9_mdb_copy_mb_per_s"] = megabytes / mdbCopy.copy
                    figures["W9_mdb_copy_synced_mb_per_s"] = megabytes / mdbCopy.copyAndSync
                }
                return figures
            }
        }
        // mdb_copy's figure goes in the LMDB column of the MB/s row.
        // Every round's, so that a round's ratio compares the copies made in that round.
        if let samples = report.samples("W9_mdb_copy_mb_per_s", .strata) {
            report.record("W9_compaction_mb_per_s", .lmdb, samples: samples)
        }
    }

    /// Seconds `mdb_copy -c` takes to copy the store's live generation, and that plus an
    /// `fdatasync` of the copy (nil when not installed).
    static func timeMdbCopy(_ store: Store, _ ctx: WorkloadContext) throws -> (copy: Double, copyAndSync: Double)? {
        let tool = ["/usr/bin/mdb_copy", "/usr/local/bin/mdb_copy"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let tool else {
            ctx.progress("W9: mdb_copy not found (Tools/bench installs lmdb-utils); no comparison")
            return nil
        }
        let source = URL(fileURLWithPath: store.path).appendingPathComponent("current").resolvingSymlinksInPath().path
        let target = ctx.runDirectory.appendingPathComponent("W9-mdb-copy")
        try? FileManager.default.removeItem(at: target)
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: target) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = ["-c", source, target.path]
        let started = MonotonicClock.nanoseconds()
        try p.run()
        InterruptCleanup.track(p.processIdentifier)
        p.waitUntilExit()
        InterruptCleanup.untrack(p.processIdentifier)
        guard p.terminationStatus == 0 else { throw MdbCopyFailed(status: p.terminationStatus) }
        let copied = MonotonicClock.nanoseconds()
        let fd = open(target.appendingPathComponent("data.mdb").path, O_RDONLY)
        guard fd >= 0 else { throw SyncFailed(errno: errno) }
        defer { close(fd) }
        guard fdatasync(fd) == 0 else { throw SyncFailed(errno: errno) }
        let synced = MonotonicClock.nanoseconds()
        return (Double(copied - started) / 1e9, Double(synced - started) / 1e9)
    }

    struct SyncFailed: Error, CustomStringConvertible {
        let errno: Int32
        var description: String { "fdatasync of mdb_copy's output failed: \(String(cString: strerror(errno)))" }
    }

    struct MdbCopyFailed: Error, CustomStringConvertible {
        let status: Int32
        var description: String { "mdb_copy -c exited \(status)" }
    }
}
