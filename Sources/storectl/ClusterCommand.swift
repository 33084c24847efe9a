import ArgumentParser
import Foundation
import Strata
import StrataCluster

/// The PostgreSQL URL option of the cluster commands and of the commands that write to a replica.
struct PostgresOption: ParsableArguments {
    @Option(help: ArgumentHelp(
        "The cluster's PostgreSQL database, postgres://USER[:PASSWORD]@HOST[:PORT]/DB (default: the " +
        "\(ClusterAddress.environmentVariable) environment variable, which keeps a password out of process lists).",
        valueName: "url"))
    var postgres: String?

    func address() throws -> ClusterAddress {
        do { return try ClusterAddress.resolve(postgres) } catch { throw failure(error) }
    }
}

/// What every `storectl cluster` subcommand takes: the store (an existing one, or for `join` a
/// new one), the cluster's database, `--json`.
struct ClusterArguments<Location: ParsableArguments & StoreLocation>: ParsableArguments {
    @OptionGroup var target: Location
    @OptionGroup var connection: PostgresOption
    @Flag(help: "Print the cluster's status as JSON.") var json = false

    var url: URL { target.url }
    var configuration: StoreConfiguration { target.configuration }
}

struct ClusterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cluster",
        abstract: "Run a store on several machines: one log in PostgreSQL, a local replica on each machine.",
        discussion: """
        init makes the cluster from an existing store (which becomes its first replica); join makes a \
        replica on another machine from the cluster's latest snapshot; status shows the log's head, \
        the replicas and the retention horizon; compact publishes a new snapshot and trims the log \
        behind it; reset starts a replica behind the horizon again from the latest snapshot; forget \
        removes a replica that is gone from the status (its name is free again). Commands \
        that write (import, migrate) write a replica's saves through the cluster.

        Examples:
          STRATA_POSTGRES_URL=postgres://strata@db.internal/library storectl cluster init ./library.strata
          STRATA_POSTGRES_URL=postgres://strata@db.internal/library storectl cluster join ./library.strata
          storectl cluster status ./library.strata --json
        """,
        subcommands: [ClusterInitCommand.self, ClusterJoinCommand.self, ClusterStatusCommand.self,
                      ClusterCompactCommand.self, ClusterResetCommand.self, ClusterForgetCommand.self]
    )

    /// `storectl cluster` alone: a usage error (exit 64), as every command without its arguments.
    func run() throws {
        note("storectl: error: Missing subcommand: init, join, status, compact, reset or forget\n\n\(Storectl.helpMessage(for: Self.self))")
        throw ExitCode(Exit.usage)
    }
}

struct ClusterInitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create a cluster in a PostgreSQL database from an existing store, its first replica.",
        discussion: """
        Creates the strata_* tables, publishes the store's state as the starting snapshot, and makes \
        the store a replica (its saves go through the cluster from then on). Refuses (exit 73) when \
        the database already holds a cluster, and (exit 75) while another process has the store open. \
        Prints the cluster's status afterwards (--json: as `cluster status --json`).

        Example:
          STRATA_POSTGRES_URL=postgres://strata@db.internal/library storectl cluster init ./library.strata
        """
    )

    @OptionGroup var cluster: ClusterArguments<StoreArgument>
    @Option(help: ArgumentHelp("This replica's name in the cluster (default: host:store path).", valueName: "name"))
    var name: String?

    func run() async throws {
        let address = try cluster.connection.address()
        let store: Store
        do { store = try Store.openExisting(at: cluster.url, configuration: cluster.configuration) } catch {
            throw failure(error)
        }
        defer { store.close() }
        do {
            let status = try await Cluster.initialize(store: store, address: address, name: name)
            printStatus(status, json: cluster.json)
        } catch { throw failure(error) }
    }
}

struct ClusterJoinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "join",
        abstract: "Make a new replica from the cluster's latest snapshot and the log after it.",
        discussion: """
        STORE must not exist. The snapshot is downloaded beside it and checked (size and checksum) \
        before the store is made; then the log after the snapshot is applied. Prints the cluster's \
        status afterwards (--json: as `cluster status --json`).

        Example:
          STRATA_POSTGRES_URL=postgres://strata@db.internal/library storectl cluster join /srv/library.strata
        """
    )

    @OptionGroup var cluster: ClusterArguments<NewStoreArgument>

    func run() async throws {
        let address = try cluster.connection.address()
        // Checked before anything is made: the replica goes by this name when it is attached.
        let name = ClusterReplica.defaultName(forStoreAt: cluster.url)
        if let problem = ClusterReplica.nameProblem(name) {
            throw failure(CLIError("""
                \(EchoedText.shown(cluster.target.store)): a replica made here would be named \
                \(EchoedText.shown(name)), which \(problem): join at another path
                """, code: Exit.usage))
        }
        let store: Store
        do {
            store = try await Cluster.join(at: cluster.url, address: address, configuration: cluster.configuration,
                                           name: name)
        } catch { throw failure(error) }
        do {
            let status: ClusterStatus
            do {
                status = try await withAttached(store, address: address) { try await $0.status() }
            } catch StrataError.replication(let e) where e.kind == .behindRetention {
                // A `cluster compact` elsewhere trimmed the log past the snapshot between the
                // join's check and this catch-up: the replica, made a moment ago, starts again
                // from the newer snapshot (as `cluster reset` would), once.
                let again = try await Cluster.reset(at: cluster.url, address: address, configuration: cluster.configuration)
                status = try await withAttached(again, address: address) { try await $0.status() }
            }
            printStatus(status, json: cluster.json)
        } catch StrataError.replication(let e) where e.kind == .migrationNeeded {
            // The cluster migrated after its latest snapshot: the replica is made, and is
            // migrated like every other replica (a join again would find the path taken).
            throw failure(CLIError("""
                \(cluster.target.store): the replica is made from the cluster's latest snapshot, which is older \
                than the cluster's migration: \(e.reason)
                """, code: Exit.dataError))
        } catch { throw failure(error) }
    }
}

struct ClusterForgetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Remove a replica that is gone from the cluster's status; its name is free for a new one.",
        discussion: """
        NAME is as `cluster status` lists it. Only the row goes: a replica of that name still running \
        writes it again at its next report, so a replica seen in the last 10 s is refused (exit 75) \
        unless --force is given. Refuses (exit 66) a name no replica goes by.

        Example:
          STRATA_POSTGRES_URL=postgres://strata@db.internal/library storectl cluster forget old-host:/srv/library.strata
        """
    )

    @Argument(help: ArgumentHelp("The replica's name, as `cluster status` lists it.", valueName: "name"))
    var name: String
    @OptionGroup var connection: PostgresOption
    @Flag(help: "Print the removed row as JSON.") var json = false
    @Flag(help: "Remove the row even if the replica was seen in the last 10 s (it may be running).")
    var force = false

    func run() async throws {
        let address = try connection.address()
        let removed: ClusterStatus.Replica
        do { removed = try await Cluster.forget(replica: name, address: address, force: force) } catch { throw failure(error) }
        if json {
            printJSON(.object(replicaFields(removed, nameKey: "forgot")))
        } else {
            print("forgot replica \(EchoedText.escaped(removed.name)): applied \(removed.applied), last seen " +
                  "\(String(format: "%.1f", removed.secondsSinceSeen)) s ago, pid \(removed.processID) on " +
                  "\(EchoedText.escaped(removed.host))")
        }
    }
}

struct ClusterStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "The cluster's head and retention horizon, this replica's position and lag, the replicas seen.",
        discussion: """
        JSON: {"cluster": "…", "model": "library", "schemaVersion": 1, "layout": 2, "head": 1200, "horizon": 0, \
        "applied": 1180, "lag": 20, "snapshot": {"position": 0, "bytes": 98304}, \
        "replicas": [{"name": "host:/path", "applied": 1200, "host": "host", "pid": 4242, "secondsSinceSeen": 0.4}]}

        Example:
          STRATA_POSTGRES_URL=postgres://strata@db.internal/library storectl cluster status /srv/library.strata --json
        """
    )

    @OptionGroup var cluster: ClusterArguments<StoreArgument>

    func run() async throws {
        let address = try cluster.connection.address()
        var configuration = cluster.configuration
        configuration.readOnly = true
        let store: Store
        do { store = try Store.openExisting(at: cluster.url, configuration: configuration) } catch {
            throw failure(error)
        }
        defer { store.close() }
        do {
            printStatus(try await Cluster.status(address: address, store: store), json: cluster.json)
        } catch { throw failure(error) }
    }
}

struct ClusterCompactCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact",
        abstract: "Publish this replica's state as the cluster's snapshot and trim the log behind it.",
        discussion: """
        The replica catches up first, so the snapshot is at the cluster's head as this replica last \
        saw it. Replicas behind the new horizon start again from it with `cluster reset`. Each \
        replica's own log is compacted with `storectl compact`. Prints the cluster's status \
        afterwards (--json: as `cluster status --json`).

        Example:
          STRATA_POSTGRES_URL=postgres://strata@db.internal/library storectl cluster compact /srv/library.strata
        """
    )

    @OptionGroup var cluster: ClusterArguments<StoreArgument>

    func run() async throws {
        let address = try cluster.connection.address()
        do {
            let store = try Store.openExisting(at: cluster.url, configuration: cluster.configuration)
            let status = try await withAttached(store, address: address) { try await Cluster.compact(replica: $0) }
            printStatus(status, json: cluster.json)
        } catch { throw failure(error) }
    }
}

struct ClusterResetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reset",
        abstract: "Start a replica again from the cluster's latest snapshot (a client reset).",
        discussion: """
        For a replica behind the cluster's retention horizon, or whose history diverged from the \
        cluster's. Nothing is lost: a replica's saves are all in the cluster's log. The store is \
        switched to the snapshot atomically, then the log after it is applied. Refuses (exit 75) \
        while another process has the store open. Prints the cluster's status afterwards (--json: \
        as `cluster status --json`).

        Example:
          STRATA_POSTGRES_URL=postgres://strata@db.internal/library storectl cluster reset /srv/library.strata
        """
    )

    @OptionGroup var cluster: ClusterArguments<StoreArgument>

    func run() async throws {
        let address = try cluster.connection.address()
        do {
            let store = try await Cluster.reset(at: cluster.url, address: address, configuration: cluster.configuration)
            printStatus(try await withAttached(store, address: address) { try await $0.status() }, json: cluster.json)
        } catch { throw failure(error) }
    }
}

/// Attaches `store` to its cluster (which catches it up), runs `body` with the replica, detaches
/// and closes it, whatever `body` does.
private func withAttached<R>(_ store: Store, address: ClusterAddress,
                             _ body: (ClusterReplica) async throws -> R) async throws -> R {
    defer { store.close() }
    let replica = try await ClusterReplica.open(store: store, address: address)
    let result = await Result(catching: { try await body(replica) })
    await replica.close()
    return try result.get()
}

/// Opens a store to write to: a replica of a cluster is attached to it (its saves go through the
/// cluster); any other store is opened as it is.
func openForWriting(_ target: StoreArgument, postgres: PostgresOption,
                    configure: (inout StoreConfiguration) -> Void = { _ in }) async throws -> (Store, ClusterReplica?) {
    var configuration = target.configuration
    configure(&configuration)
    let store = try Store.openExisting(at: target.url, configuration: configuration)
    do {
        guard try store.replicaClusterID != nil else {
            // A URL given on the command line for a store of one machine: the write would stay
            // local, though whoever gave it expects it in the cluster (a forgotten `cluster init`).
            if postgres.postgres != nil {
                throw ClusterError(.wrongStore, """
                    \(store.path) is not a replica of a cluster, so the --postgres given would not be used: make the cluster from it with `storectl cluster init`, or leave --postgres out to write \
                    to it alone
                    """)
            }
            return (store, nil)
        }
        let address: ClusterAddress
        do { address = try ClusterAddress.resolve(postgres.postgres) } catch {
            // No URL for a store whose `cluster init` did not finish: how to finish it says more.
            if let notice = try Cluster.unfinishedInitNotice(store) { throw ClusterError(.noCluster, notice) }
            throw error
        }
        let replica = try await ClusterReplica.open(store: store, address: address)
        return (store, replica)
    } catch {
        store.close()
        throw error
    }
}

extension Result where Failure == Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

/// A replica's row as `cluster status --json` and `cluster forget --json` print it, its name
/// under `nameKey`.
private func replicaFields(_ r: ClusterStatus.Replica, nameKey: String = "name") -> [(String, JSONValue)] {
    [(nameKey, .string(r.name)), ("applied", .int(Int64(clamping: r.applied))), ("host", .string(r.host)),
     ("pid", .int(Int64(r.processID))), ("secondsSinceSeen", .double(r.secondsSinceSeen))]
}

private func printStatus(_ s: ClusterStatus, json: Bool) {
    if json {
        var fields: [(String, JSONValue)] = [
            ("cluster", .string(s.clusterID)), ("model", .string(s.model)),
            ("schemaVersion", .int(Int64(s.schemaVersion))), ("layout", .int(Int64(s.layout))), ("head", .int(Int64(s.head))),
            ("horizon", .int(Int64(s.horizon))),
        ]
        if let applied = s.applied { fields.append(("applied", .int(Int64(applied)))) }
        if let lag = s.lag { fields.append(("lag", .int(Int64(lag)))) }
        if let diverged = s.historyDiverged { fields.append(("historyDiverged", .bool(diverged))) }
        if let snapshot = s.snapshot {
            fields.append(("snapshot", .object([("position", .int(Int64(snapshot.position))),
                                                ("bytes", .int(Int64(snapshot.bytes)))])))
        }
        fields.append(("replicas", .array(s.replicas.map { r in
            .object(replicaFields(r))
        })))
        printJSON(.object(fields))
        return
    }
    print("cluster \(s.clusterID) (model \(s.model) v\(s.schemaVersion))")
    print("  layout:    \(s.layout) (\(s.layout >= 2 ? "log entries may be compressed" : "log entries plain, readable by earlier Strata versions"))")
    print("  head:      \(s.head)")
    print("  horizon:   \(s.horizon) (the log holds the transactions after it)")
    if let applied = s.applied, let lag = s.lag {
        let behind = s.historyDiverged == true
            ? " (its history is not the cluster's: a database restored from an older backup? start it again with "
                + "`storectl cluster reset`)"
            : applied < s.horizon ? " (behind the horizon: start it again with `storectl cluster reset`)" : ""
        print("  this replica: applied \(applied), lag \(lag)\(behind)")
    }
    if let snapshot = s.snapshot {
        print("  snapshot:  at \(snapshot.position), \(formatBytes(snapshot.bytes))")
    }
    for r in s.replicas {
        // One that was last at a position the log no longer holds entries after catches up
        // only from a snapshot.
        let behind = r.applied < s.horizon ? " (behind the horizon: it starts again with `storectl cluster reset`)" : ""
        print("  replica \(ClusterReplica.shownName(r.name)): applied \(r.applied)\(behind), pid \(r.processID) on \(EchoedText.escaped(r.host)), " +
              "seen \(String(format: "%.1f", r.secondsSinceSeen)) s ago")
    }
}

/// Says on standard error, for a command that reads or maintains `store` without its cluster,
/// that a `cluster init` of it did not finish and how to finish it (nothing when it did).
func noteUnfinishedClusterInit(_ store: Store) {
    guard let notice = try? Cluster.unfinishedInitNotice(store) else { return }
    StandardStreams.writeError("storectl: note: \(notice)\n")
}
