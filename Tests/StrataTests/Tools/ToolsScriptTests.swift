import Foundation
import Testing
import StrataTestSupport

/// The operator scripts in `Tools/` refuse what they must not act on before they build or
/// remove anything.
@Suite struct ToolsScriptTests {
    static let runScript = repositoryRoot.appendingPathComponent("Tools/run").path

    /// `Tools/run STORE_DIR` removes and makes again the store it is given; a directory that is
    /// not a store is refused (exit 64) and left as it is, and a relative one is the caller's,
    /// not the repository's. (`Tools/run Docs` from another directory removed the repository's
    /// `Docs`; `Tools/run Sources` would have removed the sources.)
    @Test func runRefusesADirectoryThatIsNotAStoreAndLeavesIt() async throws {
        let dir = temporaryDirectory("tools-run")
        defer { try? FileManager.default.removeItem(at: dir) }
        let docs = dir.appendingPathComponent("Docs")
        try FileManager.default.createDirectory(at: docs, withIntermediateDirectories: true)
        let kept = docs.appendingPathComponent("notes.txt")
        try Data("mine".utf8).write(to: kept)
        for given in ["Docs", docs.path, "/", repositoryRoot.path] {
            let r = try await run("/bin/sh", ["-c", "cd \"$0\" && exec \"$1\" \"$2\"", dir.path, Self.runScript, given])
            #expect(r.status == 64, "\(given): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("is not a store"), "\(given): \(r.stderr)")
        }
        #expect(try String(contentsOf: kept, encoding: .utf8) == "mine")
        #expect(FileManager.default.fileExists(atPath: repositoryRoot.appendingPathComponent("Sources").path))
        let extra = try await run(Self.runScript, ["a", "b"])
        #expect(extra.status == 64 && extra.stderr.contains("usage"), "\(extra.stderr)")
    }

    /// The long-run scripts check their arguments before they build anything and refuse a bad
    /// one with exit 64: `Tools/fuzz fuzz-json` fuzzed every target without a time limit (the
    /// target taken for SECONDS, which libFuzzer read as 0), `Tools/context-model --minutes abc`
    /// ran for the default 30 minutes, `--seed abc` replayed seeds 1–12, `Tools/cluster-loop
    /// --seed 42` ran with a random seed, and `Tools/kill-loop -3` trapped after its build.
    @Test func longRunScriptsRefuseBadArgumentsBeforeBuilding() async throws {
        let cases: [(String, [String])] = [
            ("fuzz", ["fuzz-json"]), ("fuzz", ["10m"]), ("fuzz", ["0"]), ("fuzz", ["60", "fuzz-bogus"]),
            ("kill-loop", ["-3"]), ("kill-loop", ["abc"]),
            ("context-model", ["--minutes", "abc"]), ("context-model", ["--steps", "20k"]),
            ("context-model", ["--seed", "abc"]), ("context-model", ["--jobs", "0"]), ("context-model", ["--minutes"]),
            ("cluster-loop", ["--seed", "abc"]), ("cluster-loop", ["-5"]), ("cluster-loop", ["300", "--sed", "42"]),
            ("import-at-scale", ["99"]), ("import-at-scale", ["2000", "--bogus", "1"]), ("import-at-scale", ["2000", "--dir"]),
        ]
        for (script, arguments) in cases {
            let path = repositoryRoot.appendingPathComponent("Tools/\(script)").path
            let r = try await run(path, arguments)
            #expect(r.status == 64, "\(script) \(arguments): \(r.status) \(r.stderr.suffix(300))")
            // Refused before the build (each script says when it builds).
            #expect(!r.stderr.contains("building"), "\(script) \(arguments): \(r.stderr.suffix(300))")
        }
        let help = try await run(repositoryRoot.appendingPathComponent("Tools/context-model").path, ["--help"])
        #expect(help.status == 0 && help.stdout.contains("--minutes"), "\(help.stderr)")
    }
}
