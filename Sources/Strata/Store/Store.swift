import Foundation
import Logging
import Synchronization

/// A Strata store: one directory holding an LMDB environment with the log, the materialized
/// state and its indexes.
///
/// One writer appends every save to the log and updates the state in the same LMDB transaction;
/// readers use MVCC snapshots and never wait. Open a store once per process (opening it again
/// returns the same instance).
///
/// ```swift
/// let schema = try Schema.load(directory: URL(fileURLWithPath: "Schemas/library"))
/// let store = try Store.open(at: URL(fileURLWithPath: "/var/lib/app/library.strata"), schema: schema)
/// var changes = ChangeSet()
/// var genre = Record(entity: schema.entity(named: "Genre")!)
/// genre["name"] = .string("Jazz")
/// changes.insert(genre)
/// let tx = try await store.save(changes, author: "setup")
/// let genres = try store.mainContext.fetch(Query(entity: "Genre"))
/// ```
public final class Store: Sendable {
    /// The store directory.
    public let path: String
    /// The schema the store holds (the one it was opened with).
    public let schema: Schema
    /// The configuration the store was opened with.
    public let configuration: StoreConfiguration
    /// The live generation's environment; replaced by compaction and migration.
    private let envBox: Locked<LMDBEnvironment>
    /// The LMDB environment of the live generation. Take it once per operation: a compaction may
    /// swap it between two reads of this property.
    var env: LMDBEnvironment { envBox.withLock { $0 } }
    let directory: StoreDirectory
    let lock: StoreLock?
    let writer: Writer?
    let snapshots: SnapshotRegistry
    let hub = ChangeHub()
    /// Publishes this process's commits and other processes' to ``hub``, in log order.
    let publisher: CommitPublisher
    /// One compaction or migration at a time in this process (``MaintenanceGate``).
    let maintenance = MaintenanceGate()
    /// Entered by the ``close()`` that closes, left when that close has finished (a later
    /// `close()` waits for it).
    private let closeFinished = DispatchGroup()
    let logger: Logger
    /// The process that opened the store (a child after `fork()` must open its own).
    let processID: pid_t
    /// ``ForkWatch/generation`` at open: it changes in a forked child.
    private let forkGeneration = ForkWatch.generation
    private let closed = Atomic<Bool>(false)
    /// Whether ``close()`` was called; set with `closeFinished` entered, under its lock.
    private let closeStarted = Locked<Bool>(false)
    /// Run (tests only) by the close that closes, once the store reads as closed and before it
    /// shuts anything down.
    let closeStartingForTesting = Locked<(@Sendable () -> Void)?>(nil)
    /// Set when this process migrated the store: this instance holds the old schema.
    private let migratedVersion = Atomic<Int>(0)
    private let deleteOnClose: Bool
    /// Held weakly: the context holds the store, and a strong reference back would keep both alive.
    private let main = Locked<WeakViewContext>(WeakViewContext())
    /// This process's ``UnsyncedCommits`` marker (a relaxed store), removed at a clean close.
    private let unsyncedMarker: String?
    /// Generations this instance switched away from, held weakly: each closes (and is removed
    /// from disk) when its last snapshot is released, and ``close()`` closes any still open, so
    /// that a reference some thread has not dropped yet cannot outlive the close and leave the
    /// old generation on disk when the process exits.
    let replacedEnvironments = ReplacedEnvironments()

    /// True when this open found that the machine went down (an OS crash or a power loss) while
    /// a process had the store open with ``Durability/relaxed`` durability, before its last
    /// flush: the commits made since that flush may be lost, and on a file system that does not
    /// keep the order of writes the data file may hold some pages of a commit and not others
    /// (``verify(rebuild:progress:)`` checks the store); also when that process's final flush
    /// failed. A process that was killed (or ended without closing the store) leaves a marker
    /// that the next open of this boot that no other process shares syncs and removes: its
    /// commits were in the OS's cache. If the machine restarts first, even cleanly, that open
    /// reports it as a crash: it cannot tell a clean restart from a crash.
    ///
    /// A replica found so keeps the finding (StrataCluster refuses to follow its cluster with it:
    /// make a new replica); any other store reports it once, to this open (and in the log).
    public let crashedWithUnsyncedCommits: Bool

    private init(path: String, schema: Schema, configuration: StoreConfiguration, env: LMDBEnvironment,
                 lock: StoreLock?, deleteOnClose: Bool) throws {
        self.path = path
        self.schema = schema
        self.configuration = configuration
        self.envBox = Locked(env)
        self.directory = StoreDirectory(path: path, permissions: StorePermissions(configuration))
        self.lock = lock
        self.deleteOnClose = deleteOnClose
        self.processID = getpid()
        var logger = Logger(label: "strata.store")
        logger[metadataKey: "store"] = "\(path)"
        self.logger = logger
        snapshots = SnapshotRegistry(limit: configuration.maxOpenSnapshots, path: path, schema: schema,
                                     forkGeneration: forkGeneration)
        let head = try CommitPublisher.head(env, schema)
        let box = envBox
        publisher = CommitPublisher(hub: hub, schema: schema, head: head,
                                    intervalMilliseconds: configuration.otherProcessPollMilliseconds, logger: logger) {
            let env = box.withLock { $0 }
            return env.isClosed ? nil : env
        }
        if configuration.readOnly {
            writer = nil
        } else {
            let registry = snapshots
            let warnAfter = configuration.snapshotAgeWarningSeconds
            let log = logger
            writer = Writer(env: env, storePath: path, schema: schema, config: configuration, publisher: publisher,
                            logger: logger) {
                for s in registry.takeOverdueIfDue(olderThan: warnAfter) {
                    log.warning("""
                        snapshot '\(s.label)' pinned at transaction \(s.transactionID) for \(Int(s.age)) s \
                        keeps old pages alive
                        """)
                }
            }
        }
        let isReplica = try Self.storedClusterID(env) != nil
        if let writer, isReplica { writer.isReplica.store(true, ordering: .releasing) }
        if env.staleReadersCleared > 0 {
            logger.notice("cleared \(env.staleReadersCleared) stale reader slot(s) of crashed processes")
        }
        crashedWithUnsyncedCommits = try Self.settleUnsyncedMarkers(path: path, env: env, readOnly: configuration.readOnly,
                                                                    isReplica: isReplica, lock: lock, logger: logger)
        // Last: nothing in this open can fail after the marker is written.
        unsyncedMarker = configuration.durability == .relaxed && !configuration.readOnly
            ? try UnsyncedCommits.mark(directory: path, permissions: StorePermissions(configuration)) : nil
        if !configuration.readOnly {
            let marker = unsyncedMarker, directory = path, permissions = StorePermissions(configuration)
            let logger = self.logger
            writer?.onFlushFailure.withLock {
                $0 = { UnsyncedCommits.noteFailedSync(marker: marker, directory: directory, permissions: permissions,
                                                      logger: logger) }
            }
        }
    }

    /// Looks at the ``UnsyncedCommits`` markers left in the store directory. Returns whether one
    /// says commits may be lost: one of another boot (the machine went down), or one whose
    /// process's final flush failed. A read-write open that no other process shares syncs the
    /// data file for the processes of this boot that are gone (their commits may still be in the
    /// OS's cache only) and removes their markers; and, except in a replica, removes the markers
    /// that said commits may be lost once it has reported them. Where the kernel gives no boot id,
    /// nothing can be told apart: markers are left alone.
    private static func settleUnsyncedMarkers(path: String, env: LMDBEnvironment, readOnly: Bool, isReplica: Bool,
                                              lock: StoreLock?, logger: Logger) throws -> Bool {
        let listed = try UnsyncedCommits.markers(in: path)
        guard !listed.isEmpty, let boot = UnsyncedCommits.bootID else { return false }
        guard !readOnly else { return listed.contains { $0.bootID != boot || $0.flushFailed } }
        UnsyncedCommits.afterListingForTesting.withLock { $0 }?(path)
        // Asked after the listing: a process that wrote a marker before it holds the lock now,
        // unless it has ended. Only when no other process has the store open is a marker of this
        // boot known to be stale (a process id alone can be reused, or be another namespace's).
        // A marker of an instance still open in this process is its own to remove.
        // The live generation's lock.mdb too: a process whose `strata.lock` was deleted and made
        // again still has the store open, and its marker is not stale.
        let shared = (lock?.isShared() ?? true) || env.otherProcessHoldsLockFile() != false
        // Read again once nobody else holds the lock: a process that held it at the listing may
        // have noted a failed final flush in its marker before it let go, and that marker must
        // be reported, not taken as stale and removed. (Not listed again: a marker made since is
        // a new opener's.)
        let markers = shared ? listed : listed.compactMap(UnsyncedCommits.reread)
        let crashed = markers.filter { $0.bootID != boot || $0.flushFailed }
        let gone = shared ? [] : markers.filter {
            $0.bootID == boot && !$0.flushFailed && !UnsyncedCommits.isOpenHere($0.path)
        }
        let reported = isReplica ? [] : crashed
        if !reported.isEmpty {
            // The machine went down with commits not flushed: on a file system that does not keep
            // the order of writes (ext4 and XFS do not, for blocks written over), pages of earlier
            // commits may be damaged too. Every page is checked before the store is used, and
            // the markers stay while it fails, so every open checks again.
            try env.checkPages()
        }
        if !gone.isEmpty || !reported.isEmpty {
            // What the file holds now is made durable before the evidence goes. A sync that
            // fails is noted in the markers of the processes that are gone: the kernel reports a
            // write error once, so the next open's sync would succeed, and they would be taken
            // for clean exits.
            do {
                if UnsyncedCommits.failSettlingSyncForTesting.withLock({ $0.contains(path) }) {
                    throw StrataError.lmdb(LMDBError(code: EIO, operation: "mdb_env_sync"))
                }
                try syncDataFile(env)
            } catch {
                for m in gone { UnsyncedCommits.noteFailedFlush(m.path, logger: logger) }
                throw error
            }
            for m in gone + reported { UnsyncedCommits.clear(m.path, logger: logger) }
            do { try StoreDirectory.syncDirectory(path) } catch {
                logger.warning("could not sync \(path) after removing markers of unsynced commits: \(error)")
            }
        }
        guard !crashed.isEmpty else { return false }
        let pids = crashed.map { String($0.pid) }.joined(separator: ", ")
        let remedy = isReplica ? "; this replica must be made again from its cluster (`storectl cluster join`)"
                               : " (`storectl verify` checks the store)"
        logger.warning("""
            process(es) \(pids) had this store open with relaxed durability, and the machine went down (or \
            the final flush failed) before its last commits were flushed: those commits may be lost\(remedy)
            """)
        return true
    }

    /// `env`'s data file flushed to disk (`mdb_env_sync(force)`), its failure a ``StrataError``.
    private static func syncDataFile(_ env: LMDBEnvironment) throws {
        do { try env.sync() } catch let e as LMDBError { throw StrataError.lmdb(e) }
    }

    deinit {
        guard !closed.load(ordering: .acquiring) else { return }
        // In a forked child the environment, queues and locks are the parent's: nothing to close.
        guard !snapshots.isForkedChild else { return }
        // The last reference may go on the writer's queue (a save's merge closure held it).
        if !closeInBackgroundIfItCannotWait() { shutDown() }
    }

    // MARK: Opening

    /// Opens (creating when missing, unless configured otherwise) the store at `url` for `schema`.
    ///
    /// - Throws: ``StrataError/migrationRequired(storeVersion:appVersion:model:)`` or
    ///   ``StrataError/storeTooNew(storeVersion:appVersion:model:)`` when versions differ (nothing is
    ///   changed), ``StrataError/alreadyOpen(path:reason:)`` when this process has it open with other
    ///   options, ``StrataError/notAStore(path:reason:)`` for a directory that is not a store.
    public static func open(at url: URL, schema: Schema,
                            configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        try StoreRegistry.shared.open(path: url.path, configuration: configuration, schema: schema,
                                      deleteOnClose: false, sameOptions: true)
    }

    /// Whether `url` holds a store, or anything a new store must not be created over (a bare
    /// LMDB environment, a damaged `current` link): `current` or `data.mdb` is there. A store
    /// whose creation stopped before its first commit does not count: ``open(at:schema:configuration:)``
    /// creates it.
    public static func exists(at url: URL) -> Bool {
        let directory = StoreDirectory(path: url.path)
        // lstat: a `current` link counts even when it points nowhere.
        var st = stat()
        if lstat(url.appendingPathComponent("data.mdb").path, &st) == 0 { return true }
        return lstat(directory.currentPath, &st) == 0 && !directory.creationUnfinished
    }

    /// Process ids of the other processes that have the store at `url` open (hold its lock
    /// file), as `/proc/locks` lists them; empty when there are none, or when they cannot be
    /// seen this way (no lock file, no `/proc`, a file system whose `/proc/locks` entries name
    /// another device than `stat` does, such as a btrfs subvolume; a process of another pid
    /// namespace is listed as 0). It opens nothing: a tool waiting for a store to be free (`storectl compact
    /// --wait`) asks this instead of opening the store, which would make it one of the processes
    /// every other such tool waits for.
    public static func processesHolding(at url: URL) -> [Int32] {
        StoreLock.holders(ofLockFile: StoreDirectory(path: url.standardizedFileURL.path).lockPath)
    }

    /// Opens an existing store read-write with the schema stored in it (for tools such as
    /// `storectl import`, which work with whatever model the store holds).
    public static func openExisting(at url: URL,
                                    configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        var config = configuration
        config.createIfMissing = false
        return try StoreRegistry.shared.open(path: url.path, configuration: config, schema: nil, deleteOnClose: false)
    }

    /// Opens an existing store read-only, with the schema stored in it (for tools, and for prebuilt
    /// stores shipped read-only, also in a directory that cannot be written).
    public static func openReadOnly(at url: URL,
                                    configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        var config = configuration
        config.readOnly = true
        return try StoreRegistry.shared.open(path: url.path, configuration: config, schema: nil, deleteOnClose: false)
    }

    /// A store in a new temporary directory, removed on ``close()``: the same code path as a real
    /// store (there is no separate in-memory engine), for tests and previews.
    public static func temporary(schema: Schema,
                                 configuration: StoreConfiguration = StoreConfiguration()) throws -> Store {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-\(UUID().uuidString)")
        var config = configuration
        config.readOnly = false
        config.createIfMissing = true
        return try StoreRegistry.shared.open(path: dir.path, configuration: config, schema: schema, deleteOnClose: true)
    }

    /// Called by the registry with the canonical path, once per process.
    static func make(path: String, schema appSchema: Schema?, configuration: StoreConfiguration,
                     deleteOnClose: Bool) throws -> Store {
        try configuration.validate()
        try appSchema?.checkDefaults(maxValueBytes: configuration.maxValueBytes)
        let fm = FileManager.default
        let permissions = StorePermissions(configuration)
        let directory = StoreDirectory(path: path, permissions: permissions)
        let mayCreate = configuration.createIfMissing && !configuration.readOnly && appSchema != nil
        var isDir: ObjCBool = false
        if !fm.fileExists(atPath: path, isDirectory: &isDir) {
            guard mayCreate else { throw StrataError.storeNotFound(path: path) }
            try createStoreDirectory(path, permissions: permissions)
        } else if !isDir.boolValue {
            throw StrataError.notAStore(path: path, reason: "a store is a directory, this is a file")
        }
        // Whether this is a store at all, decided before anything is created in the directory:
        // a failed open of a directory that is not a store (another program's) leaves it as it
        // was, without a lock file. Read again under the lock below (a switch may come between).
        if let live = try directory.currentGeneration() {
            // The link and the generation it names are checked before the lock file is made too
            // (and again under the lock below): a damaged link or a generation others may write
            // is refused with nothing created. A switch may come between the read of the link
            // and the check: only a link that still names the same generation is refused here.
            do {
                try directory.checkLiveGeneration(live)
                try permissions.checkDirectory(path + "/" + live, store: path)
            } catch {
                if try directory.currentGeneration() == live { throw error }
            }
        } else {
            try refuseWithoutCurrent(directory, mayCreate: mayCreate)
        }
        // Nothing in a directory that others may write can be trusted (they could have replaced
        // any file): refused before anything in it is opened or created.
        try permissions.checkDirectory(path, store: path)
        try permissions.checkFileMode(directory.lockPath, store: path)
        let lock = try StoreLock(path: directory.lockPath, readOnly: configuration.readOnly, permissions: permissions,
                                 store: path)
        let generation: String
        if let live = try directory.currentGeneration() {
            // Checked before anything is removed: the stale-generation sweep keeps only `live`,
            // so a link pointing nowhere would otherwise delete every generation, data included.
            try directory.checkLiveGeneration(live)
            try permissions.checkDirectory(path + "/" + live, store: path)
            generation = live
            if !configuration.readOnly {
                // The link read is made durable before anything is written or removed: a
                // switch whose own directory sync failed (or a crash between its rename and its
                // sync) left a rename a power loss could undo, and this open would otherwise
                // delete the old generation that link names, or acknowledge saves into the new
                // one.
                try directory.syncDirectory()
            }
            // A live generation without data beside one with data is not a store being created
            // (its first generation is the only one): `current` was pointed at the wrong one, and
            // the sweep below would delete the data. Refused as it is.
            if (directory.dataFileSize(live) ?? 0) == 0 {
                let holding = directory.generationsHoldingData().filter { $0 != live }
                if !holding.isEmpty {
                    throw StrataError.notAStore(
                        path: path,
                        reason: "`current` points at \(live), whose data.mdb is " +
                                "\(directory.dataFileSize(live) == nil ? "missing" : "empty"), while " +
                                "\(holding.joined(separator: ", ")) \(holding.count == 1 ? "holds" : "hold") data; " +
                                "nothing was changed (point `current` at the generation to use)")
                }
            }
            // `isShared`, not `otherHolders`: a holder `F_GETLK` reports without a pid (in another
            // PID namespace) and `/proc/locks` does not list is building a generation too.
            if !configuration.readOnly && lock?.isShared() == false {
                directory.removeStaleGenerations(except: live)
            }
        } else {
            try refuseWithoutCurrent(directory, mayCreate: mayCreate)
            generation = try directory.createFirstGeneration()
        }
        let generationPath = path + "/" + generation
        // LMDB opens these by name and would follow a link planted in their place (writing,
        // for lock.mdb, wherever it points): refused before LMDB opens the generation.
        for file in ["data.mdb", "lock.mdb"] {
            try StorePermissions.checkFile(generationPath + "/" + file, store: path)
            try permissions.checkFileMode(generationPath + "/" + file, store: path)
        }
        // A creation that stopped before the store's first commit was durable (a full disk, a
        // kill): its generation holds no store yet, and an open that may create one creates it.
        // Read before the data file's size: a creator finishing meanwhile removes the marker
        // only after its commit, so an empty file seen after the marker is a creation's.
        let unfinished = directory.creationUnfinished
        let dataSize = directory.dataFileSize(generation)
        if (dataSize ?? 0) == 0 && !unfinished {
            // LMDB would quietly start an empty store in an emptied or deleted data file: every
            // transaction gone. (Missing, it was "no store here", which `init` contradicted.)
            throw StrataError.notAStore(path: path, reason: "\(generation)/data.mdb is " +
                                            "\(dataSize == nil ? "missing" : "empty"): the store's data is gone")
        }
        if (dataSize == nil || dataSize == 0) && !mayCreate {
            if unfinished { throw Self.creationStopped(path) }
            throw StrataError.storeNotFound(path: path)
        }
        let env: LMDBEnvironment
        do {
            env = try openEnvironment(path: generationPath, configuration: configuration)
        } catch StrataError.notAStore where unfinished && !mayCreate {
            throw Self.creationStopped(path)
        }
        do {
            let schema: Schema
            do {
                schema = try prepareMeta(env: env, path: path, appSchema: appSchema, configuration: configuration)
            } catch StrataError.notAStore where unfinished && !mayCreate {
                throw Self.creationStopped(path)
            }
            // A new store: the generation's entries (data.mdb, lock.mdb) made durable with its
            // first commit, which `prepareMeta` just wrote; then the creation is finished.
            if dataSize == nil || unfinished {
                if !configuration.readOnly {
                    // A relaxed store's first commit (its metadata) is synced too: it comes before
                    // the marker of unsynced commits (``UnsyncedCommits``), which the open writes last.
                    if configuration.durability == .relaxed { try syncDataFile(env) }
                    try StoreDirectory.syncDirectory(generationPath)
                    // The store is made: a marker that cannot be removed only makes the next open
                    // that may create the store find its metadata and remove it then.
                    try? directory.finishCreation()
                }
            }
            return try Store(path: path, schema: schema, configuration: configuration, env: env, lock: lock,
                             deleteOnClose: deleteOnClose)
        } catch {
            env.close()
            throw error
        }
    }

    /// The error of an open that may not create a store, for a store whose creation stopped
    /// before its first commit.
    private static func creationStopped(_ path: String) -> StrataError {
        .notAStore(path: path, reason: "its creation has not finished: it stopped before its first commit was "
            + "written, or is still running (create it again: `storectl init`, or open it with a schema)")
    }

    /// Makes the store directory `path` (missing parents with the default mode; the store
    /// directory itself with the store's, whatever the umask) and syncs its parent, so that a
    /// crash cannot lose the store's own entry.
    /// With `mayExist` false, a directory made meanwhile by another process is refused
    /// (``StrataError/notAStore(path:reason:)``) rather than shared: the caller then knows that
    /// the directory is its own to remove.
    static func createStoreDirectory(_ path: String, permissions: StorePermissions, mayExist: Bool = true) throws {
        var st = stat()
        if lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK {
            // A link to a directory that does not exist (`fileExists` follows it): mkdir would
            // not follow it, and making its target would create a directory wherever it points.
            let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "?"
            throw StrataError.notAStore(path: path, reason: "cannot create directory: \(path) is a symbolic link to "
                + "\(target), which does not exist "
                + "(create that directory first, or give the path of a directory to create)")
        }
        let parent = (path as NSString).deletingLastPathComponent.isEmpty
            ? "." : (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        } catch {
            throw StrataError.notAStore(
                path: path,
                reason: "cannot create directory: " +
                        "\(FileSystemReason.uncreatableDirectory(parent) ?? FileSystemReason.describe(error))")
        }
        do {
            try permissions.makeDirectory(path)
        } catch StrataError.lmdb(let e) where e.code == EEXIST && mayExist {
            // Made by another process opening the same new store at this moment.
        } catch StrataError.lmdb(let e) where e.code == EEXIST {
            throw StrataError.notAStore(path: path, reason: "the directory was made by another process meanwhile")
        } catch StrataError.lmdb(let e) {
            throw StrataError.notAStore(path: path,
                                        reason: "cannot create directory: \(String(cString: strerror(e.code)))")
        }
        try StoreDirectory.syncDirectory(parent)
    }

    /// For a directory without `current`: throws unless a new store may be created in it. A bare
    /// LMDB environment and a generation holding data (a store whose link was removed) are never
    /// created over (an interrupted first open leaves an empty generation only); anything else
    /// is ``StrataError/storeNotFound(path:)`` unless `mayCreate`.
    private static func refuseWithoutCurrent(_ directory: StoreDirectory, mayCreate: Bool) throws {
        let path = directory.path
        if FileManager.default.fileExists(atPath: path + "/data.mdb") {
            throw StrataError.notAStore(path: path,
                                        reason: "a bare LMDB environment (Strata keeps its data under current/)")
        }
        if let orphan = directory.generationsHoldingData().first {
            // Another process creating the store may have linked `current` to it since it was
            // read: not an orphan then (two `init`s at once made one say the link was missing).
            if try directory.currentGeneration() != nil { return }
            throw StrataError.notAStore(path: path, reason: "`current` is missing but \(orphan) holds a store's data; "
                + "nothing was changed "
                + "(if \(orphan) is the live generation, restore the link with `ln -s \(orphan) current` inside the "
                + "store directory)")
        }
        guard mayCreate else { throw StrataError.storeNotFound(path: path) }
    }

    /// Refuses a read without a reader slot (`MDB_NOLOCK`) while another process has the
    /// generation at `path` open: its writer would not see this reader, and would reuse the
    /// pages the reader is reading after two commits (wrong answers, or a damaged page read).
    /// Every process with the environment open holds a lock on its `lock.mdb`
    /// (``FileLockProbe``). A writer that opens the store later cannot see such a reader either
    /// (see README, "Opening a store").
    private static func refuseUnlockedReadWhileOpenElsewhere(_ path: String) throws {
        if let pid = FileLockProbe.holder(fileAt: path + "/lock.mdb") {
            throw StrataError.storeBusy(path: path, processIDs: pid > 0 ? [pid] : [])
        }
    }

    private static func openEnvironment(path: String, configuration c: StoreConfiguration) throws -> LMDBEnvironment {
        var options = LMDBOptions(mapSizeBytes: min(c.initialMapSizeBytes, c.maxMapSizeBytes),
                                  maxMapSizeBytes: c.maxMapSizeBytes, maxReaders: c.maxReaders, readOnly: c.readOnly,
                                  noSync: c.durability == .relaxed, noLock: false)
        options.fileMode = StorePermissions(c).fileMode
        options.checkPages = c.checkPagesOnOpen
        options.pageCheckMemo = c.checkedPagesMemo.map { PageCheckMemo(directory: $0.path) }
        // A read-only store in a directory we cannot write to: the lock file cannot be used, so
        // the open takes no reader slot (`MDB_NOLOCK`).
        if c.readOnly && access(path, W_OK) != 0 {
            try refuseUnlockedReadWhileOpenElsewhere(path)
            options.noLock = true
        }
        do {
            return try LMDBEnvironment(path: path, options: options)
        } catch let e as LMDBError {
            if c.readOnly && !options.noLock && (e.code == EACCES || e.code == EROFS) {
                try refuseUnlockedReadWhileOpenElsewhere(path)
                options.noLock = true
                if let env = try? LMDBEnvironment(path: path, options: options) { return env }
            }
            if e.isDamagedPage {
                throw StrataError.damagedStore(path: path,
                                               reason: "liblmdb found a damaged page (\(e.operation): \(e.message))")
            } else if e.isForeignFormat {
                throw StrataError.notAStore(path: path, reason: "data.mdb is not a readable LMDB file (\(e.message))")
            } else if e.isNotFound {
                throw StrataError.notAStore(path: path, reason: "the LMDB file has no Strata databases")
            }
            throw StrataError.lmdb(e)
        }
    }

    /// Initializes a new store's `meta`, or checks an existing one against the app's schema.
    private static func prepareMeta(env: LMDBEnvironment, path: String, appSchema: Schema?,
                                    configuration: StoreConfiguration) throws -> Schema {
        let stored: (format: UInt32, schema: [UInt8])? = try env.read { txn in
            let found: UInt32?
            do {
                found = try MetaKey.storedFormat(txn, meta: env[.meta])
            } catch let e as DecodingError {
                throw StrataError.notAStore(path: path, reason: "the stored store format is unreadable: \(e)")
            }
            guard let format = found else { return nil }
            let schema = try txn.withValue(env[.meta], key: MetaKey.schema) { Array($0) } ?? []
            // The schema's checksum, or (a store made before it was kept) its model and version.
            if let stored = try txn.withValue(env[.meta], key: MetaKey.schemaChecksum, { b -> UInt32? in
                var r = ByteReader(b)
                return b.count == 4 ? try r.u32() : nil
            }) {
                guard let stored, stored == CRC32C.checksum(schema) else {
                    throw StrataError.damagedStore(
                        path: path, reason: "database 'meta', key 'schema': the stored schema fails its checksum")
                }
            }
            return (format, schema)
        }
        guard let stored else {
            guard let appSchema,
                  !configuration.readOnly else { throw StrataError.notAStore(path: path, reason: "no Strata metadata") }
            let empty = try env.read { try $0.entryCount(env[.log]) == 0 && $0.entryCount(env[.objects]) == 0 }
            guard empty else { throw StrataError.notAStore(path: path, reason: "data without Strata metadata") }
            // Another process creating the same store at this moment may have written its
            // metadata since the read above: then the store is checked against that one.
            guard try writeMeta(env: env, schema: appSchema) else {
                return try prepareMeta(env: env, path: path, appSchema: appSchema, configuration: configuration)
            }
            return appSchema
        }
        guard MetaKey.readableFormats.contains(stored.format) else {
            throw StrataError.notAStore(
                path: path, reason: "store format \(stored.format); this Strata reads formats " +
                                    "\(MetaKey.readableFormats.lowerBound)–\(MetaKey.readableFormats.upperBound)")
        }
        let storeSchema: Schema
        do {
            storeSchema = try Schema.parse(stored.schema, source: "\(path) (stored schema)", readingStoredSchema: true)
        } catch let e as SchemaError {
            throw StrataError.notAStore(path: path, reason: "stored schema is unreadable: \(e)")
        }
        let recorded = try env.read { txn -> (model: [UInt8]?, version: [UInt8]?) in
            (try txn.withValue(env[.meta], key: MetaKey.model) { Array($0) },
             try txn.withValue(env[.meta], key: MetaKey.version) { Array($0) })
        }
        var version = ByteWriter(capacity: 4)
        version.u32(UInt32(truncatingIfNeeded: storeSchema.version))
        if let model = recorded.model, model != Array(storeSchema.model.utf8) {
            throw StrataError.damagedStore(
                path: path,
                reason: "database 'meta': the stored schema's model '\(EchoedText.shown(storeSchema.model))' differs " +
                        "from the recorded model '\(EchoedText.shown(String(decoding: model, as: UTF8.self)))'")
        }
        if let v = recorded.version, v != version.bytes {
            throw StrataError.damagedStore(path: path,
                                           reason: "database 'meta': the stored schema's version " +
                                                   "\(storeSchema.version) differs from the recorded version")
        }
        guard let appSchema else { return storeSchema }
        guard storeSchema.model == appSchema.model else {
            throw StrataError.modelMismatch(store: storeSchema.model, app: appSchema.model)
        }
        if storeSchema.version < appSchema.version {
            throw StrataError.migrationRequired(storeVersion: storeSchema.version, appVersion: appSchema.version,
                                                model: appSchema.model)
        }
        if storeSchema.version > appSchema.version {
            throw StrataError.storeTooNew(storeVersion: storeSchema.version, appVersion: appSchema.version,
                                          model: appSchema.model)
        }
        guard storeSchema.canonicalJSON.utf8.elementsEqual(appSchema.canonicalJSON.utf8) else {
            throw StrataError.schemaChanged(version: appSchema.version, model: appSchema.model)
        }
        return appSchema
    }

    /// Writes a new store's metadata for `schema`, in one write transaction that first checks
    /// none is there: false (nothing written) when another process wrote its own first.
    @discardableResult
    static func writeMeta(env: LMDBEnvironment, schema: Schema) throws -> Bool {
        precondition(!env.options.readOnly)
        return try env.write { txn in
            if try txn.withValue(env[.meta], key: MetaKey.format, { _ in true }) == true { return false }
            try txn.put(env[.meta], key: MetaKey.format, value: MetaKey.formatValue(MetaKey.storeFormat))
            let json = Array(schema.canonicalJSON.utf8)
            try txn.put(env[.meta], key: MetaKey.schema, value: json)
            var checksum = ByteWriter(capacity: 4)
            checksum.u32(CRC32C.checksum(json))
            try txn.put(env[.meta], key: MetaKey.schemaChecksum, value: checksum.bytes)
            try txn.put(env[.meta], key: MetaKey.model, value: Array(schema.model.utf8))
            var version = ByteWriter(capacity: 4)
            version.u32(UInt32(schema.version))
            try txn.put(env[.meta], key: MetaKey.version, value: version.bytes)
            var created = ByteWriter(capacity: 8)
            // A clock set before 1970 gives 0, not a trap.
            created.u64(UInt64(max(0, Date().timeIntervalSince1970 * 1000)))
            try txn.put(env[.meta], key: MetaKey.created, value: created.bytes)
            return true
        }
    }

    // MARK: Closing

    /// Whether ``close()`` was called.
    public var isClosed: Bool { closed.load(ordering: .acquiring) }

    /// Finishes queued saves, closes every snapshot and the environment. Idempotent. Reads under
    /// way on other threads (a main context's fetch) are waited for; reads asked for afterwards
    /// throw ``StrataError/closed(path:)``. In a child process forked after the open it only
    /// marks the store closed (the environment is the parent's).
    ///
    /// Called from inside work of this store, it cannot wait for that work, which would wait for
    /// it: on the writer's own queue (a ``MergePolicy/custom(_:)`` closure, which runs inside a
    /// save; also a child context's custom merge closure, inside a read of the store) or from
    /// the `progress` callback of ``compact(horizon:dryRun:rebuildIndexes:progress:)``,
    /// ``migrate(schemas:to:registry:dryRun:progress:)`` or ``verify(rebuild:progress:)``
    /// (while they copy, inside the operation's reads). There it refuses new work at once
    /// (``isClosed`` is true, every call throws ``StrataError/closed(path:)``) and returns, and
    /// the rest of the close runs on another thread when the save or the operation's reads end;
    /// the compaction or migration then throws ``StrataError/closed(path:)`` (a verify may still
    /// return its report if it has read all it needs; a migration's `.switching` callback runs
    /// on the writer's queue, and that migration completes). Opening the path again before the
    /// close has finished throws ``StrataError/alreadyOpen(path:reason:)`` ("still closing").
    public func close() {
        // In a forked child the environment, queues and locks are the parent's (LMDB does not
        // support using an environment across fork()): marked closed, nothing touched, not even
        // the lock below (a parent's thread may have held it at the fork).
        if snapshots.isForkedChild {
            closed.store(true, ordering: .releasing)
            return
        }
        // The first close enters `closeFinished` before the store reads as closed, under one
        // lock: a second close that finds it closed then always has a close to wait for (it
        // returned at once when it came between the flag and the enter).
        let first = closeStarted.withLock { started -> Bool in
            if started { return false }
            started = true
            closeFinished.enter()
            closed.store(true, ordering: .releasing)
            return true
        }
        guard first else {
            // Closed already: wait until that close has finished (it may run on another thread),
            // unless that close is waiting for this thread.
            if !closeCannotWait { closeFinished.wait() }
            return
        }
        closeStartingForTesting.withLock { $0 }?()
        let finished = closeFinished
        if closeInBackgroundIfItCannotWait(then: { finished.leave() }) { return }
        shutDown()
        closeFinished.leave()
    }

    private func shutDown() { closingParts(inBackground: false).finish() }

    /// Whether a close on this thread would wait for work this thread is in the middle of: on
    /// the writer's queue (a save's merge closure, a compaction's switch), or inside a read of
    /// this store (``ThreadReads``: a migration's or a verify's `progress` callback, a child
    /// context's custom merge closure).
    private var closeCannotWait: Bool {
        (writer?.isCurrentQueue ?? false) || ThreadReads.isInside(store: snapshots)
    }

    /// Where a close cannot wait (``closeCannotWait``): refuses new work at once, marks the path
    /// closing, and finishes the close (then `then`) on a thread of its own (not a pool thread,
    /// which may all be busy) once the work in progress ends: the queue's, and every read of the
    /// store's snapshots, the caller's among them. False, having done nothing, anywhere else.
    /// Captures no reference to `self` (it also runs in `deinit`).
    private func closeInBackgroundIfItCannotWait(then: (@Sendable () -> Void)? = nil) -> Bool {
        guard closeCannotWait else { return false }
        writer?.refuseNewWork()
        StoreRegistry.shared.beginClosing(path: path)
        let parts = closingParts(inBackground: true)
        Thread.detachNewThread {
            parts.finish()
            then?()
        }
        return true
    }

    /// What closing needs, taken from this instance now (the environment as it is now), so the
    /// close can end on another thread after the instance is gone. `inBackground`: the path was
    /// marked closing (``StoreRegistry/beginClosing(path:)``), to be unmarked at the end.
    private func closingParts(inBackground: Bool) -> ClosingParts {
        ClosingParts(writer: writer, hub: hub, publisher: publisher, mainContext: main.withLock { $0.context }, snapshots: snapshots,
                     env: env, replaced: replacedEnvironments, lock: lock, path: path, storeID: ObjectIdentifier(self), deleteOnClose: deleteOnClose,
                     inBackground: inBackground, unsyncedMarker: unsyncedMarker, logger: logger)
    }

    /// The parts of a store that closing stops, in order (``finish()``).
    private struct ClosingParts: Sendable {
        let writer: Writer?
        let hub: ChangeHub
        let publisher: CommitPublisher
        let mainContext: ViewContext?
        let snapshots: SnapshotRegistry
        /// The environment when the parts were taken; for a store with a writer, the writer's
        /// current one is closed instead (``finish()``).
        let env: LMDBEnvironment
        let replaced: ReplacedEnvironments
        let lock: StoreLock?
        let path: String
        let storeID: ObjectIdentifier
        let deleteOnClose: Bool
        let inBackground: Bool
        let unsyncedMarker: String?
        let logger: Logger

        func finish() {
            // A flush that failed before is not made good by the close's: the kernel reports a
            // write error once, and the pages it could not write are gone from the cache.
            let flushed = (writer?.close() ?? true) && writer?.failedFlush == nil
            if let unsyncedMarker {
                // Every commit of this process is on disk: nothing is left for a crash to take.
                // After a failed flush the marker says so, for the next open to report (the
                // kernel reports a write error once: that open's own sync would succeed).
                if flushed { UnsyncedCommits.clear(unsyncedMarker, logger: logger, syncDirectory: true) }
                else { UnsyncedCommits.noteFailedFlush(unsyncedMarker, logger: logger) }
            }
            publisher.close()
            hub.finishAll()
            mainContext?.close()
            snapshots.closeAll()
            // Read after the writer closed: a compaction's switch let in before the close may have
            // replaced the environment taken when these parts were (the old one is closed just
            // after, with the other replaced ones).
            (writer?.env ?? env).close()
            // Every snapshot is closed: an old generation still open is only referenced, not
            // read (a read in flight is waited for). Closed before the lock is released, so its
            // directory is renamed away before another process can open the store.
            replaced.closeAll()
            // Their directories are renamed away; their deletions finish before the close
            // returns, so a process that exits next leaves nothing of them (a deletion that takes
            // longer, on a stalled file system, is left to finish or to the next open).
            if !replaced.waitForDeletions(seconds: ReplacedEnvironments.deletionWaitSeconds) {
                logger.warning("closing \(path): the deletion of an old generation goes on in the background")
            }
            lock?.release()
            StoreRegistry.shared.remove(path: path, storeID: storeID)
            if deleteOnClose { try? FileManager.default.removeItem(atPath: path) }
            if inBackground { StoreRegistry.shared.endClosing(path: path) }
        }
    }

    func markMigrated(to version: Int) { migratedVersion.store(version, ordering: .releasing) }
    /// The version this instance migrated the store to, if it did (it is then retired).
    var migratedToVersion: Int? {
        let v = migratedVersion.load(ordering: .acquiring)
        return v > 0 ? v : nil
    }

    /// Refuses use in a child process after `fork()` (LMDB environments must not cross a fork).
    func checkProcess() throws { try snapshots.checkProcess() }

    func checkUsable() throws {
        if let migrated = migratedToVersion { throw StrataError.migrated(path: path, toVersion: migrated) }
        if closed.load(ordering: .acquiring) { throw StrataError.closed(path: path) }
        try checkProcess()
    }

    // MARK: Saving

    /// Saves `changes` as one transaction and returns its id once it is committed (and durable in
    /// ``Durability/durable`` mode). All or nothing: a validation failure throws and writes nothing.
    /// Saves arriving while a commit is in flight share the next commit (group commit) but keep
    /// their own transaction ids and validation. A change set with no effect returns the last
    /// transaction id without writing.
    ///
    /// The commit runs on the writer's queue, and the task resumes when it is done. In
    /// ``Durability/relaxed`` mode a small save (up to 64 changes) that finds the writer idle is
    /// committed on the task's own thread instead, as ``saveAndWait(_:author:metadata:)`` does:
    /// with no fsync to wait for, that is shorter than the two thread hops it saves
    /// (``WriterStatistics/inlineAsyncSaves`` counts them).
    public func save(_ changes: ChangeSet, author: String = "main",
                     metadata: [String: String] = [:]) async throws -> TransactionID {
        try await writerFor(changes).submit(changes, author: author, metadata: metadata)
    }

    /// Saves `sets` in this order, queued together so that one group commit may take them all
    /// (see ``Writer/submitInOrder(_:author:stopAtFailure:)``): each is its own transaction,
    /// validated and logged alone, and the results come in the order of `sets`. An import uses it to copy and
    /// sync the B-tree pages its batches share once for several batches.
    func saveInOrder(_ sets: [(changes: ChangeSet, metadata: [String: String])], author: String,
                     stopAtFailure: Bool) async -> [Result<TransactionID, Error>] {
        var writer: Writer?
        do {
            // The checks of a single save, for each of them; nothing is queued if one fails.
            for set in sets { writer = try writerFor(set.changes) }
        } catch {
            return sets.map { _ in .failure(error) }
        }
        guard let writer else { return [] }
        return await writer.submitInOrder(sets, author: author, stopAtFailure: stopAtFailure)
    }

    /// The checks every save makes before it is queued; returns the writer.
    private func writerFor(_ changes: ChangeSet) throws -> Writer {
        try checkUsable()
        guard let writer else { throw StrataError.readOnly(path: path) }
        try changes.checkTyped(against: schema)
        return writer
    }

    /// ``save(_:author:metadata:)`` for code that is not async (command-line tools, callbacks):
    /// blocks the calling thread until the transaction is committed (and durable in
    /// ``Durability/durable`` mode), like Core Data's `performAndWait`. When the writer is idle
    /// the commit runs on the calling thread itself (no hop to the writer's thread and back);
    /// saves arriving meanwhile share its group commit. Do not call it from a task that must not
    /// block (it holds a thread for the length of a commit, an fsync when durable), nor from
    /// inside the writer (throws ``StrataError/saveFromWriter(path:)``), nor from inside a read
    /// of this store on the same thread (throws ``StrataError/saveInsideRead(path:)``: a commit
    /// that must grow the map waits for every read to end, and would wait for that one for ever).
    public func saveAndWait(_ changes: ChangeSet, author: String = "main",
                            metadata: [String: String] = [:]) throws -> TransactionID {
        if ThreadReads.isInside(store: snapshots) { throw StrataError.saveInsideRead(path: path) }
        return try writerFor(changes).submitAndWait(changes, author: author, metadata: metadata)
    }

    /// Builds a change set with `body` and saves it with ``saveAndWait(_:author:metadata:)``.
    public func saveAndWait(author: String = "main", metadata: [String: String] = [:],
                            _ body: (inout ChangeSet) throws -> Void) throws -> TransactionID {
        var changes = ChangeSet()
        try body(&changes)
        return try saveAndWait(changes, author: author, metadata: metadata)
    }

    /// Builds a change set with `body` and saves it.
    ///
    /// Runs on the caller's actor (`nonisolated(nonsending)`): `body` is called there, so the
    /// closure form works from `@MainActor` code as a `ChangeSet` does.
    public nonisolated(nonsending) func save(author: String = "main", metadata: [String: String] = [:],
                                             _ body: (inout ChangeSet) throws -> Void) async throws -> TransactionID {
        var changes = ChangeSet()
        try body(&changes)
        return try await save(changes, author: author, metadata: metadata)
    }

    /// Counters of the writer (saves, log transactions, LMDB commits, map growths).
    public var statistics: WriterStatistics { writer?.statistics ?? WriterStatistics() }

    // MARK: Reading

    /// The context for readers: auto-refreshing, label "main". Getting it never fails (as Core
    /// Data's `viewContext`); its reads throw ``StrataError/closed(path:)`` once the store is
    /// closed, as every read of the store does.
    public var mainContext: ViewContext {
        main.withLock { m in
            if let c = m.context { return c }
            let c = ViewContext(store: self, label: "main")
            m.context = c
            return c
        }
    }

    /// A new view context; pinned to one snapshot unless `autoRefresh`.
    public func newViewContext(label: String, autoRefresh: Bool = false) throws -> ViewContext {
        try checkUsable()
        return try ViewContext(store: self, label: label, autoRefresh: autoRefresh)
    }

    /// Pins a snapshot of the latest committed state. Counts against ``StoreConfiguration/maxOpenSnapshots``.
    public func snapshot(label: String) throws -> Snapshot {
        try checkUsable()
        let now = SnapshotRegistry.monotonicNanos()
        for s in snapshots.takeOverdueIfDue(olderThan: configuration.snapshotAgeWarningSeconds, now: now) {
            logger.warning("""
                snapshot '\(s.label)' pinned at transaction \(s.transactionID) for \(Int(s.age)) s keeps old \
                pages alive
                """)
        }
        return try Snapshot.open(store: self, label: label, now: now)
    }

    /// Replaces the live environment (compaction, migration). Runs on the writer queue.
    func swapEnvironment(_ new: LMDBEnvironment) -> LMDBEnvironment {
        envBox.withLock { current in
            defer { current = new }
            return current
        }
    }

    /// Runs `body` in one short read transaction (not counted as a pinned snapshot).
    func read<R>(_ body: (ReadView) throws -> R) throws -> R {
        try checkUsable()
        let env = self.env
        env.noteReader()
        do {
            // Marked: a close() from user code inside (a child's custom merge closure) must not
            // wait for this read.
            return try ThreadReads.marked(store: snapshots) {
                try env.read { try body(ReadView(txn: $0, env: env, schema: schema)) }
            }
        } catch StrataError.closed(let p) where p == env.path {
            throw StrataError.closed(path: path)   // the store's path, not the generation's
        }
    }

    /// The last committed transaction (``TransactionID/zero`` for an empty store).
    public var lastTransactionID: TransactionID {
        get throws { try read { try $0.lastTransactionID() } }
    }

    /// ``lastTransactionID`` without `try`, for conditions and autoclosures
    /// (`#expect(store.currentTransactionID == tx)`): nil when the store cannot be read (closed,
    /// used after `fork()`, an I/O error), which ``lastTransactionID`` throws.
    public var currentTransactionID: TransactionID? { try? lastTransactionID }

    /// Open snapshots, oldest first: who holds each, its age and how far behind the head it is.
    public func openSnapshots() throws -> [SnapshotInfo] {
        // Before the registry is read: in a forked child its entries are the parent's, and a
        // snapshot the child released (its slot left to the parent) is freed memory there.
        try checkUsable()
        warnAboutOldSnapshots()
        return snapshots.infos(head: try lastTransactionID)
    }

    /// Reports (once each) snapshots pinned longer than ``StoreConfiguration/snapshotAgeWarningSeconds``.
    /// Runs after every commit and when the accounting is read (snapshot opens run a throttled check).
    func warnAboutOldSnapshots() {
        guard !snapshots.isForkedChild else { return }
        for s in snapshots.takeOverdue(olderThan: configuration.snapshotAgeWarningSeconds) {
            logger.warning("""
                snapshot '\(s.label)' pinned at transaction \(s.transactionID) for \(Int(s.age)) s keeps old \
                pages alive
                """)
        }
    }

    /// Committed transactions as they happen. Each call is a new subscriber.
    public func changes() -> ChangeStream {
        // Through the publisher: the first subscription starts the watch of other processes.
        ChangeStream(subscriber: publisher.subscribe(capacity: configuration.changeStreamBufferSize))
    }
}

/// The environments a store instance switched away from (``Store/replacedEnvironments``).
final class ReplacedEnvironments: Sendable {
    private struct Weak: Sendable { weak var env: LMDBEnvironment? }
    private let list = Locked<[Weak]>([])
    /// The background deletions of their directories (``StoreDirectory/retire(generation:group:)``).
    let deletions = DispatchGroup()
    /// How long a close waits for those deletions: 60 s.
    static let deletionWaitSeconds = 60.0

    /// Waits for the deletions under way, at most `seconds`; whether they finished.
    func waitForDeletions(seconds: Double) -> Bool {
        deletions.wait(timeout: .now() + .milliseconds(Int(seconds * 1_000))) == .success
    }

    func add(_ env: LMDBEnvironment) {
        list.withLock { l in
            l.removeAll { $0.env == nil }
            l.append(Weak(env: env))
        }
    }

    /// Closes those still open; idempotent.
    func closeAll() {
        let open = list.withLock { l -> [LMDBEnvironment] in
            defer { l.removeAll() }
            return l.compactMap(\.env)
        }
        for env in open { env.close() }
    }
}

/// A weak reference to the main context (see ``Store/mainContext``).
struct WeakViewContext: Sendable {
    weak var context: ViewContext?
}
