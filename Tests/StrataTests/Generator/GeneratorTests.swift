import Foundation
import Testing
@testable import Strata

/// `strata-generate` (`Tools/generate-library`): the catalog shape imports into a store of
/// `Schemas/catalog` with every record and every dependency edge, and the same arguments give the
/// same bytes.
@Suite struct GeneratorTests {
    private var generator: String {
        URL(fileURLWithPath: storectlPath).deletingLastPathComponent().appendingPathComponent("strata-generate").path
    }

    @Test func theCatalogShapeImportsWithEveryDependency() async throws {
        let dir = temporaryDirectory("generate-catalog")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("catalog.ndjson").path
        #expect(try await run(generator, ["2000", "--shape", "catalog", "--seed", "7", "--output", input]).status == 0)
        let again = dir.appendingPathComponent("again.ndjson").path
        #expect(try await run(generator, ["2000", "--shape", "catalog", "--seed", "7", "--output", again]).status == 0)
        let text = try String(contentsOfFile: input, encoding: .utf8)
        #expect(text == (try String(contentsOfFile: again, encoding: .utf8)), "the same arguments gave other bytes")

        // What the file says: records by entity, and the dependency edges.
        let lines = text.split(separator: "\n")
        #expect(lines.count == 2000)
        let packages = lines.filter { $0.contains(#""entity":"Package""#) }.count
        let edges = lines.reduce(0) { n, line in
            guard let range = line.range(of: #""depends":["#) else { return n }
            return n + line[range.upperBound...].components(separatedBy: #"{"name":"#).count - 1
        }
        #expect(packages > 1800 && edges > 3 * packages, "\(packages) packages, \(edges) edges")

        let store = dir.appendingPathComponent("store").path
        let catalogSchema = repositoryRoot.appendingPathComponent("Schemas/catalog").path
        #expect(try await storectl("init", store, "--schema", catalogSchema).status == 0)
        let imported = try await storectl("import", store, input, "--batch", "500", "--quiet")
        #expect(imported.status == 0, "\(imported.stderr)")
        func count(_ entity: String, _ filter: [String] = []) async throws -> Int {
            let r = try await storectl(["query", store, "--entity", entity, "--count"] + filter)
            #expect(r.status == 0, "\(r.stderr)")
            return Int(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        }
        #expect(try await count("Section") == 40)
        #expect(try await count("Package") == packages)
        #expect(try await count("Maintainer") == 2000 - 40 - packages)
        // Every edge, counted from the store's side: the sum of each package's dependencies.
        let exported = try await storectl("export", store, "--entity", "Package")
        #expect(exported.status == 0, "\(exported.stderr)")
        let stored = exported.stdout.split(separator: "\n").reduce(0) { n, line in
            guard let range = line.range(of: #""depends":["#) else { return n }
            let list = line[range.upperBound...].prefix { $0 != "]" }
            return n + (list.isEmpty ? 0 : list.split(separator: ",").count)
        }
        #expect(stored == edges)
        #expect(try await storectl("verify", store).status == 0)
    }

    /// The output is written aside and renamed into place at the end: a run that fails (past a
    /// file-size limit) leaves the file that was there as it was, and nothing of its own.
    @Test func aFailedRunLeavesTheOutputThatWasThere() async throws {
        let dir = temporaryDirectory("generate-fails")
        defer { try? FileManager.default.removeItem(at: dir) }
        let output = dir.appendingPathComponent("library.ndjson")
        try Data("the last library\n".utf8).write(to: output)
        let r = try await run("/bin/sh", ["-c", "ulimit -f 64 && exec \"$0\" 20000 --output \"$1\"", generator, output.path])
        #expect(r.status == 74, "exit \(r.status): \(r.stderr)")
        #expect(try String(contentsOf: output, encoding: .utf8) == "the last library\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["library.ndjson"])
        // Through a symbolic link that points at nothing yet: the link stays, its target is made.
        let link = dir.appendingPathComponent("link.ndjson"), target = dir.appendingPathComponent("target.ndjson")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: target.lastPathComponent)
        #expect(try await run(generator, ["100", "--output", link.path]).status == 0)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link.path) == target.lastPathComponent)
        #expect(try String(contentsOf: target, encoding: .utf8).hasPrefix("{"))
    }

    @Test func anUnknownShapeIsAUsageError() async throws {
        let r = try await run(generator, ["1000", "--shape", "graph"])
        #expect(r.status == 64 && r.stderr.contains("--shape needs library or catalog"), "\(r.stderr)")
    }

    /// Interrupted (Ctrl-C, `kill`, a hang-up) while it writes, the tool removes the file it was
    /// writing aside and ends by the signal: `FILE.partial-PID` stayed for good, up to gigabytes.
    @Test(.serialized, arguments: [SIGINT, SIGTERM, SIGHUP])
    func anInterruptedRunLeavesNoPartialFile(signal: Int32) async throws {
        let dir = temporaryDirectory("generate-interrupted")
        defer { try? FileManager.default.removeItem(at: dir) }
        let output = dir.appendingPathComponent("big.ndjson").path
        let child = try ChildProcess.start(generator, ["50000000", "--output", output])
        func partials() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).filter { $0.contains(".partial-") }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while partials().isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(!partials().isEmpty, "the run wrote nothing aside")
        child.kill(signal)
        let ended = child.wait()
        #expect(!ended.exited && ended.code == signal, "\(ended)")
        #expect(partials().isEmpty, "\(partials())")
        #expect(!FileManager.default.fileExists(atPath: output))
    }
}
