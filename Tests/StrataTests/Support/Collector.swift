import Foundation
import Testing
@testable import Strata

/// Collects what an async sequence delivers, in a task, so a test can wait with a deadline.
final class Collector<Element: Sendable>: Sendable {
    let items = Locked<[Element]>([])
    let finished = Locked(false)
    let task: Task<Void, Never>

    init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
        let items = self.items, finished = self.finished
        task = Task {
            do {
                for try await e in sequence { items.withLock { $0.append(e) } }
            } catch {}
            finished.withLock { $0 = true }
        }
    }

    var all: [Element] { items.withLock { $0 } }

    /// Waits until `count` items arrived (or the deadline passed) and returns what arrived.
    ///
    /// The deadline is generous because the collecting task needs a cooperative thread: with the
    /// whole suite running on two cores, tests that block theirs can hold every one of them for
    /// tens of seconds. Callers expect `count` items, so a long deadline costs only a failing test.
    func wait(for count: Int, seconds: Double = 90) async throws -> [Element] {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while all.count < count && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
        return all
    }

    func cancel() { task.cancel() }
}
