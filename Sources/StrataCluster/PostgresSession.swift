import Foundation
import Logging
import PostgresNIO
import Strata
import Synchronization

/// One PostgreSQL connection used synchronously, from threads that are neither NIO's event loops
/// nor Swift's cooperative pool (a store's writer queue, a replica's follower thread, the dispatch
/// queues of ``offPool(_:_:)``): each call blocks its thread until PostgreSQL answers or
/// ``deadline`` passes. Connects on first use and again after the connection broke, except inside
/// a transaction (``transaction(_:)``), which fails instead; calls are serialized.
final class PostgresSession: Sendable {
    /// How long one statement may take before the connection is closed under it (and the
    /// statement counts as broken): a network that drops packets silently must not hold a
    /// replica's writer, and with it the store's write lock, for ever. PostgreSQL's own
    /// `statement_timeout` is set to the same.
    static let deadline: TimeAmount = .seconds(15)
    /// PostgreSQL's `statement_timeout` (and `idle_in_transaction_session_timeout`) for every
    /// session: below the client's ``deadline``, so that PostgreSQL's cancel (nothing done)
    /// comes first.
    static let serverTimeoutMilliseconds = Int(deadline.nanoseconds / 1_000_000) - 1_000

    /// The cluster's own event loop, for every connection: not NIO's shared singleton, whose loops
    /// a server built on NIO runs its handlers on; a handler blocked in `saveAndWait` would then
    /// hold the loop the save's append is answered on. Lives as long as the process.
    static let eventLoops = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    let address: ClusterAddress
    private let logger: Logger
    /// The cluster every new connection must find in the database (nil: not checked), so that a
    /// replica never appends to another cluster's log behind the same URL (a database restored
    /// from another cluster's backup, a URL edited to point elsewhere).
    let expectedCluster: String?

    private struct State {
        var connection: PostgresConnection?
        /// Inside BEGIN … COMMIT: a broken connection fails the transaction, never reconnects.
        var inTransaction = false
        /// After ``close()``: every call fails, nothing reconnects.
        var closed = false
    }
    /// Locks are the core's pthread `Locked` (the thread sanitizer sees them; it does not see
    /// `Synchronization.Mutex`'s futex on Linux).
    private let state = Locked(State())
    /// Serializes calls: a connection runs one statement at a time.
    private let calls = Locked<Void>(())
    private let nextID = Atomic<Int>(1)

    init(address: ClusterAddress, logger: Logger, expectedCluster: String? = nil) {
        self.address = address
        self.logger = logger
        self.expectedCluster = expectedCluster
    }

    /// A session released without ``close()`` closes its connection (postgres-nio requires a
    /// connection to be closed before it is released).
    deinit {
        if let conn = state.withLock({ $0.connection }) { closeWithoutWaiting(conn) }
    }

    /// How a failed statement ended.
    enum Failure: Error {
        /// Nothing was sent: the connection could not be made, or the session is closed.
        case notConnected(String)
        /// PostgreSQL refused the statement (an SQL error): it did nothing, unless it was a
        /// procedure that had committed before the error (see ``SharedLog``).
        case refused(sqlState: String, message: String)
        /// The connection broke, or the server ended it, while the statement ran: it may or may
        /// not have taken effect.
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
        do {
            return try calls.withLock { _ -> PostgresQueryResult in try runLocked(query) }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw .broken("PostgreSQL at \(address): \(Self.describe(error))")
        }
    }

    /// ``run(_:)`` with ``calls`` held.
    private func runLocked(_ query: PostgresQuery) throws(Failure) -> PostgresQueryResult {
        let conn = try connected()
        do {
            return try Self.answer(conn, query, logger: logger)
        } catch let e as PSQLError where e.code == .server {
            let sqlState = e.serverInfo?[.sqlState] ?? "?"
            let message = e.serverInfo?[.message] ?? "\(e)"
            let severity = e.serverInfo?[.severity] ?? ""
            // The server ending the session (FATAL, an administrator's shutdown, class 57) or a
            // connection failure (class 08) says nothing of whether the statement committed.
            // 57014 is a statement cancelled by `statement_timeout`: refused, nothing done (but
            // what a procedure committed before).
            if severity == "FATAL" || severity == "PANIC" || (sqlState.hasPrefix("57") && sqlState != "57014")
                || sqlState.hasPrefix("08") {
                drop(conn)
                throw .broken("PostgreSQL at \(address) ended the session: \(message) (SQLSTATE \(sqlState))")
            }
            throw .refused(sqlState: sqlState, message: message)
        } catch {
            drop(conn)
            throw .broken("PostgreSQL at \(address): the connection broke: \(Self.describe(error))")
        }
    }

    /// Runs `query` on `conn` and waits for its rows until ``deadline``. The deadline fails the
    /// wait itself (the first completion of the promise wins) and closes the connection: one that
    /// the server ended while it was idle was seen to leave its next query waiting for ever.
    static func answer(_ conn: PostgresConnection, _ query: PostgresQuery,
                       logger: Logger) throws -> PostgresQueryResult {
        let answer = conn.eventLoop.makePromise(of: PostgresQueryResult.self)
        conn.query(query, logger: logger).cascade(to: answer)
        let timeout = conn.eventLoop.scheduleTask(in: deadline) {
            answer.fail(DeadlinePassed(seconds: deadline.nanoseconds / 1_000_000_000))
            closeWithoutWaiting(conn)
        }
        defer { timeout.cancel() }
        return try answer.futureResult.wait()
    }

    /// Runs `body` between BEGIN and COMMIT on one connection (ROLLBACK when it throws). A
    /// connection that breaks meanwhile fails the transaction: its later statements never run on
    /// a new connection outside it. A COMMIT whose answer is lost throws ``Failure/broken(_:)``.
    func transaction<R>(begin: PostgresQuery = "BEGIN", _ body: () throws -> R) throws -> R {
        _ = try run(begin)
        state.withLock { $0.inTransaction = true }
        defer { state.withLock { $0.inTransaction = false } }
        let result: R
        do {
            result = try body()
        } catch {
            do {
                _ = try run("ROLLBACK")
            } catch {
                // A connection left inside a failed transaction would refuse every later
                // statement: the next call connects again instead. (A broken one is gone already.)
                if let conn = state.withLock({ $0.connection }) { drop(conn) }
            }
            throw error
        }
        _ = try run("COMMIT")
        return result
    }

    /// Runs `body` with the session's connection held (for LISTEN: the caller keeps the
    /// connection until it breaks).
    func withConnection<R>(_ body: (PostgresConnection) throws -> R) throws -> R {
        try calls.withLock { _ in try body(try connected()) }
    }

    /// Closes the connection without waiting for it, after the statement running now (if any);
    /// every later call fails with ``Failure/notConnected(_:)``.
    func close() {
        let conn = calls.withLock { _ in
            state.withLock { s -> PostgresConnection? in
                defer {
                    s.connection = nil
                    s.closed = true
                }
                return s.connection
            }
        }
        if let conn {
            closeWithoutWaiting(conn)
        }
    }

    private func connected() throws(Failure) -> PostgresConnection {
        let (existing, inTransaction, closed) = state.withLock { ($0.connection, $0.inTransaction, $0.closed) }
        if closed { throw .notConnected("the connection to PostgreSQL at \(address) is closed") }
        if let existing, !existing.isClosed { return existing }
        if inTransaction {
            throw .broken("the connection to PostgreSQL at \(address) broke during a transaction")
        }
        let id = nextID.add(1, ordering: .relaxed).oldValue
        var configuration = address.configuration
        let serverTimeoutMs = "\(Self.serverTimeoutMilliseconds)"
        // Appends rely on READ COMMITTED (see SharedLog), whatever the database's default.
        configuration.options.additionalStartupParameters = [
            ("default_transaction_isolation", "read committed"),
            ("statement_timeout", serverTimeoutMs),
            // A client that stops answering inside a transaction (a replica waiting its turn holds
            // the cluster's head row, which every machine's append needs) loses it, and its locks,
            // after as long: not after TCP keepalive's hours.
            ("idle_in_transaction_session_timeout", serverTimeoutMs),
        ]
        do {
            let conn = try PostgresConnection.connect(on: Self.eventLoops.next(),
                                                      configuration: configuration, id: id,
                                                      logger: logger).wait()
            if let expectedCluster {
                let found: String?
                do {
                    found = try Self.answer(conn, "SELECT cluster_id FROM strata_cluster", logger: logger)
                        .first?.decode(String.self)
                } catch {
                    // A connection is closed before it is let go, whatever happened to it.
                    closeWithoutWaiting(conn)
                    throw error
                }
                guard found == expectedCluster else {
                    closeWithoutWaiting(conn)
                    throw ClusterError(.wrongStore, """
                        the database at \(address) holds cluster \(found ?? "none"), \
                        not this replica's \(expectedCluster)
                        """)
                }
            }
            do {
                try Self.requireDurableCommits(conn, logger: logger)
            } catch {
                closeWithoutWaiting(conn)
                throw error
            }
            state.withLock { $0.connection = conn }
            return conn
        } catch let e as ClusterError {
            throw .notConnected(e.reason)
        } catch {
            throw .notConnected("cannot connect to PostgreSQL at \(address): \(Self.describe(error))")
        }
    }

    /// Turns `synchronous_commit` on for the session when the database or role set it `off`
    /// (a common tuning): a commit would then be answered before PostgreSQL's log is flushed,
    /// and a save acknowledged on that answer could be lost by a crash of the server. Any other
    /// setting (`local`, `remote_write`, `on`, `remote_apply`) flushes at least the server's own
    /// log first and is left as the administrator chose it.
    static func requireDurableCommits(_ conn: PostgresConnection, logger: Logger) throws {
        let setting = try answer(conn, "SELECT current_setting('synchronous_commit')", logger: logger)
            .first?.decode(String.self)
        if setting == "off" { _ = try answer(conn, "SET synchronous_commit = on", logger: logger) }
    }

    private func drop(_ conn: PostgresConnection) {
        state.withLock { s in
            if s.connection === conn { s.connection = nil }
        }
        closeWithoutWaiting(conn)
    }

    /// A PostgreSQL or NIO error in words (PSQLError's own description hides the server's message).
    static func describe(_ error: Error) -> String {
        if let e = error as? PSQLError {
            if let message = e.serverInfo?[.message] { return message }
            let words = words(for: e.code)
            // The error under it in its own words (postgres-nio's description of a PSQLError
            // is a fixed sentence that says nothing).
            if let underlying = e.underlying { return "\(words): \(describe(underlying))" }
            return words
        }
        // A connection that failed (NIO's errors name the errno deep inside their text): the
        // system's words for it.
        let text = "\(error)"
        if let r = text.range(of: "errno: "), let code = Int32(String(text[r.upperBound...].prefix { $0.isNumber })) {
            return String(cString: strerror(code))
        }
        return text
    }

    /// What a postgres-nio error code means, for people.
    static func words(for code: PSQLError.Code) -> String {
        switch code {
        case .clientClosedConnection: "the connection was closed"
        case .serverClosedConnection: "the server closed the connection"
        case .connectionError: "the connection failed"
        case .uncleanShutdown: "the connection ended without a proper close"
        case .sslUnsupported: "the server does not take SSL connections"
        case .authMechanismRequiresPassword: "the server asks for a password, and the URL gives none"
        case .unsupportedAuthMechanism: "the server asks for an authentication method this client does not support"
        case .saslError: "the authentication failed"
        case .queryCancelled: "the statement was cancelled"
        case .messageDecodingFailure, .unexpectedBackendMessage: "the server's answer could not be read"
        default: "\(code)"
        }
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
                _ = try Self.answer(conn, PostgresQuery(unsafeSQL: "LISTEN \(channel)"), logger: logger)
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

/// A statement that did not answer within ``PostgresSession/deadline``.
struct DeadlinePassed: Error, CustomStringConvertible {
    let seconds: Int64
    var description: String { "no answer within \(seconds) s" }
}

/// Closes `conn` without waiting, keeping it alive until the close completes (postgres-nio
/// asserts that a connection is closed before it is released).
func closeWithoutWaiting(_ conn: PostgresConnection) {
    let closing: EventLoopFuture<Void> = conn.close()
    closing.whenComplete { _ in withExtendedLifetime(conn) {} }
}
