#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// How storectl asks the C allocator to serve large blocks and to grow its heaps.
///
/// glibc serves a block of 128 KiB or more with a mapping of its own, returned to the system when
/// it is freed, until the program frees such a block: it then raises that threshold (up to 32 MiB)
/// so that later blocks of that size come from the heap, where freed memory stays with the
/// process. An import frees many large buffers (batches, sort runs, log entries), so the heaps
/// kept growing: a 1,000,000-record `storectl import` into an empty store peaked at 396–411 MB of
/// RSS with the threshold rising, 360–364 MB with it fixed at 128 KiB, in the same time
/// (BENCHMARKS.md, W11, "Measured and not built"). So every command starts with the threshold fixed
/// at 128 KiB (``apply()``).
///
/// A small import is the other way round: it has no memory bound to keep, and its time goes into
/// growing memory. Every buffer mapped afresh is faulted in page by page, and the writer's
/// transaction copies each page it changes into a block of its own (LMDB allocates them one by one
/// with `malloc`), so a heap grows by about 132 KiB at a time, each step a system call, while
/// 100,000 records go into a 1,000,000-record store. An import whose input files come to less than
/// ``smallImportMaxInputBytes`` in all therefore serves blocks up to
/// ``smallImportMmapThresholdBytes`` from the heap and grows a heap by ``smallImportTopPadBytes``
/// more than it needs (``applyForImport(inputBytes:)``). Measured in BENCHMARKS.md ("The
/// allocator").
///
/// A setting the user chose (`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=…` or
/// `MALLOC_MMAP_THRESHOLD_`; `glibc.malloc.top_pad` or `MALLOC_TOP_PAD_`) is left as it is. The
/// library itself never changes the allocator of the process it runs in.
enum MallocTuning {
    /// The threshold storectl fixes: glibc's own starting value, 128 KiB.
    static let mmapThresholdBytes: Int32 = 128 << 10
    /// glibc's `M_MMAP_THRESHOLD` parameter of `mallopt` (<malloc.h>).
    static let mmapThresholdParameter: Int32 = -3
    /// glibc's `M_TOP_PAD` parameter of `mallopt` (<malloc.h>).
    static let topPadParameter: Int32 = -2

    /// The threshold of an import of a small input: glibc's own ceiling for its rising threshold.
    static let smallImportMmapThresholdBytes: Int32 = 32 << 20
    /// How much more than it needs a heap grows by in an import of a small input (glibc's default
    /// is 128 KiB). At most this much freed memory stays in each heap.
    static let smallImportTopPadBytes: Int32 = 64 << 20
    /// The largest input (all files, in bytes) that an import treats as small: half of
    /// `ImportOptions.bulkInMemoryMaxInputBytes`'s default, so that the 1,000,000-record library
    /// (256 MB) keeps the fixed threshold and the default pad that hold it under 400 MB.
    static let smallImportMaxInputBytes = 128 << 20

    /// Fixes the threshold at ``mmapThresholdBytes``; done first by every command.
    static func apply() {
        set(mmapThresholdParameter, mmapThresholdBytes, unlessSetBy: "MALLOC_MMAP_THRESHOLD_", "malloc.mmap_threshold")
    }

    /// For an import of `inputBytes` bytes in all (nil when a size is not known, such as a pipe's):
    /// a small one raises the threshold to ``smallImportMmapThresholdBytes`` and the heaps' pad to
    /// ``smallImportTopPadBytes``. Called before the import allocates its buffers.
    static func applyForImport(inputBytes: Int?) {
        guard let inputBytes, inputBytes < smallImportMaxInputBytes else { return }
        set(mmapThresholdParameter, smallImportMmapThresholdBytes,
            unlessSetBy: "MALLOC_MMAP_THRESHOLD_", "malloc.mmap_threshold")
        set(topPadParameter, smallImportTopPadBytes, unlessSetBy: "MALLOC_TOP_PAD_", "malloc.top_pad")
    }

    /// The total size of `paths` when every one is a regular file; nil otherwise (a pipe, a
    /// device, a file that cannot be examined), which the caller treats as large.
    static func inputBytes(_ paths: [String]) -> Int? {
        var total = 0
        for path in paths {
            var info = stat()
            guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
            total += Int(info.st_size)
        }
        return total
    }

    /// Sets `mallopt` parameter `parameter` to `value`, unless the environment variable
    /// `variable` or the glibc tunable `tunable` already chose it.
    private static func set(_ parameter: Int32, _ value: Int32, unlessSetBy variable: String, _ tunable: String) {
        #if canImport(Glibc)
        let environment = ProcessInfo.processInfo.environment
        if environment[variable] != nil { return }
        if let tunables = environment["GLIBC_TUNABLES"], tunables.contains(tunable) { return }
        // `mallopt` is declared in <malloc.h>, which Swift's Glibc module does not import: found
        // by name, called through its C signature. Not found (another C library), or returning
        // 0 (a value it refuses), the allocator keeps its own behaviour, which only costs time or
        // holds more memory, so there is nothing to report.
        guard let symbol = dlsym(nil, "mallopt") else { return }
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        _ = mallopt(parameter, value)
        #endif
    }
}
