import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

/// Background writeback of what a bulk build wrote, and prefetching a cold data file.
extension LMDBEnvironment {
    /// Starts writing the data file's dirty pages to disk without waiting (`sync_file_range`
    /// with `SYNC_FILE_RANGE_WRITE`): a bulk build calls it after each batch so that the disk
    /// works while the next batch is built, and the final sync has less left to wait for. Not a
    /// durability guarantee (that is ``sync()``).
    ///
    /// The call returns at once: `sync_file_range` submits the I/O in the caller's thread (ext4
    /// maps every dirty page to blocks and builds the requests, a third of a compaction's time
    /// when it ran inline), so it runs on a utility queue while the caller builds the next
    /// batch. At most one is queued at a time; one that starts late still covers every page
    /// dirtied before it.
    ///
    /// While ``isBulkBuild`` is set (never for an `MDB_WRITEMAP` environment), each writeback
    /// then writes and waits for every dirty page
    /// below the size the file had at the previous one (`SYNC_FILE_RANGE_WAIT_BEFORE | WRITE |
    /// WAIT_AFTER`), releases this process's mappings of the file (``releaseMappedPages()``:
    /// `POSIX_FADV_DONTNEED` skips mapped pages, and each fault of the build maps up to 16
    /// cached neighbours) and drops those pages from the page cache (`POSIX_FADV_DONTNEED`,
    /// which leaves dirty pages alone). The two meta pages stay, as every transaction reads
    /// them. The cache so holds the batches not yet on disk rather than the whole new file, as
    /// PostgreSQL's bulk writes go through a ring of buffers: what other work had cached stays,
    /// and the build reuses the memory it frees instead of taking fresh pages (on a virtual
    /// machine, each fresh page is also a fault in the host: 500 MB written into the cache for
    /// the first time ran at 530 MB/s here). The price: the new file's pages are read from disk
    /// when next used (see ``prefetch()``).
    ///
    /// Waiting for the pages consumes a write error the kernel would otherwise report to the
    /// next `fdatasync` of this descriptor (LMDB's), so such an error is kept and ``sync()``
    /// throws it: a generation whose pages did not reach the disk is never switched in.
    package func startWriteback() {
        guard Self.syncFileRange != nil, !closed.load(ordering: .acquiring) else { return }
        guard writebackQueued.compareExchange(expected: false, desired: true,
                                              ordering: .acquiringAndReleasing).exchanged else {
            return
        }
        Self.writebackQueue.async { [self] in
            writebackQueued.store(false, ordering: .releasing)
            writebackGate.withLock { state in
                guard !closed.load(ordering: .acquiring) else { return }
                var fd: Int32 = -1
                guard mdb_env_get_fd(handle, &fd) == MDB_SUCCESS, fd >= 0,
                      let syncFileRange = Self.syncFileRange else { return }
                var info = stat()
                let size = fstat(fd, &info) == 0 ? Int(info.st_size) : 0
                _ = syncFileRange(fd, 0, 0, 2 /* SYNC_FILE_RANGE_WRITE: errors are left for the sync */)
                let metaBytes = Self.metaPagesBytes
                let drop = isBulkBuild.load(ordering: .acquiring) && !options.writeMap
                if drop, state.error == nil, state.submittedBelow > metaBytes {
                    let length = state.submittedBelow - metaBytes
                    // WAIT_BEFORE | WRITE | WAIT_AFTER: clean, so that the advice can drop them.
                    if syncFileRange(fd, Int64(metaBytes), Int64(length), 7) != 0 {
                        state.error = errno
                    } else {
                        // A failed madvise only leaves some pages mapped, and so cached.
                        _ = try? releaseMappedPages()
                        if posix_fadvise(fd, off_t(metaBytes), off_t(length), POSIX_FADV_DONTNEED) == 0 {
                            droppedWrittenPages.store(true, ordering: .relaxed)
                        }
                    }
                }
                state.submittedBelow = size
            }
        }
    }

    /// How often ``withWritebackDuringCommit(_:)`` asks the kernel to start writing.
    static let commitWritebackIntervalMicroseconds: UInt32 = 2_000

    /// Runs `commit` (the `mdb_txn_commit` of a transaction that dirtied many pages) while a
    /// thread of its own asks the kernel, every ``commitWritebackIntervalMicroseconds``, to start
    /// writing the data file's dirty pages (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`), and
    /// returns once that thread has stopped. LMDB writes all of a commit's pages (`writev`) and
    /// only then syncs them: without this the disk starts at the sync, which then waits for all of
    /// it (about 70 ms of the 100 ms that committing 70 MB took here, in an import of 20,000
    /// records into a store of 200,000). Not a durability guarantee: the commit's own sync is.
    /// Write errors are left for that sync to report (the asynchronous request waits for
    /// nothing). Without `sync_file_range` (not Linux), or for an `MDB_WRITEMAP` environment or
    /// one whose commits do not sync (`MDB_NOSYNC` at the time), `commit` just runs.
    package func withWritebackDuringCommit<R>(_ commit: () -> R) -> R {
        var fd: Int32 = -1, flags: UInt32 = 0
        guard !options.writeMap, let syncFileRange = Self.syncFileRange,
              mdb_env_get_flags(handle, &flags) == MDB_SUCCESS, flags & UInt32(MDB_NOSYNC) == 0,
              mdb_env_get_fd(handle, &fd) == MDB_SUCCESS, fd >= 0 else { return commit() }
        let state = Locked(CommitPump.notStarted)
        let wake = DispatchSemaphore(value: 0), finished = DispatchSemaphore(value: 0)
        let interval = DispatchTimeInterval.microseconds(Int(Self.commitWritebackIntervalMicroseconds)), file = fd
        let pump = Thread { [self] in
            // A thread that starts after the commit ended leaves the descriptor alone.
            guard state.withLock({ s -> Bool in
                guard s == .notStarted else { return false }
                s = .running
                return true
            }) else { return }
            repeat {
                _ = syncFileRange(file, 0, 0, 2 /* SYNC_FILE_RANGE_WRITE */)
                commitWritebackRequests.add(1, ordering: .relaxed)
            } while wake.wait(timeout: .now() + interval) == .timedOut
            finished.signal()
        }
        pump.name = "strata.commit-writeback"
        pump.start()
        let result = commit()
        let running = state.withLock { s -> Bool in
            if s == .running { return true }
            s = .abandoned
            return false
        }
        if running {
            // Woken at once, not at its next interval; it uses the descriptor, so it stops
            // before the environment can close it.
            wake.signal()
            finished.wait()
        }
        return result
    }

    /// The thread of ``withWritebackDuringCommit(_:)``: not started yet, running, or abandoned
    /// (the commit ended before it started: it does nothing if it ever does).
    private enum CommitPump { case notStarted, running, abandoned }

    /// The first error a background writeback saw while waiting for its pages (nil: none). The
    /// kernel reports a write error once per open file, and that wait took it.
    package var backgroundWritebackError: Int32? { writebackGate.withLock { $0.error } }

    /// Records `code` as if a background writeback had seen that write error (tests of the
    /// path no real disk here can produce on demand).
    package func recordWritebackErrorForTesting(_ code: Int32) { writebackGate.withLock { $0.error = code } }

    /// Reads the data file into the page cache (sequential 1 MiB reads of a second descriptor),
    /// when it is at most half of the memory available (`MemAvailable`, and the cgroup's
    /// `memory.max` where one is set), stopping if the environment closes: a new generation
    /// whose build dropped its pages (``startWriteback()``) starts cold, and
    /// readers of a store opened with `MDB_NORDAHEAD` would otherwise fetch it a page per fault
    /// (a compaction that read a cold 318 MB generation took 6 s instead of 0.6).
    /// `POSIX_FADV_WILLNEED` does not do it: the kernel caps it at one readahead window. Errors
    /// only leave the file cold.
    package func prefetch() {
        Self.prefetch(file: path + "/data.mdb") { closed.load(ordering: .relaxed) }
    }

    /// ``prefetch()`` on a utility queue, after every writeback queued before this call and only
    /// if one of them dropped pages. Returns at once. The queue holds the environment weakly: one
    /// that is released meanwhile (a generation replaced again) closes, and the reading stops.
    package func prefetchInBackground() {
        let file = path + "/data.mdb"
        Self.writebackQueue.async { [weak self] in
            guard let self, droppedWrittenPages.load(ordering: .relaxed),
                  !closed.load(ordering: .acquiring) else { return }
            Self.prefetchQueue.async { [weak self] in
                Self.prefetch(file: file) { self.map { $0.closed.load(ordering: .relaxed) } ?? true }
            }
        }
    }

    /// The reading of ``prefetch()``: `stop` is asked before each 1 MiB.
    static func prefetch(file: String, stop: () -> Bool) {
        let fd = Glibc.open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, let available = availableMemoryBytes(),
              Int(info.st_size) <= available / prefetchAvailableMemoryDivisor else { return }
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        let chunk = prefetchChunkBytes
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 4096)
        defer { buffer.deallocate() }
        var offset: off_t = 0
        while !stop() {
            let n = pread(fd, buffer, chunk, offset)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            offset += off_t(n)
        }
    }

    /// Memory the page cache may use without evicting much: `MemAvailable` from `/proc/meminfo`,
    /// lowered to the cgroup's free `memory.max` where one is set. Nil when unknown.
    package static func availableMemoryBytes() -> Int? {
        guard let meminfo = try? readProcFile("/proc/meminfo"),
              let line = meminfo.split(separator: "\n").first(where: { $0.hasPrefix("MemAvailable:") }),
              let kB = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else { return nil }
        var available = kB * 1024
        if let max = (try? readProcFile("/sys/fs/cgroup/memory.max"))
               .flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }),
           let current = (try? readProcFile("/sys/fs/cgroup/memory.current"))
               .flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) {
            available = min(available, Swift.max(0, max - current))
        }
        return available
    }

    /// Waits until every background writeback queued so far has finished.
    package static func waitForWriteback() { writebackQueue.sync {} }

    /// Waits until every background writeback and prefetch queued so far has finished (tests).
    package static func waitForBackgroundWork() {
        waitForWriteback()
        prefetchQueue.sync {}
    }

    /// The two meta pages at the start of the data file (LMDB's page size is the system's): a
    /// writeback never drops them, every transaction reads them.
    package static let metaPagesBytes = 2 * Int(sysconf(Int32(_SC_PAGESIZE)))
    /// ``prefetch()`` reads a file only when it is at most this fraction (1/n) of the memory
    /// available, so it never pushes much else out of the cache.
    package static let prefetchAvailableMemoryDivisor = 2
    /// The size of ``prefetch()``'s reads.
    package static let prefetchChunkBytes = 1 << 20

    /// Where background writebacks run (one at a time: they contend for the same disk).
    static let writebackQueue = DispatchQueue(label: "strata.writeback", qos: .utility)
    /// Where prefetches run, apart from writebacks (a long one must not hold up another
    /// store's build).
    static let prefetchQueue = DispatchQueue(label: "strata.prefetch", qos: .utility)

    /// glibc's `sync_file_range`, which Swift's Glibc module does not import (it is declared
    /// only under `_GNU_SOURCE`); looked up once. Nil where it does not exist.
    static let syncFileRange: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sync_file_range") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32).self)
    }()
}
