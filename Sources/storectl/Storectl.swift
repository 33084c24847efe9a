import ArgumentParser
import Foundation
import Strata

@main
struct Storectl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storectl",
        abstract: "Create, inspect, import into and maintain Strata stores.",
        discussion: """
        A store is a directory: strata.lock, current -> gen-N/ (data.mdb, lock.mdb). \
        Read commands take --json for a stable, documented output shape \
        (export and replay write NDJSON records; see README, "storectl").

        Exit codes (sysexits): 0 ok, 64 usage, 65 bad input data, 66 cannot open, \
        70 internal error, 73 cannot create, 74 I/O error, 75 temporary failure (store busy).
        """,
        subcommands: [InitCommand.self, InfoCommand.self, ImportCommand.self, ExportCommand.self, QueryCommand.self,
                      LogCommand.self, ShowCommand.self, HistoryCommand.self, ReplayCommand.self, DiffCommand.self,
                      VerifyCommand.self, CompactCommand.self, MigrateCommand.self, GenerateCommand.self,
                      ClusterCommand.self]
    )

    /// ArgumentParser's `main`, plus a last check of standard output: `print` does not report
    /// a failed write (a full disk, `> /dev/full`), so a command whose output was lost would
    /// exit 0. It exits 74 instead, saying why.
    static func main() async {
        // A write past the file-size limit (`ulimit -f`) fails with EFBIG, which the command
        // reports (exit 74). The commands' writes run on threads that block signals, so
        // SIGXFSZ's default action (ending the process) does not happen today either; ignored,
        // it cannot, whichever thread writes.
        signal(SIGXFSZ, SIG_IGN)
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            _ = finishStandardOutput()
            // ArgumentParser's own messages echo a value it could not read ("The value '…' is
            // invalid") whole and raw: shown as every other echoed value is instead.
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            if code != .success, !message.isEmpty {
                FileHandle.standardError.write(Data((shownParserMessage(message) + "\n").utf8))
                Foundation.exit(code.rawValue)
            }
            exit(withError: error)
        }
        if !finishStandardOutput() { Foundation.exit(Exit.ioError) }
    }

    /// `message` with each quoted value (`'…'`) shown as ``EchoedText/shown(_:)`` shows it (at
    /// most 64 characters, control characters escaped) and any other control character of a
    /// line escaped; its lines stay lines.
    static func shownParserMessage(_ message: String) -> String {
        message.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            let parts = line.split(separator: "'", omittingEmptySubsequences: false)
            // Odd parts are inside quotes (an unmatched last quote leaves its tail as it is).
            // A value our own messages show already ends with its size (`…(N bytes)`): kept.
            return parts.enumerated().map { i, part in
                let quoted = i % 2 == 1 && i < parts.count - 1
                let shortened = part.hasSuffix(" bytes)") && part.contains("…(")
                return quoted && !shortened ? EchoedText.shown(String(part)) : EchoedText.escaped(String(part))
            }.joined(separator: "'")
        }.joined(separator: "\n")
    }

    /// Flushes standard output; false (with the reason on stderr) when a write to it failed.
    private static func finishStandardOutput() -> Bool {
        // fflush(NULL) flushes every output stream and fails when any write does (`stdout`
        // itself is not reachable from Swift 6's strict concurrency).
        guard fflush(nil) != 0 else { return true }
        note("storectl: error: cannot write to standard output: \(String(cString: strerror(errno)))")
        return false
    }
}
