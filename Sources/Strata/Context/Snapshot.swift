import Foundation
import Glibc
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
    /// When it was opened (wall clock, to a few milliseconds).
    public let openedAt: Date
    let store: Store
    /// The environment the snapshot reads (kept alive by it even after a compaction switched
    /// the store to a new generation).
    let env: LMDBEnvironment
    let serial: Int
    /// The read transaction; empty once closed.
    let txn: ReadTxnCell

    /// Opens a snapshot of `store`'s current environment and registers it (one lock).
    static func open(store: Store, label: String) throws -> Snapshot {
        let env = store.env
        let handle = try env.beginRead()
        do {
            let transactionID: TransactionID
            if let hint = env.headHint(for: handle) {
                transactionID = hint
            } else {
                let view = ReadView(txn: LMDBTransaction(handle: handle, isWrite: false), env: env, schema: store.schema)
                transactionID = try env.mapLock.withShared { try view.lastTransactionID() }
            }
            let cell = ReadTxnCell(handle)
            let openedAt = SnapshotRegistry.coarseNow()
            let serial = try store.snapshots.add(label: label, transactionID: transactionID, openedAt: openedAt, txn: cell, env: env)
            return Snapshot(store: store, env: env, txn: cell, serial: serial, label: label, transactionID: transactionID, openedAt: openedAt)
        } catch {
            env.endRead(handle)
            throw error
        }
    }

    private init(store: Store, env: LMDBEnvironment, txn: ReadTxnCell, serial: Int, label: String, transactionID: TransactionID, openedAt: Date) {
        self.store = store
        self.env = env
        self.txn = txn
        self.serial = serial
        self.label = label
        self.transactionID = transactionID
        self.openedAt = openedAt
    }

    deinit { close() }

    /// Releases the reader slot. Reads after this throw ``StrataError/closed(path:)``.
    public func close() {
        SnapshotRegistry.release(serial: serial, txn: txn, env: env, registry: store.snapshots)
    }

    /// Whether ``close()`` was called (or the store closed).
    public var isClosed: Bool { txn.isEmpty }

    /// Reads the snapshot. A snapshot stays readable until closed, also after a compaction or a
    /// migration replaced the store's generation (it keeps the old one alive).
    func read<R>(_ body: (ReadView) throws -> R) throws -> R {
        try store.checkProcess()
        return try txn.withTransaction { handle in
            guard let handle else { throw StrataError.closed(path: store.path) }
            return try env.mapLock.withShared {
                try body(ReadView(txn: LMDBTransaction(handle: handle, isWrite: false), env: env, schema: store.schema))
            }
        }
    }
}

/// A snapshot's read transaction handle behind a mutex: `MDB_NOTLS` read transactions may move
/// between threads but must be used by one at a time; empty once the snapshot is closed.
final class ReadTxnCell: Sendable {
    /// `OpaquePointer` is not `Sendable`; the mutex is what makes handing it between threads
    /// safe (it is only ever touched while the mutex is held).
    private struct Handle: @unchecked Sendable { let txn: OpaquePointer }
    private let handle: Mutex<Handle?>

    init(_ txn: OpaquePointer) { handle = Mutex(Handle(txn: txn)) }

    var isEmpty: Bool { handle.withLock { $0 == nil } }

    /// Takes the handle out (once): the caller ends the transaction.
    func take() -> OpaquePointer? {
        handle.withLock { h -> Handle? in
            defer { h = nil }
            return h
        }?.txn
    }

    /// Runs `body` with the handle (nil when closed) while holding the mutex.
    func withTransaction<R>(_ body: (OpaquePointer?) throws -> R) throws -> R {
        // `Mutex.withLock` wants a `sending` result, which a generic `R` read from the store is
        // not; the closure runs synchronously on this thread before `withLock` returns, so the
        // result is never shared between threads.
        nonisolated(unsafe) var result: Result<R, Error>?
        handle.withLock { h in result = Result { try body(h?.txn) } }
        guard let result else { throw StrataError.closed(path: "") }
        return try result.get()
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
///
/// Slots live in an array indexed by the snapshot's serial and are reused (a free list), so
/// opening and closing a snapshot costs one uncontended lock each and no hashing; the age check
/// made at every open runs at most every ``checkInterval(for:)`` (a monotonic clock read, no lock).
final class SnapshotRegistry: Sendable {
    private struct Entry: Sendable {
        let label: String
        let transactionID: TransactionID
        let openedAt: Date
        var warned: Bool
        /// The snapshot's transaction and environment, to close it when the store closes. Not
        /// the snapshot itself (a weak reference costs a side-table allocation per open); the
        /// entry goes when the snapshot closes, which its deinit does.
        let txn: ReadTxnCell
        let env: LMDBEnvironment
    }
    private struct Slots: Sendable {
        /// nil: free (or reserved and not registered yet).
        var entries: [Entry?] = []
        var free: [Int] = []
        var reserved = 0
    }
    private let slots = Mutex<Slots>(Slots())
    /// Monotonic nanoseconds before which ``takeOverdueIfDue(olderThan:)`` does nothing.
    private let nextCheckNanos = Atomic<Int64>(0)
    let limit: Int

    init(limit: Int) { self.limit = limit }

    /// Registers an open snapshot in a free slot and returns the slot's index (the snapshot's
    /// serial), or throws when `limit` are open.
    func add(label: String, transactionID: TransactionID, openedAt: Date, txn: ReadTxnCell, env: LMDBEnvironment) throws -> Int {
        let entry = Entry(label: label, transactionID: transactionID, openedAt: openedAt, warned: false, txn: txn, env: env)
        return try slots.withLock { s in
            guard s.reserved < limit else { throw StrataError.tooManySnapshots(limit: limit) }
            s.reserved += 1
            if let slot = s.free.popLast() {
                s.entries[slot] = entry
                return slot
            }
            s.entries.append(entry)
            return s.entries.count - 1
        }
    }

    /// The wall clock from `CLOCK_REALTIME_COARSE` (a few milliseconds' resolution, a fraction
    /// of the cost of `Date()`): snapshot ages are reported in seconds.
    static func coarseNow() -> Date {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &ts)
        return Date(timeIntervalSince1970: Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9)
    }

    /// Frees a snapshot's slot. Each serial is released exactly once.
    func remove(_ serial: Int) {
        slots.withLock { s in
            precondition(s.reserved > 0 && serial < s.entries.count, "snapshot slot \(serial) released twice")
            s.entries[serial] = nil
            s.free.append(serial)
            s.reserved -= 1
        }
    }

    var count: Int { slots.withLock { $0.reserved } }

    func infos(head: TransactionID) -> [SnapshotInfo] {
        let now = Date()
        return slots.withLock { s in
            s.entries.compactMap { e -> SnapshotInfo? in
                guard let e else { return nil }
                return SnapshotInfo(label: e.label, transactionID: e.transactionID, ageSeconds: now.timeIntervalSince(e.openedAt),
                                    lagTransactions: head.rawValue &- min(head.rawValue, e.transactionID.rawValue))
            }
        }.sorted { $0.transactionID < $1.transactionID || ($0.transactionID == $1.transactionID && $0.ageSeconds > $1.ageSeconds) }
    }

    /// How often the per-open check runs: a quarter of the warning age, at most once a second,
    /// so a warning comes at most 25 % (or 1 s) late.
    static func checkInterval(for seconds: Double) -> Int64 {
        Int64(min(max(seconds / 4, 0.001), 1) * 1e9)
    }

    /// ``takeOverdue(olderThan:)``, unless the last check was less than ``checkInterval(for:)`` ago.
    func takeOverdueIfDue(olderThan seconds: Double) -> [(label: String, transactionID: TransactionID, age: Double)] {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        let now = Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
        let due = nextCheckNanos.load(ordering: .relaxed)
        guard now >= due else { return [] }
        // One thread wins the check; the others skip it.
        guard nextCheckNanos.compareExchange(expected: due, desired: now + Self.checkInterval(for: seconds), ordering: .relaxed).exchanged
        else { return [] }
        return takeOverdue(olderThan: seconds)
    }

    /// Snapshots older than `seconds` not reported before; each is reported once.
    func takeOverdue(olderThan seconds: Double) -> [(label: String, transactionID: TransactionID, age: Double)] {
        let now = Date()
        return slots.withLock { s in
            var out: [(String, TransactionID, Double)] = []
            for i in s.entries.indices {
                guard let e = s.entries[i], !e.warned, now.timeIntervalSince(e.openedAt) > seconds else { continue }
                s.entries[i]?.warned = true
                out.append((e.label, e.transactionID, now.timeIntervalSince(e.openedAt)))
            }
            return out
        }
    }

    /// Ends a snapshot's read transaction and frees its slot, once: whichever of the snapshot's
    /// ``Snapshot/close()`` and the store's ``closeAll()`` takes the transaction first does it.
    static func release(serial: Int, txn: ReadTxnCell, env: LMDBEnvironment, registry: SnapshotRegistry) {
        guard let handle = txn.take() else { return }
        env.endRead(handle)
        registry.remove(serial)
    }

    func closeAll() {
        let all = slots.withLock { s in
            s.entries.indices.compactMap { i in s.entries[i].map { (serial: i, txn: $0.txn, env: $0.env) } }
        }
        for e in all { Self.release(serial: e.serial, txn: e.txn, env: e.env, registry: self) }
    }
}
