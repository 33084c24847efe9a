import Foundation
import Testing
@testable import Strata

/// Collects what an async sequence delivers, in a task, so a test can wait with a deadline. The
/// collecting task and the wait both run on a thread of their own (``ThreadExecutor``), not on
/// the cooperative pool: with the whole suite running, the pool can be busy for longer than the
/// deadline, and a wait that got a thread before the collector did would give up on events that
/// had arrived.
final class Collector<Element: Sendable>: Sendable {
    let items = Locked<[Element]>([])
    let finished = Locked(false)
    let task: Task<Void, Never>

    init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
        let items = self.items, finished = self.finished
        task = Task(executorPreference: ThreadExecutor.shared) {
            do {
                for try await e in sequence { items.withLock { $0.append(e) } }
            } catch {}
            finished.withLock { $0 = true }
        }
    }

    var all: [Element] { items.withLock { $0 } }

    /// Waits until `count` items arrived (or the deadline passed) and returns what arrived.
    ///
    /// Callers expect `count` items, so a long deadline costs only a failing test.
    func wait(for count: Int, seconds: Double = 90) async throws -> [Element] {
        try await withTaskExecutorPreference(ThreadExecutor.shared) {
            let deadline = ContinuousClock.now + .seconds(seconds)
            while all.count < count && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
            return all
        }
    }

    /// Waits until the sequence ended (or the deadline passed); whether it ended.
    func waitUntilFinished(seconds: Double = 90) async throws -> Bool {
        try await withTaskExecutorPreference(ThreadExecutor.shared) {
            let deadline = ContinuousClock.now + .seconds(seconds)
            while !finished.withLock({ $0 }) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
            return finished.withLock { $0 }
        }
    }

    func cancel() { task.cancel() }
}
