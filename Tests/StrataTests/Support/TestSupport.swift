import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `store`'s writer held inside `Writer.exclusive` (see ``holdWriter(_:)``): saves queue up and
/// none commits until ``release()``.
struct HeldWriter {
    fileprivate let gate: DispatchSemaphore
    fileprivate let task: Task<Void, Error>
    /// Lets the writer go on, and waits until it has left the exclusive block.
    func release() async throws {
        gate.signal()
        try await task.value
    }
}

/// Holds `store`'s writer and returns once it is held (deterministic tests of queued saves).
func holdWriter(_ store: Store) async throws -> HeldWriter {
    let writer = try #require(store.writer)
    let gate = DispatchSemaphore(value: 0)
    let held = Locked(false)
    let task = Task { try await writer.exclusive { held.withLock { $0 = true }; gate.wait() } }
    while !held.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(1)) }
    return HeldWriter(gate: gate, task: task)
}

/// A task executor on a serial dispatch queue of its own: a task started with
/// `Task(executorPreference: HookExecutor.shared)` runs its synchronous stretches (such as an
/// inline save held in `Writer.beforeInlineCommitForTesting`) on that queue's thread, not on a
/// thread of Swift's cooperative pool, which has one thread per core (two here) and would leave
/// other tests, run in parallel, without one while a test hook holds it.
final class HookExecutor: TaskExecutor {
    static let shared = HookExecutor()
    private let queue = DispatchQueue(label: "strata-tests.hook-executor")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// A configuration in relaxed durability (commits skip fsync; see `Durability.relaxed`).
func relaxedConfiguration() -> StoreConfiguration {
    var config = StoreConfiguration()
    config.durability = .relaxed
    return config
}

/// A change set inserting `n` genres named `prefix-0`, `prefix-1`, …
func genres(_ n: Int, prefix: String = "g") -> ChangeSet {
    var c = ChangeSet()
    for i in 0..<n { c.insert(Genre(name: "\(prefix)-\(i)")) }
    return c
}

/// Checks `condition` every millisecond until it holds, suspending meanwhile (no thread held).
func waitUntil(_ condition: () throws -> Bool) async throws {
    while try !condition() { try await Task.sleep(for: .milliseconds(1)) }
}

/// One of a writer's ``Writer/TestHooks``, armed to hold the first thread that reaches it
/// (the hook is removed as it is reached) until ``release()``; a held thread goes on by itself
/// after 120 s, so a failing test cannot hang the run. (It went on after 10 s, which a test
/// resuming on a starved pool can take, and then found commits it expected held.)
struct HeldHook: Sendable {
    private let reached = DispatchSemaphore(value: 0)
    private let go = DispatchSemaphore(value: 0)

    /// Arms the hook that `set` writes into `writer.testHooks` (`{ $0.beforeInlineCommit = $1 }`).
    static func arm(_ writer: Writer, _ set: @escaping @Sendable (inout Writer.TestHooks, (@Sendable () -> Void)?) -> Void) -> HeldHook {
        let held = HeldHook()
        writer.testHooks.withLock {
            set(&$0) {
                writer.testHooks.withLock { set(&$0, nil) }
                held.reached.signal()
                _ = held.go.wait(timeout: .now() + 120)
            }
        }
        return held
    }

    /// Returns once a thread is held at the hook.
    func waitUntilReached() async throws { try await waitUntil { reached.wait(timeout: .now()) == .success } }

    /// Lets the held thread go on.
    func release() { go.signal() }
}

/// A small save started on ``HookExecutor`` (so that if it is held, or wrongly blocks, it holds
/// that executor's thread and not one of the cooperative pool's).
func saveOnHookExecutor(_ store: Store, _ changes: ChangeSet) -> Task<TransactionID, Error> {
    Task(executorPreference: HookExecutor.shared) { try await store.save(changes) }
}

/// Asks `writer` for an `exclusive` body from a new task; returns the task once the body is
/// asked for (queued or deferred) or has already run.
func askForExclusive<R: Sendable>(_ writer: Writer, _ body: @escaping @Sendable () throws -> R) async throws -> Task<R, Error> {
    let ran = Locked(false)
    let task = Task { try await writer.exclusive { () throws -> R in
        ran.withLock { $0 = true }
        return try body()
    } }
    try await waitUntil { writer.exclusiveQueuedForTesting > 0 || ran.withLock { $0 } }
    return task
}

/// Closes `store` on a thread of its own; the flag turns true when `close()` has returned.
func closeOnThread(_ store: Store) -> Locked<Bool> {
    let closed = Locked(false)
    Thread {
        store.close()
        closed.withLock { $0 = true }
    }.start()
    return closed
}

/// Runs `body` on a thread of its own and waits (suspended) for its result; a test failure
/// naming `what` if it has not returned after 60 s (a deadlock).
func resultOnThread<R: Sendable>(_ what: String, _ body: @escaping @Sendable () throws -> R) async throws -> Result<R, Error> {
    let outcome = Locked<Result<R, Error>?>(nil)
    Thread { let r = Result { try body() }; outcome.withLock { $0 = r } }.start()
    let deadline = Date().addingTimeInterval(60)
    while true {
        if let r = outcome.withLock({ $0 }) { return r }
        try #require(Date() < deadline, "\(what) never returned (deadlock)")
        try await Task.sleep(for: .milliseconds(5))
    }
}

/// Opens the store at `url` once a close finishing in the background has ended (until then the
/// registry says the path is still closing); a test failure after 60 s.
func openAfterBackgroundClose(_ url: URL, schema: Schema) async throws -> Store {
    let deadline = Date().addingTimeInterval(60)
    while true {
        do {
            return try Store.open(at: url, schema: schema)
        } catch StrataError.alreadyOpen {
            try #require(Date() < deadline, "the close in the background never finished")
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}

extension Result where Failure == Error {
    /// `Result(catching:)` for an async body.
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
