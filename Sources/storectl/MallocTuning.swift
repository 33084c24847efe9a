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
/// (BENCHMARKS.md, W11 at the target's scale).
///
/// A threshold the user chose (`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=…` or
/// `MALLOC_MMAP_THRESHOLD_`) is left as it is. The library itself never changes the allocator of
/// the process it runs in.
enum MallocTuning {
    /// The threshold storectl fixes: glibc's own starting value, 128 KiB.
    static let mmapThresholdBytes: Int32 = 128 << 10
    /// glibc's `M_MMAP_THRESHOLD` parameter of `mallopt` (<malloc.h>).
    static let mmapThresholdParameter: Int32 = -3

    static func apply() {
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
        _ = mallopt(mmapThresholdParameter, mmapThresholdBytes)
        #endif
    }
}
