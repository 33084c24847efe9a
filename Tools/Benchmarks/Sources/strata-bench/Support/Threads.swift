import Foundation
import Synchronization

/// A flag one thread raises and others poll (the end of an import, for readers that run meanwhile).
final class StopFlag: Sendable {
    private let raised = Atomic<Bool>(false)
    var isRaised: Bool { raised.load(ordering: .acquiring) }
    func raise() { raised.store(true, ordering: .releasing) }
}

/// Runs blocking `body` on a new OS thread and suspends (without blocking the cooperative pool)
/// until it returns.
///
/// Why: raw LMDB and GRDB's synchronous API block the calling thread while another writer holds
/// the lock. Blocking the two cooperative threads of this 2-core machine would serialize the
/// savers on the pool instead of on the engine, so each concurrent saver or reader gets a thread.
func runOnThread<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
        let thread = Thread {
            continuation.resume(with: Result { try body() })
        }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
    }
}
