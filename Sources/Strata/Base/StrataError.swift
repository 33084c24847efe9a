/// Everything that can go wrong in Strata, each case carrying what is needed to say where and why.
///
/// Operating errors (bad input, a full disk, a corrupt file, a store that needs migrating) are
/// thrown as these, and so are calls made in a state the store cannot serve them in (a closed
/// store, a forked process, a `saveAndWait` from inside the writer). A value that breaks the
/// contract of the call it is given to (a `Record` with the wrong number of values, an attribute
/// name its entity lacks) trips a precondition instead, as an out-of-range `Array` index does.
public enum StrataError: Error, Sendable, CustomStringConvertible {
    /// A schema file is unusable.
    case schema(SchemaError)
    /// A liblmdb call failed.
    case lmdb(LMDBError)
    /// No store at the path (and creating one was not asked for).
    case storeNotFound(path: String)
    /// The directory holds something that is not a Strata store (or one this version cannot read).
    case notAStore(path: String, reason: String)
    /// The store cannot be trusted as it is, and was not opened: a directory of it that others
    /// may write (or its group, when it is not opened as shared with the group), or a file of it
    /// (`data.mdb`, `lock.mdb`, `strata.lock`) that is a symbolic link or not a regular file.
    /// The reason says what to fix; nothing was changed.
    case insecure(path: String, reason: String)
    /// The store is already open in this process with different options.
    case alreadyOpen(path: String, reason: String)
    /// The store was written with another model.
    case modelMismatch(store: String, app: String)
    /// The store's schema version is older than the app's: run `storectl migrate`.
    case migrationRequired(storeVersion: Int, appVersion: Int, model: String)
    /// The store was written by a newer schema version than the app knows.
    case storeTooNew(storeVersion: Int, appVersion: Int, model: String)
    /// The store's schema and the app's differ although their version numbers are equal.
    case schemaChanged(version: Int, model: String)
    /// A Swift entity type does not match the schema.
    case entityMismatch(type: String, reason: String)
    /// A state record failed its checksum or does not decode, or an entry of the index
    /// databases (`uniques`, `links`, `indexes`, counts) is damaged; `id` is the object it
    /// concerns, or all zeros when the entry names none.
    case corruptRecord(id: ObjectID, reason: String)
    /// A log entry failed its checksum or does not decode.
    case corruptLogEntry(transaction: TransactionID, reason: String)
    /// The store's data file is damaged where liblmdb itself would trust it: a meta page, a page
    /// header, a node, a page number or a value's size (``Store/verify(rebuild:progress:)`` and
    /// a store opened with ``StoreConfiguration/checkPagesOnOpen`` check them all before reading).
    /// The reason names the database and page, and the key near the damage when there is one.
    case damagedStore(path: String, reason: String)
    /// A save was refused by validation; nothing of it was written.
    case validation(ValidationFailure)
    /// The map reached ``StoreConfiguration/maxMapSizeBytes``.
    case storeFull(maxMapSizeBytes: Int)
    /// A write on a store opened read-only.
    case readOnly(path: String)
    /// More snapshots open than ``StoreConfiguration/maxOpenSnapshots``.
    case tooManySnapshots(limit: Int)
    /// More saves waiting than ``StoreConfiguration/maxPendingSaves``.
    case writerOverloaded(limit: Int)
    /// A change set larger than ``StoreConfiguration/maxChangesPerSave``.
    case saveTooLarge(changes: Int, limit: Int)
    /// The store was closed.
    case closed(path: String)
    /// The store was opened before `fork()`; a child process must open its own.
    case usedAfterFork(path: String)
    /// A transaction id that does not exist in the log.
    case noSuchTransaction(TransactionID)
    /// Objects changed in the store since the context read them (merge policy ``MergePolicy/fail``).
    case conflict([MergeConflict])
    /// Other processes have the store open, so it cannot switch generations (compaction, migration).
    case storeBusy(path: String, processIDs: [Int32])
    /// History before the compaction horizon was squashed; it cannot be replayed.
    case beforeHorizon(requested: TransactionID, horizon: TransactionID)
    /// The store was migrated to a new schema version by this process; open it again with it.
    case migrated(path: String, toVersion: Int)
    /// A query that does not fit its entity (unknown attribute, wrong value type, …).
    case invalidQuery(entity: String, reason: String)
    /// ``Store/saveAndWait(_:author:metadata:)`` called from the writer's own queue (it would
    /// wait for itself).
    case saveFromWriter(path: String)
    /// ``Store/saveAndWait(_:author:metadata:)`` called inside a read of the same store on the
    /// same thread (a `verify` or migration progress callback, a custom merge closure): its
    /// commit may have to grow the map, which waits for every read to end, this one included.
    case saveInsideRead(path: String)
    /// A ``StoreConfiguration`` value out of its range (named, with the value and the range);
    /// nothing was opened.
    case invalidConfiguration(field: String, value: String, reason: String)
    /// A replica of a cluster could not reach, write or apply the shared log.
    case replication(ReplicationError)

    /// A message that says what went wrong and where (as `storectl` prints it after `error:`).
    public var description: String {
        switch self {
        case .schema(let e): return e.description
        // The case also carries the operating system's refusals of the store's own file work
        // (a directory made, a rejects file written): only LMDB's calls are said to be LMDB's.
        case .lmdb(let e): return e.operation.hasPrefix("mdb_") ? "LMDB: \(e)" : "\(e)"
        case .storeNotFound(let p): return "\(p): no store here (create one with `storectl init`)"
        case .notAStore(let p, let r): return "\(p): not a Strata store: \(r)"
        case .insecure(let p, let r): return "\(p): refused: \(r)"
        case .alreadyOpen(let p, let r): return "\(p): already open in this process: \(r)"
        case .modelMismatch(let s, let a): return "store holds model '\(s)', the app's schema is model '\(a)'"
        case .migrationRequired(let s, let a, let m):
            return "store is at \(m) v\(s), the app needs v\(a): migration required (run `storectl migrate STORE " +
                   "--schema Schemas/\(m)`)"
        case .storeTooNew(let s, let a, let m):
            return "store is at \(m) v\(s), newer than the app's v\(a): it was written by a newer version of the app"
        case .schemaChanged(let v, let m):
            return "the app's \(m) v\(v) schema differs from the one the store was created with; give changed " +
                   "schemas a new version"
        case .entityMismatch(let t, let r): return "Swift type \(t) does not match the schema: \(r)"
        // The zero id stands for an entry of the index databases that names no object.
        case .corruptRecord(let id, let r):
            return id == ObjectID(high: 0, low: 0) ? "corrupt store entry: \(r)" : "corrupt state record \(id): \(r)"
        case .corruptLogEntry(let tx, let r): return "corrupt log entry for transaction \(tx): \(r)"
        case .damagedStore(let p, let r): return "\(p): the store is damaged: \(r)"
        case .validation(let f): return f.description
        case .storeFull(let m): return "store is full: the map reached its maximum of \(m) bytes"
        case .readOnly(let p): return "\(p): store is open read-only"
        case .tooManySnapshots(let l):
            return "too many open snapshots (limit \(l)); release snapshots or raise maxOpenSnapshots"
        case .writerOverloaded(let l): return "too many saves waiting for the writer (limit \(l))"
        case .invalidConfiguration(let f, let v, let r): return "StoreConfiguration.\(f) = \(v): \(r)"
        case .saveFromWriter(let p):
            return "\(p): saveAndWait called on the writer's queue (it would wait for itself); use save from a task"
        case .saveInsideRead(let p):
            return "\(p): saveAndWait called inside a read of the store (a progress callback, a merge closure): its "
                + "commit may have to wait for that read to end; save after the read, or with save from a task"
        case .saveTooLarge(let c, let l):
            return "a save of \(c) changes exceeds the limit of \(l); split it into batches"
        case .closed(let p): return "\(p): store is closed"
        case .usedAfterFork(let p):
            return "\(p): store was opened by the parent process before fork(); open it again in the child"
        case .noSuchTransaction(let tx): return "transaction \(tx) is not in the log"
        case .invalidQuery(let e, let r): return "invalid query on \(e): \(r)"
        case .migrated(let p, let v): return "\(p): the store was migrated to v\(v); open it again with that schema"
        case .storeBusy(let p, let pids):
            return pids.isEmpty
                ? "\(p): another process is opening the store; try again"
                : "\(p): open in other process(es) \(pids.map(String.init).joined(separator: ", ")); close them " +
                  "first (or wait)"
        case .beforeHorizon(let tx, let h):
            return "transaction \(tx) is before the compaction horizon \(h): history up to \(h) was squashed"
        case .replication(let e): return e.reason
        case .conflict(let list):
            return "conflict: \(list.count) object(s) changed underneath:\n"
                + list.map { "  " + $0.description }.joined(separator: "\n")
        }
    }
}
