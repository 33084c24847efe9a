import Glibc

/// A reader/writer lock guarding the memory map.
///
/// Every read of the map holds it shared (cheap, never contended in practice); growing the map
/// (`mdb_env_set_mapsize`) holds it exclusively, because LMDB unmaps and remaps the file and any
/// cursor page pointer held across that would dangle. This is the only time a reader can wait,
/// and only for the length of one `mmap` call. Readers are preferred: a waiting writer never
/// holds a reader back while the lock is held shared.
///
/// `@unchecked Sendable` is safe: the only state is a `pthread_rwlock_t` allocated once, never
/// moved, and designed for concurrent use from any thread.
public final class RWLock: @unchecked Sendable {
    // Visible to inlined code only (see `Locked`).
    @usableFromInline let lock: UnsafeMutablePointer<pthread_rwlock_t>

    package init() {
        lock = .allocate(capacity: 1)
        // Reader-preferring (glibc's default, set here explicitly): a thread may take the lock
        // shared while others hold it shared even when a writer is waiting. Verify relies on it:
        // its two threads each hold the lock shared while one may wait for the other.
        var attributes = pthread_rwlockattr_t()
        var rc = pthread_rwlockattr_init(&attributes)
        precondition(rc == 0, "pthread_rwlockattr_init failed: \(rc)")
        defer { pthread_rwlockattr_destroy(&attributes) }
        rc = pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_READER_NP))
        precondition(rc == 0, "pthread_rwlockattr_setkind_np failed: \(rc)")
        rc = pthread_rwlock_init(lock, &attributes)
        precondition(rc == 0, "pthread_rwlock_init failed: \(rc)")
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    @inlinable @inline(__always)
    public func withShared<R>(_ body: () throws -> R) rethrows -> R {
        let rc = pthread_rwlock_rdlock(lock)
        precondition(rc == 0, "pthread_rwlock_rdlock failed: \(rc)")
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }

    @inlinable @inline(__always)
    public func withExclusive<R>(_ body: () throws -> R) rethrows -> R {
        let rc = pthread_rwlock_wrlock(lock)
        precondition(rc == 0, "pthread_rwlock_wrlock failed: \(rc)")
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}
