import Foundation
import StrataTestSupport
import Testing

/// `Tools/postgres`, the private server the tests and the benchmark run, with the directories an
/// operator gives it.
@Suite struct PrivatePostgresScriptTests {
    static let script = repositoryRoot.appendingPathComponent("Tools/postgres").path

    /// A DIR with spaces, or relative to where the script runs, starts, restarts and stops: the
    /// socket directory went unquoted to the server (`invalid argument: "space"`), and a relative
    /// one was taken from inside the data directory. `stop` of a DIR no server was started in
    /// says so (exit 66), not `cat: DIR/bin: No such file`.
    @Test func aDirectoryWithSpacesOrARelativeOneStartsAndStops() async throws {
        let root = temporaryDirectory("postgres script")
        defer { try? FileManager.default.removeItem(at: root) }
        #expect(chmod(root.path, 0o755) == 0)
        for given in ["with spaces/pg dir", "relative"] {
            let started = try await run("/bin/sh", ["-c", "cd \"$0\" && exec \"$1\" start \"$2\"", root.path, Self.script, given])
            #expect(started.status == 0 && started.stdout.hasPrefix("postgres://strata@127.0.0.1:"),
                    "\(given): \(started.status) \(started.stderr)")
            let restarted = try await run("/bin/sh", ["-c", "cd \"$0\" && exec \"$1\" restart \"$2\"", root.path, Self.script, given])
            #expect(restarted.status == 0 && restarted.stdout == started.stdout, "\(given): \(restarted.stderr)")
            let stopped = try await run("/bin/sh", ["-c", "cd \"$0\" && exec \"$1\" stop \"$2\"", root.path, Self.script, given])
            #expect(stopped.status == 0, "\(given): \(stopped.stderr)")
        }
        let never = try await run(Self.script, ["stop", root.appendingPathComponent("never").path])
        #expect(never.status == 66 && never.stderr.contains("no server was started"), "\(never.stderr)")
    }

    /// On a machine with no server installed, `install` installs one (here: Debian's package is
    /// installed already, but the directory it is looked for in is given empty, so none is
    /// found after the install either, and that is said, exit 69). It ended at once, with exit 2
    /// and no word, before installing anything: the unmatched glob's failing `ls` ended the
    /// script under `pipefail`.
    @Test func installOnAMachineWithoutAServerGetsAsFarAsInstalling() async throws {
        let empty = temporaryDirectory("no postgres")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: empty) }
        var environment = ProcessInfo.processInfo.environment
        environment["STRATA_POSTGRES_ROOT"] = empty.path
        let r = try await run(Self.script, ["install"], environment: environment)
        #expect(r.status == 69, "\(r.status): \(r.stderr)")
        #expect(r.stderr.contains("installing Debian's postgresql"), "\(r.stderr)")
        #expect(r.stderr.contains("no PostgreSQL server after installing"), "\(r.stderr)")
    }

    /// A DIR under a directory the server's user cannot enter (a repository in root's 0700 home)
    /// is refused at once, saying so (exit 77), and nothing is left; it failed in initdb with
    /// "permission denied" (exit 70), leaving the directory.
    @Test func aDirectoryTheServersUserCannotReachIsRefusedClearly() async throws {
        let root = temporaryDirectory("postgres closed")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        #expect(chmod(root.path, 0o700) == 0)
        let dir = root.appendingPathComponent("pg").path
        let r = try await run(Self.script, ["start", dir])
        #expect(r.status == 77, "\(r.status): \(r.stderr)")
        #expect(r.stderr.contains("cannot reach"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir))
    }

    /// A started server listens on a port below the kernel's range of ephemeral ports, picked by
    /// the script itself (it asked python3, which a fresh machine may not have).
    @Test func aServerGetsAPortOutsideTheEphemeralRange() async throws {
        let root = temporaryDirectory("postgres port")
        defer { try? FileManager.default.removeItem(at: root) }
        let dir = root.appendingPathComponent("pg").path
        let started = try await run(Self.script, ["start", dir])
        #expect(started.status == 0, "\(started.stderr)")
        defer { _ = try? runBlocking(Self.script, ["stop", dir]) }
        let port = Int(started.stdout.split(separator: ":").last?.split(separator: "/").first ?? "") ?? 0
        #expect((20_000..<32_000).contains(port), "\(started.stdout)")
    }
}
