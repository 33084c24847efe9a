import Foundation
import Testing
@testable import Strata

/// `strata-generate` (`Tools/generate-library`), built beside storectl.
var generatorPath: String {
    URL(fileURLWithPath: storectlPath).deletingLastPathComponent().appendingPathComponent("strata-generate").path
}

/// A generated input of `records` records of `shape` (`library` or `catalog`) in `dir`.
func generateInput(_ records: Int, shape: String, seed: Int, in dir: URL) async throws -> String {
    let path = dir.appendingPathComponent("\(shape)-\(records)-\(seed).ndjson").path
    let r = try await run(generatorPath, ["\(records)", "--shape", shape, "--seed", "\(seed)", "--output", path])
    try #require(r.status == 0, "\(r.stderr)")
    return path
}

/// `lines` as an NDJSON file `name` in `dir`.
func writeInput(_ lines: [String], in dir: URL, _ name: String = "in.ndjson") throws -> String {
    let url = dir.appendingPathComponent(name)
    try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: url)
    return url.path
}

/// Runs `body` while a reader on a thread of its own counts `entity`'s objects over and over,
/// and returns what `body` returned with every count the reader saw. (A loop on the
/// cooperative pool would hold one of its few threads for as long as `body` runs.)
func countsSeen<R>(of entity: EntityDescription, in store: Store,
                   while body: () async throws -> R) async throws -> (R, Set<Int>) {
    let done = Locked(false), seen = Locked<Set<Int>>([]), finished = DispatchSemaphore(value: 0)
    Thread {
        while !done.withLock({ $0 }) {
            if let n = try? store.read({ try $0.objectCount(entity) }) { seen.withLock { _ = $0.insert(n) } }
            usleep(200)
        }
        finished.signal()
    }.start()
    let result: R
    do {
        result = try await body()
    } catch {
        done.withLock { $0 = true }
        await withCheckedContinuation { c in DispatchQueue.global().async { finished.wait(); c.resume() } }
        throw error
    }
    done.withLock { $0 = true }
    await withCheckedContinuation { c in DispatchQueue.global().async { finished.wait(); c.resume() } }
    return (result, seen.withLock { $0 })
}
