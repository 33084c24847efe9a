import Foundation
import Glibc
import StrataLMDB
import StrataTestSupport
import Synchronization
import Testing

/// The lock in one atomic word a snapshot keeps inline (``WordLock``): mutual exclusion under
/// contention, with threads parked and woken; `tryLock` that never waits; a parked thread let in
/// by its own lock's unlock and not by another's. Serialized: its threads would otherwise park beside
/// the other tests' and be woken by their unlocks, which could hide a wakeup lost here.
@Suite(.serialized) struct WordLockTests {
    /// What the threads of a run share: the lock, and a plain counter only touched holding it.
    private final class Shared: @unchecked Sendable {
        // `@unchecked Sendable`: `counter` is only read and written holding `mutex` (what the test
        // checks); `mutex`, `inside` and `overlaps` are atomic.
        let mutex = WordLock()
        let inside = Atomic<Int>(0)
        let overlaps = Atomic<Int>(0)
        var counter = 0
    }

    /// Threads take the lock in turn, each holding it for a time drawn from the seed (often long
    /// enough for the others to park), and add one to a plain counter each time. The reference
    /// model is the sum: every increment is kept, and no two threads are ever inside at once.
    /// A failing seed repeats with `STRATA_WORDLOCK_SEED=N`.
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

    /// Two locks, each with a thread parked waiting for it. Letting the first go lets its thread
    /// in; the second's thread stays out, its lock still held and still marked as having a waiter
    /// (woken too if the two threads park at the same place, it marks the lock again), until its
    /// own lock is let go.
    @Test func aParkedThreadGetsInWhenItsLockIsLetGoAndNotBefore() async throws {
        let first = Shared(), second = Shared()
        first.mutex.lock()
        second.mutex.lock()
        let enteredFirst = Atomic<Bool>(false), enteredSecond = Atomic<Bool>(false)
        let a = Thread {
            first.mutex.lock()
            enteredFirst.store(true, ordering: .releasing)
            first.mutex.unlock()
        }
        let b = Thread {
            second.mutex.lock()
            enteredSecond.store(true, ordering: .releasing)
            second.mutex.unlock()
        }
        a.start()
        b.start()
        let deadline = Date().addingTimeInterval(60)
        while !first.mutex.hasWaiters || !second.mutex.hasWaiters {
            try #require(Date() < deadline, "the waiting threads never parked")
            try await Task.sleep(for: .milliseconds(1))
        }
        try await Task.sleep(for: .milliseconds(20))
        let early = (enteredFirst.load(ordering: .acquiring), enteredSecond.load(ordering: .acquiring))
        #expect(!early.0 && !early.1, "a waiter got in while its lock was held")

        first.mutex.unlock()
        while !enteredFirst.load(ordering: .acquiring) {
            try #require(Date() < deadline, "the first lock's parked thread was never woken")
            try await Task.sleep(for: .milliseconds(1))
        }
        try await Task.sleep(for: .milliseconds(20))
        let secondIn = enteredSecond.load(ordering: .acquiring)
        let secondMarked = second.mutex.hasWaiters
        #expect(!secondIn, "the second lock's waiter got in while that lock was held")
        #expect(secondMarked, "the second lock lost the mark of its parked thread")

        second.mutex.unlock()
        while !enteredSecond.load(ordering: .acquiring) || first.mutex.isHeld || second.mutex.isHeld {
            try #require(Date() < deadline, "the second lock's parked thread was never woken, or a lock was left held")
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// The seeds of the randomized test: `STRATA_WORDLOCK_SEED` alone when set, else five fixed.
    static func seeds() -> [UInt64] {
        if let s = ProcessInfo.processInfo.environment["STRATA_WORDLOCK_SEED"], let seed = UInt64(s) { return [seed] }
        return [1, 2, 3, 4, 5]
    }
}
