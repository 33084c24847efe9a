import CLMDBBench
import Foundation
import Strata

/// The two page-placement probes: what a durable commit's `fdatasync` costs on this disk as a
/// function of where its pages lie, and whether LMDB can be made to place a commit's pages side
/// by side from outside (it cannot usefully: only unbounded file growth is faster; see
/// BENCHMARKS.md, W2 durable).
extension ProbeCommand {
    /// `fsync-placement`: in a 64 MiB file written with zeros beforehand (so no write allocates
    /// blocks or changes the file's size), `--count` rounds of: write N pages, `fdatasync`. N is
    /// 1, 13 (a one-track save's pages) and 60 (a 16-track save's), the pages either at random
    /// places or side by side at a random place. Prints the median and 90th percentile.
    func fsyncPlacement(_ root: URL) throws {
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let path = root.appendingPathComponent("placement.dat").path
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw PlacementError("open(\(path)): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let pageBytes = 4_096, filePages = 16_384   // 64 MiB
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        for mb in 0..<(filePages * pageBytes >> 20) { try pwriteAll(fd, zeros, at: mb << 20, path) }
        guard fsync(fd) == 0 else { throw PlacementError("fsync(\(path)): \(String(cString: strerror(errno)))") }
        let page = [UInt8](repeating: 0x5A, count: pageBytes)
        var random = SplitMix64(seed: 17)
        for (pages, sideBySide) in [(1, false), (13, false), (13, true), (60, false), (60, true)] {
            var times: [UInt64] = []
            times.reserveCapacity(count)
            for _ in 0..<count {
                let started = MonotonicClock.nanoseconds()
                let base = Int(random.next() % UInt64(filePages - pages))
                for i in 0..<pages {
                    let at = sideBySide ? base + i : Int(random.next() % UInt64(filePages))
                    try pwriteAll(fd, page, at: at * pageBytes, path)
                }
                guard fdatasync(fd) == 0 else { throw PlacementError("fdatasync(\(path)): \(String(cString: strerror(errno)))") }
                times.append(MonotonicClock.nanoseconds() &- started)
            }
            times.sort()
            let median = Double(times[times.count / 2]) / 1_000, p90 = Double(times[min(times.count - 1, times.count * 9 / 10)]) / 1_000
            print(String(format: "%2d page(s) %@ + fdatasync: median %6.0f µs, p90 %6.0f µs (%d rounds)",
                         pages, pages == 1 ? "          " : (sideBySide ? "side by side" : "at random   "), median, p90, count))
        }
    }

    /// `page-placement`: the equal-work floor (`lmdb-indexed`: raw LMDB writing Strata's entries)
    /// doing `--count` one-track durable commits into a fresh store, four ways:
    /// - LMDB's default: each commit takes the lowest free pages (old copies of pages freed by
    ///   earlier commits), scattered over the file;
    /// - a read transaction held for the whole run: no freed page can be reused, so every
    ///   commit's pages are new pages at the end of the file, side by side;
    /// - the same on a file extended beforehand with written zeros, so those pages overwrite
    ///   allocated blocks instead of growing the file;
    /// - the held read transaction renewed every 256 commits (on an extended file): the file stops
    ///   growing, and commits reuse pages freed by the window before.
    /// Prints commits per second and the pages the store's file holds after the run.
    func pagePlacement(_ schema: Schema, _ root: URL) throws {
        let tracks = (0..<count).map { TrackData.make($0) }
        let setup = BenchSetup(schema: schema, mapSizeBytes: 8 << 30)
        let modes: [(name: String, hold: Int?, extend: Bool)] = [
            ("LMDB's default (free pages reused)", nil, false),
            ("reader held for the run", Int.max, false),
            ("reader held, file extended first", Int.max, true),
            ("reader renewed every 256 commits, file extended", 256, true),
        ]
        for (i, mode) in modes.enumerated() {
            let dir = root.appendingPathComponent("placement-\(i)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            let subject = try IndexedLMDBSubject(directory: dir, setup: setup, sync: .durable)
            var held: OpaquePointer?
            defer {
                if let held { mdb_txn_abort(held) }
                subject.close()
                try? FileManager.default.removeItem(at: dir)
            }
            if mode.extend {
                // About 16 pages a commit when no page is reused, and room to spare.
                let bytes = (count * 16 + 4_096) * 4_096
                let data = dir.appendingPathComponent("data.mdb").path
                let fd = open(data, O_WRONLY)
                guard fd >= 0 else { throw PlacementError("open(\(data)): \(String(cString: strerror(errno)))") }
                defer { close(fd) }
                let end = Int(lseek(fd, 0, SEEK_END))
                let zeros = [UInt8](repeating: 0, count: 1 << 20)
                var at = end
                while at < bytes { try pwriteAll(fd, zeros, at: at, data); at += zeros.count }
                guard fsync(fd) == 0 else { throw PlacementError("fsync(\(data)): \(String(cString: strerror(errno)))") }
            }
            let seconds = try MonotonicClock.measure {
                for (n, t) in tracks.enumerated() {
                    if let every = mode.hold, n % every == 0 {
                        let next = try subject.db.beginRead()
                        if let held { mdb_txn_abort(held) }
                        held = next
                    }
                    try subject.saveBlocking([t])
                }
            }.seconds
            var info = MDB_envinfo()
            try lmdbCheck(mdb_env_info(subject.db.env, &info), "mdb_env_info")
            let name = mode.name.padding(toLength: 50, withPad: " ", startingAt: 0)
            print(String(format: "%@ %6.0f commits/s; the file's last page %7d (%5.1f MB), %4.1f pages a commit",
                         name, Double(count) / seconds, info.me_last_pgno, Double(info.me_last_pgno) * 4_096 / 1e6,
                         Double(info.me_last_pgno) / Double(count)))
        }
    }

    private func pwriteAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int, _ path: String) throws {
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
        guard written == bytes.count else {
            throw PlacementError("pwrite(\(path), \(bytes.count) bytes at \(offset)): \(written < 0 ? String(cString: strerror(errno)) : "short write (\(written))")")
        }
    }
}

/// A failed system call of a placement probe.
struct PlacementError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
