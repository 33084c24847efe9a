import Foundation
import Glibc
import StrataLMDB
import StrataTestSupport
import Synchronization
import Testing

/// The lock in one atomic word a snapshot keeps inline (``WordLock``): mutual exclusion under
/// contention, with threads parked and woken; `tryLock` that never waits; parked threads let in
/// by their own lock's unlock and not by another's. Serialized, so that its own tests' threads do
/// not wake each other's (other suites' snapshot locks can still wake a place they share).
@Suite(.serialized) struct WordLockTests {
    /// What the threads of a run share: the lock, and a plain counter only touched holding it.
    private final class Shared: @unchecked Sendable {
        // `@unchecked Sendable`: `counter` is only read and written holding `mutex` (what the test
        // checks); `mutex` and the counts are atomic.
        let mutex = WordLock()
        let inside = Atomic<Int>(0)
        let overlaps = Atomic<Int>(0)
        /// Threads that took the lock and let it go again (read without the lock).
        let finished = Atomic<Int>(0)
        var counter = 0
    }

    /// Threads take the lock in turn, each holding it for a time drawn from the seed (often long
    /// enough for the others to park), and add one to a plain counter each time. The reference
    /// model is the sum: every increment is kept, and no two threads are ever inside at once.
    /// `STRATA_WORDLOCK_SEED=N` runs seed N alone (a seed repeats the hold times, not the threads'
    /// interleaving).
    @Test(arguments: WordLockTests.seeds())
    func everyIncrementIsKeptAndNoTwoThreadsAreEverInsideAtOnce(seed: UInt64) async throws {
        let shared = Shared()
        let threads = 4, rounds = 400
        let finished = Atomic<Int>(0)
        for t in 0..<threads {
            let thread = Thread {
                var random = SeededGenerator(seed: seed &+ UInt64(t) &* 0x9E37_79B9)
                for _ in 0..<rounds {
                    shared.mutex.lock()
                    if shared.inside.add(1, ordering: .relaxed).newValue != 1 {
                        shared.overlaps.add(1, ordering: .relaxed)
                    }
                    let before = shared.counter
                    // Held for nothing, a few spins, or long enough to make the others park.
                    switch random.next() % 8 {
                    case 0: usleep(UInt32(random.next() % 200))
                    case 1, 2: for _ in 0..<Int(random.next() % 500) { _ = shared.inside.load(ordering: .relaxed) }
                    default: break
                    }
                    shared.counter = before + 1
                    shared.inside.subtract(1, ordering: .relaxed)
                    shared.mutex.unlock()
                    if random.next() % 4 == 0 { sched_yield() }
                }
                finished.add(1, ordering: .releasing)
            }
            thread.start()
        }
        let deadline = Date().addingTimeInterval(60)
        while finished.load(ordering: .acquiring) < threads {
            try #require(Date() < deadline, "seed \(seed): the threads never finished (a lost wakeup?)")
            try await Task.sleep(for: .milliseconds(5))
        }
        shared.mutex.lock()
        let counted = shared.counter
        shared.mutex.unlock()
        let overlaps = shared.overlaps.load(ordering: .relaxed), held = shared.mutex.isHeld
        #expect(counted == threads * rounds, "seed \(seed)")
        #expect(overlaps == 0, "seed \(seed)")
        #expect(!held, "seed \(seed): the lock was left held")
    }

    /// `tryLock` takes a free lock, fails without waiting while the lock is held, also by another
    /// thread, and succeeds again once it is let go.
    @Test func tryLockTakesAFreeLockAndNeverWaitsForAHeldOne() async throws {
        let shared = Shared()
        let tookFree = shared.mutex.tryLock(), heldAfter = shared.mutex.isHeld
        let tookHeld = shared.mutex.tryLock()
        #expect(tookFree)
        #expect(heldAfter)
        #expect(!tookHeld)
        let other = try await resultOnThread("tryLock on another thread") { shared.mutex.tryLock() }
        #expect(try other.get() == false)
        shared.mutex.unlock()
        let heldAfterUnlock = shared.mutex.isHeld
        let tookAgain = shared.mutex.tryLock()
        #expect(!heldAfterUnlock)
        #expect(tookAgain)
        shared.mutex.unlock()
    }

    /// Two locks, held, with 40 threads waiting for each: 80 threads over 62 parking places, so
    /// some park at a place with a thread of their own lock and some at one with a thread of the
    /// other (the test checks both). Letting the first lock go lets each of its threads in, one at
    /// a time; the second's stay out, their lock still held and marked (one woken at a shared
    /// place finds its lock still held and waits again), until it is let go too.
    @Test func parkedThreadsGetInWhenTheirLockIsLetGoAndNotBefore() async throws {
        let first = Shared(), second = Shared()
        first.mutex.lock()
        second.mutex.lock()
        let perLock = 40
        let places = Locked<[(lock: Int, place: Int)]>([])
        let started = Atomic<Int>(0)
        for (index, shared) in [first, second].enumerated() {
            for _ in 0..<perLock {
                Thread {
                    places.withLock { $0.append((index, WordLock.parkingPlace(of: pthread_self()))) }
                    started.add(1, ordering: .releasing)
                    shared.mutex.lock()
                    if shared.inside.add(1, ordering: .relaxed).newValue != 1 {
                        shared.overlaps.add(1, ordering: .relaxed)
                    }
                    shared.counter += 1
                    shared.inside.subtract(1, ordering: .relaxed)
                    shared.mutex.unlock()
                    shared.finished.add(1, ordering: .releasing)
                }.start()
            }
        }
        let deadline = Date().addingTimeInterval(60)
        while started.load(ordering: .acquiring) < 2 * perLock || !first.mutex.hasWaiters || !second.mutex.hasWaiters {
            try #require(Date() < deadline, "the waiting threads never parked")
            try await Task.sleep(for: .milliseconds(1))
        }
        try await Task.sleep(for: .milliseconds(50))
        let byPlace = Dictionary(grouping: places.withLock { $0 }, by: \.place)
        try #require(byPlace.values.contains { g in g.count(where: { $0.lock == 0 }) >= 2 },
                     "no two threads of the first lock park at one place: the test shows less than it says")
        try #require(byPlace.values.contains { g in Set(g.map(\.lock)).count == 2 },
                     "no place holds threads of both locks: the test shows less than it says")
        let early = first.finished.load(ordering: .acquiring) + second.finished.load(ordering: .acquiring)
        try #require(early == 0, "\(early) waiters got in while their lock was held")

        first.mutex.unlock()
        while first.finished.load(ordering: .acquiring) < perLock {
            try #require(Date() < deadline, "the first lock's parked threads were not all let in")
            try await Task.sleep(for: .milliseconds(1))
        }
        try await Task.sleep(for: .milliseconds(20))
        let secondIn = second.finished.load(ordering: .acquiring), secondMarked = second.mutex.hasWaiters
        try #require(secondIn == 0, "\(secondIn) of the second lock's waiters got in while it was held")
        #expect(secondMarked, "the second lock lost the mark of its parked threads")

        second.mutex.unlock()
        while second.finished.load(ordering: .acquiring) < perLock || first.mutex.isHeld || second.mutex.isHeld {
            try #require(Date() < deadline, "the second lock's parked threads were not all let in, or a lock was left held")
            try await Task.sleep(for: .milliseconds(1))
        }
        for shared in [first, second] {
            shared.mutex.lock()
            let counted = shared.counter
            shared.mutex.unlock()
            let overlaps = shared.overlaps.load(ordering: .relaxed)
            #expect(counted == perLock)
            #expect(overlaps == 0)
        }
    }

    /// The seeds of the randomized test: `STRATA_WORDLOCK_SEED` alone when set, else five fixed.
    static func seeds() -> [UInt64] {
        if let s = ProcessInfo.processInfo.environment["STRATA_WORDLOCK_SEED"], let seed = UInt64(s) { return [seed] }
        return [1, 2, 3, 4, 5]
    }
}
