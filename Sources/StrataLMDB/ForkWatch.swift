import Glibc
import Synchronization

/// Counts forks: a `pthread_atfork` child handler increments it, so checking "are we still the
/// process that opened this store?" is an atomic load instead of a `getpid()` system call on every
/// read.
package enum ForkWatch {
    private static let forks = Atomic<Int>(0)
    private static let registered: Bool = {
        pthread_atfork(nil, nil, { ForkWatch.forks.add(1, ordering: .relaxed) })
        return true
    }()

    /// The current fork generation (registers the handler on first use).
    package static var generation: Int {
        _ = registered
        return forks.load(ordering: .relaxed)
    }
}
