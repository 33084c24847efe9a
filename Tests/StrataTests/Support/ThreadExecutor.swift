import Foundation

/// A task executor with a thread of its own. Tasks that prefer it (`Task(executorPreference:)`,
/// `withTaskExecutorPreference`) run their nonisolated code there instead of on Swift's
/// cooperative pool, which the whole suite shares: with hundreds of tests under way on two
/// cores, a task on the pool can wait tens of seconds for a thread, and a test that waits with a
/// deadline for another task (a collector of change events) then gives up before that task ran.
///
/// Thread safety (why `@unchecked Sendable` is sound): the queue of jobs and the flag are read
/// and written only with `condition` locked; the thread runs each job after taking it off the
/// queue, outside the lock.
final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    /// One for the whole test process: what runs on it (collecting and waiting) is light.
    static let shared = ThreadExecutor(name: "test-collector")

    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// The thread's loop: takes each job in turn and runs it (never ends; the executor lives as
    /// long as the test process).
    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
