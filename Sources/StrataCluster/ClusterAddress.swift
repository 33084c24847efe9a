import Foundation
import PostgresNIO
import Strata

/// Where a cluster's PostgreSQL database is: a `postgres://` URL, given on the command line or,
/// to keep a password out of process lists, in the environment variable
/// ``ClusterAddress/environmentVariable``.
public struct ClusterAddress: Sendable, Equatable, CustomStringConvertible {
    /// The environment variable read when no URL is given: `STRATA_POSTGRES_URL`.
    public static let environmentVariable = "STRATA_POSTGRES_URL"

    /// The server's host name or address.
    public var host: String
    /// The server's port (5432 unless given).
    public var port: Int
    /// The PostgreSQL role to connect as.
    public var user: String
    /// Its password, when the server asks for one.
    public var password: String?
    /// The database holding the cluster's tables.
    public var database: String

    /// An address from its parts.
    public init(host: String, port: Int = 5432, user: String, password: String? = nil, database: String) {
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
    }

    /// Parses `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (also `postgresql://`).
    /// Percent-escapes in the user and password are decoded.
    ///
    /// - Throws: ``ClusterError`` (``ClusterError/Kind/badAddress``) naming what is missing or wrong,
    ///   never the password.
    public init(url text: String) throws {
        func bad(_ reason: String) -> ClusterError {
            ClusterError(.badAddress, "the PostgreSQL URL \(Self.redacted(text)) \(reason)")
        }
        guard !text.isEmpty else { throw ClusterError(.badAddress, "the PostgreSQL URL is empty") }
        // Spaces around it (a copied line, a variable set with a trailing blank) are refused as
        // the mistake they are: a database name ending in a space would be looked for, and its
        // absence read as a temporary failure.
        guard text.first?.isWhitespace == false, text.last?.isWhitespace == false else {
            throw bad("starts or ends with a space")
        }
        // The authority (between `scheme://` and the path) read by hand first: Foundation takes
        // some malformed ones, which then failed only when connecting, as if the server were down.
        if let start = text.range(of: "://")?.upperBound {
            let authority = text[start...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
            if authority.filter({ $0 == "@" }).count > 1 {
                throw bad("has more than one `@` before the host (an `@` in the user or password is written `%40`)")
            }
            let hostAndPort = authority.split(separator: "@", omittingEmptySubsequences: false).last ?? ""
            if hostAndPort.hasSuffix(":") { throw bad("has an empty port (postgres://USER@HOST:PORT/DB)") }
            if hostAndPort.contains(",") { throw bad("names several hosts; Strata connects to one") }
            // Foundation takes a malformed escape (`%zz`) as the characters written.
            func wellEscaped(_ part: Substring) -> Bool {
                let bytes = Array(part.utf8)
                var i = 0
                while i < bytes.count {
                    if bytes[i] == UInt8(ascii: "%") {
                        let hex = { (b: UInt8) in (b >= 48 && b <= 57) || (b | 0x20 >= 97 && b | 0x20 <= 102) }
                        guard i + 2 < bytes.count, hex(bytes[i + 1]), hex(bytes[i + 2]) else { return false }
                        i += 3
                    } else {
                        i += 1
                    }
                }
                return true
            }
            if !wellEscaped(text[start...]) {
                throw bad("has a malformed percent-escape (`%` is followed by two hexadecimal digits; `%25` is a `%`)")
            }
        }
        guard let components = URLComponents(string: text) else {
            throw bad("is not a URL (a `#`, `/`, `?` or `@` in the user or password is written percent-encoded: " +
                      "`%23`, `%2F`, `%3F`, `%40`)")
        }
        guard let scheme = components.scheme, scheme == "postgres" || scheme == "postgresql" else {
            throw bad("does not start with postgres://")
        }
        guard let host = components.host, !host.isEmpty else { throw bad("names no host") }
        guard let user = components.user, !user.isEmpty else { throw bad("names no user (postgres://USER@HOST/DB)") }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty else { throw bad("names no database (postgres://USER@HOST/DB)") }
        guard !database.contains("/") else {
            throw bad("has a path of more than a database name (postgres://USER@HOST/DB)")
        }
        if let port = components.port, !(1...65535).contains(port) { throw bad("has port \(port), not 1–65535") }
        if components.query != nil { throw bad("has query parameters, which Strata does not read") }
        if components.fragment != nil { throw bad("has a fragment (#…), which Strata does not read") }
        // An IPv6 literal is written in brackets in a URL (`[::1]`); the address is without them.
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard !bare.isEmpty else { throw bad("names no host") }
        // A NUL (`%00`) cannot reach PostgreSQL, whose protocol ends each of these strings with
        // one. (Every escape is well formed: checked above.)
        let plainUser = components.percentEncodedUser?.removingPercentEncoding ?? user
        let password = components.percentEncodedPassword?.removingPercentEncoding
        for (part, plain) in [("user", plainUser), ("password", password ?? ""), ("database name", database),
                              ("host", bare)] where plain.unicodeScalars.contains("\u{0}") {
            throw bad("has a NUL character (`%00`) in the \(part)")
        }
        self.init(host: bare, port: components.port ?? 5432, user: plainUser, password: password, database: database)
    }

    /// The address from `url` when given, else from ``environmentVariable``.
    ///
    /// - Throws: ``ClusterError`` when neither is set or the URL is malformed.
    public static func resolve(_ url: String?, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws -> ClusterAddress {
        if let url { return try ClusterAddress(url: url) }
        guard let fromEnvironment = environment[environmentVariable], !fromEnvironment.isEmpty else {
            throw ClusterError(.badAddress, """
                no PostgreSQL URL: pass --postgres postgres://USER@HOST:PORT/DB or set \(environmentVariable)
                """)
        }
        do {
            return try ClusterAddress(url: fromEnvironment)
        } catch var e as ClusterError {
            // Said where it came from: nothing on the command line shows it.
            e.reason = "\(environmentVariable): \(e.reason)"
            throw e
        }
    }

    /// The database as a making of a cluster marks its first replica with (host, port and
    /// name; no user or password: another login to it is the same database).
    var identity: String { "\(hostInURL):\(port)/\(database)" }

    /// The host as a URL writes it: an IPv6 literal in brackets.
    private var hostInURL: String { host.contains(":") ? "[\(host)]" : host }

    /// The URL without its password, as messages show it: each part cut as input is
    /// (``EchoedText/shown(_:)``), so that a huge name is not echoed whole.
    public var description: String {
        "postgres://\(EchoedText.shown(Self.encodedUser(user)))@\(EchoedText.shown(hostInURL)):\(port)/" +
            EchoedText.shown(database)
    }

    /// A user name as a URL writes it: the characters that end or split its user part
    /// percent-encoded, so that the URL a message shows is one that reads back as this address.
    private static func encodedUser(_ user: String) -> String {
        var allowed = CharacterSet.urlUserAllowed
        allowed.remove(charactersIn: "@:/?#%")
        return user.addingPercentEncoding(withAllowedCharacters: allowed) ?? user
    }

    /// `text` with its password replaced by `***`, cut as input is (``EchoedText/shown(_:)``).
    /// Found by hand, not by parsing: a password holding a `#`, `/` or `?` (not percent-encoded)
    /// makes a URL parse otherwise (`postgres://s:12#34@h/db` as the host `s`, port 12 and a
    /// fragment), and parsed it was echoed whole. What comes after `scheme://` (or from the start,
    /// for text without one) and before the last `@` is the user and password: everything in it
    /// after the first `:` is the password.
    ///
    /// Without any `@`, a URL is malformed (it names no user), and what follows a `:` before the
    /// path may be a password whose `USER:` was written without its `@HOST` (`postgres://strata:
    /// hunter2/db`), or taken for a port: it is replaced too, up to the path.
    static func redacted(_ text: String) -> String {
        var shown = text
        let start = text.range(of: "://")?.upperBound ?? text.startIndex
        if let at = text[start...].lastIndex(of: "@") {
            if let colon = text[start..<at].firstIndex(of: ":") {
                shown = String(text[..<text.index(after: colon)]) + "***" + String(text[at...])
            }
        } else if text.range(of: "://") != nil {
            let end = text[start...].firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? text.endIndex
            if let colon = text[start..<end].firstIndex(of: ":") {
                shown = String(text[..<text.index(after: colon)]) + "***" + String(text[end...])
            }
        }
        return EchoedText.shown(shown)
    }

    var configuration: PostgresConnection.Configuration {
        var config = PostgresConnection.Configuration(host: host, port: port, username: user, password: password,
                                                      database: database, tls: .disable)
        config.options.connectTimeout = .seconds(10)
        return config
    }
}

/// What went wrong in a cluster operation, with where and why.
public struct ClusterError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure it is.
    public enum Kind: Sendable, Equatable {
        /// The PostgreSQL URL is missing or malformed.
        case badAddress
        /// An argument is outside its documented range: a poll interval, or a replica name with a
        /// NUL character (``ClusterReplica/open(store:address:name:pollInterval:)``).
        case badArgument
        /// PostgreSQL cannot be reached, or a statement failed for a reason that may pass (a
        /// connection lost, a lock or statement timeout, the server shutting down).
        case unavailable
        /// PostgreSQL refused a statement for a reason trying again does not change: a privilege
        /// the role lacks, a table of a cluster's name that is not a cluster's.
        case refused
        /// The database holds no cluster (run `storectl cluster init`).
        case noCluster
        /// The database already holds a cluster (`storectl cluster init` on it again).
        case clusterExists
        /// The store does not belong to this cluster, or is not a replica.
        case wrongStore
        /// ``Cluster/join(at:address:configuration:name:)`` at a path that exists: a replica is made in
        /// a new directory.
        case storeExists
        /// A replica of the name a new one would take is in the cluster already
        /// (``Cluster/requireNameFree(_:address:)``): two would show as one in the status.
        case nameTaken
        /// No replica of that name is in the cluster (``Cluster/forget(replica:address:force:)``).
        case noSuchReplica
        /// ``Cluster/forget(replica:address:force:)`` of a replica seen in the last
        /// ``Cluster/recentlySeenSeconds``: it may be running, and would write its row again.
        case replicaActive
        /// A snapshot is missing, incomplete or fails its checksum.
        case badSnapshot
        /// The replica's machine went down while the replica was open with relaxed durability and
        /// commits not yet flushed (``Strata/Store/crashedWithUnsyncedCommits``): its file may hold
        /// part of a commit. Make a new replica (`storectl cluster join`).
        case mustRejoin
    }

    /// What kind of failure it is.
    public var kind: Kind
    /// What happened, for people (never a password).
    public var reason: String

    /// A failure of `kind`, explained by `reason`.
    public init(_ kind: Kind, _ reason: String) {
        self.kind = kind
        self.reason = reason
    }

    /// The reason.
    public var description: String { reason }
}
