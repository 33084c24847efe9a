import Foundation
import Strata
import StrataTestSupport
import Testing
@testable import StrataCluster

/// The PostgreSQL session under the cluster: what it does with connections that fail.
@Suite struct PostgresSessionTests {
    @Test func aConnectionWhoseClusterCheckFailsIsClosedAndReported() async throws {
        // A database with no cluster: the check's query fails after the connection was made (a
        // connection let go open there stopped the process: postgres-nio asserts on it).
        let address = try await TestPostgres.shared().freshDatabase()
        let outcome = try await onOwnThread { () -> String in
            let session = PostgresSession(address: address, logger: .init(label: "test"),
                                          expectedCluster: "some cluster")
            defer { session.close() }
            do {
                _ = try session.run("SELECT 1")
                return "connected"
            } catch {
                return error.text
            }
        }
        #expect(outcome.contains("cannot connect"), "\(outcome)")
    }

    /// A database (or role) set to `synchronous_commit = off` would have a commit answered
    /// before PostgreSQL's log is flushed, and an acknowledged save lost with the server: the
    /// session turns it on for itself. Stronger settings are left as they are.
    @Test(arguments: ["off", "remote_apply"])
    func aSessionCommitsDurablyWhateverTheDatabaseSays(setting: String) async throws {
        let postgres = try await TestPostgres.shared()
        let address = try await postgres.freshDatabase()
        _ = try await onOwnThread {
            try postgres.sql("ALTER DATABASE \(address.database) SET synchronous_commit = \(setting)")
        }
        let seen = try await onOwnThread { () -> String? in
            let session = PostgresSession(address: address, logger: .init(label: "test"))
            defer { session.close() }
            return try session.run("SHOW synchronous_commit").first?.decode(String.self)
        }
        #expect(seen == (setting == "off" ? "on" : setting))
    }

    @Test func aClosedSessionRefusesStatementsWithoutReconnecting() async throws {
        let address = try await TestPostgres.shared().freshDatabase()
        let outcome = try await onOwnThread { () -> String in
            let session = PostgresSession(address: address, logger: .init(label: "test"))
            _ = try session.run("SELECT 1")
            session.close()
            do {
                _ = try session.run("SELECT 1")
                return "ran"
            } catch {
                return error.text
            }
        }
        #expect(outcome.contains("is closed"), "\(outcome)")
    }
    /// A server that refuses connections, and one that closes a session's connection under a
    /// statement: said in plain words (postgres-nio's texts were printed as they were:
    /// `connectionError: Connection errors: SingleConnectionFailure(…)` and "PSQLError – Generic
    /// description to prevent accidental leakage of sensitive data…").
    @Test func connectionFailuresAreSaidInPlainWords() async throws {
        // A port nobody listens on: one just released.
        let port: Int = try {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &a) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
                }
            }
            guard bound else { throw POSIXError(.EADDRINUSE) }
            return Int(UInt16(bigEndian: a.sin_port))
        }()
        let refused = try await onOwnThread { () -> String in
            let session = PostgresSession(address: ClusterAddress(host: "127.0.0.1", port: port, user: "strata",
                                                                  database: "postgres"),
                                          logger: .init(label: "test"))
            defer { session.close() }
            do { _ = try session.run("SELECT 1"); return "connected" } catch { return error.text }
        }
        #expect(refused.contains("Connection refused"), "\(refused)")
        #expect(!refused.contains("SingleConnectionFailure") && !refused.contains("errno"), "\(refused)")

        let address = try await TestPostgres.shared().freshDatabase()
        let server = try await TestPostgres.shared()
        // The server ends the connection under a running statement.
        let broken = try await onOwnThread { () -> String in
            let session = PostgresSession(address: address, logger: .init(label: "test"))
            defer { session.close() }
            let pid = try session.run("SELECT pg_backend_pid()").first?.decode(Int32.self) ?? 0
            // The backend is ended once the server shows it running the statement (not after a
            // fixed 0.3 s: a starved killer could let a short statement finish first).
            let killer = Thread {
                let deadline = ContinuousClock.now + .seconds(120)
                while ContinuousClock.now < deadline {
                    let running = (try? server.sql("SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid) " +
                                                    "AND state = 'active' AND query LIKE 'SELECT pg_sleep%'")) ?? ""
                    if running.trimmingCharacters(in: .whitespacesAndNewlines) == "1" { break }
                    Thread.sleep(forTimeInterval: 0.01)
                }
                _ = try? server.sql("SELECT pg_terminate_backend(\(pid))")
            }
            killer.start()
            do { _ = try session.run("SELECT pg_sleep(600)"); return "ran" } catch { return error.text }
        }
        #expect(broken != "ran", "the statement outlived its connection")
        #expect(broken.contains("terminating connection") || broken.contains("closed the connection"), "\(broken)")
        #expect(!broken.contains("Generic description") && !broken.contains("PSQLError"), "\(broken)")
    }

    /// An IPv6 literal in brackets is an address without them, and is shown in brackets.
    @Test func anIPv6LiteralIsReadWithoutItsBrackets() throws {
        let address = try ClusterAddress(url: "postgres://strata@[::1]:5433/db")
        #expect(address.host == "::1" && address.port == 5433 && address.database == "db")
        #expect("\(address)" == "postgres://strata@[::1]:5433/db")
        #expect(throws: ClusterError.self) { try ClusterAddress(url: "postgres://strata@[]:5433/db") }
    }

    /// What a URL holds that Strata does not read is refused by name (a fragment was dropped in
    /// silence; a path of two names was said to name no database); a bad URL from the environment
    /// says it came from there.
    @Test func aURLIsReadWholeOrRefusedSayingWhy() throws {
        for (url, reason) in [("postgres://s@h/db#frag", "has a fragment"),
                              ("postgres://s@h/db/extra", "has a path of more than a database name"),
                              ("postgres://s@h/", "names no database"),
                              ("postgres://s@h/db?sslmode=require", "has query parameters"),
                              // These were taken, and failed only when connecting, as a server down.
                              ("postgres://s@h1,h2/db", "names several hosts"),
                              ("postgres://s@h1:5432,h2:5433/db", "names several hosts"),
                              ("postgres://s@x@h/db", "more than one `@`"),
                              ("postgres://s:p@ss@h/db", "more than one `@`"),
                              ("postgres://s@h:/db", "has an empty port"),
                              ("postgres://s@[::1]:/db", "has an empty port"),
                              ("postgres://s%00x@h/db", "NUL character"),
                              ("postgres://s:p%00w@h/db", "NUL character"),
                              ("postgres://s@h/d%00b", "NUL character")] {
            #expect("\(url)") { try ClusterAddress(url: url) } throws: { error in
                (error as? ClusterError).map { $0.kind == .badAddress && $0.reason.contains(reason) } ?? false
            }
        }
        // A malformed percent-escape is refused (it was taken as written), whatever part holds it.
        for url in ["postgres://s%zz@h/db", "postgres://s:p%4@h/db", "postgres://s@h/d%g1b", "postgres://s%@h/db"] {
            #expect("\(url)") { try ClusterAddress(url: url) } throws: { error in
                (error as? ClusterError).map { $0.kind == .badAddress && $0.reason.contains("malformed percent-escape") } ?? false
            }
        }
        #expect { try ClusterAddress.resolve(nil, environment: [ClusterAddress.environmentVariable: " postgres://s@h/db"]) }
            throws: { error in (error as? ClusterError)?.reason.hasPrefix(ClusterAddress.environmentVariable + ": ") ?? false }
        #expect(try ClusterAddress.resolve(nil, environment: [ClusterAddress.environmentVariable: "postgres://s@h/db"])
            .database == "db")
        // An empty URL says so; a space around one is refused (a trailing one was read as part of
        // the database's name, whose absence counted as a temporary failure).
        #expect { try ClusterAddress(url: "") } throws: { ($0 as? ClusterError)?.reason == "the PostgreSQL URL is empty" }
        for url in ["postgres://s@h/db ", " postgres://s@h/db", "postgres://s@h/db\n"] {
            #expect { try ClusterAddress(url: url) } throws: { error in
                (error as? ClusterError).map { $0.kind == .badAddress && $0.reason.hasSuffix("starts or ends with a space") }
                    ?? false
            }
        }
        // A user written percent-encoded is shown so, a URL that reads back as the same address
        // (`str@ta` was shown as `postgres://str@ta@h…`).
        #expect(try ClusterAddress(url: "postgres://p%25c:a%2fb@h/d%25b").password == "a/b")
        let encoded = try ClusterAddress(url: "postgres://str%40ta@h:5433/db")
        #expect(encoded.user == "str@ta" && "\(encoded)" == "postgres://str%40ta@h:5433/db")
        #expect(try ClusterAddress(url: "\(encoded)") == encoded)
    }

    /// storectl refuses a malformed URL as a usage error (64), before connecting: a URL naming
    /// two hosts, with two `@`, an empty port or a NUL was taken and then failed to connect, which
    /// exited 75, the code of a server that may come back.
    @Test func storectlRefusesAMalformedURLAsAUsageError() async throws {
        let dir = temporaryDirectory("cluster-url")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s").path
        #expect(try await storectl(["init", path, "--schema", librarySchemaDirectory.path]).status == 0)
        for (url, reason) in [("postgres://s@127.0.0.1,127.0.0.2/db", "names several hosts"),
                              ("postgres://s@x@127.0.0.1/db", "more than one `@`"),
                              ("postgres://s@127.0.0.1:/db", "has an empty port"),
                              ("postgres://s%00@127.0.0.1/db", "NUL character")] {
            for command in ["init", "status", "join"] {
                let target = command == "join" ? dir.appendingPathComponent("new").path : path
                let r = try await storectl(["cluster", command, target, "--postgres", url])
                #expect(r.status == 64 && r.stderr.contains(reason), "\(command) \(url): \(r.status) \(r.stderr)")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("new").path))
    }

    /// A huge URL, or huge parts of one, are shown cut after 64 characters with their length in
    /// every message, as other input is; the message was as long as the URL. A password with a
    /// character a URL reserves says how to write it.
    @Test func aHugeURLIsShownCut() throws {
        let huge = String(repeating: "x", count: 100_000)
        for url in ["postgres://s@h/db?\(huge)", "postgres://s@h/\(huge)/more", "\(huge)://s@h/db"] {
            #expect { try ClusterAddress(url: url) } throws: { error in
                guard let e = error as? ClusterError else { return false }
                return e.reason.count < 400 && e.reason.contains("…(")
            }
        }
        let address = try ClusterAddress(url: "postgres://\(huge)@\(String(repeating: "h", count: 200)):5432/\(huge)")
        #expect("\(address)".count < 400, "\("\(address)".count) characters")
        #expect { try ClusterAddress(url: "postgres://s:pa#ss@h/db") } throws: { error in
            (error as? ClusterError)?.reason.contains("percent-encoded") ?? false
        }
        // A password that makes the URL parse otherwise (a port of its digits, a fragment) is
        // never shown: it was echoed whole.
        for url in ["postgres://s:12#34@h/db", "postgres://s:12/34@h/db", "postgres://s:pa?ss@h/db", "s:pa34ss@h/db"] {
            #expect(throws: ClusterError.self) { try ClusterAddress(url: url) }
            do { _ = try ClusterAddress(url: url) } catch let e as ClusterError {
                #expect(!e.reason.contains("34") && !e.reason.contains("ss@") && e.reason.contains("***"), "\(e.reason)")
            }
        }
        // A URL whose `USER:PASSWORD` lost its `@HOST`: what follows the `:` may be the password
        // (shown whole before, read as a host and a port).
        for url in ["postgres://strata:hunter2/library", "postgres://strata:123456/library"] {
            do {
                _ = try ClusterAddress(url: url)
                Issue.record("\(url) was taken")
            } catch let e as ClusterError {
                #expect(!e.reason.contains("hunter2") && !e.reason.contains("123456") && e.reason.contains("***"),
                        "\(e.reason)")
            }
        }
    }
}
