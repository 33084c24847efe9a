import Foundation
import Synchronization

/// Where a store stands against the app's schema versions.
public enum MigrationStatus: Sendable, Equatable {
    /// The store is at the app's last version.
    case upToDate(version: Int)
    /// The store is at `from`; the app's schemas reach `to`, through these steps.
    case needsMigration(from: Int, to: Int, steps: [String])
    /// The store was written by a newer version than the app knows.
    case tooNew(store: Int, app: Int)
}

/// What a migration did (or, for a dry run, would do).
public struct MigrationReport: Sendable {
    /// True when nothing was changed (the new generation was built, measured and deleted).
    public let dryRun: Bool
    /// The store's version before.
    public let from: Int
    /// The version migrated to.
    public let to: Int
    /// Live objects after the migration (counted before the catch-up).
    public let objects: Int
    /// Log transactions rewritten through the steps (their ids unchanged).
    public let transactionsUpcast: Int
    /// The transaction recording the migration (nil for a dry run).
    public let migrationTransaction: TransactionID?
    /// Time spent in each step, over every object and historical version: an estimate, from
    /// one record in 64 (a positional plan's time is shared among the steps it does).
    public let stepSeconds: [(step: String, seconds: Double)]
    /// Live objects per entity after the migration.
    public let objectsPerEntity: [String: Int]
    /// Size of the old generation's data file.
    public let bytesBefore: Int
    /// Size of the new generation's data file.
    public let bytesAfter: Int
    /// Wall-clock time of the whole migration.
    public let seconds: Double
}

/// Progress of a migration.
///
/// The state (`base`) and the log (`log`) are built at the same time, on two threads, so their
/// events interleave; the callback must be safe to call from either.
public struct MigrationProgress: Sendable {
    /// What the migration is doing.
    public enum Phase: String, Sendable {
        /// Building the new state from the live objects (`done`/`total` in objects).
        case base
        /// Rewriting the log through the steps (`done`/`total` in transactions).
        case log
        /// Applying what was committed during the build, on the writer (reported once).
        case catchingUp
        /// Syncing and switching to the new generation (not reported at present).
        case switching
    }
    /// The current phase.
    public let phase: Phase
    /// Units of the phase done so far.
    public let done: Int
    /// Units of the phase in all (0 when not known).
    public let total: Int
}

extension Store {
    /// The cheap check at launch: reads the store's schema version without opening it for writing.
    /// `schemas` are every version of the model, oldest first (``Schema/loadAll(directory:)``).
    public static func migrationStatus(at url: URL, schemas: [Schema], configuration: StoreConfiguration = StoreConfiguration()) throws -> MigrationStatus {
        guard let app = schemas.last else { throw MigrationError(reason: "no schema versions given") }
        // Use the instance this process has open (LMDB forbids a second one); otherwise a
        // read-only open that is closed again.
        let stored: Schema
        if let open = StoreRegistry.shared.existing(path: url.path) {
            stored = open.schema
        } else {
            let store = try Store.openReadOnly(at: url, configuration: configuration)
            stored = store.schema
            store.close()
        }
        let version = stored.version
        guard stored.model == app.model else { throw StrataError.modelMismatch(store: stored.model, app: app.model) }
        if version == app.version { return .upToDate(version: version) }
        if version > app.version { return .tooNew(store: version, app: app.version) }
        let steps = schemas.filter { $0.version > version }.flatMap { s in s.migrationSteps.map { "v\(s.version): \($0.summary)" } }
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
    public static func migrate(at url: URL, schemas: [Schema], to target: Int? = nil, registry: MigrationRegistry = MigrationRegistry(),
                               dryRun: Bool = false, configuration: StoreConfiguration = StoreConfiguration(),
                               progress: (@Sendable (MigrationProgress) -> Void)? = nil) async throws -> MigrationReport {
        let store = try Store.openExisting(at: url, configuration: configuration)
        let report = try await store.migrate(schemas: schemas, to: target, registry: registry, dryRun: dryRun, progress: progress)
        store.close()
        return report
    }

    /// Migrates this store (opened with its stored schema); see
    /// ``Store/migrate(at:schemas:to:registry:dryRun:configuration:progress:)``.
    public func migrate(schemas: [Schema], to target: Int? = nil, registry: MigrationRegistry = MigrationRegistry(),
                        dryRun: Bool = false, progress: (@Sendable (MigrationProgress) -> Void)? = nil) async throws -> MigrationReport {
        try checkUsable()
        guard let writer, let lock else { throw StrataError.readOnly(path: path) }
        // One compaction or migration at a time (see `MaintenanceGate`); checked again after the wait.
        await maintenance.enter()
        defer { maintenance.leave() }
        try Task.checkCancellation()   // cancelled while it waited: do not start
        try checkUsable()
        let started = ContinuousClock.now
        let goal = target ?? schemas.last?.version ?? schema.version
        guard let app = schemas.first(where: { $0.version == goal }), app.model == schema.model else {
            throw MigrationError(reason: "no \(schema.model) schema v\(goal) among the given versions")
        }
        guard goal > schema.version else { throw MigrationError(reason: "the store is at v\(schema.version); nothing to do for v\(goal)") }
        guard let current = schemas.first(where: { $0.version == schema.version }), current.canonicalJSON == schema.canonicalJSON else {
            throw MigrationError(reason: "the given v\(schema.version) schema differs from the one the store holds")
        }
        let hops = try (schema.version + 1...goal).map { v -> MigrationHop in
            guard let from = schemas.first(where: { $0.version == v - 1 }), let to = schemas.first(where: { $0.version == v }) else {
                throw MigrationError(reason: "schema v\(v) is missing")
            }
            return try MigrationHop(from: from, to: to, registry: registry)
        }
        let others = lock.otherHolders()
        guard others.isEmpty else { throw StrataError.storeBusy(path: path, processIDs: others) }

        let snapshot = try self.snapshot(label: "migration")
        defer { snapshot.close() }
        let oldEnv = snapshot.env
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
                for key in [MetaKey.horizon, MetaKey.created] {
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
                let stateProgress: @Sendable (Int) -> Void = { report(MigrationProgress(phase: .base, done: $0, total: objects)) }
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
                    let done = DispatchGroup()
                    let side = stateSide
                    DispatchQueue.global().async(group: done) {
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
                    guard let built = result.withLock({ $0 }) else { throw MigrationError(reason: "the state build did not finish") }
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
        func objectsPerEntity() throws -> [String: Int] {
            try newEnv.read { txn in
                Dictionary(uniqueKeysWithValues: try app.entities.map { ($0.name, try ReadView(txn: txn, env: newEnv, schema: app).objectCount($0)) })
            }
        }
        let stepSeconds: [(step: String, seconds: Double)] = zip(hops.flatMap { h in h.steps.map { "v\(h.to.version): \($0.summary)" } }, upcaster.timings.map(\.seconds)).map { (step: $0, seconds: $1) }
        if dryRun {
            try newEnv.sync()
            let counts = try objectsPerEntity()
            return MigrationReport(dryRun: true, from: schema.version, to: goal, objects: counts.values.reduce(0, +),
                                   transactionsUpcast: upcaster.transactions, migrationTransaction: nil, stepSeconds: stepSeconds,
                                   objectsPerEntity: counts, bytesBefore: oldEnv.fileBytes, bytesAfter: newEnv.fileBytes,
                                   seconds: (ContinuousClock.now - started).seconds)
        }
        progress?(MigrationProgress(phase: .catchingUp, done: 0, total: 0))
        try checkUsable()
        try prefetchBeforeCatchUp(generation, builtAt: t0)
        let box = UpcasterBox(upcaster)
        let marker = try await writer.exclusive { [self] in
            assert(env === oldEnv, "the live generation changed during a migration")
            var u = box.value
            defer { box.value = u }
            let marker = try oldEnv.read { txn -> TransactionID in
                let view = ReadView(txn: txn, env: oldEnv, schema: schema)
                let last = try view.lastTransactionID()
                if last > t0 { try u.upcastLog(view, after: t0, upTo: last, applyingToState: true) { _ in } }
                return last.next
            }
            try u.writeMarker(marker, from: schema.version, to: goal, steps: stepSeconds.map(\.step))
            progress?(MigrationProgress(phase: .switching, done: 0, total: 0))
            try switchGeneration(generation, lock: lock, replacing: oldEnv)
            // This instance holds the old schema: it stops here, and nothing queued is acknowledged.
            markMigrated(to: goal)
            writer.stopFromQueue(failing: .migrated(path: path, toVersion: goal))
            return marker
        }
        switched = true
        let bytesAfter = newEnv.fileBytes
        let counts = try objectsPerEntity()
        let finalSeconds: [(step: String, seconds: Double)] = zip(stepSeconds.map(\.step), box.value.timings.map(\.seconds)).map { (step: $0, seconds: $1) }
        newEnv.close()
        return MigrationReport(dryRun: false, from: schema.version, to: goal, objects: counts.values.reduce(0, +),
                               transactionsUpcast: box.value.transactions, migrationTransaction: marker, stepSeconds: finalSeconds,
                               objectsPerEntity: counts, bytesBefore: oldEnv.fileBytes, bytesAfter: bytesAfter,
                               seconds: (ContinuousClock.now - started).seconds)
    }
}

/// Set when one side of a migration's build failed, so the other stops early.
final class MigrationCancellation: Sendable {
    private let flag = Atomic<Bool>(false)
    func cancel() { flag.store(true, ordering: .relaxed) }
    var isCancelled: Bool { flag.load(ordering: .relaxed) }
}

/// What a side of the build throws when the other side failed (never reported: the other
/// side's error is).
struct MigrationCancelled: Error {}

/// Carries the upcaster into the writer's exclusive block (used only there, one thread at a time).
private final class UpcasterBox: @unchecked Sendable {
    var value: Upcaster
    init(_ value: Upcaster) { self.value = value }
}

/// Rewrites state and log through the migration hops.
///
/// The log is rewritten entry by entry. An update only carries the attributes it changed, and a
/// step (a conversion, a custom step) needs the whole record, so the upcaster keeps the
/// old-schema records in a scratch environment while it walks the log (the records alone: no
/// indexes). The new generation's state is not replayed from the rewritten log: it is the live
/// state, each object transformed once and written in bulk (``BulkStateBuilder``) — the same
/// state, since an upcast update's values are the transform of the whole record after it.
/// `verify` on a migrated store checks that the two agree. The two parts run at once when a
/// second snapshot of the same transaction can be had (``stateSide()``), and a failure on one
/// side stops the other (``MigrationCancellation``). The log rewrite also tracks the unique
/// keys a migration can change through the history (``checkedUniques``): a clash there fails
/// the migration, since the rewritten log could not be replayed. Transactions committed during
/// the build are caught up through ``StateApplier`` as a save would be.
struct Upcaster: Sendable {
    let old: Schema
    let new: Schema
    let hops: [MigrationHop]
    let newEnv: LMDBEnvironment
    let scratch: LMDBEnvironment
    var timings: [Duration]
    var transactions = 0

    /// Per old entity tag: the new entity, and the uniques of it whose keys the log rewrite
    /// tracks (in the scratch's `uniques` database) to refuse a migration under which two
    /// objects would have shared a unique key at some transaction — a replay of the rewritten
    /// log (`verify`'s rebuild) would fail there. A unique over the same attributes, carried
    /// unchanged (no conversion, no custom step, one hop), as an old one is left out: the old
    /// store already held it at every transaction, with the same keys.
    let checkedUniques: [UInt16: (entity: EntityDescription, uniques: [IndexDescription])]
    /// Shared by the two sides of the build (``stateSide()`` copies the reference).
    let cancellation = MigrationCancellation()

    init(old: Schema, new: Schema, hops: [MigrationHop], newEnv: LMDBEnvironment) throws {
        self.old = old
        self.new = new
        self.hops = hops
        self.newEnv = newEnv
        var checked: [UInt16: (entity: EntityDescription, uniques: [IndexDescription])] = [:]
        for e in old.entities {
            guard let target = new.entity(tag: e.tag), !target.uniques.isEmpty else { continue }
            let plan = hops.count == 1 ? hops[0].plans[e.tag] : nil
            let toCheck = target.uniques.filter { u in
                guard let positions = plan?.unchangedPositions(u) else { return true }
                return !e.uniques.contains { $0.attributes == positions }
            }
            if !toCheck.isEmpty { checked[e.tag] = (target, toCheck) }
        }
        checkedUniques = checked
        scratch = try StateRebuilder.scratch(sizeHint: 1 << 20, storeDirectory: URL(fileURLWithPath: newEnv.path).deletingLastPathComponent().path)
        timings = Array(repeating: .zero, count: hops.reduce(0) { $0 + $1.steps.count })
    }

    func close() { scratch.close() }

    /// A copy for building the state on another thread: the same schemas, hops and generation,
    /// its own step timings (added back with ``addTimings(of:)``). It does not use the scratch.
    func stateSide() -> Upcaster {
        var side = self
        side.timings = Array(repeating: .zero, count: timings.count)
        side.transformed = 0
        side.transactions = 0
        return side
    }

    /// Adds the step times `other` measured (see ``stateSide()``).
    mutating func addTimings(of other: Upcaster) {
        for i in timings.indices { timings[i] += other.timings[i] }
    }

    /// Records transformed so far; one in ``timingSample`` is timed step by step.
    var transformed = 0
    /// Per-step times are measured on one record in this many and scaled up (an estimate: the
    /// clock reads would otherwise cost more than the steps).
    static let timingSample = 64

    mutating func transform(_ id: ObjectID, _ values: [Value]) throws -> [Value] {
        var v = values
        defer { transformed += 1 }
        guard transformed % Self.timingSample == 0 else {
            for hop in hops { v = try hop.transform(id, v) }
            return v
        }
        var sampled = [Duration](repeating: .zero, count: timings.count)
        var offset = 0
        try sampled.withUnsafeMutableBufferPointer { all in
            for hop in hops {
                v = try hop.transform(id, v, timings: UnsafeMutableBufferPointer(rebasing: all[offset..<offset + hop.steps.count]))
                offset += hop.steps.count
            }
        }
        for i in timings.indices { timings[i] += sampled[i] * Self.timingSample }
        return v
    }

    func mapTag(_ tag: UInt16) -> UInt16? {
        var t: UInt16? = tag
        for hop in hops { t = t.flatMap { hop.relationshipTags[$0] } }
        return t
    }

    /// For a compacted store: the old-schema state at the horizon into the scratch (the records
    /// the first updates after the horizon need).
    mutating func loadBase(_ view: ReadView, horizon: TransactionID, head: TransactionID) throws {
        guard horizon > .zero else { return }
        _ = try StateRebuilder.loadBase(from: view, horizon: horizon, head: head, into: scratch, schema: old)
        // The scratch's uniques become the new-schema keys of the checked uniques at the horizon.
        let uniques = scratch[.uniques], objects = scratch[.objects]
        try scratch.writeGrowing { try $0.empty(uniques) }
        guard !checkedUniques.isEmpty else { return }
        var base: [(ObjectID, [Value])] = []
        try scratch.read { txn in
            var scan = ChunkedScan(txn: txn, db: objects, prefix: nil)
            while let (k, v) = try scan.next() {
                let id = k.withUnsafeBytes { ObjectID(keyBytes: $0) }
                guard checkedUniques[id.entityTag] != nil else { continue }
                base.append((id, try v.withUnsafeBytes { try RecordCodec.decode($0, id: id, schema: old) }.values))
            }
        }
        var transformedBase: [(ObjectID, [Value])] = []
        for (id, values) in base { transformedBase.append((id, try transform(id, values))) }
        try scratch.writeGrowing { txn in
            for (id, values) in transformedBase { try trackUniques(txn, id, before: nil, after: values) }
        }
    }

    /// Tags of the new schema's indexes and uniques whose keys the old store holds byte for
    /// byte: one hop, an entity without a custom step, the same tag, and the same attributes
    /// carried over without conversion (an index key is the tag, the attributes' sortable
    /// encodings and the id; a unique's is the tag and the encodings, with the id as value).
    func carriedKeyTags() -> (indexes: Set<UInt16>, uniques: Set<UInt16>) {
        guard hops.count == 1 else { return ([], []) }
        var indexes = Set<UInt16>(), uniques = Set<UInt16>()
        for e in old.entities {
            guard let plan = hops[0].plans[e.tag], let target = new.entity(tag: e.tag) else { continue }
            func carried(_ d: IndexDescription, among old: [IndexDescription]) -> Bool {
                guard let p = plan.unchangedPositions(d) else { return false }
                return old.contains { $0.tag == d.tag && $0.attributes == p }
            }
            for d in target.indexes where carried(d, among: e.indexes) { indexes.insert(d.tag) }
            for d in target.uniques where carried(d, among: e.uniques) { uniques.insert(d.tag) }
        }
        return (indexes, uniques)
    }

    /// Moves `id`'s checked unique keys from those of `before` to those of `after` (new-schema
    /// values; nil: the object does not exist), in the scratch, refusing a key another object
    /// holds — what ``StateApplier`` does to the `uniques` database when the rewritten log is
    /// replayed.
    func trackUniques(_ txn: LMDBTransaction, _ id: ObjectID, before: [Value]?, after: [Value]?) throws {
        guard let (entity, uniques) = checkedUniques[id.entityTag] else { return }
        let db = scratch[.uniques]
        for u in uniques {
            let was = try before.flatMap { try Layout.uniqueKey(u, record: $0, entity: entity, id: id) }
            let now = try after.flatMap { try Layout.uniqueKey(u, record: $0, entity: entity, id: id) }
            if was == now { continue }
            if let was { _ = try txn.delete(db, key: was) }
            guard let now, let after else { continue }
            if try txn.put(db, key: now, value: id.keyBytes, mode: .noOverwrite) == .keyExists {
                let owner = try txn.withValue(db, key: now) { ObjectID(keyBytes: $0) }
                if let owner, owner != id { throw StrataError.uniqueClash(u, entity, after, id: id, owner: owner) }
            }
        }
    }

    /// The new generation's state from `view`'s live state: every object transformed and
    /// written in bulk, links under their new tags, and the object counts (unchanged by a
    /// migration; checked against the objects written).
    mutating func buildState(_ view: ReadView, expectedObjects: Int, progress: (Int) -> Void) throws {
        let (indexTags, uniqueTags) = carriedKeyTags()
        var builder = BulkStateBuilder(env: newEnv, schema: new, expectedObjects: expectedObjects,
                                       carried: .init(source: view.txn, sourceEnv: view.env, indexTags: indexTags, uniqueTags: uniqueTags))
        var objects = ChunkedScan(txn: view.txn, db: view.env[.objects], prefix: nil)
        var done = 0
        while let (k, v) = try objects.next() {
            guard k.count == 16 else { throw MigrationError(reason: "the objects database holds a \(k.count)-byte key (ids are 16 bytes); run verify") }
            let id = k.withUnsafeBytes { ObjectID(keyBytes: $0) }
            let r = try v.withUnsafeBytes { try RecordCodec.decode($0, id: id, schema: old) }
            try builder.add(id: id, values: try transform(id, r.values), version: r.version)
            done += 1
            if done % 4_096 == 0, cancellation.isCancelled { throw MigrationCancelled() }
            if done % 65_536 == 0 { progress(done) }
        }
        var links = ChunkedScan(txn: view.txn, db: view.env[.links], prefix: nil)
        while let (k, _) = try links.next() {
            guard k.count == 34 else { throw MigrationError(reason: "the links database holds a \(k.count)-byte key (links are 34 bytes); run verify") }
            let oldTag = UInt16(k[0]) << 8 | UInt16(k[1])
            guard old.relationship(tag: oldTag) != nil else { throw MigrationError(reason: "a link has relationship tag \(oldTag), which \(old.model) v\(old.version) does not declare; run verify") }
            // Every relationship carries over (the shape check refuses steps that drop one).
            guard let tag = mapTag(oldTag) else { throw MigrationError(reason: "relationship tag \(oldTag) has no counterpart in v\(new.version)") }
            try builder.addLink(Layout.u16(tag) + k.dropFirst(2))
        }
        try builder.finish()
        // Counts: the old store's, for every entity it has a count for (also the zero ones a
        // replay of the log leaves), each checked against what was written.
        var counts: [(key: [UInt8], value: [UInt8])] = []
        for e in old.entities {
            let key = MetaKey.count(e.tag)
            let stored = try view.txn.withValue(view.env[.counts], key: key) { b -> UInt64 in
                var r = ByteReader(b)
                return try r.u64()
            }
            let written = builder.objectsPerEntity[e.tag] ?? 0
            guard let stored else {
                guard written == 0 else { throw MigrationError(reason: "\(e.name) has \(written) objects but no stored count; run verify") }
                continue
            }
            guard stored == UInt64(written) else {
                throw MigrationError(reason: "\(e.name) has \(written) objects but a stored count of \(stored); run verify")
            }
            counts.append((key, MetaKey.countValue(written)))
        }
        try newEnv.writeGrowing { txn in for c in counts { try txn.put(newEnv[.counts], key: c.key, value: c.value) } }
        progress(done)
    }

    /// Rewrites the log entries (`after`, `upTo`] through the steps into the new generation's
    /// log; with `applyingToState`, also to its state (the catch-up: the state was built before
    /// them). The scratch follows in the old schema.
    mutating func upcastLog(_ view: ReadView, after: TransactionID, upTo: TransactionID, applyingToState: Bool, progress: (Int) -> Void) throws {
        guard upTo > after else { return }
        var batch: [LogEntry] = []
        var batchBytes = 0
        func flush(_ u: inout Upcaster) throws {
            guard !batch.isEmpty else { return }
            let upcast = try u.upcast(batch)
            try u.newEnv.writeGrowing { txn in
                for entry in upcast {
                    if applyingToState {
                        var applier = StateApplier(txn: txn, env: u.newEnv, schema: u.new, transactionID: entry.transactionID)
                        for c in entry.changes { try applier.apply(c) }
                        try applier.flushCounts()
                    }
                    try txn.put(u.newEnv[.log], key: entry.transactionID.keyBytes, value: LogEntryCodec.encode(entry), mode: .append)
                }
            }
            u.transactions += batch.count
            progress(u.transactions)
            batch.removeAll(keepingCapacity: true)
            batchBytes = 0
        }
        var expected = after.next
        var failure: Error?
        try view.forEachLogEntry(after.next.rawValue...upTo.rawValue) { entry in
            if cancellation.isCancelled {
                failure = MigrationCancelled()
                return false
            }
            guard entry.transactionID == expected else {
                failure = StrataError.corruptLogEntry(transaction: expected, reason: "missing from the log; cannot migrate")
                return false
            }
            expected = expected.next
            batch.append(entry)
            batchBytes += entry.changes.count
            if batch.count >= 512 || batchBytes >= 65_536 {
                do { try flush(&self) } catch { failure = error; return false }
            }
            return true
        }
        if let failure { throw failure }
        guard expected == upTo.next else { throw StrataError.corruptLogEntry(transaction: expected, reason: "missing from the log; cannot migrate") }
        try flush(&self)
    }

    /// Entries in the new schema; the scratch's records advance through the originals.
    private mutating func upcast(_ entries: [LogEntry]) throws -> [LogEntry] {
        var out: [LogEntry] = []
        var pending: [(LogEntry, [LoggedChange])] = []
        // Compute with the scratch's records, then apply the originals to them, in one
        // transaction (redone whole if the scratch's map has to grow).
        let timingsBefore = timings, transformedBefore = transformed
        let objects = scratch[.objects]
        let old = self.old
        try scratch.writeGrowing { txn in
            pending.removeAll()
            timings = timingsBefore
            transformed = transformedBefore
            func record(_ id: ObjectID) throws -> Record? {
                try txn.withValue(objects, key: id.keyBytes) { try RecordCodec.decode($0, id: id, schema: old) }
            }
            for entry in entries {
                var changes: [LoggedChange] = []
                changes.reserveCapacity(entry.changes.count)
                for c in entry.changes {
                    switch c {
                    case .insert(let id, let values):
                        guard let e = old.entity(tag: id.entityTag), values.count == e.attributes.count else {
                            throw StrataError.corruptLogEntry(transaction: entry.transactionID, reason: "insert of \(id): no entity with its tag and \(values.count) attributes in \(old.model) v\(old.version)")
                        }
                        let t = try transform(id, values)
                        changes.append(.insert(id: id, values: t))
                        let record = RecordCodec.encode(Record(entity: e, id: id, values: values, version: entry.transactionID))
                        if try txn.put(objects, key: id.keyBytes, value: record, mode: .noOverwrite) == .keyExists {
                            throw StrataError.corruptLogEntry(transaction: entry.transactionID, reason: "inserts \(id), which exists")
                        }
                        try trackUniques(txn, id, before: nil, after: t)
                    case .update(let id, let attrs, let previous):
                        guard var record = try record(id) else { throw MigrationError(reason: "transaction \(entry.transactionID) updates missing object \(id)") }
                        let before = record.values
                        for a in attrs {
                            guard a.attribute >= 0, a.attribute < record.values.count else {
                                throw StrataError.corruptLogEntry(transaction: entry.transactionID, reason: "update of \(id) names attribute \(a.attribute) of \(record.values.count)")
                            }
                            record.values[a.attribute] = a.new
                        }
                        let tb = try transform(id, before), ta = try transform(id, record.values)
                        let diff = tb.indices.filter { tb[$0] != ta[$0] }.map { AttributeChange(attribute: $0, old: tb[$0], new: ta[$0]) }
                        // Kept even when empty: the update still gave the object this transaction's version.
                        changes.append(.update(id: id, changes: diff, previousVersion: previous))
                        record.version = entry.transactionID
                        try txn.put(objects, key: id.keyBytes, value: RecordCodec.encode(record))
                        try trackUniques(txn, id, before: tb, after: ta)
                    case .delete(let id, let values, let previous):
                        let t = try transform(id, values)
                        changes.append(.delete(id: id, values: t, previousVersion: previous))
                        guard try txn.delete(objects, key: id.keyBytes) else {
                            throw StrataError.corruptLogEntry(transaction: entry.transactionID, reason: "deletes \(id), which does not exist")
                        }
                        try trackUniques(txn, id, before: t, after: nil)
                    case .link(let tag, let a, let b):
                        if let t = mapTag(tag) { changes.append(.link(relationship: t, from: a, to: b)) }
                    case .unlink(let tag, let a, let b):
                        if let t = mapTag(tag) { changes.append(.unlink(relationship: t, from: a, to: b)) }
                    }
                }
                pending.append((entry, changes))
            }
        }
        for (entry, changes) in pending {
            out.append(LogEntry(transactionID: entry.transactionID, schemaVersion: new.version, timestampMs: entry.timestampMs,
                                author: entry.author, metadata: entry.metadata, changes: changes))
        }
        return out
    }

    /// The transaction that records the migration itself (no data changes).
    func writeMarker(_ tx: TransactionID, from: Int, to: Int, steps: [String]) throws {
        let entry = LogEntry(transactionID: tx, schemaVersion: to, timestampMs: Int64(Date().timeIntervalSince1970 * 1000), author: "migration",
                             metadata: ["migrationFrom": String(from), "migrationTo": String(to), "steps": steps.joined(separator: "; ")], changes: [])
        try newEnv.writeGrowing { try $0.put(newEnv[.log], key: tx.keyBytes, value: LogEntryCodec.encode(entry), mode: .append) }
    }
}
