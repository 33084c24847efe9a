import ArgumentParser
import Foundation
import Strata

/// The default command: runs the workloads and prints the table.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run", abstract: "Runs the workloads (the default command).")

    @Flag(help: "Small sizes for a smoke run (CI): everything in well under two minutes.")
    var quick = false

    @Option(name: .customLong("json"), help: ArgumentHelp("Also write the results as JSON to this file.", valueName: "file"))
    var jsonPath: String?

    @Option(name: .customLong("dir"), help: ArgumentHelp("Directory for the stores, on the disk under test (default: <repo>/.bench-data).", valueName: "dir"))
    var dataDirectory: String?

    @Option(help: "Records for W1 and W4 (default 1,000,000; --quick: 100,000).")
    var records: Int?

    @Option(help: "Records of W11's generated library, imported into an empty store; a tenth as many more then go into that store (default 200,000; --quick: 5,000). 1,000,000 measures W11's targets at their own scale.")
    var importFileRecords: Int?

    @Option(help: ArgumentHelp("Only these workloads, comma-separated (e.g. W1,W4).", valueName: "list"))
    var only: String?

    @Option(help: ArgumentHelp("Engines, comma-separated (default strata,lmdb,lmdb-indexed,grdb,grdb-indexed; the -indexed ones, raw LMDB writing Strata's entries and GRDB with Strata's Track indexes, take part in W1–W3, and grdb-indexed also in W10).", valueName: "list"))
    var engines: String = "strata,lmdb,lmdb-indexed,grdb,grdb-indexed"

    @Option(help: ArgumentHelp("Schema directory (default: <repo>/Schemas/library).", valueName: "dir"))
    var schema: String?

    @Option(help: "LMDB map size in MiB, for raw LMDB and Strata's initial map.")
    var mapSizeMb = 8192

    @Option(help: "Rounds per engine, interleaved; the median is reported (default 3, --quick: 1).")
    var rounds: Int?

    /// Upper case (`--only` is matched upper-cased): W6G is reported as `W6g_…`.
    static let workloadNames = ["W1", "W2", "W3", "W4", "W5", "W6", "W6G", "W7", "W8", "W9", "W10", "W11", "W12", "W13"]

    func validate() throws {
        if let records, records <= 0 { throw ValidationError("--records must be positive") }
        if let importFileRecords, importFileRecords < 100 || importFileRecords > 100_000_000 {
            throw ValidationError("--import-file-records must be between 100 and 100,000,000")
        }
        if let rounds, rounds <= 0 { throw ValidationError("--rounds must be positive") }
        guard mapSizeMb > 0 else { throw ValidationError("--map-size-mb must be positive") }
        for name in selectedWorkloads where !Self.workloadNames.contains(name) {
            throw ValidationError("unknown workload '\(name)' (available: \(Self.workloadNames.joined(separator: ", ")))")
        }
        _ = try selectedEngines()
    }

    var selectedWorkloads: [String] {
        guard let only else { return Self.workloadNames }
        return only.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).uppercased() }
    }

    func selectedEngines() throws -> [Engine] {
        try engines.split(separator: ",").map {
            guard let e = Engine(rawValue: $0.trimmingCharacters(in: .whitespaces).lowercased()) else {
                throw ValidationError("unknown engine '\($0)' (\(Engine.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            return e
        }
    }

    func sizes() -> BenchSizes {
        var s = quick ? BenchSizes.quick : BenchSizes.full
        if let records {
            s.importRecords = records
            s.pointReadRecords = records
        }
        if let importFileRecords { s.importFileRecords = importFileRecords }
        return s
    }

    func run() async throws {
        guard let schemaURL = schema.map({ URL(fileURLWithPath: $0) }) ?? Paths.defaultSchemaDirectory else {
            throw ValidationError("cannot find Schemas/library; pass --schema")
        }
        let base = dataDirectory.map { URL(fileURLWithPath: $0) } ?? Paths.defaultDataDirectory
        let runDirectory = base.appendingPathComponent("run-\(getpid())")
        try FileManager.default.createDirectory(at: runDirectory, withIntermediateDirectories: true)
        let cleanup = RunDirectoryCleanup(runDirectory: runDirectory, base: base)
        defer { cleanup.remove() }
        let machine = MachineInfo.current(dataDirectory: runDirectory)
        let ctx = WorkloadContext(
            setup: BenchSetup(schema: try Schema.load(directory: schemaURL), mapSizeBytes: mapSizeMb << 20),
            sizes: sizes(), runDirectory: runDirectory, schemaDirectory: schemaURL,
            executablePath: Paths.executable, engines: try selectedEngines(), rounds: rounds ?? (quick ? 1 : 3))
        printHeader(machine, ctx)
        let date = Date()
        let contention = CPUContention()
        var report = Report()
        let selected = Set(selectedWorkloads)
        if selected.contains("W1") { await W1Import.run(ctx, &report) }
        if selected.contains("W2") { await W2SmallTransactions.run(ctx, &report) }
        if selected.contains("W3") { await W3GroupCommit.run(ctx, &report) }
        if selected.contains("W4") { await W4PointReads.run(ctx, &report) }
        if selected.contains("W5") { await W5SnapshotOpen.run(ctx, &report) }
        if selected.contains("W6") { await W6ReaderLatency.run(ctx, &report) }
        if selected.contains("W6G") { await W6gSavesDuringExport.run(ctx, &report) }
        if selected.contains("W7") { await W7ChildContexts.run(ctx, &report) }
        if selected.contains("W8") { await W8Verify.run(ctx, &report) }
        if selected.contains("W9") { await W9Compaction.run(ctx, &report) }
        if selected.contains("W10") { await W10Migration.run(ctx, &report) }
        if selected.contains("W11") { await W11Import.run(ctx, &report) }
        if selected.contains("W12") { await W12Cluster.run(ctx, &report) }
        if selected.contains("W13") { await W13Catalog.run(ctx, &report) }
        let (otherCPU, wall) = contention.othersSinceStart()
        emit("")
        emit(TableRenderer.render(report), terminator: "")
        emit("")
        emit(Target.render(report), terminator: "")
        emit(String(format: "wall %.0f s; other processes used %.1f CPU-seconds meanwhile (%.0f%% of one core)%@", wall, otherCPU,
                    100 * otherCPU / max(wall, 1e-9), otherCPU / max(wall, 1e-9) > 0.1 ? " — the machine was not quiet, figures are disturbed" : ""))
        if let jsonPath {
            let command = CommandLine.arguments.map { $0.contains(" ") ? "'\($0)'" : $0 }.joined(separator: " ")
            let data = try JSONReport.data(report, machine: machine, date: date, command: command, sizes: ctx.sizes, quick: quick,
                                           rounds: ctx.rounds, wallSeconds: wall, otherCPUSeconds: otherCPU)
            try data.write(to: URL(fileURLWithPath: jsonPath))
            ctx.progress("wrote \(jsonPath)")
        }
        if report.results.contains(where: { if case .failed = $0.status { true } else { false } }) {
            throw ExitCode(1)
        }
    }

    private func printHeader(_ machine: MachineInfo, _ ctx: WorkloadContext) {
        let gib = Double(machine.memoryBytes) / Double(1 << 30)
        emit(String(format: "strata-bench%@ — %d cores, %.1f GiB, kernel %@", quick ? " --quick" : "", machine.cores, gib, machine.kernel))
        emit("data: \(ctx.runDirectory.path) (\(machine.dataFileSystem) on \(machine.dataDevice), \(machine.dataFreeBytes >> 30) GiB free)")
        if machine.dataFileSystemIsTmpfs {
            emit("WARNING: the data directory is on tmpfs: fsync costs nothing there, durable figures are meaningless. Use --dir on a real disk.")
        }
        let s = ctx.sizes
        emit("rounds: \(ctx.rounds) per engine, interleaved, median reported")
        emit("sizes: W1 \(s.importRecords) records, W2 \(s.smallTransactions) tx, W3 \(s.groupCommitTransactions) tx per saver count, "
              + "W4 \(s.pointReads) reads of \(s.pointReadRecords), W5 \(s.snapshotOpens) opens at a time for at least \(s.snapshotSeconds) s, "
              + "W6 \(s.latencyReads) idle reads of \(s.latencyPreload) + import of \(s.latencyImportRecords), "
              + "W6g \(s.exportGrowthSaves) saves of \(s.exportGrowthBatch) past a \(s.exportGrowthMapBytes >> 20) MiB map holding "
              + "\(s.exportGrowthPreload), idle and during a \(String(format: "%.1f", s.exportSeconds)) s export")
    }

    /// Unbuffered stdout, so the header shows before the progress lines (stderr) even in a pipe.
    private func emit(_ text: String, terminator: String = "\n") {
        FileHandle.standardOutput.write(Data((text + terminator).utf8))
    }
}
