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

    @Option(help: ArgumentHelp("Model directory with v1.json … vN.json; the highest version is used.", valueName: "dir"))
    var schema: String
    @Option(help: ArgumentHelp("File to write (default: stdout).", valueName: "file"))
    var output: String?

    func run() async throws {
        let loaded: Schema
        do { loaded = try Schema.load(directory: URL(fileURLWithPath: schema)) } catch { throw failure(error) }
        let source = ModelGenerator.swiftSource(for: loaded)
        guard let output else {
            print(source, terminator: "")
            return
        }
        do {
            try Data(source.utf8).write(to: URL(fileURLWithPath: output), options: .atomic)
        } catch {
            throw failure(error, context: output).withCode(Exit.cannotCreate)
        }
        note("wrote \(output) (\(loaded.entities.count) entities)")
    }
}
