import Foundation

/// What a `child-import` process reports on stdout (one JSON object).
struct ChildImportResult: Codable, Sendable {
    let engine: String
    let records: Int
    let seconds: Double
    /// `VmHWM`: the peak resident set, heap and mapped store pages together.
    let peakRSSBytes: Int
    /// The highest anonymous (heap) RSS seen by a sampler every 5 ms.
    let peakAnonymousBytes: Int
    /// Resident file-backed memory (mostly mapped store pages) at the end of the import.
    let endFileBytes: Int
    let storeFileBytes: Int
}

/// W1: import N records in transactions of 10k, durable; records/s and peak RSS.
///
/// Each engine runs in a fresh child process (this binary's hidden `child-import` command), so the
/// peak RSS (`VmHWM` of `/proc/self/status`) belongs to that engine alone.
enum W1Import {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        await ctx.measureRounds("W1", keys: ["W1_import", "W1_peak_rss_mb"], &report) { engine in
            let dir = try ctx.storeDirectory("W1", engine)
            defer { ctx.remove(dir) }
            let r = try await runChild(ctx, engine: engine, directory: dir)
            let mb = 1_048_576.0
            ctx.progress(String(format: "  W1 %@: peak RSS %.1f MB = heap (peak %.1f MB) + mapped store and binary pages (%.1f MB at the end); store file %.1f MB",
                                engine.rawValue, Double(r.peakRSSBytes) / mb, Double(r.peakAnonymousBytes) / mb, Double(r.endFileBytes) / mb,
                                Double(r.storeFileBytes) / mb))
            return ["W1_import": Double(r.records) / r.seconds, "W1_peak_rss_mb": Double(r.peakRSSBytes) / mb]
        }
    }

    static func runChild(_ ctx: WorkloadContext, engine: Engine, directory: URL) async throws -> ChildImportResult {
        let data = try await ChildProcess.output(ctx.executablePath, [
            "child-import", "--engine", engine.rawValue, "--records", String(ctx.sizes.importRecords),
            "--batch", String(ctx.sizes.batchSize), "--dir", directory.path, "--schema", ctx.schemaDirectory.path,
            "--map-size-mb", String(ctx.setup.mapSizeBytes >> 20),
        ])
        return try JSONDecoder().decode(ChildImportResult.self, from: data)
    }

    /// The child's side: import, check the count, report.
    static func importInThisProcess(engine: Engine, records: Int, batchSize: Int, directory: URL, setup: BenchSetup,
                                    traceBatches: Bool) async throws -> ChildImportResult {
        var sizes = BenchSizes.quick
        sizes.batchSize = batchSize
        let ctx = WorkloadContext(setup: setup, sizes: sizes, runDirectory: directory, schemaDirectory: directory,
                                  executablePath: "", engines: [engine], rounds: 1)
        let sampler = MemorySampler()
        let subject = try engine.open(in: directory, setup: setup, sync: .durable)
        var seconds = 0.0
        let endFile: Int
        do {
            var start = 0
            while start < records {
                let end = min(records, start + batchSize)
                let s = try await ctx.load(subject, start..<end)
                if traceBatches {
                    ctx.progress(String(format: "  batch %d..<%d: %.3f s, RSS %.1f MB (heap %.1f, file %.1f)", start, end, s,
                                        Double(ProcessMemory.residentBytes() ?? 0) / 1_048_576,
                                        Double(ProcessMemory.residentAnonymousBytes() ?? 0) / 1_048_576,
                                        Double(ProcessMemory.residentFileBytes() ?? 0) / 1_048_576))
                }
                seconds += s
                start = end
            }
            try ctx.expectCount(subject, records)
            endFile = ProcessMemory.residentFileBytes() ?? 0
        } catch {
            subject.close()
            _ = sampler.stop()
            throw error
        }
        subject.close()
        let peakAnonymous = sampler.stop()
        return ChildImportResult(engine: engine.rawValue, records: records, seconds: seconds,
                                 peakRSSBytes: ProcessMemory.peakResidentBytes() ?? 0, peakAnonymousBytes: peakAnonymous,
                                 endFileBytes: endFile, storeFileBytes: directorySize(directory))
    }

    static func directorySize(_ url: URL) -> Int {
        let fm = FileManager.default
        guard let names = try? fm.subpathsOfDirectory(atPath: url.path) else { return 0 }
        return names.reduce(0) { sum, name in
            sum + ((try? fm.attributesOfItem(atPath: url.appendingPathComponent(name).path)[.size] as? Int) ?? 0)
        }
    }
}
