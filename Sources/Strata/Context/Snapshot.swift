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

    /// The read transaction (nil once closed). `MDB_NOTLS` read transactions may move between
    /// threads but must be used by one at a time: the mutex is what makes that hold, and the
    /// `OpaquePointer` is only ever touched while it is held, which is why the
    /// `@unchecked Sendable` is sound.
    struct Handle: @unchecked Sendable {
        var txn: OpaquePointer?
    }
    private let state: Locked<Handle>
    /// The registry slot the snapshot occupies (-1: not registered). Set once by the registry,
    /// under its lock, before `open` returns the snapshot.
    private let serial = Atomic<Int>(-1)
    /// Set once the transaction was taken (by ``close()`` or the store's closing), so that
    /// `deinit` after an explicit close does not lock again.
    private let ended = Atomic<Bool>(false)
    /// Set by a ``close()`` called inside a read of this snapshot on the reading thread, and
    /// taken by that read before it releases the mutex: only the thread holding the mutex sets
    /// or reads it.
    private let closeWhenReadEnds = Atomic<Bool>(false)

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
                let view = ReadView(txn: env.transaction(handle, isWrite: false), env: env, schema: store.snapshots.schema)
                transactionID = try env.mapLock.withShared { try view.lastTransactionID() }
            }
        } catch {
            env.endRead(handle)
            throw error
        }
        let snapshot = Snapshot(registry: store.snapshots, env: env, txn: handle, label: label, transactionID: transactionID,
                                openedAtNanos: now)
        do {
            try store.snapshots.add(snapshot)
        } catch {
            // Never registered: end the transaction here (its deinit then has nothing to do).
            if let txn = snapshot.takeTransaction() { env.endRead(txn) }
            throw error
        }
        return snapshot
    }

    private init(registry: SnapshotRegistry, env: LMDBEnvironment, txn: OpaquePointer, label: String, transactionID: TransactionID, openedAtNanos: Int64) {
        self.registry = registry
        self.env = env
        self.state = Locked(Handle(txn: txn))
        self.label = label
        self.transactionID = transactionID
        self.openedAtNanos = openedAtNanos
    }

    deinit {
        if !ended.load(ordering: .acquiring) { close() }
    }

    /// Releases the reader slot. Reads after this throw ``StrataError/closed(path:)``. Called
    /// inside a read of this snapshot on the reading thread (a custom merge closure that closes
    /// or refreshes the pinned context it reads through), it takes effect when that read ends.
    public func close() {
        if ThreadReads.transaction(of: self) != nil {
            // This very read holds the mutex that closing takes: the read closes on its way out.
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

    /// Takes the transaction out, once (nil afterwards): the caller ends the transaction and
    /// frees the slot. Waits for a read in progress on another thread.
    func takeTransaction() -> OpaquePointer? {
        state.withLock { s -> Handle? in
            guard s.txn != nil else { return nil }
            defer { s.txn = nil; ended.store(true, ordering: .releasing) }
            return s
        }?.txn
    }

    /// What ``tryTakeTransaction()`` found.
    enum TryTake {
        /// A read holds the mutex on another thread.
        case busy
        /// Taken: the caller ends it (in `env`) and frees the slot.
        case taken(OpaquePointer, LMDBEnvironment)
        /// Someone else took it already.
        case alreadyTaken
    }

    /// ``takeTransaction()`` without waiting for a read in progress (for the registry's
    /// ``SnapshotRegistry/closeAll()``, which must not wait while holding its own lock).
    func tryTakeTransaction() -> TryTake {
        let outcome = state.withLockIfAvailable { s -> OpaquePointer? in
            guard let txn = s.txn else { return nil }
            s.txn = nil
            ended.store(true, ordering: .releasing)
            return txn
        }
        switch outcome {
        case nil: return .busy
        case .some(nil): return .alreadyTaken
        case .some(.some(let txn)): return .taken(txn, env)
        }
    }

    /// Records the registry slot (called by the registry, under its lock).
    fileprivate func setSerial(_ slot: Int) { serial.store(slot, ordering: .releasing) }

    /// Runs `body` with the transaction handle (nil once closed), holding the mutex. A
    /// ``close()`` noted inside `body` (see ``read(_:)``) takes the transaction before the mutex
    /// is released, so no other read gets in between, and ends it after.
    func withTransaction<R>(_ body: (OpaquePointer?) throws -> R) throws -> R {
        var result: Result<R, Error>?
        var closedInside: OpaquePointer?
        state.withLock { s in
            result = Result { try body(s.txn) }
            // Plain load and store: only the thread holding the mutex touches the flag.
            if closeWhenReadEnds.load(ordering: .relaxed) {
                closeWhenReadEnds.store(false, ordering: .relaxed)
                if let txn = s.txn {
                    s.txn = nil
                    ended.store(true, ordering: .releasing)
                    closedInside = txn
                }
            }
        }
        if let txn = closedInside { endTaken(txn) }
        guard let result else { throw StrataError.closed(path: registry.path) }
        return try result.get()
    }

    /// Reads the snapshot. A snapshot stays readable until closed, also after a compaction or a
    /// migration replaced the store's generation (it keeps the old one alive). A read nested in
    /// a read of this snapshot on the same thread (user code inside the read, such as a child's
    /// custom merge closure, reading through the same pinned context) uses the outer read's
    /// transaction instead of locking the mutex again.
    func read<R>(_ body: (ReadView) throws -> R) throws -> R {
        try registry.checkProcess()
        if let handle = ThreadReads.transaction(of: self) {
            // The outer read holds the mutex and the map lock (shared, which nests: readers are
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

/// The reads of a store the calling thread is inside, in a thread-specific value
/// (`pthread_getspecific`, a few nanoseconds) pointing to the innermost of a chain of frames on
/// the thread's stack. User code runs inside reads (a compaction's, a migration's or a verify's
/// `progress` callback, a custom merge closure of a child's `apply`, an export's `emit`), and
/// from there:
/// - a ``Store/close()`` of that store must not wait for the read it is part of (closing waits
///   for every read under way), so it closes in the background (``isInside(store:)``);
/// - a read of the same snapshot must not lock its mutex again, and uses the outer read's
///   transaction (``transaction(of:)``); a close of that snapshot is noted and done when the
///   outer read ends.
///
/// A store is named by its ``SnapshotRegistry`` (one per store, held by every snapshot).
enum ThreadReads {
    /// One read under way: the store's registry, the snapshot and its transaction (nil for a
    /// store's short read), and the frame outside it.
    private struct Frame {
        let store: ObjectIdentifier
        let snapshot: ObjectIdentifier?
        let transaction: OpaquePointer?
        let outer: UnsafeRawPointer?
    }

    /// The key; nil if the process is out of keys (then no read is marked: a close from inside
    /// one waits for itself, and a nested read locks its snapshot again, as before the marks).
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        return pthread_key_create(&key, nil) == 0 ? key : nil
    }()

    /// The innermost frame on this thread for which `matches` holds.
    private static func frame(where matches: (Frame) -> Bool) -> Frame? {
        guard let key else { return nil }
        var next = pthread_getspecific(key).map { UnsafeRawPointer($0) }
        while let pointer = next {
            let frame = pointer.load(as: Frame.self)
            if matches(frame) { return frame }
            next = frame.outer
        }
        return nil
    }

    /// Whether the calling thread is inside a read of the store whose registry is `store`.
    static func isInside(store: SnapshotRegistry) -> Bool {
        let id = ObjectIdentifier(store)
        return frame { $0.store == id } != nil
    }

    /// The transaction of the read of `snapshot` the calling thread is inside, if any.
    static func transaction(of snapshot: Snapshot) -> OpaquePointer? {
        let id = ObjectIdentifier(snapshot)
        return frame { $0.snapshot == id }?.transaction
    }

    /// Runs `body` marked as inside a read of `store` (of `snapshot`, through `transaction`,
    /// when given); the frame lives on this stack for the call.
    static func marked<R>(store: SnapshotRegistry, snapshot: Snapshot? = nil, transaction: OpaquePointer? = nil,
                          _ body: () throws -> R) rethrows -> R {
        guard let key else { return try body() }
        let outer = pthread_getspecific(key)
        var frame = Frame(store: ObjectIdentifier(store), snapshot: snapshot.map(ObjectIdentifier.init),
                          transaction: transaction, outer: outer.map { UnsafeRawPointer($0) })
        return try withUnsafeMutablePointer(to: &frame) { pointer in
            pthread_setspecific(key, UnsafeRawPointer(pointer))
            defer { pthread_setspecific(key, outer) }
            return try body()
        }
    }
}

/// Information about one open snapshot, for pinned-snapshot accounting.
public struct SnapshotInfo: Sendable, Equatable {
    /// The snapshot's label.
    public let label: String
    /// The last transaction it sees.
    public let transactionID: TransactionID
    /// Seconds since it was opened.
    public let ageSeconds: Double
    /// Transactions committed since (how far behind the head it is).
    public let lagTransactions: UInt64
}

/// The open snapshots of a store, with a limit and age warnings.
///
/// Slots live in an array indexed by the snapshot's serial and are reused (a free list), so
/// opening and closing a snapshot costs one uncontended lock each and no hashing; the age check
/// made at every open runs at most every ``checkInterval(for:)`` (a monotonic clock read, no lock).
///
/// A slot holds its snapshot unretained (a retain, or a weak reference with its side table,
/// per open was measurable in W5). That is safe because a snapshot's slot is always freed
/// before the snapshot's memory is: ``Snapshot/close()`` (which `deinit` runs unless the
/// transaction was already taken) frees it, and ``closeAll()`` frees the slots of the snapshots
/// it closes; both under the lock, and every use of a slot's reference happens under that lock
/// too, without retaining it.
final class SnapshotRegistry: Sendable {
    /// An unretained reference to a registered snapshot (see the type's comment for why that
    /// is safe; it is only dereferenced under the registry's lock).
    private struct Entry: @unchecked Sendable {
        let snapshot: Unmanaged<Snapshot>
        var warned: Bool
    }
    private struct Slots: Sendable {
        /// nil: free.
        var entries: [Entry?] = []
        var free: [Int] = []
        var used = 0
        /// Set by ``SnapshotRegistry/closeAll()``: a snapshot whose open raced with the store's
        /// close is refused instead of registered after the registry was emptied (its
        /// transaction would then keep the environment's close waiting).
        var closed = false
    }
    private let slots = Locked<Slots>(Slots())
    /// Monotonic nanoseconds before which ``takeOverdueIfDue(olderThan:)`` does nothing.
    private let nextCheckNanos = Atomic<Int64>(0)
    let limit: Int
    /// The store's directory, schema and ``ForkWatch/generation`` at open, for the snapshots'
    /// reads and errors.
    let path: String
    let schema: Schema
    private let forkGeneration: Int

    init(limit: Int, path: String, schema: Schema, forkGeneration: Int) {
        self.limit = limit
        self.path = path
        self.schema = schema
        self.forkGeneration = forkGeneration
    }

    /// Refuses use in a child process after `fork()` (LMDB environments must not cross a fork).
    func checkProcess() throws {
        if ForkWatch.generation != forkGeneration { throw StrataError.usedAfterFork(path: path) }
    }

    /// Whether this is a child process forked after the store was opened.
    var isForkedChild: Bool { ForkWatch.generation != forkGeneration }

    /// Registers an open snapshot in a free slot and records the slot in it (its serial), or
    /// throws when `limit` are open.
    func add(_ snapshot: Snapshot) throws {
        let entry = Entry(snapshot: Unmanaged.passUnretained(snapshot), warned: false)
        try slots.withLock { s in
            if s.closed { throw StrataError.closed(path: path) }
            guard s.used < limit else { throw StrataError.tooManySnapshots(limit: limit) }
            s.used += 1
            let slot: Int
            if let reused = s.free.popLast() {
                s.entries[reused] = entry
                slot = reused
            } else {
                s.entries.append(entry)
                slot = s.entries.count - 1
            }
            // A new snapshot's mutex is not contended: no other thread has it yet.
            snapshot.setSerial(slot)
        }
    }

    /// `CLOCK_MONOTONIC_COARSE` in nanoseconds (a few milliseconds' resolution, a few
    /// nanoseconds to read through the vDSO): snapshot ages are reported in seconds.
    static func monotonicNanos() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }

    /// Frees a snapshot's slot. Each serial is released exactly once.
    func remove(_ serial: Int) {
        slots.withLock { s in
            precondition(s.used > 0 && serial < s.entries.count && s.entries[serial] != nil, "snapshot slot \(serial) released twice")
            s.entries[serial] = nil
            s.free.append(serial)
            s.used -= 1
        }
    }

    var count: Int { slots.withLock { $0.used } }

    func infos(head: TransactionID) -> [SnapshotInfo] {
        let now = Self.monotonicNanos()
        return slots.withLock { s in
            s.entries.compactMap { e -> SnapshotInfo? in
                guard let e else { return nil }
                return e.snapshot._withUnsafeGuaranteedRef { snap in
                    SnapshotInfo(label: snap.label, transactionID: snap.transactionID, ageSeconds: Double(now - snap.openedAtNanos) / 1e9,
                                 lagTransactions: head.rawValue &- min(head.rawValue, snap.transactionID.rawValue))
                }
            }
        }.sorted { $0.transactionID < $1.transactionID || ($0.transactionID == $1.transactionID && $0.ageSeconds > $1.ageSeconds) }
    }

    /// How often the per-open check runs: a quarter of the warning age, at most once a second,
    /// so a warning comes at most 25 % (or 1 s) late.
    static func checkInterval(for seconds: Double) -> Int64 {
        Int64(min(max(seconds / 4, 0.001), 1) * 1e9)
    }

    /// ``takeOverdue(olderThan:)``, unless the last check was less than ``checkInterval(for:)`` ago.
    /// `now` is ``monotonicNanos()``.
    func takeOverdueIfDue(olderThan seconds: Double, now: Int64 = monotonicNanos()) -> [(label: String, transactionID: TransactionID, age: Double)] {
        let due = nextCheckNanos.load(ordering: .relaxed)
        guard now >= due else { return [] }
        // One thread wins the check; the others skip it.
        guard nextCheckNanos.compareExchange(expected: due, desired: now + Self.checkInterval(for: seconds), ordering: .relaxed).exchanged
        else { return [] }
        return takeOverdue(olderThan: seconds)
    }

    /// Snapshots older than `seconds` not reported before; each is reported once.
    func takeOverdue(olderThan seconds: Double) -> [(label: String, transactionID: TransactionID, age: Double)] {
        let now = Self.monotonicNanos()
        return slots.withLock { s in
            var out: [(String, TransactionID, Double)] = []
            for i in s.entries.indices {
                guard let e = s.entries[i], !e.warned else { continue }
                let (label, id, age) = e.snapshot._withUnsafeGuaranteedRef { ($0.label, $0.transactionID, Double(now - $0.openedAtNanos) / 1e9) }
                guard age > seconds else { continue }
                s.entries[i]?.warned = true
                out.append((label, id, age))
            }
            return out
        }
    }

    /// Ends every registered snapshot's transaction and frees its slot (the store is closing).
    /// A snapshot in the middle of a read on another thread, or of its own `close()`, is waited
    /// for, without holding the registry's lock while waiting (the read may itself need it), so
    /// when this returns no transaction of the store's environments is in use.
    func closeAll() {
        while true {
            let busy = slots.withLock { s -> Bool in
                s.closed = true
                var busy = false
                for i in s.entries.indices {
                    guard let e = s.entries[i] else { continue }
                    let outcome = e.snapshot._withUnsafeGuaranteedRef { $0.tryTakeTransaction() }
                    switch outcome {
                    case .busy:
                        busy = true
                        continue
                    case .taken(let txn, let env):
                        env.endRead(txn)
                    case .alreadyTaken:
                        // Its close() is between taking the transaction and freeing the slot:
                        // wait until it has ended the transaction and freed the slot, so the
                        // store does not close the environment under its `mdb_txn_reset`.
                        busy = true
                        continue
                    }
                    s.entries[i] = nil
                    s.free.append(i)
                    s.used -= 1
                }
                return busy
            }
            guard busy else { return }
            usleep(1_000)
        }
    }
}

extension Snapshot: PinnedRead {
    /// One read of the pinned transaction (a long copy reads it a chunk at a time).
    package func readPinned<R>(_ body: (LMDBTransaction) throws -> R) throws -> R { try read { try body($0.txn) } }
}
