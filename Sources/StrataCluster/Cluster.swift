import CStrataPOSIX
import Foundation
import Logging
import PostgresNIO
import Strata

/// Making, joining, inspecting and trimming a cluster: several machines working on one dataset.
/// PostgreSQL holds the one ordered log (``SharedLog``), snapshots to start replicas from, and the
/// replicas' last positions; each machine keeps a full replica in LMDB (a ``ClusterReplica``).
public enum Cluster {
    /// Bytes per row of a snapshot in `strata_snapshot_chunks`.
    static let chunkBytes = 1 << 20

    /// The cluster's row.
    struct Row {
        let id: String
        let layout: Int
        let model: String
        let schemaVersion: Int
        let head: UInt64
        let horizon: UInt64
    }

    /// What a store marked by a `cluster init` that did not finish (killed, or PostgreSQL lost
    /// during it) says: the init is to be run again with the database it was making the cluster
    /// in (`making`, as ``ClusterAddress/identity`` names it), which finishes it (whether or not
    /// that database committed the cluster); only that, or a store of one machine, is safe.
    static func unfinishedInit(_ store: Store, making: String) -> String {
        unfinishedInit(path: store.path, making: making)
    }

    static func unfinishedInit(path: String, making: String) -> String {
        """
        \(path): a `storectl cluster init` of this store into the database at \(making) did not finish: \
        run `storectl cluster init \(path) --postgres postgres://USER@\(making)` again to finish it (the \
        store is marked for that cluster, so it is neither a replica yet nor a store of one machine)
        """
    }

    /// What every command on `store` says while a `cluster init` of it has not finished
    /// (``Store/clusterBeingMadeIn``), nil otherwise: how to finish it.
    public static func unfinishedInitNotice(_ store: Store) throws -> String? {
        try store.clusterBeingMadeIn.map { unfinishedInit(store, making: $0) }
    }

    static func readCluster(_ session: PostgresSession) throws -> Row {
        let exists: PostgresQueryResult
        do {
            exists = try session.run("SELECT to_regclass('strata_cluster') IS NOT NULL")
        } catch {
            throw failure(error, session.address)
        }
        guard try exists.first?.decode(Bool.self) == true else {
            throw ClusterError(.noCluster, """
                the database at \(session.address) holds no cluster (make one with `storectl cluster init`)
                """)
        }
        let rows: PostgresQueryResult
        do {
            rows = try session.run(
                "SELECT cluster_id, layout, model, schema_version, head, horizon FROM strata_cluster")
        } catch {
            throw failure(error, session.address)
        }
        guard let row = rows.first else {
            throw ClusterError(.noCluster, "the database at \(session.address) has an empty strata_cluster table")
        }
        let (id, layout, model, version, head, horizon): (String, Int32, String, Int32, Int64, Int64)
        do {
            (id, layout, model, version, head, horizon) =
                try row.decode((String, Int32, String, Int32, Int64, Int64).self)
        } catch {
            throw ClusterError(.noCluster, "the cluster row at \(session.address) cannot be read: \(error)")
        }
        guard layout <= ClusterSchema.layout else {
            throw ClusterError(.noCluster, """
                the cluster at \(session.address) uses table layout \(layout); this Strata knows layout \
                \(ClusterSchema.layout) and older
                """)
        }
        guard let head = UInt64(exactly: head), let horizon = UInt64(exactly: horizon),
              head <= TransactionID.largest.rawValue, horizon <= head else {
            throw ClusterError(.noCluster, "the cluster at \(session.address) has head \(head) and horizon \(horizon)")
        }
        return Row(id: id, layout: Int(layout), model: model, schemaVersion: Int(version), head: head, horizon: horizon)
    }

    /// Creates a cluster in the (empty of Strata tables) database at `address` with `store` as
    /// its first replica and its current state as the starting snapshot: the tables, the log's
    /// head at the store's head, the snapshot. The store becomes a replica first (from then on its
    /// saves go through the cluster), so nothing is saved between the snapshot and the start.
    /// Everything in PostgreSQL is made in one transaction: a failure leaves no cluster there, and
    /// the store is a store of one machine again.
    ///
    /// - Throws: ``ClusterError`` (``ClusterError/Kind/clusterExists`` when the database holds
    ///   one; ``ClusterError/Kind/badArgument`` when `name` holds a NUL character),
    ///   ``StrataError/storeBusy(path:processIDs:)`` when another process has the store open.
    @discardableResult
    public static func initialize(store: Store, address: ClusterAddress, name: String? = nil) async throws
        -> ClusterStatus {
        // The default name (`host:path`) too: one with a control character (a path holding a
        // line break) made a cluster whose first replica no later command could open.
        try ClusterReplica.checkName(name ?? ClusterReplica.defaultName(store))
        let session = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
        defer { session.close() }
        let existing = try await offPool("init") { () throws -> String? in
            do {
                guard try session.run("SELECT to_regclass('strata_cluster') IS NOT NULL")
                    .first?.decode(Bool.self) == true
                else { return nil }
                return try session.run("SELECT cluster_id FROM strata_cluster").first?.decode(String.self) ?? ""
            } catch let e as PostgresSession.Failure {
                throw failure(e, address)
            }
        }
        let marked = try store.replicaClusterID
        if let existing {
            if existing == marked, let marked {
                // Made, though the init that made it stopped before it said so to the store.
                if try store.clusterBeingMadeIn != nil { try await store.finishMakingCluster(clusterID: marked) }
                throw ClusterError(.clusterExists, """
                    the database at \(address) already holds this store's cluster \(existing): open the replica \
                    (`storectl cluster status` shows it)
                    """)
            }
            // This store's own `init` into this database was cut short before its PostgreSQL
            // transaction committed, and another store's cluster was made there since: a database
            // holds one cluster, so this store's was never made and can never be. Its mark goes
            // (it is a store of one machine again); it was left waiting for an `init` that could
            // not finish, refusing every save.
            if let marked, try store.clusterBeingMadeIn == address.identity {
                try await store.leaveCluster(clusterID: marked)
                throw ClusterError(.clusterExists, """
                    the database at \(address) holds another cluster (\(existing)), made after this store's \
                    `cluster init` into it was cut short: that init is undone, and \(store.path) is a store of one \
                    machine again (make its cluster in another database, or join the one there with a new replica)
                    """)
            }
            throw ClusterError(.clusterExists,
                               "the database at \(address) already holds a cluster (`storectl cluster status`)")
        }
        // A store marked for a cluster this database does not hold: an `init` that died before its
        // PostgreSQL transaction committed, made again under the same id; or a replica of a
        // cluster that was made (in another database), which must never be made into a second
        // cluster: both would take the same id, and its history would fork.
        if marked != nil, let making = try store.clusterBeingMadeIn, making != address.identity {
            throw ClusterError(.wrongStore, unfinishedInit(store, making: making))
        }
        if let marked, try store.clusterBeingMadeIn != address.identity {
            throw ClusterError(.wrongStore, """
                \(store.path) is already a replica of cluster \(marked), which the database at \(address) does not \
                hold: a replica belongs to one cluster (open it with its own cluster's URL; to start a new \
                cluster, make it from a store of one machine)
                """)
        }
        let clusterID = marked ?? UUID().uuidString.lowercased()
        // Made before the mark: a scratch directory that cannot be made leaves the store as it was.
        let scratch = try temporaryDirectory(near: store.path)
        defer { removeScratch(scratch) }
        if marked == nil { try await store.markAsReplica(clusterID: clusterID, makingClusterIn: address.identity) }
        do {
            // Kept in the store: the name this replica goes by at every later open.
            if let name { try await store.setReplicaName(name) }
            let position = try await store.writeReplicaSnapshot(to: scratch.appendingPathComponent("snapshot"))
            let file = scratch.appendingPathComponent("snapshot").appendingPathComponent(Store.replicaSnapshotFile)
            let schema = store.schema
            let made = name ?? ClusterReplica.defaultName(store)
            try await offPool("init") {
                try transaction(session) { () throws -> Void in
                    try ClusterSchema.requireCallableProcedures(session)
                    for statement in ClusterSchema.create { _ = try session.run(statement) }
                    let head = Int64(position.rawValue), layout = ClusterSchema.layout
                    let version = Int32(schema.version), model = schema.model
                    _ = try session.run("""
                        INSERT INTO strata_cluster (cluster_id, layout, model, schema_version, head, horizon)
                        VALUES (\(clusterID), \(layout), \(model), \(version), \(head), \(head))
                        """)
                    try upload(session, snapshot: file, position: position, madeBy: made)
                    // The first replica is in `status` from the start, at the snapshot's position.
                    let pid = Int32(getpid()), host = ProcessInfo.processInfo.hostName
                    _ = try session.run("""
                        INSERT INTO strata_replicas (name, applied, host, pid, last_seen)
                            VALUES (\(made), \(head), \(host), \(pid), now())
                        """)
                }
            }
        } catch {
            // The mark goes only when the cluster is certainly not made: a COMMIT whose answer was
            // lost may have made it, and a store that left would then fork from its snapshot.
            let check = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
            defer { check.close() }
            let made = try? await offPool("init") { () throws -> Bool in
                guard try check.run("SELECT to_regclass('strata_cluster') IS NOT NULL").first?.decode(Bool.self) == true
                else { return false }
                return try check.run("SELECT cluster_id FROM strata_cluster").first?.decode(String.self) == clusterID
            }
            if made == false {
                do {
                    try await store.leaveCluster(clusterID: clusterID)
                } catch let leaving {
                    // Another process opened the store meanwhile: the mark stays, and says so.
                    throw ClusterError(.unavailable, """
                        making the cluster failed (\(error)), and the store stays marked for cluster \(clusterID) \
                        (\(leaving)): run `storectl cluster init` again to make it under that id
                        """)
                }
            }
            if made == true {
                try await store.finishMakingCluster(clusterID: clusterID)
                return try await offPool("status") { try status(check, store: store) }
            }
            // Another `cluster init` made a cluster in the same database meanwhile (its tables
            // went in first, and this one's clashed with them).
            let other = try? await offPool("init") { () throws -> Bool in
                try check.run("SELECT to_regclass('strata_cluster') IS NOT NULL").first?.decode(Bool.self) == true
                    && check.run("SELECT count(*) FROM strata_cluster").first?.decode(Int64.self) ?? 0 > 0
            }
            if made == false, other == true {
                throw ClusterError(.clusterExists, """
                    the database at \(address) already holds a cluster, made by another `cluster init` meanwhile \
                    (`storectl cluster status`)
                    """)
            }
            throw error
        }
        try await store.finishMakingCluster(clusterID: clusterID)
        return try await offPool("status") { try status(session, store: store) }
    }

    /// Refuses a name that a replica of the cluster at `address` goes by already (its row in
    /// `strata_replicas`, which `cluster status` lists): a new replica taking it would share that
    /// row, and the status would show the two as one, the one behind hidden. A replica that is gone
    /// keeps its row until ``forget(replica:address:force:)`` removes it.
    ///
    /// - Throws: ``ClusterError`` (``ClusterError/Kind/nameTaken``) saying when that replica was
    ///   last seen and how to free the name.
    public static func requireNameFree(_ name: String, address: ClusterAddress) async throws {
        let session = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
        defer { session.close() }
        try await requireNameFree(name, session: session)
    }

    /// ``requireNameFree(_:address:)`` on an open session (a join's own).
    static func requireNameFree(_ name: String, session: PostgresSession) async throws {
        let taken = try await offPool("join") { () throws -> ClusterStatus.Replica? in
            _ = try readCluster(session)
            return try replicaRow(session, named: name)
        }
        guard let taken else { return }
        // The name whole, as `cluster forget` takes it, quoted for a shell.
        let quoted = "'" + ClusterReplica.shownName(name).replacingOccurrences(of: "'", with: #"'\''"#, options: .literal) + "'"
        throw ClusterError(.nameTaken, """
            a replica named \(ClusterReplica.shownName(name)) is in the cluster already (applied \(taken.applied), last \
            seen \(Int(exactly: taken.secondsSinceSeen.rounded(.down)).map(String.init) ?? "\(taken.secondsSinceSeen)") s ago, process \(taken.processID) on \(EchoedText.shown(taken.host))): make \
            this one at another path, or, if that replica is gone (also one this join makes again), remove its row \
            first with `storectl cluster forget \(quoted)`
            """)
    }

    /// Removes the row of replica `name` from `strata_replicas` (what `cluster status` lists), for a
    /// replica that is gone: its name is free for a new one. Returns the row removed.
    ///
    /// A replica reports at least every second while it follows the cluster (or every poll
    /// interval, if that is longer), and once more when it closes; a running one would write its
    /// row again at its next report. So a row seen in the last ``recentlySeenSeconds`` is left
    /// alone unless `force` is given: stop that replica first (or wait), and forget it then.
    ///
    /// - Throws: ``ClusterError`` (``ClusterError/Kind/noSuchReplica``) when no replica goes by
    ///   that name; (``ClusterError/Kind/replicaActive``) when it was seen too recently and
    ///   `force` is false.
    @discardableResult
    public static func forget(replica name: String, address: ClusterAddress,
                              force: Bool = false) async throws -> ClusterStatus.Replica {
        let session = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
        defer { session.close() }
        let recent = force ? -1.0 : recentlySeenSeconds
        // One statement: the row goes only if it was not seen within `recent` seconds; either way
        // it comes back, with whether it went.
        let outcome = try await offPool("forget") { () throws -> (ClusterStatus.Replica, Bool)? in
            _ = try readCluster(session)
            return try mappingFailures(session, "removing a replica's row") {
                try session.run("""
                    WITH found AS (
                        SELECT name, applied, host, pid, extract(epoch FROM now() - last_seen)::float8 AS age
                        FROM strata_replicas WHERE name = \(name) FOR UPDATE),
                    gone AS (
                        DELETE FROM strata_replicas r USING found
                        WHERE r.name = found.name AND found.age >= \(recent) RETURNING r.name)
                    SELECT found.name, found.applied, found.host, found.pid, found.age, EXISTS (SELECT 1 FROM gone)
                    FROM found
                    """).first.map { row -> (ClusterStatus.Replica, Bool) in
                        let (n, applied, host, pid, age, removed) =
                            try row.decode((String, Int64, String, Int32, Double, Bool).self)
                        return (ClusterStatus.Replica(name: n, applied: UInt64(clamping: applied), host: host,
                                                      processID: pid, secondsSinceSeen: age), removed)
                    }
            }
        }
        guard let (row, removed) = outcome else {
            throw ClusterError(.noSuchReplica, """
                no replica named \(ClusterReplica.shownName(name)) is in the cluster at \(address) (`cluster status \
                --json` lists the names)
                """)
        }
        guard removed else {
            throw ClusterError(.replicaActive, """
                replica \(ClusterReplica.shownName(name)) was seen \(String(format: "%.1f", max(0, row.secondsSinceSeen))) s \
                ago (process \(row.processID) on \(EchoedText.shown(row.host))): a running replica writes its row again; \
                stop it and try again once it has not been seen for \(Int(recentlySeenSeconds)) s, or give --force
                """)
        }
        return row
    }

    /// How recently a replica may have been seen for ``forget(replica:address:force:)`` to leave it
    /// alone without `force`: ten of a following replica's one-second reports.
    public static let recentlySeenSeconds = 10.0

    /// The row of replica `name`, if any.
    static func replicaRow(_ session: PostgresSession, named name: String) throws -> ClusterStatus.Replica? {
        try mappingFailures(session, "reading the cluster's replicas") {
            try session.run("""
                SELECT name, applied, host, pid, extract(epoch FROM now() - last_seen)::float8 FROM strata_replicas
                WHERE name = \(name)
                """).first.map(replica)
        }
    }

    /// A row of `strata_replicas` as (name, applied, host, pid, seconds since seen).
    static func replica(_ row: PostgresRow) throws -> ClusterStatus.Replica {
        let (name, applied, host, pid, age) = try row.decode((String, Int64, String, Int32, Double).self)
        return ClusterStatus.Replica(name: name, applied: UInt64(clamping: applied), host: host, processID: pid,
                                     secondsSinceSeen: age)
    }

    /// Snapshots a join downloads before it gives up, when each is trimmed past (a newer one
    /// published, and the log behind it trimmed) before the replica made from it is in place.
    static let maxJoinAttempts = 5

    /// Makes a new replica at `url` (which must not exist) from the cluster's latest snapshot and
    /// opens it; attach it with ``ClusterReplica/open(store:address:name:pollInterval:)``, which
    /// applies the log after the snapshot. The snapshot is downloaded next to `url`, its size and
    /// checksum checked, and only then made into a store.
    ///
    /// With `name` (the name the caller will attach the replica under,
    /// ``ClusterReplica/open(store:address:name:pollInterval:)``; it is only checked here, not
    /// kept), a name another replica of the cluster goes by already is refused first
    /// (``requireNameFree(_:address:)``). A `cluster compact` elsewhere that trims the log past the
    /// snapshot after the replica is in place makes the attach fail with `behindRetention`;
    /// ``reset(at:address:configuration:)`` then starts it from the newer snapshot (storectl's
    /// join does so).
    public static func join(at url: URL, address: ClusterAddress,
                            configuration: StoreConfiguration = StoreConfiguration(),
                            name: String? = nil) async throws -> Store {
        try await join(at: url, address: address, configuration: configuration, name: name, afterDownload: nil)
    }

    /// ``join(at:address:configuration:name:)``, running `afterDownload` (tests: a compaction
    /// elsewhere) after each snapshot is downloaded and made into a replica, before the join
    /// checks it.
    static func join(at url: URL, address: ClusterAddress, configuration: StoreConfiguration, name: String? = nil,
                     afterDownload: (@Sendable () async throws -> Void)?) async throws -> Store {
        // Made in the directory the parent's symbolic links lead to, under the path the store will
        // have (the parent's entry is synced, which a link to it would refuse after the replica
        // was made and moved into place).
        let standard = url.standardizedFileURL
        let parent = standard.deletingLastPathComponent().resolvingSymlinksInPath().path
        let path = (parent as NSString).appendingPathComponent(standard.lastPathComponent)
        // What joins killed before they finished left: removed even when this one is refused.
        removeLeftovers(near: path)
        // lstat: a symbolic link is in the way too, also one that points nowhere.
        var st = stat()
        if lstat(path, &st) == 0 {
            throw ClusterError(.storeExists, "\(path) exists: a replica is made in a new directory")
        }
        let session = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
        defer { session.close() }
        if let name { try await requireNameFree(name, session: session) }
        // A path whose directory cannot be made (a file in its way, a file system that takes no
        // directory) is refused naming that path, as one that exists is: not the raw error of
        // the scratch directory beside it, nor as an unexpected error.
        func cannotMake(_ code: Int32) -> ClusterError {
            ClusterError(.storeExists, "cannot make a replica at \(path): \(String(cString: strerror(code)))")
        }
        let refusedCodes: Set<Int32> = [ENOENT, ENOTDIR, EEXIST, EACCES, EPERM, EROFS]
        // The directories above the replica this join makes (deepest first): a join that fails
        // removes them again (only while empty), so it leaves nothing, as a store's `init` does.
        var madeParents: [String] = []
        var above = parent
        while !above.isEmpty, above != "/", lstat(above, &st) != 0, errno == ENOENT {
            madeParents.append(above)
            above = (above as NSString).deletingLastPathComponent
        }
        var joined = false
        // Clean-up after a failure: a parent that cannot be removed (not empty, gone) stays.
        defer { if !joined { for made in madeParents { _ = rmdir(made) } } }
        do {
            try FileManager.default.createDirectory(atPath: parent.isEmpty ? "." : parent,
                                                    withIntermediateDirectories: true)
        } catch {
            let posix = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError
            if let code = posix.map({ Int32($0.code) }), refusedCodes.contains(code) { throw cannotMake(code) }
            if (error as NSError).code == NSFileWriteFileExistsError { throw cannotMake(ENOTDIR) }
            throw error
        }
        let scratch: URL
        do {
            scratch = try temporaryDirectory(near: path)
        } catch StrataError.lmdb(let e) where refusedCodes.contains(e.code) {
            throw cannotMake(e.code)
        }
        defer { removeScratch(scratch) }
        let file = scratch.appendingPathComponent(Store.replicaSnapshotFile)
        // Made whole in the scratch directory, then renamed into place: a join killed before the
        // rename leaves nothing at `path` (its scratch directory goes with the next join); one
        // killed after it leaves a whole replica at the snapshot's position, which catches up
        // when it is next opened.
        let made = scratch.appendingPathComponent("replica")
        var cluster: Row
        var attempts = 0
        while true {
            let (latest, position) = try await offPool("join") { try downloadLatestSnapshot(session, to: file) }
            cluster = latest
            try Store.makeReplica(fromSnapshot: file, at: made, configuration: configuration)
            try await afterDownload?()
            // A `cluster compact` elsewhere may have published a newer snapshot and trimmed the
            // log behind it meanwhile: the replica could not catch up from this one, so it is
            // made again from the newer one (what `cluster reset` would do), not left in place.
            let horizon = try await offPool("join") { try readCluster(session).horizon }
            if horizon <= position { break }
            attempts += 1
            try? FileManager.default.removeItem(at: made)
            try? FileManager.default.removeItem(at: file)
            guard attempts < maxJoinAttempts else {
                throw ClusterError(.unavailable, """
                    the cluster published a newer snapshot and trimmed its log behind it \(attempts) times while \
                    this join downloaded one (`storectl cluster compact` running elsewhere): join again
                    """)
            }
        }
        // Never over what is at `path` by now: a directory made there during the download, even
        // an empty one, stays, and the join is refused.
        guard strata_rename_noreplace(made.path, path) == 0 else {
            let code = errno
            if code == EEXIST || code == ENOTEMPTY {
                throw ClusterError(.storeExists, "\(path) exists: a replica is made in a new directory")
            }
            throw StrataError.lmdb(LMDBError(code: code, operation: "rename \(made.path) to \(path)"))
        }
        // The replica's entry made durable in its parent, as a store's creation does.
        try StoreDirectory.syncDirectory(parent.isEmpty ? "." : parent)
        let store = try Store.openExisting(at: URL(fileURLWithPath: path), configuration: configuration)
        guard try store.replicaClusterID == cluster.id else {
            store.close()
            // Made by this join a moment ago: nothing of it is left in the way of the next try.
            try? FileManager.default.removeItem(atPath: path)
            throw ClusterError(.badSnapshot, "the snapshot in \(address) is not of cluster \(cluster.id)")
        }
        joined = true
        return store
    }

    /// Starts the replica at `url` again from the cluster's latest snapshot (a client reset): for
    /// a replica behind the retention horizon (``ReplicationError/Kind/behindRetention``), or one
    /// whose history diverged from the cluster's. The replica holds nothing of its own (what it
    /// acknowledged is in the cluster's log), so nothing is lost; its store is switched to the
    /// snapshot atomically (``Store/resetReplica(at:fromSnapshot:configuration:)``). Attach it
    /// with ``ClusterReplica/open(store:address:name:pollInterval:)`` to apply the log after the
    /// snapshot. The store must not be open anywhere.
    public static func reset(at url: URL, address: ClusterAddress,
                             configuration: StoreConfiguration = StoreConfiguration()) async throws -> Store {
        let path = url.standardizedFileURL.path
        let session = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
        defer { session.close() }
        // Checked before a snapshot is downloaded: one of another cluster would only be refused
        // once here, by its name inside the scratch directory.
        let marked = try Store.replicaCluster(at: URL(fileURLWithPath: path), configuration: configuration)
        guard let marked else { throw ClusterError(.wrongStore, "\(path) is not a replica of a cluster") }
        do {
            try await requireCluster(marked, of: path, session: session, address: address)
        } catch let e as ClusterError where e.kind == .noCluster {
            // A `cluster init` of this store that did not finish: finishing it is the way on.
            if let making = try Store.clusterBeingMadeIn(at: URL(fileURLWithPath: path), configuration: configuration) {
                throw ClusterError(.noCluster, unfinishedInit(path: path, making: making))
            }
            throw e
        }
        let scratch = try temporaryDirectory(near: path)
        defer { removeScratch(scratch) }
        let file = scratch.appendingPathComponent(Store.replicaSnapshotFile)
        _ = try await offPool("reset") { try downloadLatestSnapshot(session, to: file) }
        return try Store.resetReplica(at: URL(fileURLWithPath: path), fromSnapshot: file, configuration: configuration)
    }

    /// Refuses a replica of cluster `clusterID` (the store at `path`) when the database at
    /// `address` holds another cluster, before anything is read from it or moved: exit 66 as
    /// ``ClusterReplica/open(store:address:name:pollInterval:)`` says it.
    static func requireCluster(_ clusterID: String, of path: String, session: PostgresSession,
                               address: ClusterAddress) async throws {
        let found = try await offPool("check") { try readCluster(session).id }
        guard found == clusterID else {
            throw ClusterError(.wrongStore, """
                \(path) is a replica of cluster \(clusterID); the database at \(address) holds cluster \(found)
                """)
        }
    }

    /// The cluster at `address`, and `store`'s place in it when given.
    public static func status(address: ClusterAddress, store: Store? = nil) async throws -> ClusterStatus {
        let session = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
        defer { session.close() }
        return try await offPool("status") { try status(session, store: store) }
    }

    static func status(_ session: PostgresSession, store: Store?) throws -> ClusterStatus {
        // The replica's head before the cluster's: a save commits locally after its append, so a
        // head read first is never past the cluster's read after it (read the other way round, a
        // save in between showed a healthy replica past the head).
        let applied = try store?.lastTransactionID
        let cluster: Row
        do { cluster = try readCluster(session) } catch let e as ClusterError where e.kind == .noCluster {
            // A `cluster init` of this store that did not finish: finishing it is the way on.
            if let store, let making = try store.clusterBeingMadeIn {
                throw ClusterError(.noCluster, unfinishedInit(store, making: making))
            }
            throw e
        }
        var status = ClusterStatus(clusterID: cluster.id, model: cluster.model, schemaVersion: cluster.schemaVersion,
                                   head: cluster.head, horizon: cluster.horizon)
        status.layout = cluster.layout
        try mappingFailures(session, "reading the cluster's replicas and snapshot") {
            for row in try session.run("""
                SELECT name, applied, host, pid, extract(epoch FROM now() - last_seen)::float8 FROM strata_replicas
                ORDER BY name
                """) {
                status.replicas.append(try replica(row))
            }
            for row in try session.run("""
                SELECT position, bytes, extract(epoch FROM created_at)::float8 FROM strata_snapshots WHERE complete
                ORDER BY position DESC LIMIT 1
                """) {
                let (position, bytes, created) = try row.decode((Int64, Int64, Double).self)
                status.snapshot = ClusterStatus.Snapshot(position: UInt64(clamping: position), bytes: Int(bytes),
                                                         created: Date(timeIntervalSince1970: created))
            }
        }
        if let store {
            guard try store.replicaClusterID == cluster.id else {
                throw ClusterError(.wrongStore, "\(store.path) is not a replica of cluster \(cluster.id)")
            }
            status.applied = applied?.rawValue
            let pastHead = status.applied.map { $0 > cluster.head } == true
            status.historyDiverged = try pastHead || ClusterReplica.historyDiverged(store, session, at: applied) != nil
        }
        return status
    }

    /// Publishes `replica`'s state as the cluster's new snapshot and trims the log in PostgreSQL
    /// behind it (the retention horizon moves to the snapshot's position); older snapshots are
    /// removed. A replica that is behind the new horizon starts again from this snapshot
    /// (``ReplicationError/Kind/behindRetention``). Each replica's local log is compacted on its
    /// own (``Store/compact(horizon:dryRun:rebuildIndexes:progress:)``). With nothing after the horizon (the
    /// replica, caught up, is at it), nothing changes.
    @discardableResult
    public static func compact(replica: ClusterReplica) async throws -> ClusterStatus {
        try await compact(store: replica.store, address: replica.address, name: replica.name)
    }

    /// ``compact(replica:)`` of `store`, a replica of the cluster at `address`, named `name`.
    static func compact(store: Store, address: ClusterAddress, name: String) async throws -> ClusterStatus {
        let session = PostgresSession(address: address, logger: Logger(label: "strata.cluster"))
        defer { session.close() }
        // At the horizon already (an idle cluster compacted again): no snapshot is written.
        let here = try store.lastTransactionID.rawValue
        let horizon = try await offPool("compact", { try readCluster(session).horizon })
        if horizon == here {
            return try await offPool("compact") {
                // A trim an earlier compaction left unfinished is finished here, with nothing new
                // to publish (it waited for a compaction that moved the horizon).
                if let position = Int64(exactly: horizon) { try removeBehindHorizon(session, horizon: position) }
                return try status(session, store: store)
            }
        }
        // Refused before its snapshot is written (and again, under the cluster row's lock, by
        // `publish`).
        if here < horizon { throw behindHorizon(here, horizon) }
        let scratch = try temporaryDirectory(near: store.path)
        defer { removeScratch(scratch) }
        let position = try await store.writeReplicaSnapshot(to: scratch.appendingPathComponent("snapshot"))
        let file = scratch.appendingPathComponent("snapshot").appendingPathComponent(Store.replicaSnapshotFile)
        return try await offPool("compact") {
            let trimmed = try publish(session, store: store, snapshot: file, position: position, madeBy: name)
            // What the new horizon left behind, outside the transaction: every append waits for
            // the head row, so nothing long runs while it is held. Interrupted, it is done by the
            // next compaction; entries and snapshots behind the horizon are never read.
            // Nothing published (another compaction of the same state came first): its trim, or an
            // earlier one left unfinished, is finished all the same.
            let behind = try trimmed ?? Int64(exactly: readCluster(session).horizon)
            if let behind { try removeBehindHorizon(session, horizon: behind) }
            return try status(session, store: store)
        }
    }

    /// Uploads the snapshot at `position` and moves the cluster's horizon to it, in one
    /// PostgreSQL transaction: the new horizon, or nil when the horizon is there already (then
    /// nothing is kept). The upload runs before the cluster's row is locked (its rows are seen
    /// by no one before the commit), so saves go on meanwhile; under the lock, which also puts
    /// two compactions one after the other, only the checks and the horizon's move.
    static func publish(_ session: PostgresSession, store: Store, snapshot file: URL, position: TransactionID,
                        madeBy name: String) throws -> Int64? {
        let p = Int64(position.rawValue)
        return try mappingFailures(session, nil) { () throws -> Int64? in
            do {
                return try session.transaction { () throws -> Int64? in
                    try upload(session, snapshot: file, position: position, madeBy: name)
                    if let hook = uploadedForTesting.withLock({ $0[store.path] }) { hook() }
                    guard let row = try session.run("SELECT horizon, head FROM strata_cluster FOR UPDATE").first else {
                        throw ClusterError(.noCluster, "the database at \(session.address) holds no cluster row")
                    }
                    let (horizon, head) = try row.decode((Int64, Int64).self)
                    // At the horizon: the cluster's snapshot is this state already, and nothing
                    // is behind it to trim (another compaction of the same state came first).
                    if p == horizon { throw NothingToPublish() }
                    guard p > horizon else { throw behindHorizon(UInt64(p), UInt64(clamping: horizon)) }
                    // A replica past the head, or with another history than the cluster's (its
                    // database restored from an older backup), must not become the snapshot
                    // every new replica starts from.
                    guard p <= head else {
                        throw ClusterError(.badSnapshot, """
                            this replica is at transaction \(p), past the cluster's head \(head) at \
                            \(session.address): its history is not the cluster's (start it again with \
                            `storectl cluster reset STORE`)
                            """)
                    }
                    // A replica stopped before a migration entry the new horizon would trim (it
                    // waits for its code to be migrated there) could then only start again from a
                    // snapshot, at the new schema, without the check that its steps are the
                    // cluster's: the compaction waits for it to migrate, or to be forgotten.
                    try refuseTrimmingAMigrationAReplicaNeeds(session, horizon: horizon, position: p)
                    if let diverged = try ClusterReplica.historyDiverged(store, session, at: position) {
                        throw ClusterError(.badSnapshot, """
                            this replica's transaction \(diverged) is not the cluster's transaction \(diverged) at \
                            \(session.address): its history diverged (start it again with `storectl cluster reset STORE`)
                            """)
                    }
                    _ = try session.run("UPDATE strata_cluster SET horizon = \(p)")
                    return p
                }
            } catch is NothingToPublish {
                // Rolled back, upload and all.
                return nil
            }
        }
    }

    /// Throws (``ClusterError/Kind/replicaActive``) when a migration entry after `horizon`, up to
    /// `position`, is one that a replica listed at or after `horizon` has not applied yet. The
    /// entries where the schema version goes up (and the first after the horizon) are read and
    /// decoded; each that is a migration entry is compared with the replicas' positions.
    static func refuseTrimmingAMigrationAReplicaNeeds(_ session: PostgresSession, horizon: Int64, position p: Int64) throws {
        let candidates = try session.run("""
            SELECT id FROM (SELECT id, schema_version, lag(schema_version) OVER (ORDER BY id) AS before
                            FROM strata_log WHERE id > \(horizon) AND id <= \(p)) t
            WHERE before IS NULL OR schema_version > before ORDER BY id
            """).map { try $0.decode(Int64.self) }
        for id in candidates {
            guard let row = try session.run("""
                SELECT id, entry, author, saved_ms, schema_version FROM strata_log WHERE id = \(id)
                """).first else { continue }
            let (tx, payload, author, saved, version) = try row.decode((Int64, ByteBuffer, String, Int64, Int32).self)
            let entry = try ReplicatedEntry(row: tx, payload, author, saved, version)
            guard try entry.migratesTo() != nil else { continue }
            if let behind = try session.run("""
                SELECT name, applied FROM strata_replicas WHERE applied >= \(horizon) AND applied < \(id)
                ORDER BY applied, name LIMIT 1
                """).first {
                let (name, applied) = try behind.decode((String, Int64).self)
                throw ClusterError(.replicaActive, """
                    replica \(ClusterReplica.shownName(name)) is at transaction \(applied), before the cluster's \
                    migration at \(id): compacting to \(p) would trim the entry it must migrate at; migrate it \
                    first (`storectl migrate STORE --postgres URL` with the new code), or remove it from the \
                    cluster (`storectl cluster forget`)
                    """)
            }
        }
    }

    /// A compaction refused: the replica at `position` is behind the cluster's `horizon`.
    static func behindHorizon(_ position: UInt64, _ horizon: UInt64) -> ClusterError {
        ClusterError(.badSnapshot, """
            this replica is at transaction \(position), behind the cluster's horizon \(horizon): compact from a \
            replica at the cluster's head
            """)
    }

    /// Thrown out of ``publish(_:store:snapshot:position:madeBy:)``'s transaction to roll its
    /// upload back when the horizon is at the snapshot's position already.
    private struct NothingToPublish: Error {}

    /// Log entries removed per statement behind a new horizon: each statement well within
    /// PostgreSQL's `statement_timeout` (``PostgresSession/deadline``) however long the log.
    static let trimBatch: Int64 = 50_000
    /// Snapshot chunks (``chunkBytes`` each) removed per statement.
    static let chunkTrimBatch = 64

    /// Removes the log entries at or before `horizon` and the snapshots before it, a bounded
    /// batch per statement (`batch` entries, ``chunkTrimBatch`` chunks), each statement its own
    /// transaction.
    static func removeBehindHorizon(_ session: PostgresSession, horizon: Int64, batch: Int64 = trimBatch) throws {
        try mappingFailures(session, "removing what the new horizon left behind") {
            if let first = try session.run("SELECT min(id) FROM strata_log").first?.decode(Int64?.self) {
                var from = first
                while from <= horizon {
                    // Ids near Int64.max (a damaged or edited log) end the batches at the horizon
                    // instead of overflowing.
                    let (reach, overflow) = from.addingReportingOverflow(batch - 1)
                    let to = overflow ? horizon : min(horizon, reach)
                    _ = try session.run("DELETE FROM strata_log WHERE id >= \(from) AND id <= \(to)")
                    if to == horizon { break }
                    from = to + 1
                }
            }
            let old = try session.run("SELECT id FROM strata_snapshots WHERE position < \(horizon)").map {
                try $0.decode(Int64.self)
            }
            for id in old {
                // Its chunks a batch at a time, then the row (whose cascade finds none left).
                while true {
                    let removed = try session.run("""
                        WITH gone AS (
                            DELETE FROM strata_snapshot_chunks WHERE snapshot_id = \(id) AND seq IN (
                                SELECT seq FROM strata_snapshot_chunks WHERE snapshot_id = \(id)
                                ORDER BY seq LIMIT \(chunkTrimBatch))
                            RETURNING 1)
                        SELECT count(*) FROM gone
                        """).first?.decode(Int64.self) ?? 0
                    if removed == 0 { break }
                }
                _ = try session.run("DELETE FROM strata_snapshots WHERE id = \(id)")
            }
        }
    }

    /// Called on a compaction's thread once its snapshot is uploaded, before the cluster's row
    /// is locked (tests: another replica's save meanwhile must not wait for the compaction); by
    /// the path of the store compacted, so that tests running in parallel keep to their own.
    static let uploadedForTesting = Locked<[String: @Sendable () -> Void]>([:])

    // MARK: Snapshots in PostgreSQL

    /// Uploads `file` as a complete snapshot at `position`, in chunks; returns its id. Runs in
    /// the caller's transaction.
    @discardableResult
    static func upload(_ session: PostgresSession, snapshot file: URL, position: TransactionID,
                       madeBy: String) throws -> Int64 {
        guard let handle = FileHandle(forReadingAtPath: file.path) else {
            throw ClusterError(.badSnapshot, "cannot read the snapshot \(file.path)")
        }
        defer { try? handle.close() }
        let p = Int64(position.rawValue)
        guard let id = try session.run("""
            INSERT INTO strata_snapshots (position, bytes, chunks, checksum, made_by) VALUES (\(p), 0, 0, 0, \(madeBy))
            RETURNING id
            """).first?.decode(Int64.self) else {
            throw ClusterError(.unavailable, "no snapshot id came back")
        }
        var checksum = Checksum(), bytes: Int64 = 0, seq: Int32 = 0
        while true {
            let data = try handle.read(upToCount: chunkBytes) ?? Data()
            if data.isEmpty { break }
            checksum.add(data)
            bytes += Int64(data.count)
            let buffer = ByteBuffer(data: data)
            _ = try session.run(
                "INSERT INTO strata_snapshot_chunks (snapshot_id, seq, data) VALUES (\(id), \(seq), \(buffer))")
            seq += 1
        }
        let sum = checksum.signed
        _ = try session.run("""
            UPDATE strata_snapshots SET bytes = \(bytes), chunks = \(seq), checksum = \(sum), complete = true
            WHERE id = \(id)
            """)
        return id
    }

    /// The cluster's row, and its latest snapshot downloaded to `file` in one read (a compaction
    /// deleting it meanwhile cannot tear it); every failure as a ``ClusterError``.
    static func downloadLatestSnapshot(_ session: PostgresSession, to file: URL) throws -> (cluster: Row, position: UInt64) {
        let cluster = try readCluster(session)
        var downloaded: UInt64?
        do {
            try session.transaction(begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") {
                downloaded = try download(session, to: file)
            }
        } catch let e as PostgresSession.Failure where downloaded == nil {
            throw ClusterError(.unavailable, "downloading the snapshot: \(e.text)")
        } catch is PostgresSession.Failure {
            // Only the read-only transaction's COMMIT failed: every chunk was read in it, and
            // the file's size and checksum checked out.
        } catch let e as ClusterError {
            throw e
        } catch let e as StrataError {
            // Writing the file (a full disk, a file-size limit): an I/O error, with its errno.
            throw e
        } catch {
            throw ClusterError(.badSnapshot, "downloading the snapshot: \(error)")
        }
        guard let position = downloaded else {
            throw ClusterError(.unavailable, "downloading the snapshot from \(session.address): no position came back")
        }
        // Synced once the transaction is over: a sync of a large file on a slow disk must not
        // outlast PostgreSQL's idle-in-transaction timeout and fail a complete download.
        let fd = open(file.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StrataError.lmdb(LMDBError(code: errno, operation: "open \(file.path)")) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw StrataError.lmdb(LMDBError(code: errno, operation: "fsync \(file.path)")) }
        return (cluster, position)
    }

    /// Downloads the latest complete snapshot to `file`, checking its size and checksum (not
    /// synced: the caller syncs it once its transaction is over); returns its position.
    static func download(_ session: PostgresSession, to file: URL) throws -> UInt64 {
        guard let row = try session.run("""
            SELECT id, position, bytes, chunks, checksum FROM strata_snapshots WHERE complete
            ORDER BY position DESC LIMIT 1
            """).first else {
            throw ClusterError(.badSnapshot, "the cluster at \(session.address) holds no snapshot to start from")
        }
        let (id, position, bytes, chunks, sum) = try row.decode((Int64, Int64, Int64, Int32, Int64).self)
        guard chunks >= 0, bytes >= 0 else {
            throw ClusterError(.badSnapshot, "the snapshot at transaction \(position) declares \(chunks) chunks of \(bytes) bytes")
        }
        // Checked before anything is downloaded: a position no transaction can have is damage
        // to the cluster's database, not a snapshot to start from.
        guard let start = UInt64(exactly: position), start <= TransactionID.largest.rawValue else {
            throw ClusterError(.badSnapshot, "the latest snapshot declares the position \(position), which no transaction can have")
        }
        // A failure to write the file is the file system's (exit 73 or 74 by its errno), not the
        // snapshot's.
        func failed(_ code: Int32, _ what: String) -> StrataError {
            .lmdb(LMDBError(code: code, operation: "\(what) \(file.path)"))
        }
        let fd = open(file.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failed(errno, "create") }
        // Closed once, checked when the download is complete: a network file system reports a
        // write it could not make at the close. (After a failure, the file is removed anyway.)
        var isOpen = true
        defer { if isOpen { _ = close(fd) } }
        var checksum = Checksum(), received: Int64 = 0
        for seq in 0..<chunks {
            guard let chunk = try session.run("""
                SELECT data FROM strata_snapshot_chunks WHERE snapshot_id = \(id) AND seq = \(seq)
                """).first else {
                throw ClusterError(.badSnapshot,
                                   "the snapshot at transaction \(position) lacks chunk \(seq) of \(chunks)")
            }
            let data = Data(buffer: try chunk.decode(ByteBuffer.self))
            checksum.add(data)
            received += Int64(data.count)
            try data.withUnsafeBytes { bytes in
                var done = 0
                while done < bytes.count {
                    let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw failed(errno, "writing the snapshot to")
                    }
                    done += n
                }
            }
        }
        guard received == bytes, checksum.signed == sum else {
            throw ClusterError(.badSnapshot, """
                the snapshot at transaction \(position) is damaged: \(received) bytes with checksum \
                \(checksum.signed), expected \(bytes) bytes with checksum \(sum)
                """)
        }
        isOpen = false
        guard close(fd) == 0 else { throw failed(errno, "closing the snapshot written to") }
        return start
    }

    /// Runs `body` in one PostgreSQL transaction on `session`, rolled back when it throws.
    static func transaction<R>(_ session: PostgresSession, _ body: () throws -> R) throws -> R {
        try mappingFailures(session, nil) { try session.transaction(body) }
    }

    /// Runs `body`'s statements on `session`, its failures as ``ClusterError``s: PostgreSQL's as
    /// ``failure(_:_:)`` words them, a ``ClusterError`` as it is, any other (a row that does not
    /// decode) as ``ClusterError/Kind/unavailable``, after `doing` when given.
    static func mappingFailures<R>(_ session: PostgresSession, _ doing: String?, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch let e as PostgresSession.Failure {
            throw failure(e, session.address)
        } catch let e as ClusterError {
            throw e
        } catch {
            throw ClusterError(.unavailable, doing.map { "\($0): \(error)" } ?? "\(error)")
        }
    }

    /// SQLSTATE classes of refusals that may pass: connection exceptions, transaction rollbacks
    /// (serialization, deadlock), insufficient resources, objects not in the state required (a
    /// lock not available), operator intervention (a statement timeout, a shutdown), system
    /// errors; and a login or database refused (reported as every failure to connect is).
    static let passingStateClasses: Set<Substring> = ["08", "40", "53", "55", "57", "58",
                                                      // A login or database refused: a failure to
                                                      // connect, as an unreachable server is.
                                                      "28", "3D"]
    /// Refusals outside those classes that may pass too: a read-only transaction (a standby
    /// being promoted in a failover).
    static let passingStates: Set<String> = ["25006"]

    /// A ``ClusterError`` for a statement's failure at `address`: ``ClusterError/Kind/refused``
    /// when PostgreSQL refused it for a reason a retry does not change (it names the database).
    static func failure(_ e: PostgresSession.Failure, _ address: ClusterAddress) -> ClusterError {
        guard case .refused(let state, _) = e, !passingStateClasses.contains(state.prefix(2)),
              !passingStates.contains(state) else {
            return ClusterError(.unavailable, e.text)
        }
        return ClusterError(.refused, "PostgreSQL at \(address) refused: \(e.text)")
    }

    /// A new directory beside `path` (same file system as the store; removed by the caller).
    /// The file in a scratch directory its maker holds locked (`flock`) while it works there:
    /// locks end with the process however it ends, and are seen by every process on the machine
    /// whatever its PID namespace (a container sharing the directory).
    static let scratchOwnerFile = ".owner"
    /// The owner files' descriptors, held from a scratch directory's making to its removal.
    private static let scratchOwners = Locked<[String: Int32]>([:])
    /// How old a scratch directory without an owner file must be to be taken for a leftover (one
    /// made by a process that died between making it and locking its owner file).
    static let unownedScratchAge: TimeInterval = 60

    /// Removes the scratch directories beside `path` that processes which died (kill -9) before
    /// removing theirs left, with what they held (a snapshot downloaded, a replica half made):
    /// those whose owner file nobody holds locked.
    static func removeLeftovers(near path: String) {
        let parent = (path as NSString).deletingLastPathComponent
        let base = URL(fileURLWithPath: parent.isEmpty ? "." : parent)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: base.path)) ?? []
        where name.hasPrefix(".strata-cluster-") {
            let dir = base.appendingPathComponent(name)
            let fd = open(dir.appendingPathComponent(scratchOwnerFile).path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            if fd >= 0 {
                // Opened to probe its lock, nothing written through it.
                defer { _ = close(fd) }
                // Held: its maker is at work there.
                guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { continue }
            } else {
                var st = stat()
                guard lstat(dir.path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR,
                      Date().timeIntervalSince1970 - TimeInterval(st.st_mtim.tv_sec) > unownedScratchAge else { continue }
            }
            try? FileManager.default.removeItem(at: dir)
        }
    }

    /// A new scratch directory beside `path`, its owner file held locked by this process until
    /// ``removeScratch(_:)``; what killed processes left there is removed first.
    static func temporaryDirectory(near path: String) throws -> URL {
        let parent = (path as NSString).deletingLastPathComponent
        let base = URL(fileURLWithPath: parent.isEmpty ? "." : parent)
        removeLeftovers(near: path)
        let dir = base.appendingPathComponent(".strata-cluster-\(getpid())-\(UUID().uuidString.prefix(8))")
        // With its errno (a full disk, a directory the user may not write), which sets the exit code.
        guard mkdir(dir.path, 0o700) == 0 else {
            throw StrataError.lmdb(LMDBError(code: errno, operation: "mkdir \(dir.path)"))
        }
        let owner = dir.appendingPathComponent(scratchOwnerFile).path
        let fd = open(owner, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0, flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            // Nothing was written through it; the directory goes with it.
            if fd >= 0 { _ = close(fd) }
            try? FileManager.default.removeItem(at: dir)
            throw StrataError.lmdb(LMDBError(code: code, operation: "lock \(owner)"))
        }
        scratchOwners.withLock { $0[dir.path] = fd }
        return dir
    }

    /// Removes a scratch directory made by ``temporaryDirectory(near:)``, then lets go of its
    /// owner file.
    static func removeScratch(_ dir: URL) {
        try? FileManager.default.removeItem(at: dir)
        // An empty file held for its lock, already removed with the directory.
        if let fd = scratchOwners.withLock({ $0.removeValue(forKey: dir.path) }) { _ = close(fd) }
    }
}

/// FNV-1a over a snapshot's bytes: catches a chunk lost, reordered or damaged on its way.
struct Checksum {
    private var hash = FNV1a()
    var value: UInt64 { hash.value }

    mutating func add(_ data: Data) {
        data.withUnsafeBytes { hash.add($0) }
    }

    var signed: Int64 { Int64(bitPattern: value) }
}
