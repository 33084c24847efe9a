import Foundation
import Logging
import StrataLMDB
import Synchronization

/// A bulk load: many saves committed into a new generation beside the live one, which is
/// switched in at the end as compaction switches its generation, so readers see all of them at
/// once and a crash at any moment leaves the old state or the new one, never a part.
///
/// While it runs, this process's writer is paused (``WriterPause``: saves queue and are committed
/// on the new generation after the switch) and the store's lock is held exclusively, so no other
/// process can open the store (an open waits for the end); the generation the load started from
/// is therefore the one it replaces, with nothing to catch up. Readers of this process go on
/// reading the live generation.
///
/// The saves are resolved, validated and logged by the writer's own code (``SaveResolver``,
/// ``StateApplier``), each with its own transaction id and log entry, but many of them share one
/// LMDB write transaction (``write(_:)``) and none is synced before the switch: the pages of the
/// B-trees are copied once per shared transaction, not once per save.
///
/// When its caller allows it, the saves are resolved against a ``BulkMemoryState`` instead of
/// the new generation's B-trees: the store's state (objects, links, unique keys) is loaded into
/// it instead of copied, the saves are the same resolution with lookups in hash tables, the log
/// entries are appended to the generation as before, and the state is written once at the end,
/// every database in key order (``finish()``).
///
/// Exactly one of ``finish()`` and ``abandon()`` ends it. Its long steps (the copies, the write
/// transactions) run on a queue of its own, not on a thread of Swift's cooperative pool (two
/// threads on a two-core machine), which other tasks of the process need meanwhile.
final class BulkLoad: Sendable {
    let store: Store
    /// The live generation's last transaction when the load started: the new generation holds
    /// the state and the log up to it.
    let base: TransactionID
    /// The live generation's compaction horizon, kept by the new one.
    private let horizon: TransactionID
    private let pause: WriterPause
    private let writer: Writer
    private let lock: StoreLock
    private let oldEnv: LMDBEnvironment
    private let queue = DispatchQueue(label: "strata.bulk-load")
    /// The state the saves are resolved against when the load keeps it in memory; nil when they
    /// write the new generation's B-trees.
    let memory: BulkMemoryState?
    /// Whether the store's state was empty when the load started (no objects, links or keys).
    let startedEmpty: Bool

    private struct State {
        var generation: PendingGeneration
        var ended = false
        /// Transactions committed into the new generation, in order.
        var transactions: [TransactionID] = []
    }
    private let state: Locked<State>

    /// Transactions committed into the new generation, in order.
    var transactions: [TransactionID] { state.withLock { $0.transactions } }
    /// The new generation's environment.
    var env: LMDBEnvironment { state.withLock { $0.generation.env } }

    fileprivate init(store: Store, base: TransactionID, horizon: TransactionID, generation: PendingGeneration,
                     pause: WriterPause, writer: Writer, lock: StoreLock, oldEnv: LMDBEnvironment,
                     memory: BulkMemoryState?, startedEmpty: Bool) {
        self.store = store
        self.memory = memory
        self.startedEmpty = startedEmpty
        self.base = base
        self.horizon = horizon
        self.pause = pause
        self.writer = writer
        self.lock = lock
        self.oldEnv = oldEnv
        state = Locked(State(generation: generation))
    }

    deinit { precondition(state.withLock { $0.ended }, "a BulkLoad was neither finished nor abandoned") }

    /// Runs `body` on the load's queue and waits for it without holding a thread of the pool.
    private func onQueue<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
        try await withCheckedThrowingContinuation { c in queue.async { c.resume(with: Result { try body() }) } }
    }

    /// Runs `body` in one write transaction of the new generation and commits it (without a
    /// sync); returns what `body` returned and the transactions it committed. If the map has to
    /// grow, the transaction is aborted and `body` runs again from the start, so it must be
    /// repeatable. `body` saves through the ``BulkWriter`` it is given. Writes run one after
    /// another on the load's queue, in the order they reach it (the importer keeps one in flight
    /// at a time, so that is its order).
    func write<R: Sendable>(
        _ body: @escaping @Sendable (inout BulkWriter) throws -> R) async throws -> (result: R, committed: [TransactionID]) {
        precondition(!state.withLock { $0.ended }, "BulkLoad.write after the load ended")
        try store.checkUsable()
        let env = self.env, schema = store.schema, limits = store.configuration
        if let memory {
            return try await onQueue { [self] () throws -> (result: R, committed: [TransactionID]) in
                // Resolved once, in memory; only the log entries go to the generation, in a
                // transaction that can be run again whole when the map has to grow.
                let last = try env.read { try ReadView(txn: $0, env: env, schema: schema).lastTransactionID() }
                var writer = BulkWriter(memory: memory, env: env, schema: schema, limits: limits, next: last.next)
                let result = try body(&writer)
                let entries = writer.loggedEntries
                if !entries.isEmpty {
                    try env.writeGrowing { txn in
                        for (tx, encoded) in entries { try BulkWriter.appendLog(encoded, tx, txn: txn, env: env) }
                    }
                }
                state.withLock { $0.transactions += writer.transactions }
                return (result: result, committed: writer.transactions)
            }
        }
        return try await onQueue { [self] () throws -> (result: R, committed: [TransactionID]) in
            defer { releaseMappedPages(of: env) }
            // As `writeGrowing`, returning the body's result.
            while true {
                do {
                    let outcome = try env.write { txn in
                        let last = try ReadView(txn: txn, env: env, schema: schema).lastTransactionID()
                        var writer = BulkWriter(txn: txn, env: env, schema: schema, limits: limits,
                                                next: last.next)
                        let result = try body(&writer)
                        return (result: result, committed: writer.transactions)
                    }
                    state.withLock { $0.transactions += outcome.committed }
                    return outcome
                } catch let e as LMDBError where e.isMapFull {
                    guard try env.growMap() else { throw e }
                }
            }
        }
    }

    /// Whether `ref` names an object of the new generation as the writes that reached the load's
    /// queue before this call left it: for an import whose earlier records may have taken a
    /// unique key away from an object of the store, where the store the load started from would
    /// still answer with that object.
    func resolves(_ ref: ObjectReference) async throws -> Bool {
        precondition(!state.withLock { $0.ended }, "BulkLoad.resolves after the load ended")
        let env = self.env, schema = store.schema
        if let memory {
            return try await onQueue {
                let applier = BulkMemoryApplier(state: memory, transactionID: .zero)
                switch ref {
                case .id(let id):
                    return try applier.exists(id)
                case .unique(let tag, let c, let values):
                    guard let key = Layout.referenceKey(entity: tag, constraint: c, values: values, schema: schema)
                    else { return false }
                    return try applier.uniqueOwner(key) != nil
                }
            }
        }
        return try await onQueue {
            try env.read { try ReadView(txn: $0, env: env, schema: schema).resolve(ref) != nil }
        }
    }

    /// `body`'s answer from the new generation as the writes that reached the load's queue left
    /// it, for an importer naming what a refused write took; nil for a load in memory, where a
    /// refused save may have left part of itself.
    func read<R: Sendable>(_ body: @escaping @Sendable (ReadView) throws -> R) async throws -> R? {
        precondition(!state.withLock { $0.ended }, "BulkLoad.read after the load ended")
        guard memory == nil else { return nil }
        let env = self.env, schema = store.schema
        return try await onQueue {
            try env.read { try body(ReadView(txn: $0, env: env, schema: schema)) }
        }
    }

    /// Drops this process's mapping of `env`'s pages (they stay in the page cache): the saves read
    /// the B-trees at random places, and without it a large load would keep most of the new
    /// generation's file resident, as a copy of it would. Only a memory saving: a failure is
    /// logged and the load goes on.
    private func releaseMappedPages(of env: LMDBEnvironment) {
        do { try env.releaseMappedPages() } catch {
            store.logger.warning("could not release the mapped pages of a bulk load: \(error)")
        }
    }

    /// Copies the new generation, compactly, into another one that replaces it: the saves put
    /// their unique and link keys at random places of their B-trees, which leaves pages part
    /// full; the copy appends every database in key order, as compaction does, so the store
    /// starts out compact. The saves left the secondary indexes out (`skipsIndexes`): the copy
    /// builds them from its objects, sorted and appended (`copyGeneration`'s `.rebuilt`). The
    /// copy is sequential: about a fifth of the time of the saves it follows.
    private func compactBuiltGeneration() throws {
        let built = state.withLock { $0.generation }, schema = store.schema
        let lean = try store.makeGeneration(like: oldEnv)
        do {
            let head = try built.env.read { try ReadView(txn: $0, env: built.env, schema: schema).lastTransactionID() }
            _ = try store.copyGeneration(lean.env, from: .pinned(ReleasingReads(built.env, logger: store.logger)),
                                         sourceEnv: built.env, head: head, horizon: horizon, indexes: .rebuilt,
                                         progress: nil)
        } catch {
            lean.abandon()
            throw error
        }
        built.abandon()
        state.withLock { $0.generation = lean }
    }

    /// Copies the new generation compactly (``compactBuiltGeneration()``), makes it durable and
    /// the live one, publishes its transactions to the change streams (a batch at a time, as other
    /// processes' commits are), and lets the writer go on. Returns the new head. On an error the
    /// load is abandoned (the old generation stays). A load in memory calls `progress` (its work
    /// done counted in objects, objects in all) while it writes the generation.
    func finish(progress: (@Sendable (Int, Int) -> Void)? = nil) async throws -> TransactionID {
        precondition(!state.withLock { $0.ended }, "BulkLoad.finish after the load ended")
        do {
            try store.checkUsable()
            if let memory {
                let env = self.env, store = self.store
                // Written straight into the generation the log went to: every database in key
                // order, so it is compact as built.
                try await onQueue {
                    try memory.write(into: env, sortBudgetBytes: store.configuration.indexSortBudgetBytes,
                                     permissions: StorePermissions(store.configuration), logger: store.logger,
                                     checkUsable: store.checkUsable, progress: progress)
                }
            } else {
                try await onQueue { [self] in try compactBuiltGeneration() }
            }
        } catch {
            abandon()
            throw error
        }
        let generation = state.withLock { s -> PendingGeneration in
            s.ended = true
            return s.generation
        }
        let store = self.store, lock = self.lock, oldEnv = self.oldEnv
        let writer = self.writer, base = self.base
        let switched = Locked(false)
        let notDurable = Locked<StrataError?>(nil)
        do {
            try await pause.finish {
                do {
                    try store.checkUsable()
                    // No commit can reach the old generation meanwhile: this process's writer is
                    // paused and the exclusive lock keeps other processes out.
                    let last = try oldEnv.read {
                        try ReadView(txn: $0, env: oldEnv, schema: store.schema).lastTransactionID()
                    }
                    guard last == base else {
                        throw StrataError.corruptLogEntry(
                            transaction: last,
                            reason: "committed to the live generation during a bulk load from \(base)")
                    }
                    let notSynced = try store.switchGeneration(generation, lock: lock, replacing: oldEnv)
                    notDurable.withLock { $0 = notSynced }
                    lock.shared()
                } catch {
                    // Still on the paused writer: a close waiting for it has not released the
                    // lock yet.
                    lock.shared()
                    throw error
                }
                switched.withLock { $0 = true }
                _ = store.swapEnvironment(generation.env)
                writer.replaceEnvironment(generation.env)
                store.publisher.publishCommitted(env: generation.env)
            }
        } catch {
            if !switched.withLock({ $0 }) { generation.abandon() }
            store.maintenance.leave()
            throw error
        }
        store.maintenance.leave()
        // Switched in, but the link to it may not survive a power loss: the records are not
        // reported saved (the import run again after a reopen converges).
        if let e = notDurable.withLock({ $0 }) {
            guard case .lmdb(let cause) = e else { throw e }
            throw StrataError.lmdb(LMDBError(code: cause.code, operation: """
                the bulk load's generation was switched in, but \(cause.operation) (syncing the store directory) \
                did not succeed, so a power loss may undo it; this instance takes no more saves: reopen the store \
                and check it (an import run again converges)
                """))
        }
        return transactions.last ?? base
    }

    /// Removes the new generation and lets the writer go on; the store is as it was.
    func abandon() {
        let generation = state.withLock { s -> PendingGeneration? in
            guard !s.ended else { return nil }
            s.ended = true
            return s.generation
        }
        guard let generation else { return }
        generation.abandon()
        // Before the writer goes on: a close waiting for it then releases the lock after this.
        lock.shared()
        pause.resume()
        store.maintenance.leave()
    }
}

/// Reads of a generation nobody writes any more, one read transaction per chunk of a copy, with
/// the process's mapping of its pages dropped every ``releaseEvery`` chunks (about 4 MiB), so a
/// copy of a large generation does not keep it all resident.
private final class ReleasingReads: PinnedRead {
    static let releaseEvery = 8
    let env: LMDBEnvironment
    let logger: Logger
    private let reads = Atomic<Int>(0)

    init(_ env: LMDBEnvironment, logger: Logger) {
        self.env = env
        self.logger = logger
    }

    func readPinned<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        let result = try env.read(body)
        if reads.add(1, ordering: .relaxed).newValue % Self.releaseEvery == 0 {
            do { try env.releaseMappedPages() } catch {
                logger.warning("could not release the mapped pages of a bulk load's copy: \(error)")
            }
        }
        return result
    }
}

/// Saves inside one of a ``BulkLoad``'s write transactions, each resolved, applied and logged as
/// the writer does it, with the next transaction id.
struct BulkWriter {
    /// The transaction of the generation the saves write into, or nil when they are resolved
    /// against ``memory``.
    private let txn: LMDBTransaction?
    let env: LMDBEnvironment
    private let memory: BulkMemoryState?
    let schema: Schema
    let limits: StoreConfiguration
    private(set) var next: TransactionID
    private(set) var transactions: [TransactionID] = []
    /// With ``memory``: each save's encoded log entry, for the load to append.
    private(set) var loggedEntries: [(TransactionID, [UInt8])] = []
    /// ``StateApplier/writesSinceRelease`` of the last save, for the next one: the saves of one
    /// transaction release the mapped pages every ``StateApplier/bulkLoadReleaseInterval`` writes
    /// whatever the batch size.
    private var writesSinceRelease = 0

    /// `body`'s answer from the state the saves so far left (after an isolated save was refused,
    /// the state before it), for an importer naming what that save took; nil in memory, where a
    /// refused save may have left part of itself.
    func read<R>(_ body: (ReadView) throws -> R) rethrows -> R? {
        guard let txn else { return nil }
        return try body(ReadView(txn: txn, env: env, schema: schema))
    }

    fileprivate init(txn: LMDBTransaction, env: LMDBEnvironment, schema: Schema, limits: StoreConfiguration,
                     next: TransactionID) {
        self.txn = txn
        self.env = env
        memory = nil
        self.schema = schema
        self.limits = limits
        self.next = next
    }

    fileprivate init(memory: BulkMemoryState, env: LMDBEnvironment, schema: Schema, limits: StoreConfiguration,
                     next: TransactionID) {
        txn = nil
        self.env = env
        self.memory = memory
        self.schema = schema
        self.limits = limits
        self.next = next
    }

    /// Saves `changes` as ``Store/save(_:author:metadata:)`` would: the same resolution and
    /// validation, one log entry. Returns its transaction id, or nil when it changed nothing.
    /// With `isolated`, it runs in a nested transaction, so that when it throws nothing of it is
    /// left (and the transaction can go on); otherwise an error leaves the whole transaction
    /// unusable (the caller lets it abort). A load in memory cannot undo a save: `isolated` is
    /// refused there, and an error leaves the whole load unusable (the caller abandons it).
    mutating func save(_ changes: ChangeSet, author: String, metadata: [String: String],
                       isolated: Bool) throws -> TransactionID? {
        if changes.count > limits.maxChangesPerSave {
            throw StrataError.saveTooLarge(changes: changes.count, limit: limits.maxChangesPerSave)
        }
        let tx = next
        guard let txn else {
            guard let memory else { preconditionFailure("a BulkWriter writes into a transaction or into memory") }
            precondition(!isolated, "a bulk load in memory cannot undo a save (isolated saves need the B-trees)")
            var resolver = SaveResolver(applier: BulkMemoryApplier(state: memory, transactionID: tx), limits: limits)
            try resolver.run(changes)
            guard !resolver.changes.isEmpty else { return nil }
            loggedEntries.append((tx, Self.encodedEntry(tx, schema: schema, author: author, metadata: metadata,
                                                        changes: resolver.changes)))
            transactions.append(tx)
            next = tx.next
            return tx
        }
        let (env, schema, limits) = (self.env, self.schema, self.limits)
        var writes = writesSinceRelease
        func run(_ txn: LMDBTransaction) throws -> Bool {
            var applier = StateApplier(txn: txn, env: env, schema: schema, transactionID: tx)
            // Built from the objects when the generation is copied (`compactBuiltGeneration`).
            applier.skipsIndexes = true
            // No reader maps the new generation, so its pages are dropped in the middle of its
            // saves whatever their size (the chunks of a 1M-record load otherwise kept about
            // 600 MB of the file mapped), unless the store opted out of releasing mapped pages.
            if limits.releaseMappedPagesAfterChanges > 0 {
                applier.releaseMappedPagesEvery = StateApplier.bulkLoadReleaseInterval
                applier.writesSinceRelease = writes
            }
            var resolver = SaveResolver(applier: applier, limits: limits)
            try resolver.run(changes)
            writes = resolver.applier.writesSinceRelease
            guard !resolver.changes.isEmpty else { return false }
            try Self.appendLog(Self.encodedEntry(tx, schema: schema, author: author, metadata: metadata,
                                                 changes: resolver.changes), tx, txn: txn, env: env)
            return true
        }
        let logged = isolated ? try env.nested(in: txn, run) : try run(txn)
        writesSinceRelease = writes
        guard logged else { return nil }
        transactions.append(tx)
        next = tx.next
        return tx
    }

    /// The stored form of a save's log entry, stamped now.
    private static func encodedEntry(_ tx: TransactionID, schema: Schema, author: String,
                                     metadata: [String: String], changes: [LoggedChange]) -> [UInt8] {
        LogEntryCodec.encode(LogEntry(transactionID: tx, schemaVersion: schema.version,
                                      timestampMs: Int64(Date().timeIntervalSince1970 * 1000), author: author,
                                      metadata: metadata, changes: changes))
    }

    /// Appends an encoded log entry under `tx` (after every transaction the log holds).
    fileprivate static func appendLog(_ encoded: [UInt8], _ tx: TransactionID, txn: LMDBTransaction,
                                      env: LMDBEnvironment) throws {
        _ = try withUnsafeBytes(of: tx.rawValue.bigEndian) { key in
            try encoded.withUnsafeBytes { try txn.put(env[.log], key: key, value: $0, mode: .append) }
        }
    }
}

extension Store {
    /// Starts a ``BulkLoad``: takes the store's lock exclusively (refused with
    /// ``StrataError/storeBusy(path:processIDs:)`` when another process has the store open),
    /// pauses the writer, and copies the live generation's state and log into a new one. With
    /// `inMemory`, the load resolves its saves in memory (``BulkMemoryState``, sized for
    /// `expectedObjects` and the store's objects; its heads long from `bigHeadLength` entries; its
    /// saves cannot be `isolated`) when the snapshot's state is empty, or when the state it loads
    /// is within `storeInMemoryAtMost`: its objects, and the bytes of the pages of its objects,
    /// links and unique keys (nil: never from a store with objects).
    func beginBulkLoad(inMemory: Bool = false, storeInMemoryAtMost: (bytes: Int, objects: Int)? = (.max, .max),
                       expectedObjects: Int = 0,
                       bigHeadLength: Int32 = BulkMemoryState.defaultBigHeadLength) async throws -> BulkLoad {
        try checkUsable()
        guard let writer, let lock else { throw StrataError.readOnly(path: path) }
        let path = self.path
        func refuseOnAReplica() throws {
            guard writer.isReplica.load(ordering: .acquiring) else { return }
            throw StrataError.replication(ReplicationError(.notAttached, """
                \(path) is a replica of a cluster: a bulk load would bypass the cluster's log (import with \
                --mode incremental, which saves through it)
                """))
        }
        try refuseOnAReplica()
        await maintenance.enter()
        do {
            try Task.checkCancellation()
            try checkUsable()
            // Again after the wait: a markAsReplica let through the gate first made it a replica.
            try refuseOnAReplica()
            try takeExclusive(lock)
            let pause: WriterPause
            do { pause = try await WriterPause(writer) } catch {
                lock.shared()
                throw error
            }
            do {
                let snapshot = try self.snapshot(label: "bulk load")
                defer { snapshot.close() }
                let base = snapshot.transactionID
                // As compaction and migration check it: a horizon past the log's end, or entries
                // missing, would have the copy leave transactions out of the new log unnoticed.
                let horizon = try checkLogShape(snapshot, for: "a bulk import would copy the log without them").horizon
                let (stateIsEmpty, objects, stateBytes) = try snapshot.read { view in
                    (try DatabaseName.state.allSatisfy { try view.txn.entryCount(view.env[$0]) == 0 },
                     try view.txn.entryCount(view.env[.objects]),
                     try [DatabaseName.objects, .links, .uniques].reduce(0) { sum, name in
                         let (total, overflow) = sum.addingReportingOverflow(try view.txn.pageBytes(view.env[name]))
                         return overflow ? Int.max : total
                     })
                }
                let loads = !stateIsEmpty && inMemory && storeInMemoryAtMost.map {
                    objects <= $0.objects && stateBytes <= $0.bytes
                } == true
                try checkRoomForGeneration(snapshot)
                let generation = try makeGeneration(like: snapshot.env)
                // The load reads back what it writes (its saves look up unique keys and
                // records): the copy stays in the page cache.
                generation.endBulkBuild()
                let memory = inMemory && (stateIsEmpty || loads)
                    ? BulkMemoryState(schema: schema, expectedObjects: expectedObjects + objects,
                                      bigHeadLength: bigHeadLength) : nil
                do {
                    // On a queue of its own: a large store takes seconds to copy (or load).
                    try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, Error>) in
                        DispatchQueue(label: "strata.bulk-load.copy").async { [self] in
                            c.resume(with: Result {
                                _ = try copyGeneration(generation.env, from: snapshot, horizon: horizon, indexes: .omitted,
                                                       loadingStateInto: loads ? memory : nil, progress: nil)
                            })
                        }
                    }
                } catch {
                    generation.abandon()
                    throw error
                }
                return BulkLoad(store: self, base: base, horizon: horizon, generation: generation, pause: pause,
                                writer: writer, lock: lock, oldEnv: snapshot.env, memory: memory,
                                startedEmpty: stateIsEmpty)
            } catch {
                lock.shared()
                pause.resume()
                throw error
            }
        } catch {
            maintenance.leave()
            throw error
        }
    }
}
