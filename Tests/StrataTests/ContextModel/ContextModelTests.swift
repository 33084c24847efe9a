import Foundation
import Testing
@testable import Strata

/// The differential test: random programs of changes in child contexts at every depth (children
/// of the main context, of pinned views and of other children), saves of another writer that
/// touch the same objects and edges, commits (nested and at the root, refused ones followed by a
/// fix and a second commit), discards, rebases and refreshes of pinned views, run on a real store
/// and on the reference model (`ContextModel`); after every step every read of every live context
/// must agree.
///
/// Replay one seed: `STRATA_MODEL_SEED=17 swift test --skip-build --filter ContextModel`; run
/// others: `STRATA_MODEL_SEEDS=100-199` (or `1,5,9`), `STRATA_MODEL_STEPS=400` steps per seed;
/// `STRATA_MODEL_SHRINK=0` skips shortening a failing program. `Tools/context-model` runs many
/// seeds for a time or step budget (the long run below).
// Serialized: each program keeps a thread of the cooperative pool busy between its suspension
// points, and twenty at once would hold up every other test for minutes.
@Suite(.serialized) struct ContextModelTests {
    @Test(.timeLimit(.minutes(15)), arguments: ContextModelRun.seeds())
    func randomProgramsReadTheSameAsTheModel(seed: UInt64) async throws {
        let (_, failure) = try await ContextModelRun.run(seed: seed, steps: ContextModelRun.steps(default: 250), shrink: ContextModelRun.shrinks)
        if let failure { Issue.record(Comment(rawValue: failure.report)) }
    }

    /// The model alone over long programs: its views keep their invariants and its store stays
    /// valid (a check of the model, independent of the implementation).
    @Test(.timeLimit(.minutes(15)))
    func theModelKeepsItsInvariantsOverLongPrograms() async throws {
        for seed in UInt64(1)...40 {
            if let problem = try ContextModelRun.runModelOnly(seed: seed, steps: 400) { Issue.record(Comment(rawValue: problem)) }
            await Task.yield()
        }
    }

    /// The budgeted run of `Tools/context-model`: seeds from `STRATA_MODEL_SEEDS` (a start, or a
    /// range), `STRATA_MODEL_STEPS` steps each, `STRATA_MODEL_JOBS` programs at a time, until
    /// `STRATA_MODEL_MINUTES` have passed or `STRATA_MODEL_MAX_STEPS` steps have run. Prints one
    /// summary line.
    @Test(.enabled(if: LongRun.isRequested), .timeLimit(.minutes(24 * 60)))
    func longRunReadsTheSameAsTheModel() async throws {
        let run = LongRun()
        let jobs = max(1, ContextModelRun.environment["STRATA_MODEL_JOBS"].flatMap { Int($0) } ?? 1)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<jobs {
                group.addTask {
                    while let seed = await run.nextSeed() {
                        let shrink = await run.shouldShrink()
                        let (steps, failure) = try await ContextModelRun.run(seed: seed, steps: ContextModelRun.steps(default: 200), shrink: shrink)
                        await run.finished(seed: seed, steps: steps, failure: failure)
                    }
                }
            }
            try await group.waitForAll()
        }
        let summary = await run.summary
        print(summary)
        for report in await run.reports { Issue.record(Comment(rawValue: report)) }
    }
}

/// The state of a budgeted run, shared by its workers.
actor LongRun {
    static var isRequested: Bool {
        ContextModelRun.environment["STRATA_MODEL_MINUTES"] != nil || ContextModelRun.environment["STRATA_MODEL_MAX_STEPS"] != nil
    }

    private let start = ContinuousClock.now
    private let minutes = ContextModelRun.environment["STRATA_MODEL_MINUTES"].flatMap { Double($0) } ?? 30
    private let maxSteps = ContextModelRun.environment["STRATA_MODEL_MAX_STEPS"].flatMap { Int($0) } ?? 1_000_000
    private var seeds: [UInt64]
    private var next: UInt64
    private var steps = 0
    private var programs = 0
    private var failing: [UInt64] = []
    private(set) var reports: [String] = []

    init() {
        let given = ContextModelRun.environment["STRATA_MODEL_SEEDS"]
        let list = given.map { ContextModelRun.parseSeeds($0) } ?? []
        // One number is where an endless run starts; a range or a list is run as given.
        if list.count == 1, let first = list.first {
            seeds = []
            next = first
        } else {
            seeds = list
            next = list.isEmpty ? 1 : 0
        }
    }

    private var budgetLeft: Bool {
        steps < maxSteps && ContinuousClock.now - start < .seconds(minutes * 60)
    }

    func nextSeed() -> UInt64? {
        guard budgetLeft else { return nil }
        if !seeds.isEmpty { return seeds.removeFirst() }
        if next == 0 { return nil }
        defer { next += 1 }
        return next
    }

    /// Failing programs are shortened only for the first few failures (shortening costs time).
    func shouldShrink() -> Bool { ContextModelRun.shrinks && failing.count < 3 }

    func finished(seed: UInt64, steps n: Int, failure: ModelRunFailure?) {
        steps += n
        programs += 1
        if let failure {
            failing.append(seed)
            reports.append(failure.report)
            print("context-model: seed \(seed) FAILED at step \(failure.step): \(failure.differences.first ?? "")")
        }
    }

    var summary: String {
        let seconds = Int((ContinuousClock.now - start).components.seconds)
        let list = failing.sorted().prefix(50).map(String.init).joined(separator: ",")
        return "context-model summary: steps=\(steps) seeds=\(programs) failures=\(failing.count) seconds=\(seconds)" + (failing.isEmpty ? "" : " failing-seeds=\(list)")
    }
}
