import ArgumentParser
import Foundation
import Strata

struct GenerateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Generate typed Swift entities (structs with typed keys) from a schema.",
        discussion: """
        Examples:
          storectl generate --schema Schemas/library --output Sources/LibraryModel/LibraryModel.swift
          storectl generate --schema Schemas/library          # prints to stdout
        """
    )

    @Option(
        help: ArgumentHelp("Model directory with v1.json … vN.json; the highest version is used.", valueName: "dir"))
    var schema: String
    @Option(help: ArgumentHelp("File to write (default, or -: stdout).", valueName: "file"))
    var output: String?

    func validate() throws {
        try refuseEmptySchema(schema)
    }

    func run() async throws {
        let output = self.output == "-" ? nil : self.output
        // No store is named, but the file must not land in one (a store directory anywhere
        // above it): refused before the schema is read or anything is created.
        if let output {
            do {
                try OutputPathGuard.check(output, storeDirectory: nil)
            } catch {
                throw failure(error, context: "--output")
            }
        }
        let loaded: Schema
        do { loaded = try Schema.load(directory: URL(fileURLWithPath: schema)) } catch { throw failure(error) }
        // The loaded schema is the directory's newest version, from its file `vN.json`.
        let file = URL(fileURLWithPath: schema).appendingPathComponent("v\(loaded.version).json").path
        if let problem = ModelGenerator.problems(in: loaded, file: file).first { throw failure(problem) }
        let source = ModelGenerator.swiftSource(for: loaded)
        // Written as an export is (``OutputSink``): a file beside the destination, synced and
        // renamed over it with the replaced file's permissions and owner; a device or pipe in
        // place; stdout at once, so that a failed write (a full disk, `> /dev/full`) is an error.
        let sink: OutputSink
        do {
            sink = try OutputSink(path: output)
        } catch {
            throw failure(error, context: output).withCode(Exit.cannotCreate)
        }
        do {
            try sink.write(bytes: Data(source.utf8))
            try sink.close()
        } catch {
            sink.discard()
            throw failure(error)
        }
        guard let output else { return }
        note("wrote \(EchoedText.escaped(output)) (\(loaded.entities.count) entities)")
    }
}
