import ArgumentParser
import Foundation
import Strata

@main
struct Storectl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storectl",
        abstract: "Create, inspect, import into and maintain Strata stores.",
        discussion: """
        A store is a directory: strata.lock, current -> gen-N/ (data.mdb, lock.mdb). Read commands take --json for a stable,
        documented output shape (export and replay write NDJSON records; see README, "storectl").

        Exit codes (sysexits): 0 ok, 64 usage, 65 bad input data, 66 cannot open, 70 internal error,
        73 cannot create, 74 I/O error, 75 temporary failure (store busy).
        """,
        subcommands: [InitCommand.self, InfoCommand.self, ImportCommand.self, ExportCommand.self, QueryCommand.self,
                      LogCommand.self, ShowCommand.self, HistoryCommand.self, ReplayCommand.self, DiffCommand.self, VerifyCommand.self,
                      CompactCommand.self, MigrateCommand.self, GenerateCommand.self]
    )
}
