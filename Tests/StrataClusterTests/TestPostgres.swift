import Foundation
import Strata
import StrataTestSupport
import Synchronization
@testable import StrataCluster

/// Private PostgreSQL servers for the cluster tests, started with `Tools/postgres` (initdb in a
/// temporary directory as a non-root user, 127.0.0.1 only, a free port) and stopped when the test
/// process exits. One server is shared by the tests, each in a database of its own; a test that
/// restarts or stops its server starts one of its own.
final class TestPostgres: Sendable {
    let directory: String
    let port: Int
    let bin: String

    private init(directory: String, port: Int, bin: String) {
        self.directory = directory
        self.port = port
        self.bin = bin
    }

    /// The server the tests share.
    static func shared() async throws -> TestPostgres { try await onOwnThread { try sharedServer.get() } }
    private static let sharedServer = Result { try TestPostgres.startBlocking() }

    /// Starts a new server, stopped at exit (or by ``stop()``).
    static func start() async throws -> TestPostgres { try await onOwnThread { try startBlocking() } }

    private static func startBlocking() throws -> TestPostgres {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("strata-pg-\(UUID().uuidString)").path
        let result = try spawn(repositoryRoot.appendingPathComponent("Tools/postgres").path, ["start", directory])
        guard result.status == 0, let url = result.stdout.split(separator: "\n").last.map(String.init),
              let port = URLComponents(string: url)?.port else {
            throw ClusterError(.unavailable, "Tools/postgres start failed (\(result.status)): \(result.stderr)")
        }
        let bin = try String(contentsOfFile: directory + "/bin", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        running.withLock { $0.append(directory) }
        registerStopAtExit
        return TestPostgres(directory: directory, port: port, bin: bin)
    }

    /// Servers to stop when the process exits.
    private static let running = Locked<[String]>([])
    private static let registerStopAtExit: Void = {
        atexit {
            for directory in TestPostgres.running.withLock({ $0 }) {
                _ = try? spawn(repositoryRoot.appendingPathComponent("Tools/postgres").path, ["stop", directory])
                try? FileManager.default.removeItem(atPath: directory)
            }
        }
    }()

    /// A new, empty database on this server.
    func freshDatabase() async throws -> ClusterAddress { try await onOwnThread { try self.freshDatabaseBlocking() } }

    private func freshDatabaseBlocking() throws -> ClusterAddress {
        let name = "strata_\(UUID().uuidString.prefix(8).lowercased())"
        try sql("CREATE DATABASE \(name)")
        return address(database: name)
    }

    /// Runs `statement` with psql in database `database`; returns its output (unaligned, no headers).
    @discardableResult
    func sql(_ statement: String, database: String = "postgres") throws -> String {
        let r = try spawn(bin + "/psql", ["-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", "\(port)",
                                                           "-U", "strata", "-d", database, "-c", statement])
        guard r.status == 0 else { throw ClusterError(.unavailable, "psql \(statement): \(r.stderr)") }
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func address(database: String) -> ClusterAddress {
        ClusterAddress(host: "127.0.0.1", port: port, user: "strata", database: database)
    }

    /// Stops the server (fast shutdown: open connections are cut).
    func stop() throws {
        let r = try spawn(repositoryRoot.appendingPathComponent("Tools/postgres").path, ["stop", directory])
        guard r.status == 0 else { throw ClusterError(.unavailable, "Tools/postgres stop: \(r.stderr)") }
    }

    /// Starts a stopped server again on its port (or restarts a running one).
    func restart() async throws { try await onOwnThread { try self.restartBlocking() } }

    private func restartBlocking() throws {
        let r = try spawn(repositoryRoot.appendingPathComponent("Tools/postgres").path, ["restart", directory])
        guard r.status == 0 else { throw ClusterError(.unavailable, "Tools/postgres restart: \(r.stderr)") }
    }
}

/// Runs `executable` (``ChildProcess``), its output in temporary files rather than pipes, and
/// waits for it: `Tools/postgres` leaves a server running that would keep a pipe open. The
/// status is the exit code, or 128 + the signal's number.
func spawn(_ executable: String, _ arguments: [String]) throws -> ProcessResult {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-spawn-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let out = dir.appendingPathComponent("out").path, err = dir.appendingPathComponent("err").path
    let ended = try ChildProcess.start(executable, arguments, stdout: .file(out), stderr: .file(err)).wait()
    return ProcessResult(status: ended.exited ? ended.code : 128 + ended.code,
                         stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
                         stderr: (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
}

