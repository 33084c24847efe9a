import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

/// Releasing the pages a bulk save mapped into the process, found in `/proc/self/maps`.
extension LMDBEnvironment {
    /// Drops this process's mappings of the store's pages (`madvise(MADV_DONTNEED)` on the whole
    /// map). The map is read-only and shared (no `MDB_WRITEMAP`), so nothing is lost: the pages
    /// stay in the kernel's page cache and the next access to one faults it back in, also for a
    /// reader running concurrently. Holds ``mapLock`` shared so the map cannot move meanwhile.
    ///
    /// LMDB does not expose the map's address (`me_mapaddr` is only set for `MDB_FIXEDMAP`), so
    /// the mapping is found in `/proc/self/maps` by the data file's device and inode.
    package func releaseMappedPages() throws {
        try mapLock.withShared { try releaseMappedPagesHoldingMapLock() }
    }

    /// ``releaseMappedPages()`` for a caller that holds ``mapLock`` shared already: a write
    /// transaction in progress. Safe in the middle of one: without `MDB_WRITEMAP` the map is a
    /// read-only shared mapping of the file, LMDB writes a transaction's pages to heap copies and
    /// never into the map, and a page it still points into is faulted back in from the page cache
    /// unchanged on its next use.
    package func releaseMappedPagesHoldingMapLock() throws {
        precondition(!options.writeMap,
                     "MDB_WRITEMAP maps are written in place; dropping their pages mid-transaction is not safe")
        // A close sets the flag before it removes the map and forgets the cached ranges. (A
        // release that read the flag just before a close on another thread may still reach the
        // removed range: its `madvise` then fails, `ENOMEM`, as on any unmapped range.)
        if closed.load(ordering: .acquiring) { throw options.policy.closed(path: path) }
        let ranges = try cachedMappings.withLock { cached in
            if let cached { return cached }
            let found = try dataFileMappings().map { MappedRange(start: $0.start, end: $0.end) }
            cached = found
            return found
        }
        for range in ranges {
            guard let start = UnsafeMutableRawPointer(bitPattern: range.start) else { continue }
            if madvise(start, Int(range.end - range.start), MADV_DONTNEED) != 0 {
                throw LMDBError(code: errno, operation: "madvise(MADV_DONTNEED)")
            }
        }
        mappedPageReleases.add(1, ordering: .relaxed)
    }

    /// The whole of a `/proc` file. Its size reads as 0 and the kernel hands it out a page at a
    /// time, so this reads until end of file rather than trusting `stat`.
    package static func readProcFile(_ path: String) throws -> String {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw LMDBError(code: errno, operation: "open(\(path))") }
        defer { Glibc.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw LMDBError(code: errno, operation: "read(\(path))")
            }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// This process's mappings of the data file (one: LMDB's map).
    package func dataFileMappings() throws -> [(start: UInt, end: UInt)] {
        var fd: Int32 = -1
        try lmdbCheck(mdb_env_get_fd(handle, &fd), "mdb_env_get_fd")
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw LMDBError(code: errno, operation: "fstat(data.mdb)") }
        return try Self.mappings(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }

    /// This process's mappings of the file with `device` and `inode`, from `/proc/self/maps`
    /// (lines `start-end perms offset major:minor inode path`, numbers in hex but the inode).
    package static func mappings(device: UInt64, inode: UInt64) throws -> [(start: UInt, end: UInt)] {
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        let text = try readProcFile("/proc/self/maps")
        var out: [(start: UInt, end: UInt)] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count >= 5, UInt64(fields[4]) == inode else { continue }
            let dev = fields[3].split(separator: ":")
            guard dev.count == 2, UInt64(dev[0], radix: 16) == major,
                  UInt64(dev[1], radix: 16) == minor else { continue }
            let range = fields[0].split(separator: "-")
            guard range.count == 2, let start = UInt(range[0], radix: 16), let end = UInt(range[1], radix: 16),
                  end > start else { continue }
            out.append((start, end))
        }
        return out
    }
}
