import ArgumentParser
import Foundation
import Strata

/// Hidden: one engine's W1 import in a process of its own, so its peak RSS is its own.
/// Prints a ``ChildImportResult`` as JSON on stdout.
struct ChildImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "child-import", abstract: "Runs one engine's W1 import (used by the harness itself).", shouldDisplay: false)

    @Option(help: "Engine: strata, lmdb, lmdb-indexed, grdb or grdb-indexed.") var engine: Engine
    @Option(help: "Records to import.") var records: Int
    @Option(help: "Records per transaction.") var batch: Int = 10_000
    @Option(help: "Empty directory for the store.") var dir: String
    @Option(help: "Schema directory (Schemas/library).") var schema: String
    @Option(help: "LMDB map size in MiB.") var mapSizeMb: Int
    @Flag(help: "Print each batch's time and RSS to stderr.") var traceBatches = false

    func validate() throws {
        guard records > 0, batch > 0, mapSizeMb > 0 else { throw ValidationError("records, batch and map size must be positive") }
    }

    func run() async throws {
        let setup = BenchSetup(schema: try Schema.load(directory: URL(fileURLWithPath: schema)), mapSizeBytes: mapSizeMb << 20)
        let result = try await W1Import.importInThisProcess(engine: engine, records: records, batchSize: batch,
                                                            directory: URL(fileURLWithPath: dir), setup: setup,
                                                            traceBatches: traceBatches)
        let data = try JSONEncoder().encode(result)
        FileHandle.standardOutput.write(data)
    }
}
