import ArgumentParser
import Foundation
import LibraryModel
import Strata
import StrataCluster

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Check or run the schema migration of a store (all or nothing, recorded in the log).",
        discussion: """
        The store is rebuilt in a new generation through the steps each vN.json declares, then \
        switched in atomically: killed at any moment, it opens at the old version or the new one. \
        Custom steps run from the library model's registry (LibraryModel.libraryMigrations). \
        A replica of a cluster migrates at one position of the cluster's log (--postgres or \
        STRATA_POSTGRES_URL): the first replica migrated appends the migration to the log, which \
        stops every other replica there until it is migrated with this command too.

        --check changes nothing and exits 0 when the store is up to date, 10 when a migration is \
        needed (the steps are listed), 11 when the store is newer than the schemas.

        Examples:
          storectl migrate ./library.strata --schema Schemas/library --check
          storectl migrate ./library.strata --schema Schemas/library --dry-run --json
          storectl migrate ./library.strata --schema Schemas/library --to 2

        JSON (run or dry run): {"dryRun": false, "from": 1, "to": 2, "objects": 406, "transactionsUpcast": 1, \
        "migrationTransaction": 2, "objectsPerEntity": {...}, "steps": [{"step": "...", "seconds": 0.01}], \
        "seconds": 0.2}
        JSON (--check): {"status": "needsMigration", "from": 1, "to": 2, "steps": ["v2: rename ...", ...]}
        """
    )

    static let needsMigrationExit: Int32 = 10
    static let tooNewExit: Int32 = 11

    @OptionGroup var target: StoreArgument
    @OptionGroup var cluster: PostgresOption
    @Option(help: ArgumentHelp("Model directory with v1.json … vN.json.", valueName: "dir")) var schema: String
    @Option(parsing: .unconditional, help: "Migrate to this version (default: the highest).") var to: Int?
    @Flag(help: "Report whether a migration is needed; change nothing.") var check = false
    @Flag(help: "Build the migrated store aside, report per-step times and counts, change nothing.") var dryRun = false
    @Flag(help: "Print the result as JSON.") var json = false
    @Flag(help: "No progress output.") var quiet = false

    func validate() throws {
        try refuseEmptySchema(schema)
        if check && dryRun { throw ValidationError("--check and --dry-run exclude each other") }
    }

    func run() async throws {
        let schemas: [Schema]
        do {
            // An empty directory is refused in the words of `init` and `generate`.
            schemas = try Schema.loadAll(directory: URL(fileURLWithPath: schema))
            if schemas.isEmpty { _ = try Schema.load(directory: URL(fileURLWithPath: schema)) }
        } catch { throw failure(error) }
        var chosen = schemas
        if let to {
            guard schemas.contains(where: { $0.version == to }) else {
                throw failure(CLIError("--to \(to): no v\(to).json in \(schema)", code: Exit.usage))
            }
            chosen = schemas.filter { $0.version <= to }
        }
        if check { try runCheck(chosen) } else { try await runMigration(chosen) }
    }

    /// Says the store is at `version`, the newest given (`{"status":"upToDate",…}` with --json),
    /// with `why` after it in text.
    private func printUpToDate(_ version: Int, _ why: String? = nil) {
        if json {
            printJSON(.object([("status", .string("upToDate")), ("version", .int(Int64(version)))]))
        } else {
            print("up to date (v\(version))" + (why.map { ": \($0)" } ?? ""))
        }
    }

    private func runCheck(_ schemas: [Schema]) throws {
        // A URL for a store of one machine would not be used (as a migration without --check
        // refuses it): refused, not ignored.
        if cluster.postgres != nil, (try? isReplica()) == false {
            throw failure(ClusterError(.wrongStore, """
                \(target.store) is not a replica of a cluster, so the --postgres given would not be used: \
                leave --postgres out to check it alone
                """))
        }
        let status: MigrationStatus
        do {
            status = try Store.migrationStatus(at: target.url, schemas: schemas, configuration: target.configuration)
        } catch {
            throw failure(error)
        }
        switch status {
        case .upToDate(let v):
            printUpToDate(v)
        case .needsMigration(let from, let to, let steps):
            if json {
                printJSON(.object([("status", .string("needsMigration")), ("from", .int(Int64(from))),
                                   ("to", .int(Int64(to))), ("steps", .array(steps.map { .string($0) }))]))
            } else {
                print("migration needed: v\(from) → v\(to)")
                for s in steps { print("  \(s)") }
            }
            throw ExitCode(Self.needsMigrationExit)
        case .tooNew(let store, let app):
            if json {
                printJSON(.object([("status", .string("tooNew")), ("store", .int(Int64(store))),
                                   ("app", .int(Int64(app)))]))
            } else {
                print("the store is at v\(store), newer than the schemas (v\(app))")
            }
            throw ExitCode(Self.tooNewExit)
        }
    }

    /// Whether the store is a replica of a cluster (read from a read-only open).
    private func isReplica() throws -> Bool {
        var configuration = target.configuration
        configuration.readOnly = true
        let store = try Store.openExisting(at: target.url, configuration: configuration)
        noteUnfinishedClusterInit(store)
        defer { store.close() }
        return try store.replicaClusterID != nil
    }

    private func runMigration(_ schemas: [Schema]) async throws {
        let terminal = isatty(STDERR_FILENO) == 1 && !quiet
        let report: MigrationReport
        let show: @Sendable (MigrationProgress) -> Void = { p in
            if terminal {
                StandardStreams.writeError("\r\(p.phase.rawValue): \(p.done)\(p.total > 0 ? "/\(p.total)" : "")\u{1B}[K")
            }
        }
        do {
            if try isReplica() {
                // A replica migrates at one position of its cluster's log, as every replica does.
                guard !dryRun else {
                    throw CLIError("--dry-run is not available for a replica of a cluster", code: Exit.usage)
                }
                guard let migrated = try await Cluster.migrate(
                    at: target.url, address: try ClusterAddress.resolve(cluster.postgres), schemas: schemas,
                    registry: libraryMigrations, configuration: target.configuration, progress: show) else {
                    // As `--check` says it of a store of one machine, with the replica's version.
                    var readOnly = target.configuration
                    readOnly.readOnly = true
                    let replica = try Store.openExisting(at: target.url, configuration: readOnly)
                    let version = replica.schema.version
                    replica.close()
                    printUpToDate(version, "the cluster's log holds no migration this replica has not applied")
                    return
                }
                report = migrated
            } else {
                // A URL on the command line for a store of one machine would not be used: refused,
                // as `import --postgres` is (a migration of the wrong path stayed local, silently).
                if cluster.postgres != nil {
                    throw ClusterError(.wrongStore, """
                        \(target.store) is not a replica of a cluster, so the --postgres given would not be used: \
                        leave --postgres out to migrate it alone
                        """)
                }
                // A store already at the newest version given is up to date (exit 0), as a
                // replica with nothing to apply is: a deploy that migrates every time succeeds.
                if case .upToDate(let version) = try Store.migrationStatus(at: target.url, schemas: schemas,
                                                                           configuration: target.configuration) {
                    printUpToDate(version, "nothing to migrate")
                    return
                }
                report = try await Store.migrate(at: target.url, schemas: schemas, registry: libraryMigrations,
                                                 dryRun: dryRun, configuration: target.configuration, progress: show)
            }
            if terminal { StandardStreams.writeError("\n") }
        } catch { throw failure(error) }
        if json {
            printJSON(.object([
                ("dryRun", .bool(report.dryRun)), ("from", .int(Int64(report.from))), ("to", .int(Int64(report.to))),
                ("objects", .int(Int64(report.objects))),
                ("transactionsUpcast", .int(Int64(report.transactionsUpcast))),
                ("migrationTransaction", report.migrationTransaction.map { .int(Int64($0.rawValue)) } ?? .null),
                ("objectsPerEntity", .object(report.objectsPerEntity.sorted { $0.key < $1.key }.map {
                    ($0.key, .int(Int64($0.value)))
                })),
                ("steps", .array(report.stepSeconds.map {
                    .object([("step", .string($0.step)), ("seconds", .double($0.seconds))])
                })),
                ("bytesBefore", .int(Int64(report.bytesBefore))), ("bytesAfter", .int(Int64(report.bytesAfter))),
                ("seconds", .double(report.seconds)),
            ]))
            return
        }
        print("\(report.dryRun ? "would migrate" : "migrated") v\(report.from) → v\(report.to): \(report.objects) " +
              "objects, \(report.transactionsUpcast) transactions " +
              "rewritten\(report.migrationTransaction.map { ", recorded as transaction \($0)" } ?? ""), " +
              "\(String(format: "%.2f", report.seconds)) s")
        for s in report.stepSeconds { print("  \(s.step)  \(String(format: "%.3f", s.seconds)) s") }
        for (e, n) in report.objectsPerEntity.sorted(by: { $0.key < $1.key }) { print("  \(e): \(n)") }
    }
}
