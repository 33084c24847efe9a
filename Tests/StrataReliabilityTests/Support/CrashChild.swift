import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The reliability harness's child program (Tools/reliability), or nil when it is not built.
/// Build it with:
/// `swift build --package-path Tools/reliability --scratch-path Tools/reliability/.build --product strata-crash-child`
/// (Tools/kill-loop builds the release one). The most recently built of debug and release is used.
let crashChildPath: String? = {
    let candidates = ["debug", "release"].map {
        repositoryRoot.appendingPathComponent("Tools/reliability/.build/\($0)/strata-crash-child").path
    }.filter { FileManager.default.isExecutableFile(atPath: $0) }
    func modified(_ path: String) -> Date {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date) ?? .distantPast
    }
    return candidates.max { modified($0) < modified($1) }
}()

/// For `.enabled(if:)`: tests that run the child program need it built first.
let crashChildBuilt = crashChildPath != nil

/// Starts `executable`, stdout to `stdout` (a file, so lines written before a SIGKILL are kept)
/// and stderr to `stdout` + ".err".
func spawn(_ executable: String, _ arguments: [String], stdout: URL, environment: [String: String] = [:]) throws -> ChildProcess {
    try ChildProcess.start(executable, arguments, environment: environment, stdout: .file(stdout.path),
                           stderr: .file(stdout.path + ".err"))
}

/// Starts the child program in `mode` (see ``spawn(_:_:stdout:environment:)``).
func startCrashChild(_ mode: String, _ arguments: [String], stdout: URL) throws -> ChildProcess {
    try spawn(try #require(crashChildPath), [mode] + arguments, stdout: stdout, environment: ["STRATA_ROOT": repositoryRoot.path])
}

/// Runs the child program to completion.
func runCrashChild(_ mode: String, _ arguments: [String], environment: [String: String] = [:]) async throws -> ProcessResult {
    try await run(try #require(crashChildPath), [mode] + arguments,
                  environment: environment.merging(["STRATA_ROOT": repositoryRoot.path]) { $1 })
}

/// The complete lines of a child's stdout file (a line without its newline was never acknowledged).
func completeLines(_ url: URL) -> [String] {
    guard let data = FileManager.default.contents(atPath: url.path) else { return [] }
    var text = String(decoding: data, as: UTF8.self)
    guard let last = text.lastIndex(of: "\n") else { return [] }
    text = String(text[...last])
    return text.split(separator: "\n").map(String.init)
}

/// Waits until the child's stdout has a line starting with `prefix` (or the timeout passes).
func waitForLine(_ url: URL, prefix: String, timeoutSeconds: Double = 30) async throws -> String? {
    let deadline = Date().addingTimeInterval(timeoutSeconds)
    while Date() < deadline {
        if let line = completeLines(url).first(where: { $0.hasPrefix(prefix) }) { return line }
        try await Task.sleep(nanoseconds: 10_000_000)
    }
    return nil
}

/// One `ACK <tx> <kind> <marker> <k>` line of the child's save workload.
struct AcknowledgedSave {
    let tx: TransactionID
    let kind: String
    let marker: String
    let k: Int

    init?(_ line: String) {
        let f = line.split(separator: " ")
        guard f.count == 5, f[0] == "ACK", let tx = UInt64(f[1]), let k = Int(f[4]) else { return nil }
        self.tx = TransactionID(tx)
        kind = String(f[2])
        marker = String(f[3])
        self.k = k
    }
}

/// Whether a log entry of the child's save workload is whole (nil) or what is missing.
/// `group`: a playlist and K tracks, each linked; `update`: one update; `delete`: K + 1 deletes.
func partialTransactionProblem(_ e: LogEntry) -> String? {
    guard let kind = e.metadata["kind"], let k = e.metadata["k"].flatMap(Int.init) else { return nil }
    var inserts = 0, links = 0, updates = 0, deletes = 0
    for c in e.changes {
        switch c {
        case .insert: inserts += 1
        case .link: links += 1
        case .update: updates += 1
        case .delete: deletes += 1
        case .unlink: break
        }
    }
    switch kind {
    case "group" where inserts == k + 1 && links == k && updates == 0 && deletes == 0: return nil
    case "update" where updates == 1 && inserts == 0 && deletes == 0: return nil
    case "delete" where deletes == k + 1 && inserts == 0: return nil
    default: return "transaction \(e.transactionID) (\(kind), k=\(k)): \(inserts) inserts, \(links) links, \(updates) updates, \(deletes) deletes"
    }
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((p / 100 * Double(sorted.count - 1)).rounded()))]
}
