import Foundation

/// What every workload needs: engines' setup, sizes, where stores go, how to report progress.
struct WorkloadContext: Sendable {
    let setup: BenchSetup
    let sizes: BenchSizes
    /// This run's directory on the real disk; each workload's stores go in a subdirectory that is
    /// removed when the workload ends.
    let runDirectory: URL
    let schemaDirectory: URL
    let executablePath: String
    let engines: [Engine]
    /// Each engine's measurement is repeated this many times, interleaved (strata, lmdb, grdb,
    /// strata, …), and the median is reported.
    let rounds: Int

    func progress(_ message: String) {
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }

    /// Runs `measure` for every engine, ``rounds`` times, interleaved, and records the median of
    /// each figure it returns. An engine that fails is reported and left out of later rounds.
    func measureRounds(_ workload: String, keys: [String], _ report: inout Report,
                       _ measure: (Engine) async throws -> [String: Double]) async {
        var samples: [String: [Engine: [Double]]] = [:]
        var failed: Set<Engine> = []
        for round in 1...rounds {
            for engine in engines where !failed.contains(engine) {
                do {
                    let figures = try await measure(engine)
                    for (key, value) in figures { samples[key, default: [:]][engine, default: []].append(value) }
                    let shown = keys.compactMap { k in figures[k].map { "\(k) \(TableRenderer.number($0))" } }.joined(separator: ", ")
                    progress("\(workload) \(engine.rawValue) [\(round)/\(rounds)]: \(shown)")
                } catch {
                    failed.insert(engine)
                    progress("\(workload) \(engine.rawValue) [\(round)/\(rounds)] FAILED: \(error)")
                    report.fail(keys, engine, error)
                }
            }
        }
        for key in keys {
            for (engine, values) in samples[key] ?? [:] { report.record(key, engine, samples: values) }
        }
    }

    /// A fresh, empty directory for one store.
    func storeDirectory(_ workload: String, _ engine: Engine, _ variant: String = "") throws -> URL {
        let url = runDirectory.appendingPathComponent("\(workload)\(variant.isEmpty ? "" : "-" + variant)-\(engine.rawValue)")
        try? FileManager.default.removeItem(at: url)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    func remove(_ directory: URL) {
        try? FileManager.default.removeItem(at: directory)
    }

    /// Opens `engine` in a fresh directory, runs `body`, closes and removes the store whatever happens.
    func withSubject<R>(_ workload: String, _ engine: Engine, variant: String = "", sync: SyncLevel = .durable,
                        _ body: (any BenchSubject) async throws -> R) async throws -> R {
        let dir = try storeDirectory(workload, engine, variant)
        defer { remove(dir) }
        let subject = try engine.open(in: dir, setup: setup, sync: sync)
        do {
            let r = try await body(subject)
            subject.close()
            return r
        } catch {
            subject.close()
            throw error
        }
    }

    /// Inserts records `range` in `batchSize` transactions; returns the seconds spent saving
    /// (record generation is not timed).
    func load(_ subject: any BenchSubject, _ range: Range<Int>) async throws -> Double {
        var seconds = 0.0
        var start = range.lowerBound
        while start < range.upperBound {
            let end = min(range.upperBound, start + sizes.batchSize)
            let batch = TrackData.batch(start..<end)
            seconds += try await MonotonicClock.measure { try await subject.save(batch) }.seconds
            start = end
        }
        return seconds
    }

    /// Checks that `subject` holds exactly `expected` records.
    func expectCount(_ subject: any BenchSubject, _ expected: Int) throws {
        let n = try subject.count()
        guard n == expected else { throw CountMismatch(engine: subject.engine, expected: expected, found: n) }
    }
}

struct CountMismatch: Error, CustomStringConvertible {
    let engine: Engine
    let expected: Int
    let found: Int
    var description: String { "\(engine.rawValue) holds \(found) records, expected \(expected)" }
}

/// A workload was handed a subject it cannot run on (a harness bug, reported as the workload's failure).
struct BenchSetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
