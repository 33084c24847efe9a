#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// How storectl asks the C allocator to serve large blocks.
///
/// glibc serves a block of 128 KiB or more with a mapping of its own, returned to the system when
/// it is freed, until the program frees such a block: it then raises that threshold (up to 32 MiB)
/// so that later blocks of that size come from the heap, where freed memory stays with the
/// process. An import frees many large buffers (batches, sort runs, log entries), so the heaps
/// kept growing: a 1,000,000-record `storectl import` into an empty store peaked at 396–404 MB of
/// RSS with the threshold rising, 360–364 MB with it fixed at 128 KiB, in the same time; 100,000
/// records into a 1,000,000-record store at 521 MB against 542 MB, in the same time
/// (BENCHMARKS.md, W11 at the target's scale). So every command starts with the threshold fixed
/// at 128 KiB (``apply()``).
///
/// A small import is the other way round: every buffer it maps fresh is faulted in page by page,
/// and it has no memory bound to keep. The 60,000-record catalog took about 79,000 page faults and
/// 1.37 s with the fixed threshold, 41,000 and 1.28 s with blocks up to 32 MiB from the heap; the
/// 200,000-record library (51 MB) 2.65 s and 177 MB against 2.40 s and 230 MB. An import whose
/// input files come to less than ``smallImportMaxInputBytes`` in all therefore raises the
/// threshold to ``smallImportMmapThresholdBytes`` (``applyForImport(inputBytes:)``).
///
/// A threshold the user chose (`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=…` or
/// `MALLOC_MMAP_THRESHOLD_`) is left as it is. The library itself never changes the allocator of
/// the process it runs in.
enum MallocTuning {
    /// The threshold storectl fixes: glibc's own starting value, 128 KiB.
    static let mmapThresholdBytes: Int32 = 128 << 10
    /// glibc's `M_MMAP_THRESHOLD` parameter of `mallopt` (<malloc.h>).
    static let mmapThresholdParameter: Int32 = -3

    /// The threshold of an import of a small input: glibc's own ceiling for its rising threshold.
    static let smallImportMmapThresholdBytes: Int32 = 32 << 20
    /// The largest input (all files, in bytes) that an import treats as small: half of
    /// `ImportOptions.bulkInMemoryMaxInputBytes`'s default, so that the 1,000,000-record library
    /// (256 MB) keeps the fixed threshold that holds it under 400 MB.
    static let smallImportMaxInputBytes = 128 << 20

    /// Fixes the threshold at ``mmapThresholdBytes``; done first by every command.
    static func apply() {
        set(mmapThresholdBytes)
    }

    /// For an import of `inputBytes` bytes in all (nil when a size is not known, such as a pipe's):
    /// a small one raises the threshold to ``smallImportMmapThresholdBytes``. Called before the
    /// import allocates its buffers.
    static func applyForImport(inputBytes: Int?) {
        guard let inputBytes, inputBytes < smallImportMaxInputBytes else { return }
        set(smallImportMmapThresholdBytes)
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

    private static func set(_ threshold: Int32) {
        #if canImport(Glibc)
        let environment = ProcessInfo.processInfo.environment
        if environment["MALLOC_MMAP_THRESHOLD_"] != nil { return }
        if let tunables = environment["GLIBC_TUNABLES"], tunables.contains("malloc.mmap_threshold") { return }
        // `mallopt` is declared in <malloc.h>, which Swift's Glibc module does not import: found
        // by name, called through its C signature. Not found (another C library), or returning
        // 0 (a value it refuses), the allocator keeps its own behaviour, which only holds more
        // memory, so there is nothing to report.
        guard let symbol = dlsym(nil, "mallopt") else { return }
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        _ = mallopt(mmapThresholdParameter, threshold)
        #endif
    }
}
