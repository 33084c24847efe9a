import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The repository root (for Schemas/ and the built storectl).
let repositoryRoot: URL = {
    var url = URL(fileURLWithPath: #filePath)
    while url.path != "/" {
        url.deleteLastPathComponent()
        if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url }
    }
    fatalError("Package.swift not found above \(#filePath)")
}()

let librarySchemaDirectory = repositoryRoot.appendingPathComponent("Schemas/library")

func librarySchema() throws -> Schema { try Schema.load(directory: librarySchemaDirectory) }

/// A fresh directory under the system temporary directory, removed by `cleanup`.
func temporaryDirectory(_ name: String = "strata-test") -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// A store of the library schema in its own temporary directory; closed and removed after `body`.
func withLibraryStore<R>(_ configuration: StoreConfiguration = StoreConfiguration(),
                         _ body: (Store) async throws -> R) async throws -> R {
    let store = try Store.temporary(schema: try librarySchema(), configuration: configuration)
    defer { store.close() }
    return try await body(store)
}

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

/// A small seeded generator (SplitMix64) so random tests repeat exactly.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func makeTrack(title: String, duration: Int, rating: Double? = nil, added: Date = Date(timeIntervalSince1970: 1_700_000_000)) -> Track {
    Track(mbid: UUID(), title: title, durationSeconds: duration, rating: rating, addedAt: added)
}

/// A store of library schema `v1` at `url` holding 10,000 tracks saved in 20 transactions (what
/// the migration kill tests migrate).
func makeV1TrackStore(at url: URL, schema v1: Schema) async throws {
    let s = try Store.open(at: url, schema: v1)
    defer { s.close() }
    let track = try #require(v1.entity(named: "Track"))
    for batch in 0..<20 {
        _ = try await s.save { c in
            for i in 0..<500 {
                var r = Record(entity: track)
                r["mbid"] = .uuid(UUID())
                r["title"] = .string("t\(batch)-\(i)")
                r["durationSeconds"] = .int(Int64(i))
                r["addedAt"] = .date(Date())
                c.insert(r)
            }
        }
    }
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
