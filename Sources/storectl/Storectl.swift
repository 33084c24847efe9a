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

    /// `storectl` alone: a usage error (exit 64) with the help on standard error, as `storectl
    /// cluster` alone is (it printed the help and exited 0, which a script took for success).
    func run() async throws {
        note("storectl: error: Missing subcommand\n\n\(Storectl.helpMessage(for: Self.self))")
        throw ExitCode(Exit.usage)
    }

    /// ArgumentParser's `main`, plus a last check of standard output: `print` does not report
    /// a failed write (a full disk, `> /dev/full`), so a command whose output was lost would
    /// exit 0. It exits 74 instead, saying why.
    static func main() async {
        // A write past the file-size limit (`ulimit -f`) fails with EFBIG, which the command
        // reports (exit 74). The commands' writes run on threads that block signals, so
        // SIGXFSZ's default action (ending the process) does not happen today either; ignored,
        // it cannot, whichever thread writes.
        signal(SIGXFSZ, SIG_IGN)
        MallocTuning.apply()
        StandardStreams.reserve()
        if let bad = StandardStreams.firstArgumentNotUTF8() {
            let advice = bad.namesAFile
                ? "and would name another file; rename the file (or the directory) to a UTF-8 name"
                : "so give it as UTF-8"
            StandardStreams.writeError("""
                storectl: error: argument \(bad.position) ('\(bad.shown)') is not valid UTF-8: storectl reads \
                paths and values as UTF-8 text, \(advice)

                """)
            Foundation.exit(Exit.usage)
        }
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
            let full = fullMessage(for: error)
            if code != .success, !full.isEmpty {
                let short = message(for: error)
                let shown: String
                if !short.isEmpty, let at = full.range(of: short) {
                    // The message's own lines (usage, help) hold nothing typed: only escaped.
                    shown = escapedLines(String(full[..<at.lowerBound])) + shownParserMessage(short)
                        + escapedLines(String(full[at.upperBound...]))
                } else {
                    shown = escapedLines(full)
                }
                StandardStreams.writeError(storectlPrefixed(shown) + negativeNumberHint(short) + "\n")
                Foundation.exit(code.rawValue)
            }
            exit(withError: error)
        }
        if !finishStandardOutput() { Foundation.exit(Exit.ioError) }
    }

    /// An error message of the option parser as storectl echoes values: the value of "The value
    /// '…' is invalid for '…'" cut to 64 characters with its size (``EchoedText/shown(_:)``), and
    /// every control character escaped, a line break included (a value cannot print a line of its
    /// own); a message still longer than ``parserMessageLimit`` characters is cut with its size.
    static func shownParserMessage(_ message: String) -> String {
        let shown: String
        if let open = message.range(of: "The value '"),
           let close = message.range(of: "' is invalid for", options: .backwards), open.upperBound <= close.lowerBound {
            shown = EchoedText.escaped(String(message[..<open.upperBound]))
                + EchoedText.shown(String(message[open.upperBound..<close.lowerBound]))
                + EchoedText.escaped(String(message[close.lowerBound...]))
        } else {
            shown = EchoedText.escaped(message)
        }
        guard shown.count > parserMessageLimit else { return shown }
        return String(shown.prefix(parserMessageLimit)) + "…(\(message.utf8.count) bytes)"
    }

    /// The option parser's message with storectl's prefix (`storectl: error: …`, as every other
    /// error has) instead of its own (`Error: …`).
    static func storectlPrefixed(_ message: String) -> String {
        message.hasPrefix("Error: ") ? "storectl: error: " + message.dropFirst("Error: ".count) : message
    }

    /// A note for a missing argument or value where one given looks like a negative number: the
    /// option parser reads `-1` as an option, so `show STORE -1` said the transaction was missing.
    static func negativeNumberHint(_ message: String) -> String {
        guard message.hasPrefix("Missing expected argument") || message.hasPrefix("Missing value for") else { return "" }
        guard let negative = CommandLine.arguments.dropFirst().first(where: { a in
            a.count > 1 && a.hasPrefix("-") && a.dropFirst().allSatisfy { $0.isASCII && ($0.isNumber || $0 == ".") }
        }) else { return "" }
        return "\nNote: '\(EchoedText.shown(negative))' is read as an option, not a value: no value storectl " +
            "takes there is negative"
    }

    /// The longest parser message printed whole, in characters.
    static let parserMessageLimit = 400

    /// `text` with the control characters of each line escaped; its lines stay lines.
    static func escapedLines(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { EchoedText.escaped(String($0)) }
            .joined(separator: "\n")
    }

    /// Flushes standard output; false (with the reason on stderr) when a write to it failed.
    private static func finishStandardOutput() -> Bool {
        // fflush(NULL) flushes every output stream and fails when any write does (`stdout`
        // itself is not reachable from Swift 6's strict concurrency).
        guard fflush(nil) != 0 else { return true }
        let code = errno
        if code == EPIPE { StandardStreams.endByClosedPipe() }
        note("storectl: error: cannot write to standard output: \(String(cString: strerror(code)))")
        return false
    }
}
