import Glibc
import Synchronization

/// A mutex in one atomic word, kept inline by the object it guards: no allocation and no
/// `pthread_mutex_init` per object, for objects made and freed at a high rate (a snapshot is
/// opened and closed millions of times a second; a ``Locked`` box is three allocations).
///
/// Bit 0 of the word says the lock is held. Bits 1…62 say which of 62 parking places hold
/// threads waiting for it. An uncontended lock is one compare-and-exchange (0 to 1) and an unlock
/// one exchange (to 0); a free lock's word is always 0.
///
/// A thread that finds the lock held spins a little, then parks at the place its thread hashes
/// to (a pthread mutex and condition variable, shared by every word lock of the process): holding
/// that place's mutex, it either takes the lock if it is free, or sets its place's bit while the
/// lock is still held and waits on the condition. An unlock that finds bits set wakes every thread
/// of each such place, holding that place's mutex, and each tries again (setting its bit again if
/// it must go on waiting).
///
/// No wakeup is lost. A word's bits are set only while it is held, and only the holder clears
/// them, all at once, with the exchange that frees the lock. A waiter reads the word and starts
/// waiting without letting its place's mutex go in between. So the unlock's exchange either
/// comes before the waiter's read (the waiter then finds the lock free and takes it, or held by a
/// later holder, whose unlock will find the bit it then sets), or it finds the waiter's bit set
/// and its broadcast, which needs that mutex, comes after the waiter waits.
///
/// What it guards is rarely contended (two threads using one snapshot at once, or a close
/// waiting for a read). It is not fair: a thread that arrives while the lock is free can take
/// it before a parked one, which still wakes at every unlock. An unlock wakes every thread parked
/// at the places it finds marked, those waiting for other words included: 62 places keep that to
/// the few threads that hash to the same one.
///
/// The thread sanitizer sees the acquiring and releasing operations on the word and the pthread
/// calls of the parking, so a race on what the lock guards is reported as one (see ``Locked`` for
/// why Strata does not use `Synchronization.Mutex`). A forked child must not wait for, or let go
/// of, a word lock that was held at the fork: a place's mutex may have been held then by a thread
/// the child does not have, and the lock itself by a thread that will never let it go there (a
/// snapshot's close checks for a fork before it takes the lock).
///
/// ```swift
/// final class Guarded: Sendable {
///     private let mutex = WordLock()
///     func run() {
///         mutex.lock()
///         defer { mutex.unlock() }
///         // … the guarded section
///     }
/// }
/// ```
public struct WordLock: ~Copyable, Sendable {
    /// Bit 0: held; bit `1 + p`: threads wait at parking place `p`.
    @usableFromInline let word: Atomic<Int>

    /// A free lock.
    @inlinable
    public init() { word = Atomic(0) }

    /// Takes the lock, waiting for it if another thread has it. Not reentrant: a thread that
    /// takes a lock it holds waits forever.
    @inlinable @inline(__always)
    public borrowing func lock() {
        if word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
        lockContended()
    }

    /// Takes the lock if it is free: true; false, without waiting, if another thread holds it.
    @inlinable @inline(__always)
    public borrowing func tryLock() -> Bool {
        word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
    }

    /// Lets the lock go; the calling thread holds it. Touches the word once, first: once it is
    /// free, another thread may take the lock and free the object it lives in.
    @inlinable @inline(__always)
    public borrowing func unlock() {
        let was = word.exchange(0, ordering: .releasing)
        precondition(was & 1 == 1, "WordLock.unlock of a lock nobody held")
        if was != 1 { Self.wake(places: was >> 1) }
    }

    /// Whether a thread holds the lock (for tests: it may change at once).
    package var isHeld: Bool { word.load(ordering: .acquiring) & 1 == 1 }

    /// Whether threads are parked waiting for the lock (for tests: it may change at once).
    package var hasWaiters: Bool { word.load(ordering: .acquiring) > 1 }

    /// The parking places: one bit each in the word after the held bit, with the sign bit left
    /// clear (so at most `Int.bitWidth - 2`, checked where the places are made).
    static let parkingPlaceCount = 62

    /// Reads of the word before a thread parks, each followed by a compare-and-exchange when it
    /// finds the lock free.
    static let spins = 64

    /// ``lock()`` once the lock was found held.
    @usableFromInline
    borrowing func lockContended() {
        for _ in 0..<Self.spins {
            if word.load(ordering: .relaxed) == 0,
               word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
        }
        let place = Self.parkingPlace(of: pthread_self())
        let bit = 2 << place
        Parking.places[place].withMutex { mutex, condition in
            while true {
                let seen = word.load(ordering: .acquiring)
                if seen & 1 == 0 {
                    // Free, so 0 (a free lock has no bits): take it.
                    if word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
                    continue
                }
                if seen & bit == 0 {
                    // Held: mark this place, unless the word changed meanwhile (then look again).
                    guard word.compareExchange(expected: seen, desired: seen | bit, ordering: .relaxed).exchanged
                    else { continue }
                }
                let waited = pthread_cond_wait(condition, mutex)
                precondition(waited == 0, "pthread_cond_wait failed: \(waited)")
            }
        }
    }

    /// The parking place (0..<``parkingPlaceCount``) of a thread: its id hashed.
    package static func parkingPlace(of thread: pthread_t) -> Int {
        Int(((UInt64(thread) &* 0x9E37_79B9_7F4A_7C15) >> 32) % UInt64(parkingPlaceCount))
    }

    /// Wakes every thread parked at the places whose bits (place `p` at bit `p`) `places` sets.
    @usableFromInline
    static func wake(places: Int) {
        var rest = places
        while rest != 0 {
            let place = rest.trailingZeroBitCount
            rest &= rest - 1
            Parking.places[place].withMutex { _, condition in
                let rc = pthread_cond_broadcast(condition)
                precondition(rc == 0, "pthread_cond_broadcast failed: \(rc)")
            }
        }
    }

    /// A place where threads wait for word locks: a mutex and a condition variable.
    ///
    /// `@unchecked Sendable` is safe: the two pointers are set once in `init` and never change;
    /// the mutex and condition they point at are only used through pthread calls, which are
    /// thread-safe, and the places are never freed.
    final class Parking: @unchecked Sendable {
        /// The places, made once per process.
        static let places: [Parking] = {
            precondition(parkingPlaceCount <= Int.bitWidth - 2, "a parking place's bit would reach the word's sign bit")
            return (0..<parkingPlaceCount).map { _ in Parking() }
        }()
        private let mutex: UnsafeMutablePointer<pthread_mutex_t>
        private let condition: UnsafeMutablePointer<pthread_cond_t>

        private init() {
            mutex = .allocate(capacity: 1)
            condition = .allocate(capacity: 1)
            let m = pthread_mutex_init(mutex, nil), c = pthread_cond_init(condition, nil)
            precondition(m == 0 && c == 0, "pthread_mutex_init / pthread_cond_init failed: \(m), \(c)")
        }

        /// Runs `body` holding the place's mutex.
        func withMutex<R>(_ body: (UnsafeMutablePointer<pthread_mutex_t>, UnsafeMutablePointer<pthread_cond_t>) -> R) -> R {
            let rc = pthread_mutex_lock(mutex)
            precondition(rc == 0, "pthread_mutex_lock failed: \(rc)")
            defer {
                let unlocked = pthread_mutex_unlock(mutex)
                precondition(unlocked == 0, "pthread_mutex_unlock failed: \(unlocked)")
            }
            return body(mutex, condition)
        }
    }
}
