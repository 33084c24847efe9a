import Foundation
import Glibc

extension Store {
    /// Before a catch-up on the writer: if saves were committed since the build's snapshot
    /// (`builtAt`) and the build dropped its pages from the cache, reads the generation back
    /// first, while saves go on, rather than a page per fault while the writer waits.
    func prefetchBeforeCatchUp(_ generation: PendingGeneration, builtAt t0: TransactionID) throws {
        guard try lastTransactionID > t0, generation.env.droppedWrittenPages.load(ordering: .relaxed) else { return }
        LMDBEnvironment.waitForWriteback()
        generation.env.prefetch()
    }

    /// Refuses (`ENOSPC`) to start a new generation the file system has no room for: the pages
    /// `snapshot`'s databases use (their branch, leaf and overflow pages; free pages are not
    /// copied), which is what a compacted copy needs at most, against the space left on the
    /// file system of the store. Checked before anything is created, so a refused build leaves
    /// nothing behind. The build itself can still run out (another writer on the file system):
    /// its writes then fail with `ENOSPC` and the generation is removed.
    func checkRoomForGeneration(_ snapshot: Snapshot) throws {
        let needed = try snapshot.read { view in
            try DatabaseName.named.reduce(view.txn.pageBytes(view.env[.counts])) {
                $0 + (try view.txn.pageBytes(view.env[$1]))
            }
        }
        if let free = LMDBEnvironment.freeBytes(path), free < needed {
            throw LMDBError(code: ENOSPC, operation: "room for a new generation of about \(needed) bytes in \(path) " +
                                                     "(\(free) bytes left on its file system)")
        }
    }

    /// Creates an empty generation, built without fsync (it is synced once before the switch);
    /// its bulk copies (``LMDBEnvironment/copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)``)
    /// drop what is on disk from the page cache as they go (``LMDBEnvironment/isBulkBuild``).
    func makeGeneration(like oldEnv: LMDBEnvironment) throws -> PendingGeneration {
        let name = try directory.newGeneration()
        let path = self.path + "/" + name
        var options = oldEnv.options
        options.noSync = true
        options.mapSizeBytes = max(oldEnv.mapSizeBytes, min(configuration.initialMapSizeBytes, options.maxMapSizeBytes))
        do {
            let env = try LMDBEnvironment(path: path, options: options)
            env.isBulkBuild.store(true, ordering: .relaxed)
            return PendingGeneration(name: name, env: env)
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw error
        }
    }

    /// Tests only: run by a compaction or migration after its catch-up, right before the switch,
    /// for the store at `path`.
    /// By store path, so that tests running in parallel do not replace each other's.
    static let beforeSwitchForTesting = Locked<[String: @Sendable () -> Void]>([:])

    func runBeforeSwitchHookForTesting() {
        guard let hook = Self.beforeSwitchForTesting.withLock({ $0[path] }) else { return }
        hook()
    }

    /// The `meta` keys written outside the log (``Store/setReplicaName(_:)``,
    /// ``Store/finishMakingCluster(clusterID:)``, which another process may run while this one
    /// builds a generation from an earlier snapshot; the cluster mark itself, written and removed
    /// only with the store's lock exclusive).
    static let unloggedMetaKeys = [MetaKey.cluster, MetaKey.clusterPending, MetaKey.replicaName]

    /// Writes ``unloggedMetaKeys`` into `new` as `old` holds them now (removed where `old` has
    /// none): with the store's lock exclusive, at the switch, nobody changes them meanwhile. A
    /// generation built from a snapshot had them as they were at the snapshot, and switched in
    /// without this, took back a name or a cluster's making another process had since set.
    static func carryUnloggedMeta(from old: LMDBEnvironment, to new: LMDBEnvironment) throws {
        let values = try old.read { txn in
            try unloggedMetaKeys.map { key in try txn.withValue(old[.meta], key: key) { Array($0) } }
        }
        try new.writeGrowing { txn in
            for (key, value) in zip(unloggedMetaKeys, values) {
                if let value { try txn.put(new[.meta], key: key, value: value) } else { _ = try txn.delete(new[.meta], key: key) }
            }
        }
    }

    /// On the writer queue, with everything caught up: makes the new generation durable and
    /// switches `current` to it while no other process can open the store (exclusive lock).
    /// The old environment is removed from disk when it closes (in the background); the new one
    /// is read into the page cache in the background when its build dropped what it wrote.
    /// Returns nil, or, when the switch is made but syncing the store directory failed (a power
    /// loss may bring the old link back), that failure: the writer is stopped then. A compaction
    /// or migration loses nothing either way (the old generation holds every transaction); a
    /// bulk load must not report its records saved.
    @discardableResult
    func switchGeneration(_ generation: PendingGeneration, lock: StoreLock,
                          replacing oldEnv: LMDBEnvironment) throws -> StrataError? {
        // Taken by the caller before it read what the new generation must catch up with (a
        // compaction's or migration's catch-up, a bulk load's whole run), and given back by it.
        precondition(lock.isExclusive, "a generation switch without the store's lock held exclusive")
        generation.endBulkBuild()
        try Self.carryUnloggedMeta(from: oldEnv, to: generation.env)
        try generation.env.setNoSync(configuration.durability == .relaxed)
        try generation.env.sync()
        // The generation's own entries (data.mdb, lock.mdb), before `current` points at them.
        try StoreDirectory.syncDirectory(generation.env.path)
        // A store made shared with the group by this rewrite (a private one compacted or migrated
        // with `sharedWithGroup`): its directory and lock file get the shared modes with the new
        // generation, or the group could use none of it and a private open refused it.
        // Only a private store is changed: a shared one already has the modes, and a member of
        // the group who does not own its files could not set them (EPERM).
        // The modes before, to put back if the switch fails: a private store left with the
        // group's modes and its private generation is refused by every private open (insecure).
        var modesBefore: (directory: mode_t?, lockFile: mode_t?) = (nil, nil)
        let notSynced: StrataError?
        do {
            if configuration.sharedWithGroup {
                let permissions = StorePermissions(configuration)
                // Shared already when the group may use it (0775 or 0664 too: others may read).
                var st = stat()
                if lstat(path, &st) == 0, st.st_mode & 0o070 != 0o070 {
                    modesBefore.directory = st.st_mode & 0o7777
                    try permissions.setMode(ofDirectory: path)
                }
                // Through the lock's descriptor, which keeps this exclusive lock (see setFileMode).
                // A failure here puts the directory's mode back too (below).
                if let m = lock.fileMode(), m & 0o060 != 0o060 {
                    modesBefore.lockFile = m
                    try lock.setFileMode(permissions.fileMode)
                }
            }
            notSynced = try directory.switchCurrent(to: generation.name)
        } catch {
            // Best effort: the switch's own error is the one to report.
            if let m = modesBefore.lockFile { try? lock.setFileMode(m) }
            if let m = modesBefore.directory { chmod(path, m) }
            throw error
        }
        generation.env.prefetchInBackground()
        if let notSynced {
            // The switch is made (`current` names the new generation) and must be treated as
            // made: undoing it here would remove the generation `current` points at. The old
            // generation stays on disk (a power loss may bring the old link back); the next
            // open removes it as stale. Until then no save may be acknowledged: it would go into
            // a generation that link may not name after a power loss. The writer stops; the
            // store can still be read, and a reopen goes on from whichever link the disk has.
            logger.error("""
                switched \(path) to \(generation.name), but syncing the store directory failed (\(notSynced)); \
                the old generation is kept until the next open, and this instance takes no more saves: \
                reopen the store
                """)
            writer?.stopFromQueue(failing: notSynced)
            return notSynced
        }
        let oldPath = oldEnv.path
        let deletions = replacedEnvironments.deletions
        oldEnv.onClose { StoreDirectory.retire(generation: oldPath, group: deletions) }
        replacedEnvironments.add(oldEnv)
        return nil
    }
}
