import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The kill -9 loops during compaction and migration, short (`Tools/kill-loop 200 --during
/// compact|migrate` is the long run): small templates, a handful of kills each, checked by the
/// harness's parent mode (old or new store, never a mix; only the live generation left after the
/// open; verify(); a new save). And what a killed migration leaves outside the store.
///
/// Needs the child program: `swift build --package-path Tools/reliability --scratch-path
/// Tools/reliability/.build --product strata-crash-child` (Tools/test does it).
@Suite(.serialized) struct KilledMaintenanceTests {
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first (see the suite's comment)"))
    func killedCompactionsLeaveTheOldOrTheNewStore() async throws {
        try await shortLoop("compact")
    }

    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first (see the suite's comment)"))
    func killedMigrationsLeaveTheOldOrTheNewStore() async throws {
        try await shortLoop("migrate")
    }

    func shortLoop(_ operation: String) async throws {
        let dir = temporaryDirectory("kill-during-\(operation)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await runCrashChild("parent", ["--during", operation, "--iterations", "6", "--records", "3000", "--history", "300",
                                             "--calibration-runs", "1", "--seed", "5", "--hold-first-ms", "2000",
                                             "--workdir", dir.appendingPathComponent("work").path])
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr.suffix(2000))")
        #expect(r.stdout.contains("violations:                      0"), "\(r.stdout)")
        // At least one kill came while the operation ran (after the child said it started, before
        // it returned): otherwise no interrupted one was checked. Each variant's first child is
        // held in its first progress event and killed there (`--hold-first-ms`): the seeded
        // moments of the others, timed against one uninterrupted run, could all land after the
        // return on a loaded machine. The harness counts the kills by the child's last progress
        // line, "    PHASE: OLD / NEW".
        let lines = r.stdout.split(separator: "\n").map(String.init)
        let table = try #require(lines.firstIndex { $0.contains("by the child's last progress line") }, "\(r.stdout)")
        var duringTheOperation = 0
        for line in lines[(table + 1)...] {
            guard line.hasPrefix("    "), let colon = line.lastIndex(of: ":") else { break }
            let phase = line[..<colon].trimmingCharacters(in: .whitespaces)
            let counts = line[line.index(after: colon)...].split(separator: "/").compactMap {
                Int($0.trimmingCharacters(in: .whitespaces))
            }
            if !["starting (before READY)", "returned", "closed"].contains(phase) { duringTheOperation += counts.reduce(0, +) }
        }
        #expect(duringTheOperation > 0, "no kill came while the \(operation) ran: \(r.stdout)")
        #expect(r.stdout.contains("kills of a child held in its first progress event: 2"), "\(r.stdout)")
        print(r.stdout)
    }

    /// A migration keeps the old-schema state in a scratch LMDB environment, removed when it
    /// closes. A SIGKILL skips that, so the scratch lives in the store directory (`.scratch-…`),
    /// which the next open cleans: a killed migration leaves nothing in TMPDIR (a copy there would
    /// be 17 MB for a 40,000-record library, and an app killed mid-migration at every launch would
    /// fill the disk).
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first (see the suite's comment)"))
    func killedMigrationLeavesNoScratchBehind() async throws {
        let dir = temporaryDirectory("kill-migrate-scratch")
        defer { try? FileManager.default.removeItem(at: dir) }
        let tmp = dir.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: tmp, withIntermediateDirectories: true)
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let store = dir.appendingPathComponent("store")
        try await makeV1TrackStore(at: store, schema: all[0])
        let out = dir.appendingPathComponent("out")
        // Held in its first progress event, so the kill finds it mid-way (a small store's migration
        // could finish between the line and the kill on an idle machine).
        let child = try spawn(try #require(crashChildPath), ["migrate", "--store", store.path, "--hold-ms", "60000"], stdout: out,
                                             environment: ["STRATA_ROOT": repositoryRoot.path, "TMPDIR": tmp.path])
        // The scratch exists once the first phase is reported.
        #expect(try await waitForLine(out, prefix: "PHASE") != nil)
        child.kill()
        #expect(!child.wait().exited, "the migration finished before the kill: \(completeLines(out).suffix(2))")
        // The next open cleans the store directory (the unfinished generation goes)…
        let reopened = try Store.openExisting(at: store)
        #expect(reopened.schema.version == 1)
        reopened.close()
        let live = try FileManager.default.destinationOfSymbolicLink(atPath: store.path + "/current")
        let names = try FileManager.default.contentsOfDirectory(atPath: store.path).sorted()
        #expect(names == [StoreDirectory.currentLink, live, StoreDirectory.lockFile].sorted(), "\(names)")
        // …and nothing of the killed migration may stay in its temporary directory.
        let left = try FileManager.default.contentsOfDirectory(atPath: tmp.path)
        #expect(left.isEmpty, "left in TMPDIR by the killed migration: \(left)")
    }
}
