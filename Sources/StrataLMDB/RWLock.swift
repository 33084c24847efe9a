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
        let holds = Self.threadHolds()
        let depth = Int(holds[0])
        if depth < Self.holdSlots { holds[depth + 1] = UInt(bitPattern: lock) }
        holds[0] = UInt(depth + 1)
        defer {
            holds[0] = UInt(depth)
            pthread_rwlock_unlock(lock)
        }
        return try body()
    }

    /// Whether this thread holds the lock shared now (inside a ``withShared(_:)`` of it): it
    /// must not wait to take it exclusively, which would wait for itself for ever (glibc detects
    /// that only for a thread holding the write lock). Conservatively true when the thread holds
    /// more shared locks at once than are recorded.
    public var isHeldSharedByCurrentThread: Bool {
        let holds = Self.threadHolds()
        let depth = Int(holds[0])
        let address = UInt(bitPattern: lock)
        for slot in 0..<min(depth, Self.holdSlots) where holds[slot + 1] == address { return true }
        return depth > Self.holdSlots
    }

    /// Shared holds recorded per thread; deeper ones are counted only.
    @usableFromInline static let holdSlots = 15

    /// The key of each thread's record of its shared holds: `holdSlots + 1` words, the first
    /// the number of holds, then the lock of each (innermost last), freed when the thread ends.
    @usableFromInline static let holdsKey: pthread_key_t = {
        var key = pthread_key_t()
        let rc = pthread_key_create(&key) { free($0) }
        precondition(rc == 0, "pthread_key_create failed: \(rc)")
        return key
    }()

    /// This thread's record of its shared holds (made at its first hold).
    @usableFromInline @inline(__always)
    static func threadHolds() -> UnsafeMutablePointer<UInt> {
        if let record = pthread_getspecific(holdsKey) { return record.assumingMemoryBound(to: UInt.self) }
        return newThreadHolds()
    }

    @usableFromInline @inline(never)
    static func newThreadHolds() -> UnsafeMutablePointer<UInt> {
        guard let record = calloc(holdSlots + 1, MemoryLayout<UInt>.stride) else {
            preconditionFailure("calloc of \((holdSlots + 1) * MemoryLayout<UInt>.stride) bytes failed")
        }
        let rc = pthread_setspecific(holdsKey, record)
        precondition(rc == 0, "pthread_setspecific failed: \(rc)")
        return record.assumingMemoryBound(to: UInt.self)
    }

    @inlinable @inline(__always)
    public func withExclusive<R>(_ body: () throws -> R) rethrows -> R {
        let rc = pthread_rwlock_wrlock(lock)
        precondition(rc == 0, "pthread_rwlock_wrlock failed: \(rc)")
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}
