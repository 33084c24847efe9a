import Glibc
import Synchronization

/// A mutex in one atomic word that the object it guards keeps inline: no allocation and no
/// `pthread_mutex_init` per object, for objects made and freed at a high rate (a snapshot is
/// opened and closed millions of times a second, where ``Locked`` cost three allocations each).
///
/// The word is 0 when free, 1 when held, and 2 when held with threads that may be waiting. An
/// uncontended lock is one compare-and-exchange and an unlock one exchange. A thread that finds the
/// word held spins a little, then parks: it takes the mutex of a condition variable shared by
/// every word lock of the process, sets the word to 2 and, while the lock is still held, waits on
/// the condition. An unlock that finds 2 wakes every parked thread, and each tries again. What
/// such a lock guards is rarely contended (two threads using one snapshot at once, or a close
/// waiting for a read), so sharing one condition costs nothing in the common case and wakes a few
/// threads too many in the rare one.
///
/// No wakeup is lost: a waiter sets 2 and starts waiting without letting the parking mutex go in
/// between, and the wakeup is broadcast holding that mutex. So the unlock's exchange either comes
/// before the waiter's (which then finds 0 and has the lock) or its broadcast comes after the
/// waiter waits.
///
/// The thread sanitizer sees the acquiring and releasing operations on the word, and the parking's
/// pthread calls, so a race on what the word guards is reported as one (see ``Locked`` for why
/// Strata does not use `Synchronization.Mutex`).
///
/// ```swift
/// final class Guarded: Sendable {
///     private let word = Atomic<Int>(0)
///     func run() {
///         WordLock.lock(word)
///         defer { WordLock.unlock(word) }
///         // … the guarded section
///     }
/// }
/// ```
public enum WordLock {
    /// Takes the lock `word` holds, waiting for it if another thread has it. Not reentrant: a
    /// thread that takes a lock it holds waits forever.
    @inlinable @inline(__always)
    public static func lock(_ word: borrowing Atomic<Int>) {
        if word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
        lockContended(word)
    }

    /// Takes the lock if it is free: true; false, without waiting, if another thread holds it.
    @inlinable @inline(__always)
    public static func tryLock(_ word: borrowing Atomic<Int>) -> Bool {
        word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
    }

    /// Lets the lock go; the calling thread holds it. Touches `word` once, first: once the word is
    /// free, another thread may take the lock and free the object it lives in.
    @inlinable @inline(__always)
    public static func unlock(_ word: borrowing Atomic<Int>) {
        let was = word.exchange(0, ordering: .releasing)
        precondition(was != 0, "WordLock.unlock of a lock nobody held")
        if was == 2 { Parking.shared.wakeAll() }
    }

    /// Compare-and-exchanges tried before a thread parks (each after seeing the word free).
    static let spins = 64

    /// ``lock(_:)`` once the word was found held.
    @usableFromInline
    static func lockContended(_ word: borrowing Atomic<Int>) {
        for _ in 0..<spins {
            if word.load(ordering: .relaxed) == 0,
               word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
        }
        Parking.shared.park(until: word)
    }

    /// The one condition variable (and its mutex) every word lock's waiters park on.
    ///
    /// `@unchecked Sendable` is safe: the two pointers are set once in `init` and never change;
    /// the mutex and condition they point at are only used through pthread calls, which are
    /// thread-safe, and the one instance is never freed.
    @usableFromInline
    final class Parking: @unchecked Sendable {
        @usableFromInline static let shared = Parking()
        private let mutex: UnsafeMutablePointer<pthread_mutex_t>
        private let condition: UnsafeMutablePointer<pthread_cond_t>

        private init() {
            mutex = .allocate(capacity: 1)
            condition = .allocate(capacity: 1)
            let m = pthread_mutex_init(mutex, nil), c = pthread_cond_init(condition, nil)
            precondition(m == 0 && c == 0, "pthread_mutex_init / pthread_cond_init failed: \(m), \(c)")
        }

        /// Waits until this thread has the lock of `word`, marking it as having waiters.
        func park(until word: borrowing Atomic<Int>) {
            let rc = pthread_mutex_lock(mutex)
            precondition(rc == 0, "pthread_mutex_lock failed: \(rc)")
            // Taken with 2, not 1: another waiter may still be parked, and this thread's unlock
            // must wake it (at worst a wakeup too many).
            while word.exchange(2, ordering: .acquiring) != 0 {
                let waited = pthread_cond_wait(condition, mutex)
                precondition(waited == 0, "pthread_cond_wait failed: \(waited)")
            }
            pthread_mutex_unlock(mutex)
        }

        /// Wakes every parked thread (each then tries its word again).
        @usableFromInline
        func wakeAll() {
            let rc = pthread_mutex_lock(mutex)
            precondition(rc == 0, "pthread_mutex_lock failed: \(rc)")
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }
    }
}
