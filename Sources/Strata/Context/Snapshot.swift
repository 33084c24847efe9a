import Foundation
import Synchronization

/// A read-only view of the store pinned at one transaction: MVCC, so opening one costs about a
/// pointer copy, it never waits for the writer and the writer never waits for it.
///
/// A snapshot holds an LMDB reader slot and keeps the pages of its transaction alive; the store
/// counts them (``Store/openSnapshots()``) and warns about old ones. Close it when done (it also
/// closes when released).
///
/// ```swift
/// let snapshot = try store.snapshot(label: "report")
/// defer { snapshot.close() }
/// let n = try snapshot.count(Query(entity: "Track"))
/// ```
public final class Snapshot: Sendable {
    /// The last transaction visible.
    public let transactionID: TransactionID
    /// Who holds it (shown in pinned-snapshot accounting).
    public let label: String
    public let openedAt: Date
    let store: Store
    /// The environment the snapshot reads (kept alive by it even after a compaction switched
    /// the store to a new generation).
    let env: LMDBEnvironment
    let serial: Int
    /// The read transaction; nil once closed. Used under the lock only, by one thread at a time,
    /// which is what `MDB_NOTLS` read transactions need.
    private let txn: Locked<ReadTxnBox?>

    init(store: Store, label: String, serial: Int) throws {
        let env = store.env
        let handle = try env.beginRead()
        let view = ReadView(txn: LMDBTransaction(handle: handle, isWrite: false), env: env, schema: store.schema)
        do {
            transactionID = try env.mapLock.withShared { try view.lastTransactionID() }
        } catch {
            env.endRead(handle)
            throw error
        }
        self.env = env
        self.txn = Locked(ReadTxnBox(txn: handle))
        self.store = store
        self.label = label
        self.serial = serial
        self.openedAt = Date()
    }

    deinit { close() }

    /// Releases the reader slot. Reads after this throw ``StrataError/closed(path:)``.
    public func close() {
        guard let box = txn.withLock({ b -> ReadTxnBox? in
            defer { b = nil }
            return b
        }) else { return }
        env.endRead(box.txn)
        store.snapshots.remove(serial)
    }

    /// Whether ``close()`` was called (or the store closed).
    public var isClosed: Bool { txn.withLock { $0 == nil } }

    /// Reads the snapshot. A snapshot stays readable until closed, also after a compaction or a
    /// migration replaced the store's generation (it keeps the old one alive).
    func read<R>(_ body: (ReadView) throws -> R) throws -> R {
        try store.checkProcess()
        return try txn.withLock { box in
            guard let box else { throw StrataError.closed(path: store.path) }
            return try env.mapLock.withShared {
                try body(ReadView(txn: LMDBTransaction(handle: box.txn, isWrite: false), env: env, schema: store.schema))
            }
        }
    }
}

/// Information about one open snapshot, for pinned-snapshot accounting.
public struct SnapshotInfo: Sendable, Equatable {
    public let label: String
    public let transactionID: TransactionID
    public let ageSeconds: Double
    /// Transactions committed since (how far behind the head it is).
    public let lagTransactions: UInt64
}

/// The open snapshots of a store, with a limit and age warnings.
final class SnapshotRegistry: Sendable {
    private struct Entry: Sendable {
        let label: String
        let transactionID: TransactionID
        let openedAt: Date
        var warned: Bool
    }
    private let entries = Mutex<(next: Int, open: [Int: Entry])>((1, [:]))
    private let weakSnapshots = Mutex<[Int: WeakSnapshot]>([:])
    private struct WeakSnapshot: Sendable { weak var snapshot: Snapshot? }
    let limit: Int

    init(limit: Int) { self.limit = limit }

    func reserve() throws -> Int {
        try entries.withLock { s in
            guard s.open.count < limit else { throw StrataError.tooManySnapshots(limit: limit) }
            defer { s.next += 1 }
            return s.next
        }
    }

    func register(_ snapshot: Snapshot) {
        entries.withLock { $0.open[snapshot.serial] = Entry(label: snapshot.label, transactionID: snapshot.transactionID, openedAt: snapshot.openedAt, warned: false) }
        weakSnapshots.withLock { $0[snapshot.serial] = WeakSnapshot(snapshot: snapshot) }
    }

    func remove(_ serial: Int) {
        _ = entries.withLock { $0.open.removeValue(forKey: serial) }
        _ = weakSnapshots.withLock { $0.removeValue(forKey: serial) }
    }

    var count: Int { entries.withLock { $0.open.count } }

    func infos(head: TransactionID) -> [SnapshotInfo] {
        let now = Date()
        return entries.withLock { s in
            s.open.values.map {
                SnapshotInfo(label: $0.label, transactionID: $0.transactionID, ageSeconds: now.timeIntervalSince($0.openedAt),
                             lagTransactions: head.rawValue &- min(head.rawValue, $0.transactionID.rawValue))
            }
        }.sorted { $0.transactionID < $1.transactionID || ($0.transactionID == $1.transactionID && $0.ageSeconds > $1.ageSeconds) }
    }

    /// Snapshots older than `seconds` not reported before; each is reported once.
    func takeOverdue(olderThan seconds: Double) -> [(label: String, transactionID: TransactionID, age: Double)] {
        let now = Date()
        return entries.withLock { s in
            var out: [(String, TransactionID, Double)] = []
            for (k, e) in s.open where !e.warned && now.timeIntervalSince(e.openedAt) > seconds {
                s.open[k]?.warned = true
                out.append((e.label, e.transactionID, now.timeIntervalSince(e.openedAt)))
            }
            return out
        }
    }

    func closeAll() {
        let all = weakSnapshots.withLock { $0.values.compactMap(\.snapshot) }
        for s in all { s.close() }
    }
}
