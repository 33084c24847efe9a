import Foundation

/// What a `child-import` process reports on stdout (one JSON object).
struct ChildImportResult: Codable, Sendable {
    let engine: String
    let records: Int
    let seconds: Double
    let peakRSSBytes: Int
    /// Resident memory at the end of the import, before closing: anonymous (heap) and
    /// file-backed (mapped store pages), to tell what the peak is made of.
    let endRSSAnonBytes: Int
    let endRSSFileBytes: Int
}

/// W1: import N records in transactions of 10k, durable; records/s and peak RSS.
///
/// Each engine runs in a fresh child process (this binary's hidden `child-import` command), so the
/// peak RSS (`VmHWM`) belongs to that engine alone and no engine inherits another's page cache
/// mappings or heap.
enum W1Import {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        for engine in ctx.engines {
            do {
                let dir = try ctx.storeDirectory("W1", engine)
                defer { ctx.remove(dir) }
                let result = try await runChild(ctx, engine: engine, directory: dir)
                let rate = Double(result.records) / result.seconds
                report.record("W1_import", engine, rate)
                report.record("W1_peak_rss_mb", engine, Double(result.peakRSSBytes) / 1_048_576)
                ctx.progress(String(format: "W1 %@: %.0f records/s, peak RSS %.1f MB (at the end: %.1f MB heap, %.1f MB mapped file)",
                                    engine.rawValue, rate, Double(result.peakRSSBytes) / 1_048_576,
                                    Double(result.endRSSAnonBytes) / 1_048_576, Double(result.endRSSFileBytes) / 1_048_576))
            } catch {
                ctx.progress("W1 \(engine.rawValue) failed: \(error)")
                report.fail(["W1_import", "W1_peak_rss_mb"], error)
            }
        }
    }

    static func runChild(_ ctx: WorkloadContext, engine: Engine, directory: URL) async throws -> ChildImportResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ctx.executablePath)
        process.arguments = [
            "child-import", "--engine", engine.rawValue, "--records", String(ctx.sizes.importRecords),
            "--batch", String(ctx.sizes.batchSize), "--dir", directory.path, "--schema", ctx.schemaDirectory.path,
            "--map-size-mb", String(ctx.setup.mapSizeBytes >> 20),
        ]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.standardError
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, Error>) in
            process.terminationHandler = { _ in c.resume() }
            do { try process.run() } catch { c.resume(throwing: error) }
        }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        guard process.terminationStatus == 0 else { throw ChildFailed(status: process.terminationStatus) }
        return try JSONDecoder().decode(ChildImportResult.self, from: data)
    }

    struct ChildFailed: Error, CustomStringConvertible {
        let status: Int32
        var description: String { "child-import exited with status \(status)" }
    }

    /// The child's side: import, check the count, report.
    static func importInThisProcess(engine: Engine, records: Int, batchSize: Int, directory: URL, setup: BenchSetup,
                                    traceBatches: Bool) async throws -> ChildImportResult {
        var sizes = BenchSizes.quick
        sizes.batchSize = batchSize
        let ctx = WorkloadContext(setup: setup, sizes: sizes, runDirectory: directory, schemaDirectory: directory,
                                  executablePath: "", engines: [engine])
        let subject = try engine.open(in: directory, setup: setup, sync: .durable)
        var seconds = 0.0
        let anon: Int, file: Int
        do {
            var start = 0
            while start < records {
                let end = min(records, start + batchSize)
                let s = try await ctx.load(subject, start..<end)
                if traceBatches {
                    ctx.progress(String(format: "  batch %d..<%d: %.3f s, RSS %.1f MB", start, end, s, Double(ProcessMemory.residentBytes() ?? 0) / 1_048_576))
                }
                seconds += s
                start = end
            }
            try ctx.expectCount(subject, records)
            anon = ProcessMemory.residentAnonymousBytes() ?? 0
            file = ProcessMemory.residentFileBytes() ?? 0
        } catch {
            subject.close()
            throw error
        }
        subject.close()
        return ChildImportResult(engine: engine.rawValue, records: records, seconds: seconds, peakRSSBytes: ProcessMemory.peakResidentBytes() ?? 0,
                                 endRSSAnonBytes: anon, endRSSFileBytes: file)
    }
}
