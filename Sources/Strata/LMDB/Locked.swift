import Glibc

/// A value guarded by a pthread mutex, for state that a closure must use while the lock is held
/// and return a generic result from (which `Synchronization.Mutex` cannot, since its results must
/// be `sending`).
///
/// `@unchecked Sendable` is safe: `value` is only reachable inside `withLock`, which holds the
/// mutex for the whole access, so no two threads ever touch it at once.
final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        let rc = pthread_mutex_init(mutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        let rc = pthread_mutex_lock(mutex)
        precondition(rc == 0, "pthread_mutex_lock failed: \(rc)")
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
