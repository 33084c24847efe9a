import ArgumentParser

/// `strata-bench`: Strata's benchmark harness. Runs the same logical work through Strata,
/// raw LMDB and GRDB, interleaved in one run, and prints a table (and optionally JSON).
@main
struct StrataBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "strata-bench",
        abstract: "Benchmarks Strata against raw LMDB and GRDB (workloads W1–W13, see BENCHMARKS.md).",
        discussion: """
            Examples:
              strata-bench --quick                      smoke run, well under two minutes
              strata-bench --json bench.json            full run (1M records for W1/W4)
              strata-bench --records 200000 --only W1,W4
            """,
        subcommands: [RunCommand.self, ChildImportCommand.self, ProbeCommand.self],
        defaultSubcommand: RunCommand.self)
}
