import Glibc

/// A value guarded by a pthread mutex: Strata's lock, except for a snapshot's (``WordLock``, which
/// allocates nothing per object).
///
/// Why not `Synchronization.Mutex`? On Linux it waits on a futex inside the runtime, which the
/// thread sanitizer does not see, so every critical section guarded by it reads as a data race
/// and real races drown in the noise; `pthread_mutex_lock` is intercepted, so races the sanitizer
/// reports here are real. It also lets a closure return a generic result (`Mutex` wants results
/// that are `sending`). An uncontended lock and unlock costs about what `Mutex`'s does.
///
/// `@unchecked Sendable` is safe: the value is only reachable inside `withLock`, which holds the
/// mutex for the whole access, so no two threads ever touch it at once.
public final class Locked<Value>: @unchecked Sendable {
    // Visible to inlined code only: `withLock` is inlined into callers in other modules, so a
    // critical section costs no call through this module. The value lives behind a pointer, not
    // in a stored property: the mutex already makes every access exclusive, and a class's stored
    // property passed `inout` would also pay the runtime's exclusivity check on each access.
    @usableFromInline let storage: UnsafeMutablePointer<Value>
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init(_ value: Value) {
        storage = .allocate(capacity: 1)
        storage.initialize(to: value)
        mutex = .allocate(capacity: 1)
        let rc = pthread_mutex_init(mutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        storage.deinitialize(count: 1)
        storage.deallocate()
    }

    @inlinable @inline(__always)
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        let rc = pthread_mutex_lock(mutex)
        precondition(rc == 0, "pthread_mutex_lock failed: \(rc)")
        defer { pthread_mutex_unlock(mutex) }
        return try body(&storage.pointee)
    }

    /// ``withLock(_:)`` when the lock is free; nil, without waiting, when another thread holds it.
    @inlinable @inline(__always)
    public func withLockIfAvailable<R>(_ body: (inout Value) throws -> R) rethrows -> R? {
        let rc = pthread_mutex_trylock(mutex)
        if rc == EBUSY { return nil }
        precondition(rc == 0, "pthread_mutex_trylock failed: \(rc)")
        defer { pthread_mutex_unlock(mutex) }
        return try body(&storage.pointee)
    }
}
