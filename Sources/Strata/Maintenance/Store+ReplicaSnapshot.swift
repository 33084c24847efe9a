import Foundation
import StrataLMDB

/// Snapshots that start a replica: the state at one position, written compactly as one LMDB file
/// (as compaction writes a generation, with an empty log and the position as its horizon), and a
/// new store made from such a file.
extension Store {
    /// The name of the snapshot's file in the directory ``writeReplicaSnapshot(to:)`` makes.
    public static let replicaSnapshotFile = "data.mdb"

    /// Writes the state at the current head as a new LMDB environment in `directory` (created;
    /// it must not exist): records, links, indexes, unique keys, counts and `meta` (the schema and
    /// the cluster id), no log, the head as the horizon. Reads a pinned snapshot: saves go on
    /// meanwhile. Returns the position the snapshot holds.
    public func writeReplicaSnapshot(to directory: URL) async throws -> TransactionID {
        try checkUsable()
        let target = directory.path
        guard mkdir(target, 0o700) == 0 else {
            throw StrataError.notAStore(path: target, reason: "cannot create the snapshot directory: "
                                            + String(cString: strerror(errno)))
        }
        let snapshot = try self.snapshot(label: "replica snapshot")
        defer { snapshot.close() }
        let position = snapshot.transactionID
        do {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, Error>) in
                DispatchQueue(label: "strata.replica-snapshot").async { [self] in
                    c.resume(with: Result {
                        var options = snapshot.env.options
                        options.noSync = true
                        options.readOnly = false
                        options.noLock = false
                        let env = try LMDBEnvironment(path: target, options: options)
                        defer { env.close() }
                        _ = try copyGeneration(env, from: snapshot, horizon: position, progress: nil)
                        // A replica made from the snapshot joins a cluster that exists: it is
                        // never one being made (the first replica's mark while it makes it).
                        // Nor does it take the name of the replica the snapshot was made on.
                        try env.write { txn in
                            _ = try txn.delete(env[.meta], key: MetaKey.clusterPending)
                            _ = try txn.delete(env[.meta], key: MetaKey.replicaName)
                        }
                        try env.sync()
                    })
                }
            }
        } catch {
            try? FileManager.default.removeItem(atPath: target)
            throw error
        }
        unlink(target + "/lock.mdb")
        return position
    }

    /// Makes a new store at `url` from a snapshot file written by ``writeReplicaSnapshot(to:)``
    /// and opens it. The file is copied into the store's first generation under a temporary name,
    /// synced, renamed, and only then does `current` point at it: a crash leaves no store, or the
    /// whole one. The store opens with the schema the snapshot holds.
    ///
    /// - Throws: ``StrataError/notAStore(path:reason:)`` when `url` exists or the file is not a
    ///   snapshot of a Strata store; ``StrataError/lmdb(_:)`` with the system's error when the
    ///   file cannot be copied (a full disk: `ENOSPC`).
    public static func createReplica(fromSnapshot file: URL, at url: URL,
                                     configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        try makeReplica(fromSnapshot: file, at: url, configuration: configuration)
        return try openExisting(at: URL(fileURLWithPath: url.standardizedFileURL.path), configuration: configuration)
    }

    /// ``createReplica(fromSnapshot:at:configuration:)`` without opening the store: the store
    /// directory is complete when this returns (and may be renamed whole, as a join that builds
    /// it aside does before anyone sees it).
    public static func makeReplica(fromSnapshot file: URL, at url: URL,
                                   configuration: StoreConfiguration = StoreConfiguration()) throws {
        let path = url.standardizedFileURL.path
        if FileManager.default.fileExists(atPath: path) {
            throw StrataError.notAStore(path: path, reason: "a new replica is made in a directory that does not exist")
        }
        makeReplicaAfterCheckForTesting.withLock { $0 }?(path)
        let permissions = StorePermissions(configuration)
        // Made here or refused (another process making the same path meanwhile): what fails
        // below takes it away again (a full disk, a snapshot that cannot be read), so that
        // nothing half made stays at `url`, and never a directory someone else made.
        try createStoreDirectory(path, permissions: permissions, mayExist: false)
        do {
            let directory = StoreDirectory(path: path, permissions: permissions)
            let name = StoreDirectory.generationName(1)
            let generation = path + "/" + name
            try permissions.makeDirectory(generation)
            try copyDurably(from: file.path, to: generation + "/data.mdb", mode: permissions.fileMode)
            try StoreDirectory.syncDirectory(generation)
            if let notSynced = try directory.switchCurrent(to: name) { throw notSynced }
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw error
        }
    }

    /// Run (tests only) by ``makeReplica(fromSnapshot:at:configuration:)`` between its check
    /// that the path does not exist and the making of the directory, with the path.
    static let makeReplicaAfterCheckForTesting = Locked<(@Sendable (String) -> Void)?>(nil)

    /// The cluster the store at `url` is a replica of (``replicaClusterID``), read without
    /// keeping the store open; nil for a store of one machine.
    ///
    /// - Throws: ``StrataError/alreadyOpen(path:reason:)`` when this process has the store open
    ///   (opening it again would hand back that instance, which the read would then close).
    public static func replicaCluster(at url: URL, configuration: StoreConfiguration = StoreConfiguration())
        throws -> String? {
        try readingClosed(at: url, configuration: configuration) { try $0.replicaClusterID }
    }

    /// ``clusterBeingMadeIn`` of the store at `url`, read without keeping the store open (as
    /// ``replicaCluster(at:configuration:)``, and refused the same way while this process has it
    /// open).
    public static func clusterBeingMadeIn(at url: URL, configuration: StoreConfiguration = StoreConfiguration())
        throws -> String? {
        try readingClosed(at: url, configuration: configuration) { try $0.clusterBeingMadeIn }
    }

    /// `body` of the store at `url`, opened read-only for it and closed after; refused
    /// (``StrataError/alreadyOpen(path:reason:)``) while this process has the store open, whose
    /// instance the open would hand back and the close then close.
    private static func readingClosed<R>(at url: URL, configuration: StoreConfiguration,
                                         _ body: (Store) throws -> R) throws -> R {
        let path = url.standardizedFileURL.path
        if StoreRegistry.shared.existing(path: path) != nil {
            throw StrataError.alreadyOpen(path: path, reason: "close it first")
        }
        var readOnly = configuration
        readOnly.readOnly = true
        let store = try openExisting(at: url, configuration: readOnly)
        defer { store.close() }
        return try body(store)
    }

    /// Replaces the state of the replica at `url` with a snapshot file (a client reset: a replica
    /// too far behind its cluster's retention horizon starts again from the cluster's latest
    /// snapshot), then opens it. A replica holds nothing of its own (every save it acknowledged is
    /// in the cluster's log), so nothing is lost. The snapshot becomes a new generation, switched
    /// in with one rename, as compaction switches: a crash leaves the old replica or the new one.
    ///
    /// - Throws: ``StrataError/alreadyOpen(path:reason:)`` when this process has the store open,
    ///   ``StrataError/storeBusy(path:processIDs:)`` when another process has, and
    ///   ``StrataError/notAStore(path:reason:)`` when it is not a replica or the file is not a
    ///   snapshot of one of the same cluster.
    public static func resetReplica(at url: URL, fromSnapshot file: URL,
                                    configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        let path = url.standardizedFileURL.path
        // Before anything else: opening the store again would hand back that instance (and the
        // close below would close it), and the lock taken below, released, would drop its lock
        // (fcntl locks belong to the process, and closing any descriptor of the file drops them).
        if StoreRegistry.shared.existing(path: path) != nil {
            throw StrataError.alreadyOpen(path: path, reason: "close it before resetting the replica")
        }
        let old = try openExisting(at: url, configuration: configuration)
        let cluster: String?, replicaName: String?
        do {
            defer { old.close() }
            cluster = try old.replicaClusterID
            replicaName = try old.replicaName
        }
        guard let cluster else { throw StrataError.notAStore(path: path, reason: "not a replica of a cluster") }
        let permissions = StorePermissions(configuration)
        let directory = StoreDirectory(path: path, permissions: permissions)
        guard let lock = try StoreLock(path: directory.lockPath, readOnly: false, permissions: permissions,
                                       store: path) else { throw StrataError.readOnly(path: path) }
        defer { lock.release() }
        try lock.takeExclusive(store: path)
        guard let live = try directory.currentGeneration() else { throw StrataError.storeNotFound(path: path) }
        // A process with the live generation open whose lock file was deleted and made again
        // (see ``otherProcesses(_:)``) still writes to it. This process has it closed, so its
        // lock.mdb may be opened for the probe.
        let generationPath = path + "/" + live
        try StoreLock.refuseOtherHolders(ofGeneration: generationPath,
                                         probed: FileLockProbe.otherProcessHolds(fileAt: generationPath + "/lock.mdb"),
                                         store: path)
        let name = try directory.newGeneration()
        let generation = path + "/" + name
        do {
            try copyDurably(from: file.path, to: generation + "/data.mdb", mode: permissions.fileMode)
            try StoreDirectory.syncDirectory(generation)
            // The snapshot must be of this replica's cluster.
            var options = LMDBOptions(mapSizeBytes: min(configuration.initialMapSizeBytes, configuration.maxMapSizeBytes),
                                      maxMapSizeBytes: configuration.maxMapSizeBytes, maxReaders: 8, readOnly: true,
                                      noSync: true, noLock: true)
            options.fileMode = permissions.fileMode
            let env = try LMDBEnvironment(path: generation, options: options)
            let theirs = try storedClusterID(env)
            env.close()
            guard theirs == cluster else {
                throw StrataError.notAStore(path: file.path, reason: "not a snapshot of cluster \(cluster)")
            }
            // The replica keeps the name it goes by in the cluster (a snapshot carries none).
            if let replicaName {
                options.readOnly = false
                options.noSync = false
                let named = try LMDBEnvironment(path: generation, options: options)
                defer { named.close() }
                try named.write { try $0.put(named[.meta], key: MetaKey.replicaName, value: Array(replicaName.utf8)) }
                unlink(generation + "/lock.mdb")
            }
        } catch {
            try? FileManager.default.removeItem(atPath: generation)
            throw error
        }
        // Not synced: a power loss may bring the old link back, so the old generation stays, and
        // the reset fails with the sync's error instead of opening the store (as a compaction's
        // switch stops its writer); the next open syncs the directory first, then removes it.
        if let notSynced = try directory.switchCurrent(to: name) { throw notSynced }
        StoreDirectory.retire(generation: path + "/" + live)
        lock.release()
        return try openExisting(at: url, configuration: configuration)
    }
}

/// Copies `source` to `target` (which must not exist) under a temporary name, syncs it, and
/// renames it into place. A snapshot that cannot be opened is
/// ``StrataError/notAStore(path:reason:)``; a failure to read or write is the system's error
/// (``StrataError/lmdb(_:)`` with its errno: a full disk is `ENOSPC`).
private func copyDurably(from source: String, to target: String, mode: mode_t) throws {
    // The file system's error, by its errno (a full disk is exit 74, a read-only one 73), not a
    // verdict on the store.
    func failure(_ what: String) -> StrataError {
        let code = errno
        return StrataError.lmdb(LMDBError(code: code, operation: what))
    }
    let input = open(source, O_RDONLY | O_CLOEXEC)
    guard input >= 0 else {
        throw StrataError.notAStore(path: source, reason: "cannot open the snapshot: \(String(cString: strerror(errno)))")
    }
    defer { close(input) }
    let partial = target + ".partial"
    let output = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
    guard output >= 0 else { throw failure("create \(partial)") }
    var done = false
    defer {
        close(output)
        if !done { unlink(partial) }
    }
    // The store's file mode whatever the umask (a shared store's file is the group's to write).
    try StorePermissions.setMode(output, mode, path: partial)
    var buffer = [UInt8](repeating: 0, count: 1 << 20)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
        if n < 0 {
            if errno == EINTR { continue }
            throw failure("read the snapshot \(source)")
        }
        if n == 0 { break }
        var written = 0
        while written < n {
            let w = buffer.withUnsafeBytes { write(output, $0.baseAddress! + written, n - written) }
            if w < 0 {
                if errno == EINTR { continue }
                throw failure("write \(partial)")
            }
            written += w
        }
    }
    guard fsync(output) == 0 else { throw failure("fsync \(partial)") }
    guard rename(partial, target) == 0 else { throw failure("rename \(partial)") }
    done = true
}
