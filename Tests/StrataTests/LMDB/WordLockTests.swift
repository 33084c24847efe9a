import Foundation
import StrataLMDB
import StrataTestSupport
import Synchronization
import Testing

/// The lock in one atomic word a snapshot keeps inline (``WordLock``): mutual exclusion under
/// contention, with threads parked and woken; `tryLock` that never waits; the word's states.
@Suite struct WordLockTests {
    /// What the threads of a run share: the word, and a plain counter only touched holding it.
    private final class Shared: @unchecked Sendable {
        // `@unchecked Sendable`: `counter` is only read and written holding `word`'s lock (what
        // the test checks), and `inside` and `word` are atomics.
        let word = Atomic<Int>(0)
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
                    WordLock.lock(shared.word)
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
                    WordLock.unlock(shared.word)
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
        WordLock.lock(shared.word)
        let counted = shared.counter
        WordLock.unlock(shared.word)
        let overlaps = shared.overlaps.load(ordering: .relaxed), left = shared.word.load(ordering: .relaxed)
        #expect(counted == threads * rounds, "seed \(seed)")
        #expect(overlaps == 0, "seed \(seed)")
        #expect(left == 0, "seed \(seed): the lock was left held")
    }

    /// `tryLock` takes a free lock (the word goes to 1), fails without waiting while the lock is
    /// held, also by another thread, and succeeds again once it is let go.
    @Test func tryLockTakesAFreeLockAndNeverWaitsForAHeldOne() async throws {
        let shared = Shared()
        let tookFree = WordLock.tryLock(shared.word)
        let heldWord = shared.word.load(ordering: .relaxed)
        let tookHeld = WordLock.tryLock(shared.word)
        #expect(tookFree)
        #expect(heldWord == 1)
        #expect(!tookHeld)
        let other = try await resultOnThread("tryLock on another thread") { WordLock.tryLock(shared.word) }
        #expect(try other.get() == false)
        WordLock.unlock(shared.word)
        let freedWord = shared.word.load(ordering: .relaxed)
        let tookAgain = WordLock.tryLock(shared.word)
        #expect(freedWord == 0)
        #expect(tookAgain)
        WordLock.unlock(shared.word)
    }

    /// A thread that waits for a held lock parks, marking the word as having waiters (2), and is
    /// woken by the unlock, which then leaves the lock to it.
    @Test func aParkedThreadMarksTheWordAndIsWokenByTheUnlock() async throws {
        let shared = Shared()
        WordLock.lock(shared.word)
        let entered = Atomic<Bool>(false)
        let thread = Thread {
            WordLock.lock(shared.word)
            entered.store(true, ordering: .releasing)
            WordLock.unlock(shared.word)
        }
        thread.start()
        let deadline = Date().addingTimeInterval(60)
        while shared.word.load(ordering: .acquiring) != 2 {
            try #require(Date() < deadline, "the waiting thread never parked")
            try await Task.sleep(for: .milliseconds(1))
        }
        try await Task.sleep(for: .milliseconds(20))
        let enteredEarly = entered.load(ordering: .acquiring)
        #expect(!enteredEarly, "the waiter got in while the lock was held")
        WordLock.unlock(shared.word)
        while !entered.load(ordering: .acquiring) {
            try #require(Date() < deadline, "the parked thread was never woken")
            try await Task.sleep(for: .milliseconds(1))
        }
        while shared.word.load(ordering: .acquiring) != 0 {
            try #require(Date() < deadline, "the woken thread never let the lock go")
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// The seeds of the randomized test: `STRATA_WORDLOCK_SEED` alone when set, else five fixed.
    static func seeds() -> [UInt64] {
        if let s = ProcessInfo.processInfo.environment["STRATA_WORDLOCK_SEED"], let seed = UInt64(s) { return [seed] }
        return [1, 2, 3, 4, 5]
    }
}
