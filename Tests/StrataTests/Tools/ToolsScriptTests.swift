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
}
