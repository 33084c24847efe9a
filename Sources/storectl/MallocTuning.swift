#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// How storectl asks the C allocator to grow its heaps.
///
/// A write transaction keeps each page it changes in a buffer of its own until the commit: an
/// import of 100,000 records into a store of a million changes about 80,000 pages (330 MB) in
/// one transaction. glibc grows the heap of the writer's thread by its top pad (128 KiB by
/// default) at a time, one `mprotect` and a run of fresh page faults each, and those took about
/// a tenth of the writer's time in a profile of that import. Growing by 64 MiB at a time makes
/// that import about 6 % faster (BENCHMARKS.md, W11 at the target's scale). Pages of the pad
/// that are never written take no memory; but setting the pad also fixes glibc's `mmap`
/// threshold at 128 KiB (it no longer rises after large frees) and keeps up to the pad of freed
/// memory in each heap: a 200,000-record import into an empty store peaked 25–35 MB higher, in
/// the same time.
///
/// A top pad the user chose (`GLIBC_TUNABLES=glibc.malloc.top_pad=…` or `MALLOC_TOP_PAD_`) is
/// left as it is. The library itself never changes the allocator of the process it runs in.
enum MallocTuning {
    /// The top pad storectl sets: 64 MiB.
    static let topPadBytes: Int32 = 64 << 20
    /// glibc's `M_TOP_PAD` parameter of `mallopt` (<malloc.h>).
    static let topPadParameter: Int32 = -2

    static func apply() {
        #if canImport(Glibc)
        let environment = ProcessInfo.processInfo.environment
        if environment["MALLOC_TOP_PAD_"] != nil { return }
        if let tunables = environment["GLIBC_TUNABLES"], tunables.contains("malloc.top_pad") { return }
        // `mallopt` is declared in <malloc.h>, which Swift's Glibc module does not import: found
        // by name, called through its C signature. Not found (another C library), or returning
        // 0 (a value it refuses), the allocator keeps its default pad, which is only slower, so
        // there is nothing to report.
        guard let symbol = dlsym(nil, "mallopt") else { return }
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        _ = mallopt(topPadParameter, topPadBytes)
        #endif
    }
}
