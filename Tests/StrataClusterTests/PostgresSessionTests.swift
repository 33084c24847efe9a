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
}
