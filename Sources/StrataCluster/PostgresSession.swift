import Foundation
import Logging
import PostgresNIO
import Strata
import Synchronization

/// One PostgreSQL connection used synchronously, from threads that are neither NIO's event loops
/// nor Swift's cooperative pool (a store's writer queue, a replica's follower thread): each call
/// blocks its thread until PostgreSQL answers. Connects on first use and again after the
/// connection broke; calls are serialized.
final class PostgresSession: Sendable {
    let address: ClusterAddress
    private let logger: Logger
    private let connection = Mutex<PostgresConnection?>(nil)
    /// Serializes calls: a connection runs one statement at a time.
    private let calls = Mutex<Void>(())
    private let nextID = Atomic<Int>(1)

    /// The cluster every new connection must find in the database (nil: not checked), so that a
    /// replica never appends to another cluster's log behind the same URL (a database restored
    /// from another cluster's backup, a URL edited to point elsewhere).
    let expectedCluster: String?

    init(address: ClusterAddress, logger: Logger, expectedCluster: String? = nil) {
        self.address = address
        self.logger = logger
        self.expectedCluster = expectedCluster
    }

    /// How a failed statement ended.
    enum Failure: Error {
        /// The connection could not be made: nothing was sent.
        case notConnected(String)
        /// PostgreSQL refused the statement (an SQL error): it did nothing.
        case refused(sqlState: String, message: String)
        /// The connection broke while the statement ran: it may or may not have taken effect.
        case broken(String)

        var text: String {
            switch self {
            case .notConnected(let s), .broken(let s): return s
            case .refused(let state, let message): return "\(message) (SQLSTATE \(state))"
            }
        }
    }

    /// Runs `query`, returning its rows.
    func run(_ query: PostgresQuery) throws(Failure) -> PostgresQueryResult {
        try calls.withLock { _ throws(Failure) -> PostgresQueryResult in
            let conn = try connected()
            do {
                return try conn.query(query, logger: logger).wait()
            } catch let e as PSQLError where e.code == .server {
                let state = e.serverInfo?[.sqlState] ?? "?"
                let message = e.serverInfo?[.message] ?? "\(e)"
                throw .refused(sqlState: state, message: message)
            } catch {
                drop(conn)
                throw .broken("PostgreSQL at \(address): the connection broke: \(Self.describe(error))")
            }
        }
    }

    /// Runs `body` with the session's connection held (for LISTEN: the caller keeps the
    /// connection until it breaks).
    func withConnection<R>(_ body: (PostgresConnection) throws -> R) throws -> R {
        try calls.withLock { _ in try body(try connected()) }
    }

    /// Closes the connection (a later call opens a new one).
    func close() {
        let conn = connection.withLock { c -> PostgresConnection? in
            defer { c = nil }
            return c
        }
        if let conn {
            let closing: EventLoopFuture<Void> = conn.close()
            try? closing.wait()
        }
    }

    private func connected() throws(Failure) -> PostgresConnection {
        if let conn = connection.withLock({ $0 }), !conn.isClosed { return conn }
        let id = nextID.add(1, ordering: .relaxed).oldValue
        do {
            let conn = try PostgresConnection.connect(on: PostgresConnection.defaultEventLoopGroup.next(),
                                                      configuration: address.configuration, id: id,
                                                      logger: logger).wait()
            if let expectedCluster {
                let found = try conn.query("SELECT cluster_id FROM strata_cluster", logger: logger).wait()
                    .first?.decode(String.self)
                guard found == expectedCluster else {
                    let closing: EventLoopFuture<Void> = conn.close()
                    _ = closing
                    throw ClusterError(.wrongStore, """
                        the database at \(address) holds cluster \(found ?? "none"), not this replica's \(expectedCluster)
                        """)
                }
            }
            connection.withLock { $0 = conn }
            return conn
        } catch let e as ClusterError {
            throw .notConnected(e.reason)
        } catch {
            throw .notConnected("cannot connect to PostgreSQL at \(address): \(Self.describe(error))")
        }
    }

    private func drop(_ conn: PostgresConnection) {
        connection.withLock { c in
            if c === conn { c = nil }
        }
        let closing: EventLoopFuture<Void> = conn.close()
        _ = closing
    }

    /// A PostgreSQL or NIO error in words (PSQLError's own description hides the server's message).
    static func describe(_ error: Error) -> String {
        if let e = error as? PSQLError {
            if let message = e.serverInfo?[.message] { return message }
            if let underlying = e.underlying { return "\(e.code): \(underlying)" }
            return "\(e.code)"
        }
        return "\(error)"
    }
}

extension PostgresSession {
    /// Starts listening on `channel` with a handler that gets every notification; returns the
    /// connection listened on (listening ends when it breaks or closes).
    func listen(_ channel: String, _ handler: @escaping @Sendable () -> Void) throws(Failure) -> PostgresConnection {
        _ = try run("SELECT 1")
        do {
            return try withConnection { conn in
                conn.addListener(channel: channel) { _, _ in handler() }
                _ = try conn.query(PostgresQuery(unsafeSQL: "LISTEN \(channel)"), logger: Logger(label: "strata.cluster"))
                    .wait()
                return conn
            }
        } catch let f as Failure {
            throw f
        } catch {
            throw .broken("PostgreSQL at \(address): LISTEN failed: \(Self.describe(error))")
        }
    }
}

/// Runs blocking work (PostgreSQL calls, file copies) on a dispatch queue of its own, so that no
/// thread of Swift's cooperative pool waits for the network.
func offPool<R: Sendable>(_ label: String, _ body: @escaping @Sendable () throws -> R) async throws -> R {
    try await withCheckedThrowingContinuation { (c: CheckedContinuation<R, Error>) in
        DispatchQueue(label: "strata.cluster.\(label)").async { c.resume(with: Result { try body() }) }
    }
}
