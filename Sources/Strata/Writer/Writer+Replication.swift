import Foundation
import StrataLMDB

/// The writer of a replica: a group is validated against the local state at head H, noting what
/// it reads and writes (its ``ReplicationFootprint``), and appended to the shared log in the same
/// LMDB write transaction, before it commits (``ReplicationLog/append(_:validatedAt:footprint:)``):
/// right after H if the shared head is still H (then committed locally), or after the entries
/// other machines appended since H when none of them touches the footprint — the group would
/// have validated the same after them; the local transaction is then dropped and the replica
/// applies those entries and the group's from the shared log, in its order. When another
/// machine's entry does touch it, nothing is appended or committed: the replica catches up, and
/// the group is validated again against the new head, so merge policies and unique constraints
/// decide as on one machine. A group that lost that race ``racesBeforeTurn`` times in a row waits
/// its turn instead (``ReplicationLog/appendInTurn(_:)``): with every other machine held off, the replica
/// applies what it missed and validates the group at the shared head itself, so it cannot lose
/// again. The local log and the shared one hold the same entries under the same ids, so the
/// replica's position is its log's last id, committed with the state it describes.
extension Writer {
    /// Races for the shared head a group may lose in a row before it waits its turn. Racing is
    /// the fast path (one statement, no lock held while validating); waiting its turn makes sure
    /// a replica whose catch-ups are slower than the other machines' appends still gets through.
    static let racesBeforeTurn = 3
    /// Entries asked of the shared log per step of a catch-up.
    static let catchUpBatch = 1_000

    /// Thrown out of the write transaction to abort it when the shared head moved, or when a
    /// turn found the replica more than ``catchUpBatch`` entries behind (it catches up outside
    /// its turn first: other machines wait while it holds its turn).
    private struct SharedHeadMoved: Error {}

    /// Thrown out of the write transaction to abort it when the shared log took the group after
    /// other machines' entries (``ReplicationAppend/appendedLater(first:)``): the transaction
    /// applied it at the old head, and the replica applies it from the shared log instead.
    private struct AppendedLater: Error {}

    /// What one local transaction of ``commitReplicated(_:)`` committed.
    private struct ReplicatedCommit {
        var group: AppliedGroup
        /// Other machines' entries applied below the group in the same transaction (the last
        /// one's id), if any.
        var caughtUpThrough: TransactionID?
        var lmdbID: UInt64
    }

    /// ``commit(_:)`` for a replica.
    func commitReplicated(_ batch: [PendingSave]) {
        guard let log = replication.withLock({ $0 }) else {
            fail(batch, StrataError.replication(ReplicationError(.notAttached, """
                \(storePath) is a replica of a cluster and no cluster is attached: saves go through the \
                cluster (StrataCluster's ClusterReplica), never to the local store alone
                """)))
            return
        }
        let env = self.env
        do {
            try Self.syncAsReplica(env)
        } catch {
            fail(batch, error)
            return
        }
        // Transactions this replica appended and could not apply: caught up first. Appending
        // more meanwhile (a group that touches other objects is taken after them) wrote saves
        // into the cluster that each reported a failure, while the cause (a full disk) stayed.
        if let owed = unappliedAppend.withLock({ $0 }) {
            do {
                try catchUp(from: log)
                let head = try env.read { try ReadView(txn: $0, env: env, schema: schema).lastTransactionID() }
                guard head >= owed else {
                    throw StrataError.replication(ReplicationError(.unavailable, """
                        the cluster's log ends at transaction \(head), before \(owed)
                        """))
                }
                unappliedAppend.withLock { $0 = nil }
            } catch {
                fail(batch, StrataError.replication(ReplicationError(.unavailable, """
                    this replica has not applied transaction \(owed), which it appended to the cluster, and cannot \
                    yet (\(error)): it takes no saves until it has (nothing of these was appended)
                    """)))
                return
            }
        }
        var growths = 0, racesLost = 0
        while true {
            var appended: AppliedGroup?
            var movedTo: TransactionID?
            do {
                let done = try env.write { txn -> ReplicatedCommit in
                    racesLost < Self.racesBeforeTurn
                        ? try race(batch, txn, env: env, log: log, appended: &appended, movedTo: &movedTo)
                        : try inTurn(batch, txn, env: env, log: log, appended: &appended)
                }
                if let last = done.group.entries.last?.transactionID ?? done.caughtUpThrough {
                    env.publishHead(lmdbTransaction: done.lmdbID, transactionID: last)
                }
                // Other machines' transactions first, in the log's order.
                if let caughtUp = done.caughtUpThrough { publisher.publishCommitted(env: env, through: caughtUp) }
                finish(batch, done.group.results, done.group.entries, growths: growths)
                return
            } catch is AppendedLater {
                guard let group = appended, let first = movedTo else {
                    preconditionFailure("a group appended later has its entries and their first id")
                }
                finishAppendedLater(batch, group, first: first, log: log, growths: growths)
                return
            } catch let tooLarge as GroupTooLarge {
                // Nothing was appended or committed. A group goes again in halves, in its order
                // (each half's saves are answered before the next half is applied); one save
                // alone is refused. The map grown meanwhile stays grown: counted here, as each
                // half starts its own count.
                noteMapGrowths(growths)
                if batch.count > 1 {
                    commitReplicated(Array(batch[..<(batch.count / 2)]))
                    commitReplicated(Array(batch[(batch.count / 2)...]))
                } else {
                    fail(batch, StrataError.replication(ReplicationError(.saveTooLarge, """
                        the save's log entry is \(tooLarge.bytes) bytes, over the \(tooLarge.limit) bytes one save \
                        appended to the cluster's log may carry; split it into smaller saves
                        """)))
                }
                return
            } catch is SharedHeadMoved {
                racesLost += 1
                do {
                    try catchUp(from: log)
                } catch {
                    fail(batch, error)
                    return
                }
            } catch let e as LMDBError where e.isMapFull && appended == nil {
                do {
                    guard try env.growMap() else {
                        // A replica's group is one append: it fails whole (nothing of it is in the
                        // shared log yet). The map grown meanwhile stays grown, and is counted.
                        noteMapGrowths(growths)
                        fail(batch, StrataError.storeFull(maxMapSizeBytes: config.maxMapSizeBytes))
                        return
                    }
                    growths += 1
                } catch {
                    noteMapGrowths(growths)
                    fail(batch, error)
                    return
                }
            } catch {
                // An I/O error in the local commit's write or sync stops the writer, as on one
                // machine: the kernel may have dropped the pages it could not write, and a later
                // commit (a catch-up's too) would build on what the disk holds.
                stopIfSyncFailed(error)
                guard let group = appended else {
                    fail(batch, error)
                    return
                }
                // The shared log holds the group; only the local commit failed. The replica takes
                // the entries back from the shared log, as it would another machine's (unless
                // that failure stopped the writer: then when it is opened again).
                logger.error("the local commit of transactions appended to the cluster failed: \(error)")
                do {
                    if let stopped = failedFlush { throw stopped }
                    try catchUp(from: log)
                    finish(batch, group.results, group.entries, growths: growths)
                } catch let catchUpError {
                    let first = group.entries.first?.transactionID, last = group.entries.last?.transactionID
                    if let last { unappliedAppend.withLock { $0 = max($0 ?? last, last) } }
                    fail(batch, StrataError.replication(ReplicationError(.outcomeUnknown, """
                        the cluster holds the saves as transactions \(first.map { "\($0)" } ?? "?")–\
                        \(last.map { "\($0)" } ?? "?"), but this replica could not apply them (\(error); then \
                        \(catchUpError)); it applies them when it catches up
                        """)))
                }
                return
            }
        }
    }

    /// The group raced for the shared head: validated and applied in `txn` at the local head H,
    /// appended only if the shared head is still H (`appended` is set as soon as the shared log
    /// holds it). Refusals and no-ops with nothing to append were judged at the local head: they
    /// stand only if no machine has appended since. Throws ``SharedHeadMoved`` when one had.
    private func race(_ batch: [PendingSave], _ txn: LMDBTransaction, env: LMDBEnvironment,
                      log: any ReplicationLog, appended: inout AppliedGroup?,
                      movedTo: inout TransactionID?) throws -> ReplicatedCommit {
        let head = try ReadView(txn: txn, env: env, schema: schema).lastTransactionID()
        func requireCurrentHead() throws {
            if try !log.entries(after: head, limit: 1).isEmpty { throw SharedHeadMoved() }
        }
        let group: AppliedGroup
        let footprint = FootprintBuilder()
        do {
            group = try apply(batch, txn, env: env, footprint: footprint)
        } catch let e as LMDBError {
            throw e
        } catch {
            // A lone save's refusal: its error ends the transaction.
            try requireCurrentHead()
            throw error
        }
        if group.entries.isEmpty {
            try requireCurrentHead()
        } else {
            let movable = Self.mayMove(group.entries, validatedAt: head)
                && !Self.refusalNamesTheGroup(group.results, validatedAt: head) ? footprint.footprint : nil
            let shared = try sharedEntries(group, batch: batch)
            let outcome = try timedAppend { _ in
                try movable.map {
                    try log.append(shared, validatedAt: head, footprint: $0)
                } ?? log.append(shared, after: head)
            }
            if case .appendedLater(let first) = outcome, first <= head.next {
                throw StrataError.replication(ReplicationError(.rejectedEntry, """
                    the cluster's log placed transactions validated after \(head) at \(first)
                    """))
            }
            noteAppend(outcome)
            switch outcome {
            case .appended: appended = group
            case .appendedLater(let first):
                appended = group
                movedTo = first
                throw AppendedLater()
            case .behind: throw SharedHeadMoved()
            }
        }
        return ReplicatedCommit(group: group, caughtUpThrough: nil,
                                lmdbID: LMDBEnvironment.lmdbTransactionID(txn.handle))
    }

    /// Runs `append` (a call to the shared log), adding its time to
    /// ``WriterStatistics/sharedLogNanoseconds`` whether it answers or throws, less the time
    /// `append` reports through its argument as the writer's own work done meanwhile (a turn's
    /// catch-up and validation, which run while the turn is held).
    private func timedAppend<R>(_ append: (_ ownWork: inout UInt64) throws -> R) rethrows -> R {
        let started = DispatchTime.now().uptimeNanoseconds
        var ownWork: UInt64 = 0
        defer {
            let took = DispatchTime.now().uptimeNanoseconds &- started
            let waited = took &- min(took, ownWork)
            updateStatistics { $0.sharedLogNanoseconds &+= waited }
        }
        return try append(&ownWork)
    }

    /// Counts an append's answer in ``WriterStatistics``.
    private func noteAppend(_ outcome: ReplicationAppend) {
        updateStatistics { s in
            switch outcome {
            case .appended: s.sharedLogAppends += 1
            case .appendedLater:
                s.sharedLogAppends += 1
                s.sharedLogAppendsMoved += 1
            case .behind: s.sharedLogRacesLost += 1
            }
        }
    }

    /// Whether a group's entries, encoded for the ids after `head`, read the same after a later
    /// head: not when an update or delete names as its previous version an id of the group
    /// itself (an object the group wrote before), which moving the group would leave naming the
    /// transaction now at that id. Such a group is appended only right after `head`.
    static func mayMove(_ entries: [LogEntry], validatedAt head: TransactionID) -> Bool {
        !entries.contains { entry in
            entry.changes.contains { change in
                switch change {
                case .update(_, _, let previous), .delete(_, _, let previous): previous > head
                case .insert, .link, .unlink: false
                }
            }
        }
    }

    /// Whether a refused save of the group names, as an object's version in the store, an id
    /// after `head`: one the group itself took (an earlier save of the group changed the object
    /// the refusal's merge conflict is about). Moved, the group's entries would take other ids
    /// while the refusal went on naming that one, by then another machine's transaction. Such a
    /// group, like one ``mayMove(_:validatedAt:)`` keeps, is appended only right after `head`.
    static func refusalNamesTheGroup(_ results: [Result<TransactionID, Error>],
                                     validatedAt head: TransactionID) -> Bool {
        results.contains { result in
            guard case .failure(StrataError.conflict(let conflicts)) = result else { return false }
            return conflicts.contains { $0.storeVersion.map { $0 > head } ?? false }
        }
    }

    /// The group is durable in the shared log from `first` on, after other machines' entries that
    /// touch none of what it read or wrote: the replica applies those and the group's entries
    /// from the shared log (``catchUp(from:)``, which publishes them in the log's order), and the
    /// saves complete with the ids the group got there.
    private func finishAppendedLater(_ batch: [PendingSave], _ group: AppliedGroup, first: TransactionID,
                                     log: any ReplicationLog, growths: Int) {
        let validated = group.entries.first?.transactionID ?? first
        let shift = first.rawValue - validated.rawValue
        let entries = group.entries.map {
            LogEntry(transactionID: TransactionID($0.transactionID.rawValue + shift), schemaVersion: $0.schemaVersion,
                     timestampMs: $0.timestampMs, author: $0.author, metadata: $0.metadata, changes: $0.changes)
        }
        // A save with nothing to log reports the head it was judged at: it moves with the group.
        let results = group.results.map { $0.map { TransactionID($0.rawValue + shift) } }
        let last = entries.last?.transactionID ?? first
        do {
            try catchUp(from: log)
            let env = self.env
            let head = try env.read { try ReadView(txn: $0, env: env, schema: schema).lastTransactionID() }
            guard head >= last else {
                throw StrataError.replication(ReplicationError(.unavailable, """
                    the cluster's log ends at transaction \(head), before \(last)
                    """))
            }
            finish(batch, results, entries, growths: growths)
        } catch {
            unappliedAppend.withLock { $0 = max($0 ?? last, last) }
            fail(batch, StrataError.replication(ReplicationError(.outcomeUnknown, """
                the cluster holds the saves as transactions \(first)–\(last), but this replica could not \
                apply them (\(error)); it applies them when it catches up
                """)))
        }
    }

    /// The group in its turn: with every other machine's append held off, the entries this
    /// replica missed are applied in `txn`, then the group is validated and applied at the
    /// shared head and appended after it. A refusal is final (judged at the shared head).
    private func inTurn(_ batch: [PendingSave], _ txn: LMDBTransaction, env: LMDBEnvironment,
                        log: any ReplicationLog, appended: inout AppliedGroup?) throws -> ReplicatedCommit {
        var applied: (group: AppliedGroup, caughtUpThrough: TransactionID?)?
        try timedAppend { ownWork in try log.appendInTurn { sharedHead in
            let started = DispatchTime.now().uptimeNanoseconds
            defer { ownWork &+= DispatchTime.now().uptimeNanoseconds &- started }
            var local = try ReadView(txn: txn, env: env, schema: schema).lastTransactionID()
            if sharedHead.rawValue > local.rawValue + UInt64(Self.catchUpBatch) { throw SharedHeadMoved() }
            var caughtUpThrough: TransactionID?
            while local < sharedHead {
                guard let last = try applyShared(log.entries(after: local, limit: Self.catchUpBatch), in: txn, env: env)
                else {
                    throw StrataError.replication(ReplicationError(.rejectedEntry, """
                        the cluster's head is \(sharedHead) but its log has no entry after transaction \(local)
                        """))
                }
                local = last
                caughtUpThrough = last
            }
            guard local == sharedHead else {
                throw StrataError.replication(ReplicationError(.rejectedEntry, """
                    this replica is at transaction \(local), past the cluster's head \(sharedHead)
                    """))
            }
            let group = try apply(batch, txn, env: env)
            assert(group.entries.first.map { $0.transactionID == sharedHead.next } ?? true,
                   "a group in its turn follows the shared head")
            let shared = try sharedEntries(group, batch: batch)
            applied = (group, caughtUpThrough)
            return shared
        } }
        if let applied, !applied.group.entries.isEmpty { noteAppend(.appended) }
        guard let applied else {
            throw StrataError.replication(ReplicationError(.unavailable,
                                                           "the cluster's log did not give this replica its turn"))
        }
        if !applied.group.entries.isEmpty { appended = applied.group }
        return ReplicatedCommit(group: applied.group, caughtUpThrough: applied.caughtUpThrough,
                                lmdbID: LMDBEnvironment.lmdbTransactionID(txn.handle))
    }

    /// A replica's commits (on the writer's queue, the only place they run) sync their pages but
    /// not LMDB's meta page (`MDB_NOMETASYNC`): one sync a commit instead of two. LMDB keeps the
    /// file consistent; an OS crash may undo the last local commit, which the shared log holds
    /// (every entry is durable there before the replica commits it), and the replica applies it
    /// again when it opens. Set before each, so that it holds for the environment of the moment
    /// (a compaction switches to a new one); ``Store/leaveCluster(clusterID:)`` turns it off.
    static func syncAsReplica(_ env: LMDBEnvironment) throws {
        do {
            try env.setNoMetaSync(true)
        } catch let e as LMDBError {
            throw StrataError.lmdb(e)
        }
    }

    /// A group's entries as the shared log holds them: several saves' at most
    /// ``ReplicatedEntry/maxAppendBytes`` in all, one save's at most
    /// ``ReplicatedEntry/maxSaveBytes`` (``GroupTooLarge`` otherwise, which aborts the local
    /// transaction before anything is appended).
    private func sharedEntries(_ group: AppliedGroup, batch: [PendingSave]) throws -> [ReplicatedEntry] {
        let bytes = group.encoded.reduce(0) { $0 + $1.count }
        let limits = appendLimits
        let limit = batch.count > 1 ? limits.group : limits.save
        if bytes > limit { throw GroupTooLarge(bytes: bytes, limit: limit) }
        return zip(group.entries, group.encoded).map { entry, bytes in
            ReplicatedEntry(transactionID: entry.transactionID, bytes: bytes, author: entry.author,
                            timestampMs: entry.timestampMs, schemaVersion: entry.schemaVersion)
        }
    }

    /// Smaller append limits for the store at `path` (tests), nil for the defaults.
    package static let appendLimitsForTesting = Locked<(path: String, group: Int, save: Int)?>(nil)

    /// The most bytes of entries one append of several saves, and of one save, carries.
    var appendLimits: (group: Int, save: Int) {
        Self.appendLimitsForTesting.withLock { t in
            t.flatMap { $0.path == storePath ? ($0.group, $0.save) : nil }
        } ?? (ReplicatedEntry.maxAppendBytes, ReplicatedEntry.maxSaveBytes)
    }

    /// Thrown out of the write transaction when a group's entries are over its limit
    /// (``appendLimits``).
    struct GroupTooLarge: Error {
        let bytes: Int
        let limit: Int
    }

    /// On the writer queue: applies the shared log's entries after the local head, a batch at a
    /// time, until there are none.
    func catchUp(from log: any ReplicationLog) throws {
        while true {
            let env = self.env
            let head = try env.read { try ReadView(txn: $0, env: env, schema: schema).lastTransactionID() }
            let next = try log.entries(after: head, limit: Self.catchUpBatch)
            guard let last = next.last?.transactionID else { return }
            // Stopped before a migration entry: met first on the next step, it throws.
            if try applyReplicated(next) < last { continue }
            if !log.mayBeFollowed(next, limit: Self.catchUpBatch) { return }
        }
    }

    /// On the writer queue: applies `entries` of the shared log, in one LMDB transaction, through
    /// the same state code as a save (``StateApplier``), and writes each to the local log byte
    /// for byte under its id. Entries at or before the local head are skipped (each is applied
    /// exactly once, also when a catch-up and a follower hand over the same ones); the others
    /// must follow the head without a gap, pass their checksum and hold this schema's version; a
    /// cluster's migration entry ends the batch (the entries before it are applied).
    /// Returns the local head after; publishes what it applied to the change streams.
    func applyReplicated(_ entries: [ReplicatedEntry]) throws -> TransactionID {
        dispatchPrecondition(condition: .onQueue(queue))
        // After a failed sync nothing is committed over the pages the kernel may have dropped.
        if let failed = failedFlush { throw failed }
        let env = self.env
        try Self.syncAsReplica(env)
        while true {
            do {
                let (head, lmdbID) = try env.write { txn -> (TransactionID, UInt64) in
                    // Every entry was applied already (the writer's own appends bring most of
                    // what a follower reads): nothing to commit, the transaction is aborted.
                    guard let applied = try applyShared(entries, in: txn, env: env) else {
                        throw NothingApplied(head: try ReadView(txn: txn, env: env, schema: schema).lastTransactionID())
                    }
                    return (applied, LMDBEnvironment.lmdbTransactionID(txn.handle))
                }
                env.publishHead(lmdbTransaction: lmdbID, transactionID: head)
                publisher.publishCommitted(env: env)
                return head
            } catch let nothing as NothingApplied {
                return nothing.head
            } catch let e as LMDBError where e.isMapFull {
                guard try env.growMap() else { throw StrataError.storeFull(maxMapSizeBytes: config.maxMapSizeBytes) }
                noteMapGrowths(1)
            } catch let e as LMDBError {
                // An I/O error stops the writer (``stopIfSyncFailed(_:)``), as a save's does.
                stopIfSyncFailed(e)
                throw StrataError.lmdb(e)
            }
        }
    }

    /// Thrown out of ``applyReplicated(_:)``'s transaction when it applied nothing: the local head.
    private struct NothingApplied: Error {
        let head: TransactionID
    }

    /// Applies `entries` of the shared log in `txn` through the same state code as a save
    /// (``StateApplier``) and writes each to the local log byte for byte under its id (a
    /// compressed entry in its plain form in a store of a format before compressed entries). Entries at
    /// or before the local head are skipped; the others must follow it without a gap, pass their
    /// checksum and hold this schema's version. Returns the last id applied (nil for none).
    private func applyShared(_ entries: [ReplicatedEntry], in txn: LMDBTransaction,
                             env: LMDBEnvironment) throws -> TransactionID? {
        var head = try ReadView(txn: txn, env: env, schema: schema).lastTransactionID()
        var applied: TransactionID?
        for shared in entries where shared.transactionID > head {
            let tx = shared.transactionID
            guard tx == head.next else {
                throw StrataError.replication(ReplicationError(.rejectedEntry, """
                    the cluster's transaction \(tx) does not follow this replica's head \(head)
                    """))
            }
            let entry: LogEntry
            do {
                entry = try shared.bytes.withUnsafeBytes { try LogEntryCodec.decode($0, transactionID: tx) }
            } catch {
                throw StrataError.replication(ReplicationError(.rejectedEntry, """
                    the cluster's transaction \(tx) cannot be read: \(error)
                    """))
            }
            if entry.schemaVersion > schema.version, entry.changes.isEmpty,
               entry.metadata["migrationTo"] == String(entry.schemaVersion) {
                // The entries before it are applied (committed by the caller) first: a replica
                // behind the cluster's migration migrates at the entry itself, with everything
                // before it applied. Met first, the entry stops the replica.
                if applied != nil { return applied }
                throw StrataError.replication(ReplicationError(.migrationNeeded, """
                    the cluster's transaction \(tx) migrates model '\(schema.model)' from v\
                    \(schema.version) to v\(entry.schemaVersion): migrate this replica there with the \
                    code of that version (`storectl migrate STORE --schema DIR --postgres URL`)
                    """))
            }
            guard entry.schemaVersion == schema.version else {
                throw StrataError.replication(ReplicationError(.rejectedEntry, """
                    the cluster's transaction \(tx) is written with schema version \
                    \(entry.schemaVersion) of model '\(schema.model)'; this replica holds version \
                    \(schema.version): run the code of that version to apply it
                    """))
            }
            var applier = StateApplier(txn: txn, env: env, schema: schema, transactionID: tx)
            try applier.applyLogged(entry.changes)
            // A compressed entry goes into a replica of an earlier store format in its plain form
            // (the decoded entry encoded again, plain: what decompressing it gives, for any entry
            // this codec wrote).
            let compressed = shared.bytes.withUnsafeBytes { LogEntryCodec.isCompressed($0) }
            let stored = try compressed && !MetaKey.logTakesCompressedEntries(txn, meta: env[.meta])
                ? LogEntryCodec.encode(entry) { false } : nil
            _ = try withUnsafeBytes(of: tx.rawValue.bigEndian) { key in
                try (stored ?? shared.bytes).withUnsafeBytes { try txn.put(env[.log], key: key, value: $0, mode: .append) }
            }
            head = tx
            applied = tx
        }
        return applied
    }
}
