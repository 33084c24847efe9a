import Foundation

extension Store {
    /// The cheap check at launch: reads the store's schema version without opening it for writing.
    /// `schemas` are every version of the model, oldest first (``Schema/loadAll(directory:)``).
    ///
    /// - Throws: ``StrataError/modelMismatch(store:app:)`` for another model's schemas;
    ///   ``MigrationError`` when the given schema of the store's version is not the one the store
    ///   holds (a file of that version edited since: the store would not open with it, nor migrate
    ///   from it).
    public static func migrationStatus(
        at url: URL, schemas: [Schema],
        configuration: StoreConfiguration = StoreConfiguration()) throws -> MigrationStatus {
        guard let app = schemas.last else { throw MigrationError(reason: "no schema versions given") }
        // Use the instance this process has open (LMDB forbids a second one); otherwise a
        // read-only open that is closed again.
        let stored: Schema
        let version: Int
        if let open = StoreRegistry.shared.existing(path: url.path) {
            stored = open.schema
            // An instance that migrated the store holds the old schema; the store is at its goal.
            version = open.migratedToVersion ?? stored.version
        } else {
            let store = try Store.openReadOnly(at: url, configuration: configuration)
            stored = store.schema
            version = stored.version
            store.close()
        }
        guard stored.model == app.model else { throw StrataError.modelMismatch(store: stored.model, app: app.model) }
        // The given schema of the store's own version must be the one the store holds: an app
        // with another one is refused at open (`schemaChanged`), and a migration from it refused.
        if stored.version == version, let given = schemas.first(where: { $0.version == version }),
           !given.canonicalJSON.utf8.elementsEqual(stored.canonicalJSON.utf8) {
            throw MigrationError(reason: "the given v\(version) schema differs from the one the store holds")
        }
        if version == app.version { return .upToDate(version: version) }
        if version > app.version { return .tooNew(store: version, app: app.version) }
        let steps = schemas.filter { $0.version > version }
            .flatMap { s in s.migrationSteps.map { "v\(s.version): \($0.summary)" } }
        return .needsMigration(from: version, to: app.version, steps: steps)
    }

    /// Migrates the store at `url` to the last of `schemas` (or to version `target`): all or
    /// nothing, recorded in the log, with older transactions rewritten through the steps so replay,
    /// history and as-of read them in the new schema. The store is rebuilt in a new generation
    /// while it keeps serving (if this process has it open, its readers go on; its writes are
    /// caught up), then switched atomically; a kill at any point leaves the old or the new store.
    /// Afterwards an instance opened with the old schema refuses use with
    /// ``StrataError/migrated(path:toVersion:)``: close it and open the store with the new schema.
    ///
    /// - Throws: ``MigrationError``, ``SchemaError`` (steps that do not lead to the new version),
    ///   ``StrataError/validation(_:)`` (a unique constraint the data violates, now or at any
    ///   transaction of the log),
    ///   ``StrataError/storeBusy(path:processIDs:)``. Nothing is changed when it throws.
    public static func migrate(
        at url: URL, schemas: [Schema], to target: Int? = nil, registry: MigrationRegistry = MigrationRegistry(),
        dryRun: Bool = false, configuration: StoreConfiguration = StoreConfiguration(),
        progress: (@Sendable (MigrationProgress) -> Void)? = nil) async throws -> MigrationReport {
        // An instance this process had open already is the one used (the registry hands it
        // out): it is closed only once the migration has happened, when its schema is the old one
        // and it refuses use anyway. After a dry run or a failure the application goes on using it.
        let openBefore = StoreRegistry.shared.existing(path: url.path)
        let store = try Store.openExisting(at: url, configuration: configuration)
        var migrated = false
        defer { if store !== openBefore || migrated { store.close() } }
        let report = try await store.migrate(schemas: schemas, to: target, registry: registry, dryRun: dryRun,
                                             progress: progress)
        migrated = !dryRun
        return report
    }

    /// Migrates this store (opened with its stored schema); see
    /// ``Store/migrate(at:schemas:to:registry:dryRun:configuration:progress:)``. A replica of a
    /// cluster is migrated at a position of the cluster's log with
    /// ``migrateReplica(schemas:to:registry:marker:progress:)`` (StrataCluster's `Cluster.migrate`).
    public func migrate(schemas: [Schema], to target: Int? = nil, registry: MigrationRegistry = MigrationRegistry(),
                        dryRun: Bool = false,
                        progress: (@Sendable (MigrationProgress) -> Void)? = nil) async throws -> MigrationReport {
        try await migrate(schemas: schemas, to: target, registry: registry, dryRun: dryRun, marker: nil,
                          progress: progress)
    }

    /// Migrates this replica of a cluster at the position of `marker`, the cluster's migration
    /// entry (``migrationMarker(schemas:to:registry:at:)``, appended to the cluster's log by the
    /// replica that started the migration): the replica must have applied everything before it,
    /// and the migrated store holds `marker` byte for byte at its position, so every replica's log
    /// stays the cluster's.
    ///
    /// - Throws: ``MigrationError`` when the store is not a replica, is not right before the
    ///   marker, or the marker is not a migration to `target`; and what
    ///   ``migrate(schemas:to:registry:dryRun:progress:)`` throws.
    public func migrateReplica(schemas: [Schema], to target: Int, registry: MigrationRegistry = MigrationRegistry(),
                               marker: ReplicatedEntry,
                               progress: (@Sendable (MigrationProgress) -> Void)? = nil)
        async throws -> MigrationReport {
        guard writer?.isReplica.load(ordering: .acquiring) == true else {
            throw MigrationError(reason: "\(path) is not a replica of a cluster")
        }
        let entry = try marker.bytes.withUnsafeBytes {
            try LogEntryCodec.decode($0, transactionID: marker.transactionID)
        }
        guard entry.changes.isEmpty, entry.schemaVersion == target,
              entry.metadata["migrationTo"] == String(target) else {
            throw MigrationError(reason: """
                transaction \(marker.transactionID) of the cluster is not a migration to v\(target)
                """)
        }
        // The same plan as the replica that appended it: the same versions, steps and new schema,
        // or the replicas' states would part.
        let (_, app, hops) = try migrationPlan(schemas: schemas, to: target, registry: registry)
        let steps = hops.flatMap { h in h.steps.map { "v\(h.to.version): \($0.summary)" } }
        guard entry.metadata["migrationFrom"] == String(schema.version),
              entry.metadata["steps"] == steps.joined(separator: "; "),
              entry.metadata["schemaChecksum"] == Self.schemaChecksum(app) else {
            throw MigrationError(reason: """
                the cluster's migration at transaction \(marker.transactionID) was planned with other schemas \
                or steps than these (from v\(entry.metadata["migrationFrom"] ?? "?"), steps \
                \(entry.metadata["steps"] ?? "?")): migrate with the same schema files and code
                """)
        }
        return try await migrate(schemas: schemas, to: target, registry: registry, dryRun: false, marker: marker,
                                 progress: progress)
    }

    /// The log entry that migrates a cluster to `target` (default: the last of `schemas`) at
    /// `position`: no changes, the new schema version, the steps in its metadata, as a migration
    /// of one store records itself. A replica appends it to the cluster's log; then every replica
    /// migrates at it (``migrateReplica(schemas:to:registry:marker:progress:)``).
    public func migrationMarker(schemas: [Schema], to target: Int? = nil,
                                registry: MigrationRegistry = MigrationRegistry(),
                                at position: TransactionID) throws -> ReplicatedEntry {
        let (goal, app, hops) = try migrationPlan(schemas: schemas, to: target, registry: registry)
        let steps = hops.flatMap { h in h.steps.map { "v\(h.to.version): \($0.summary)" } }
        var entry = Upcaster.markerEntry(position, from: schema.version, to: goal, steps: steps)
        entry = LogEntry(transactionID: entry.transactionID, schemaVersion: entry.schemaVersion,
                         timestampMs: entry.timestampMs, author: entry.author,
                         metadata: entry.metadata.merging(["schemaChecksum": Self.schemaChecksum(app)]) { $1 },
                         changes: [])
        return ReplicatedEntry(transactionID: position, bytes: LogEntryCodec.encode(entry), author: entry.author,
                               timestampMs: entry.timestampMs, schemaVersion: goal)
    }

    /// CRC-32C of a schema's canonical JSON, in hex: a migration entry names the schema it
    /// migrates to.
    static func schemaChecksum(_ schema: Schema) -> String {
        String(CRC32C.checksum(Array(schema.canonicalJSON.utf8)), radix: 16)
    }

    /// The version to migrate to, its schema, and the hops there, checked against the store's
    /// schema.
    private func migrationPlan(schemas: [Schema], to target: Int?,
                               registry: MigrationRegistry) throws -> (Int, Schema, [MigrationHop]) {
        let goal = target ?? schemas.last?.version ?? schema.version
        // Another model's schemas: said as such (not as a version missing from them).
        if let other = schemas.first(where: { $0.model != schema.model }) {
            throw MigrationError(reason: "the schemas are of model '\(other.model)'; the store holds model " +
                                         "'\(schema.model)'")
        }
        guard let app = schemas.first(where: { $0.version == goal }) else {
            throw MigrationError(reason: "no \(schema.model) schema v\(goal) among the given versions")
        }
        guard goal > schema.version else {
            throw MigrationError(reason: goal == schema.version
                ? "the store is at v\(schema.version) already; nothing to do"
                : "the store is at v\(schema.version), newer than v\(goal): a migration only goes to a later version")
        }
        guard let current = schemas.first(where: { $0.version == schema.version }) else {
            throw MigrationError(reason: "no \(schema.model) schema v\(schema.version) among the given versions: " +
                                         "a migration starts from the store's own version, v\(schema.version)")
        }
        guard current.canonicalJSON.utf8.elementsEqual(schema.canonicalJSON.utf8) else {
            throw MigrationError(reason: "the given v\(schema.version) schema differs from the one the store holds")
        }
        let hops = try (schema.version + 1...goal).map { v -> MigrationHop in
            guard let from = schemas.first(where: { $0.version == v - 1 }),
                  let to = schemas.first(where: { $0.version == v }) else {
                throw MigrationError(reason: "schema v\(v) is missing")
            }
            // As opening a store with it would: a default over maxValueBytes, written into every
            // object, would leave a store no process could open with that schema.
            try to.checkDefaults(maxValueBytes: configuration.maxValueBytes)
            return try MigrationHop(from: from, to: to, registry: registry, maxValueBytes: configuration.maxValueBytes)
        }
        return (goal, app, hops)
    }

    private func migrate(schemas: [Schema], to target: Int?, registry: MigrationRegistry, dryRun: Bool,
                         marker replicaMarker: ReplicatedEntry?,
                         progress: (@Sendable (MigrationProgress) -> Void)?) async throws -> MigrationReport {
        try checkUsable()
        guard let writer, let lock else { throw StrataError.readOnly(path: path) }
        let path = self.path
        func refuseOnAReplica() throws {
            guard writer.isReplica.load(ordering: .acquiring), replicaMarker == nil, !dryRun else { return }
            // Migrated alone, the replica would rewrite its log under ids the cluster's log keeps.
            throw MigrationError(reason: """
                \(path) is a replica of a cluster: it migrates at a position of the cluster's log, with the \
                cluster (`storectl migrate --postgres URL`, StrataCluster's Cluster.migrate)
                """)
        }
        try refuseOnAReplica()
        // One compaction or migration at a time (see `MaintenanceGate`); checked again after the wait.
        await maintenance.enter()
        defer { maintenance.leave() }
        try Task.checkCancellation()   // cancelled while it waited: do not start
        try checkUsable()
        // Again after the wait: a markAsReplica let through the gate first made it a replica.
        try refuseOnAReplica()
        let started = ContinuousClock.now
        let (goal, app, hops) = try migrationPlan(schemas: schemas, to: target, registry: registry)
        try refuseWhileShared(lock)

        let snapshot = try self.snapshot(label: "migration")
        defer { snapshot.close() }
        let oldEnv = snapshot.env
        // Measured now: after the switch the old generation may be retired (a close asked for
        // from a progress callback), and its size read by path would be 0.
        let bytesBefore = oldEnv.fileBytes
        // The log is rewritten from the entries after the horizon: refused before anything is
        // made when they are not all there.
        _ = try checkLogShape(snapshot, for: "a migration would rewrite the log without them")
        try checkRoomForGeneration(snapshot)
        let generation = try makeGeneration(like: oldEnv)
        let newEnv = generation.env
        var switched = false
        defer { if !switched { generation.abandon() } }
        var upcaster = try Upcaster(old: schema, new: app, hops: hops, newEnv: newEnv)
        defer { upcaster.close() }
        let t0 = snapshot.transactionID
        // After each callback of the build: a `close()` from it stops both sides at their next
        // check, and the migration throws `StrataError.closed` (below).
        let cancellation = upcaster.cancellation
        let report: @Sendable (MigrationProgress) -> Void = { [self] p in
            progress?(p)
            if isClosed { cancellation.cancel() }
        }
        do {
            try snapshot.read { view in
                try Store.writeMeta(env: newEnv, schema: app)
                // Keys that carry over as they are (plain puts: `meta` is not empty any more).
                for key in [MetaKey.horizon, MetaKey.created, MetaKey.cluster, MetaKey.clusterPending, MetaKey.replicaName] {
                    if let value = try view.txn.withValue(view.env[.meta], key: key, { Array($0) }) {
                        try newEnv.writeGrowing { try $0.put(newEnv[.meta], key: key, value: value) }
                    }
                }
                let horizon = try view.horizon()
                let objects = try schema.entities.reduce(0) { $0 + (try view.objectCount($1)) }
                let logTotal = Int(t0.rawValue - horizon.rawValue)
                report(MigrationProgress(phase: .base, done: 0, total: objects))
                report(MigrationProgress(phase: .log, done: 0, total: logTotal))
                // The log and the state are independent (different databases of the new generation,
                // each written in its own short transactions): with a second snapshot of the same
                // transaction and generation, another thread builds the state while this one
                // rewrites the log. That thread only reads the old store and writes the new one; a
                // failure on either side waits for the other before the generation is abandoned.
                var stateSide = upcaster.stateSide()
                let stateProgress: @Sendable (Int) -> Void = {
                    report(MigrationProgress(phase: .base, done: $0, total: objects))
                }
                func rewriteLog() throws {
                    try upcaster.loadBase(view, horizon: horizon, head: t0)
                    try upcaster.upcastLog(view, after: horizon, upTo: t0, applyingToState: false) {
                        report(MigrationProgress(phase: .log, done: $0, total: logTotal))
                    }
                }
                let second = try? self.snapshot(label: "migration-state")
                let firstLMDB = LMDBEnvironment.lmdbTransactionID(view.txn.handle)
                if let second, second.transactionID == t0, second.env === oldEnv,
                   (try? second.read({ LMDBEnvironment.lmdbTransactionID($0.txn.handle) })) == firstLMDB {
                    let result = Locked<Result<Upcaster, Error>?>(nil)
                    let side = stateSide
                    let done = startOnOwnThread(name: "strata.migration-state") {
                        var u = side
                        let r = Result { () throws -> Upcaster in
                            defer { second.close() }
                            try second.read { try u.buildState($0, expectedObjects: objects, progress: stateProgress) }
                            return u
                        }
                        // A failure stops the other side at its next batch.
                        if case .failure = r { u.cancellation.cancel() }
                        result.withLock { $0 = r }
                    }
                    let logResult = Result { try rewriteLog() }
                    if case .failure = logResult { upcaster.cancellation.cancel() }
                    done.wait()
                    guard let built = result.withLock({ $0 }) else {
                        throw MigrationError(reason: "the state build did not finish")
                    }
                    // The error that stopped the migration, not the other side's stop.
                    for outcome in [logResult.map { _ in () }, built.map { _ in () }] {
                        if case .failure(let error) = outcome, !(error is MigrationCancelled) { throw error }
                    }
                    try logResult.get()
                    stateSide = try built.get()
                } else {
                    second?.close()
                    try rewriteLog()
                    try stateSide.buildState(view, expectedObjects: objects, progress: stateProgress)
                }
                upcaster.addTimings(of: stateSide)
            }
        } catch {
            try checkUsable()   // closed from a callback: that, not the sides' cancellation
            throw error
        }
        try checkUsable()   // closed from the last callback: no report, no switch
        generation.endBulkBuild()
        @Sendable func objectsPerEntity() throws -> [String: Int] {
            try newEnv.read { txn in
                Dictionary(uniqueKeysWithValues: try app.entities.map {
                    ($0.name, try ReadView(txn: txn, env: newEnv, schema: app).objectCount($0))
                })
            }
        }
        let stepSeconds: [(step: String, seconds: Double)] = zip(
            hops.flatMap { h in h.steps.map { "v\(h.to.version): \($0.summary)" } }, upcaster.timings.map(\.seconds)
        ).map { (step: $0, seconds: $1) }
        try RequiredToOneCheck.check(newEnv, from: schema, to: app)
        if dryRun {
            try newEnv.sync()
            let counts = try objectsPerEntity()
            return MigrationReport(dryRun: true, from: schema.version, to: goal, objects: counts.values.reduce(0, +),
                                   transactionsUpcast: upcaster.transactions, migrationTransaction: nil,
                                   stepSeconds: stepSeconds, objectsPerEntity: counts, bytesBefore: bytesBefore,
                                   bytesAfter: newEnv.fileBytes, seconds: (ContinuousClock.now - started).seconds)
        }
        progress?(MigrationProgress(phase: .catchingUp, done: 0, total: 0))
        try checkUsable()
        try prefetchBeforeCatchUp(generation, builtAt: t0)
        let box = UpcasterBox(upcaster)
        let (marker, counts) = try await writer.exclusive { [self] in
            // Exclusive from the catch-up's read to the switch: another process that committed
            // after the read and closed before the switch would have its transactions left behind.
            try takeExclusive(lock)
            defer { lock.shared() }
            assert(env === oldEnv, "the live generation changed during a migration")
            var u = box.value
            defer { box.value = u }
            let marker = try oldEnv.read { txn -> TransactionID in
                let view = ReadView(txn: txn, env: oldEnv, schema: schema)
                let last = try view.lastTransactionID()
                if last > t0 { try u.upcastLog(view, after: t0, upTo: last, applyingToState: true) { _ in } }
                return last.next
            }
            // What was saved during the build may have unlinked a relationship made required.
            if marker > t0.next { try RequiredToOneCheck.check(newEnv, from: schema, to: app) }
            // Read before the switch: after it, nothing may throw (the migration happened).
            let counts = try objectsPerEntity()
            if let replicaMarker {
                // A replica migrates at the cluster's migration entry, right after what it applied.
                guard marker == replicaMarker.transactionID else {
                    throw MigrationError(reason: """
                        the replica's next transaction is \(marker); the cluster migrates at \
                        \(replicaMarker.transactionID)
                        """)
                }
                try u.writeMarker(replicaMarker.bytes, at: marker)
            } else {
                try u.writeMarker(marker, from: schema.version, to: goal, steps: stepSeconds.map(\.step))
            }
            progress?(MigrationProgress(phase: .switching, done: 0, total: 0))
            runBeforeSwitchHookForTesting()
            try switchGeneration(generation, lock: lock, replacing: oldEnv)
            // This instance holds the old schema: it stops here, and nothing queued is acknowledged.
            markMigrated(to: goal)
            writer.stopFromQueue(failing: .migrated(path: path, toVersion: goal))
            return (marker, counts)
        }
        switched = true
        // This instance is retired: its change streams end (their subscribers, live queries
        // included, then learn it from their next read) and it watches no other process.
        publisher.close()
        hub.finishAll()
        let bytesAfter = newEnv.fileBytes
        let finalSeconds: [(step: String, seconds: Double)] =
            zip(stepSeconds.map(\.step), box.value.timings.map(\.seconds)).map { (step: $0, seconds: $1) }
        newEnv.close()
        return MigrationReport(dryRun: false, from: schema.version, to: goal, objects: counts.values.reduce(0, +),
                               transactionsUpcast: box.value.transactions, migrationTransaction: marker,
                               stepSeconds: finalSeconds, objectsPerEntity: counts, bytesBefore: bytesBefore,
                               bytesAfter: bytesAfter, seconds: (ContinuousClock.now - started).seconds)
    }
}

/// Carries the upcaster into the writer's exclusive block (used only there, one thread at a time).
private final class UpcasterBox: @unchecked Sendable {
    var value: Upcaster
    init(_ value: Upcaster) { self.value = value }
}
