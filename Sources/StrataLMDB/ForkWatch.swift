import Glibc
import Synchronization

/// Counts forks: a `pthread_atfork` child handler increments it, so checking "are we still the
/// process that opened this store?" is an atomic load instead of a `getpid()` system call on every
/// read.
package enum ForkWatch {
    private static let forks = Atomic<Int>(0)
    /// Registers the handler, once, noting whether it took (`pthread_atfork` refuses only for
    /// want of memory) and the process that first asked, for ``generation`` without it.
    private static let watch: (registered: Bool, firstProcess: pid_t) =
        (pthread_atfork(nil, nil, { ForkWatch.forks.add(1, ordering: .relaxed) }) == 0, getpid())

    /// The current fork generation (registers the handler on first use). Without the handler,
    /// a `getpid()` each time instead: 0 in the process that first asked, another process's id
    /// in a child (each child's differs from its parent's).
    package static var generation: Int {
        let w = watch
        if w.registered { return forks.load(ordering: .relaxed) }
        let now = getpid()
        return now == w.firstProcess ? 0 : Int(now)
    }
}
