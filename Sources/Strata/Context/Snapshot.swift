import Foundation
import Glibc
import Synchronization

/// A read-only view of the store pinned at one transaction: MVCC, so opening one costs about a
/// pointer copy, it never waits for the writer and the writer never waits for it.
///
/// A snapshot holds an LMDB reader slot and keeps the pages of its transaction alive; the store
/// counts them (``Store/openSnapshots()``) and warns about old ones. Close it when done (it also
/// closes when released). A snapshot does not keep its store open: closing the store, or
/// releasing its last reference, closes the store's snapshots (reads then throw
/// ``StrataError/closed(path:)``).
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
    /// When it was opened (to a few milliseconds): now minus its age on the monotonic clock,
    /// so a wall-clock step does not change how old it looks.
    public var openedAt: Date {
        Date(timeIntervalSinceNow: -Double(SnapshotRegistry.monotonicNanos() - openedAtNanos) / 1e9)
    }
    /// `CLOCK_MONOTONIC_COARSE` at open, in nanoseconds.
    let openedAtNanos: Int64
    /// The store's registry of snapshots, which also carries what a read needs from the store
    /// (path, schema, the process check). Not the `Store` itself: the store registry refers to
    /// stores weakly, which puts every retain and release of a `Store` on the runtime's slow
    /// path (a side table), measurable per open.
    let registry: SnapshotRegistry
    /// The environment the snapshot reads (kept alive by it even after a compaction switched
    /// the store to a new generation).
    let env: LMDBEnvironment

    /// The snapshot's lock (a ``WordLock``, inside the snapshot: opening one allocates nothing
    /// for it). `MDB_NOTLS` read transactions may move between threads but must be used by one at
    /// a time: the lock is what makes that hold.
    private let mutex = WordLock()
    /// The read transaction's address (0 once taken), read and written only holding the lock
    /// (relaxed: the lock orders them).
    private let transactionBits: Atomic<UInt>
    /// The registry slot the snapshot occupies (-1: not registered). Set once by the registry,
    /// under its lock, before `open` returns the snapshot.
    private let serial = Atomic<Int>(-1)
    /// Set once the transaction was taken (by ``close()`` or the store's closing; in a forked
    /// child, by a ``close()`` that takes nothing), so that `deinit` after an explicit close
    /// does not lock again.
    private let ended = Atomic<Bool>(false)
    /// Set by a ``close()`` called inside a read of this snapshot on the reading thread, and
    /// taken by that read before it lets the lock go: only the thread holding the lock sets
    /// or reads it.
    private let closeWhenReadEnds = Atomic<Bool>(false)
    /// Set (before ``ended``) when the store's ``SnapshotRegistry/closeAll()`` took the
    /// transaction: it may still hold this snapshot's lock, under the registry's.
    private let takenByStoreClose = Atomic<Bool>(false)
    /// Run (tests only) by ``tryTakeTransaction()`` once it has taken the transaction, still
    /// holding the snapshot's lock; with the registry's path.
    static let afterTakenByStoreCloseForTesting = PathHook()
    /// Run (tests only) at the end of `deinit`, with the registry's path. A ``PathHook``, not a
    /// locked closure: every snapshot's release passes here, and an unset hook costs one atomic
    /// load, not a process-wide lock.
    static let deinitEndedForTesting = PathHook()

    /// Opens a snapshot of `store`'s current environment and registers it; `now` is
    /// ``SnapshotRegistry/monotonicNanos()`` (read once by the caller).
    static func open(store: Store, label: String, now: Int64) throws -> Snapshot {
        let env = store.env
        let handle: OpaquePointer
        do {
            handle = try env.beginRead()
        } catch StrataError.closed {
            throw StrataError.closed(path: store.path)   // the store's path, not the generation's
        }
        env.noteReader(monotonicNanos: now)
        let transactionID: TransactionID
        do {
            if let hint = env.headHint(for: handle) {
                transactionID = hint
            } else {
                let view = ReadView(txn: env.transaction(handle, isWrite: false), env: env,
                                    schema: store.snapshots.schema)
                transactionID = try env.mapLock.withShared { try view.lastTransactionID() }
            }
        } catch {
            env.endRead(handle)
            throw error
        }
        let snapshot = Snapshot(registry: store.snapshots, env: env, txn: handle, label: label,
                                transactionID: transactionID, openedAtNanos: now)
        do {
            try store.snapshots.add(snapshot)
        } catch {
            // Never registered: end the transaction here (its deinit then has nothing to do).
            if let txn = snapshot.takeTransaction() { env.endRead(txn) }
            throw error
        }
        return snapshot
    }

    private init(registry: SnapshotRegistry, env: LMDBEnvironment, txn: OpaquePointer, label: String,
                 transactionID: TransactionID, openedAtNanos: Int64) {
        self.registry = registry
        self.env = env
        self.transactionBits = Atomic(UInt(bitPattern: txn))
        self.label = label
        self.transactionID = transactionID
        self.openedAtNanos = openedAtNanos
    }

    deinit {
        if !ended.load(ordering: .acquiring) { close() }
        // The store's close took the transaction (before this deinit began, or while the
        // `close()` above waited for the lock, which then found nothing to take) and, with the
        // registry's lock held, may still be inside this snapshot (letting its lock go): the
        // memory goes once it has let go of the registry's.
        // (Not in a forked child: the close that may be inside it is a parent's thread, which
        // does not exist there, and the registry's lock may be held for good.)
        if takenByStoreClose.load(ordering: .acquiring), !registry.isForkedChild { registry.waitForCloseAll() }
        Self.deinitEndedForTesting.run(registry.path)
    }

    /// Releases the reader slot. Reads after this throw ``StrataError/closed(path:)``. Called
    /// inside a read of this snapshot on the reading thread (a custom merge closure that closes
    /// or refreshes the pinned context it reads through), it takes effect when that read ends.
    public func close() {
        // In a forked child the transaction and its reader slot are the parent's, and the lock
        // may be held by a parent's thread that was inside a read at the fork and does not exist
        // here (it would never be let go): marked closed, the lock not touched. Reads in the
        // child are refused before they take it (``read(_:)``).
        if registry.isForkedChild {
            ended.store(true, ordering: .releasing)
            return
        }
        if ThreadReads.transaction(of: self) != nil {
            // This very read holds the lock that closing takes: the read closes on its way out.
            closeWhenReadEnds.store(true, ordering: .relaxed)
            return
        }
        guard let txn = takeTransaction() else { return }
        endTaken(txn)
    }

    /// Ends a transaction taken out of the snapshot and frees its registry slot.
    private func endTaken(_ txn: OpaquePointer) {
        // In a forked child the reader slot is the parent's: ending the transaction would free it.
        guard !registry.isForkedChild else { return }
        env.endRead(txn)
        let slot = serial.load(ordering: .acquiring)
        if slot >= 0 { registry.remove(slot) }
    }

    /// Whether ``close()`` was called (or the store closed); for a close called inside a read of
    /// this snapshot, once that read has ended.
    public var isClosed: Bool { ended.load(ordering: .acquiring) }

    /// Runs `body` holding the snapshot's lock.
    @inline(__always)
    private func withLock<R>(_ body: () throws -> R) rethrows -> R {
        mutex.lock()
        defer { mutex.unlock() }
        return try body()
    }

    /// Takes the transaction out of the snapshot and marks it ``ended`` (the caller holds the
    /// lock): nil if it was taken already.
    @inline(__always)
    private func takeLocked() -> OpaquePointer? {
        let bits = transactionBits.load(ordering: .relaxed)
        guard bits != 0 else { return nil }
        transactionBits.store(0, ordering: .relaxed)
        ended.store(true, ordering: .releasing)
        return OpaquePointer(bitPattern: bits)
    }

    /// Takes the transaction out, once (nil afterwards): the caller ends the transaction and
    /// frees the slot. Waits for a read in progress on another thread.
    func takeTransaction() -> OpaquePointer? {
        withLock { takeLocked() }
    }

    /// What ``tryTakeTransaction()`` found.
    enum TryTake {
        /// A read holds the lock on another thread.
        case busy
        /// Taken: the caller ends it (in `env`) and frees the slot.
        case taken(OpaquePointer, LMDBEnvironment)
        /// Someone else took it already.
        case alreadyTaken
    }

    /// ``takeTransaction()`` without waiting for a read in progress (for the registry's
    /// ``SnapshotRegistry/closeAll()``, which must not wait while holding its own lock).
    func tryTakeTransaction() -> TryTake {
        // `env` is read holding the lock, with the transaction: once the lock is let go, a
        // deinit waiting for it may be freeing this snapshot (it then waits for the registry's
        // lock, not for this function).
        guard mutex.tryLock() else { return .busy }
        // Let go after the return value, `env` included, is made.
        defer { mutex.unlock() }
        guard transactionBits.load(ordering: .relaxed) != 0 else { return .alreadyTaken }
        // Before ``ended``: a deinit that finds it ended then finds this too.
        takenByStoreClose.store(true, ordering: .releasing)
        guard let txn = takeLocked() else { preconditionFailure("the transaction went while the lock was held") }
        Self.afterTakenByStoreCloseForTesting.run(registry.path)
        return .taken(txn, env)
    }

    /// Records the registry slot (called by the registry, under its lock).
    func setSerial(_ slot: Int) { serial.store(slot, ordering: .releasing) }

    /// Runs `body` with the transaction handle (nil once closed), holding the lock. A
    /// ``close()`` noted inside `body` (see ``read(_:)``) takes the transaction before the lock
    /// is let go, so no other read gets in between, and ends it after.
    func withTransaction<R>(_ body: (OpaquePointer?) throws -> R) throws -> R {
        var closedInside: OpaquePointer?
        let result: Result<R, Error> = withLock {
            let result = Result { try body(OpaquePointer(bitPattern: transactionBits.load(ordering: .relaxed))) }
            // Plain load and store: only the thread holding the lock touches the flag.
            if closeWhenReadEnds.load(ordering: .relaxed) {
                closeWhenReadEnds.store(false, ordering: .relaxed)
                closedInside = takeLocked()
            }
            return result
        }
        if let txn = closedInside { endTaken(txn) }
        return try result.get()
    }

    /// Reads the snapshot. A snapshot stays readable until closed, also after a compaction or a
    /// migration replaced the store's generation (it keeps the old one alive). A read nested in
    /// a read of this snapshot on the same thread (user code inside the read, such as a child's
    /// custom merge closure, reading through the same pinned context) uses the outer read's
    /// transaction instead of taking the lock again.
    func read<R>(_ body: (ReadView) throws -> R) throws -> R {
        try registry.checkProcess()
        if let handle = ThreadReads.transaction(of: self) {
            // The outer read holds the snapshot's lock and the map lock (shared, which nests: readers are
            // preferred) on this thread for as long as this runs.
            return try env.mapLock.withShared {
                try body(ReadView(txn: env.transaction(handle, isWrite: false), env: env, schema: registry.schema))
            }
        }
        return try withTransaction { handle in
            guard let handle else { throw StrataError.closed(path: registry.path) }
            return try ThreadReads.marked(store: registry, snapshot: self, transaction: handle) {
                try env.mapLock.withShared {
                    try body(ReadView(txn: env.transaction(handle, isWrite: false), env: env, schema: registry.schema))
                }
            }
        }
    }
}

extension Snapshot: PinnedRead {
    /// One read of the pinned transaction (a long copy reads it a chunk at a time).
    package func readPinned<R>(_ body: (LMDBTransaction) throws -> R) throws -> R { try read { try body($0.txn) } }
}

/// A function a test installs to run at one point of the library, given the path of the store
/// concerned (tests running at the same time tell their stores apart by it). Reaching the point
/// while none is installed, as always outside tests, costs one atomic load and takes no lock: for
/// points on hot paths. One test at a time installs and removes it.
final class PathHook: Sendable {
    private let installed = Atomic<Bool>(false)
    private let body = Locked<(@Sendable (String) -> Void)?>(nil)

    /// Installs `body`; nil removes it. The flag is set under the lock, so two calls at once
    /// cannot leave it saying the opposite of what is installed.
    func set(_ body: (@Sendable (String) -> Void)?) {
        self.body.withLock { current in
            current = body
            installed.store(body != nil, ordering: .releasing)
        }
    }

    /// Runs the installed function, if any, with `path`.
    @inline(__always)
    func run(_ path: String) {
        guard installed.load(ordering: .acquiring) else { return }
        body.withLock { $0 }?(path)
    }
}
