import Glibc
import Synchronization

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
/// too, without retaining it. A snapshot whose transaction ``closeAll()`` took skips `close()`
/// in its `deinit`, which therefore takes the lock once (``waitForCloseAll()``): its memory
/// cannot go while ``closeAll()`` is still inside it.
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
            // A new snapshot's lock is not contended: no other thread has it yet.
            snapshot.setSerial(slot)
        }
    }

    /// `CLOCK_MONOTONIC_COARSE` in nanoseconds (a few milliseconds' resolution, a few
    /// nanoseconds to read through the vDSO): snapshot ages are reported in seconds.
    static func monotonicNanos() -> Int64 {
        var ts = timespec()
        // Fails only for a clock the system lacks; Linux has this one.
        _ = clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }

    /// Frees a snapshot's slot. Each serial is released exactly once.
    func remove(_ serial: Int) {
        slots.withLock { s in
            precondition(s.used > 0 && serial < s.entries.count && s.entries[serial] != nil,
                         "snapshot slot \(serial) released twice")
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
                    SnapshotInfo(label: snap.label, transactionID: snap.transactionID,
                                 ageSeconds: Double(now - snap.openedAtNanos) / 1e9,
                                 lagTransactions: head.rawValue &- min(head.rawValue, snap.transactionID.rawValue))
                }
            }
        }.sorted {
            $0.transactionID < $1.transactionID
                || ($0.transactionID == $1.transactionID && $0.ageSeconds > $1.ageSeconds)
        }
    }

    /// How often the per-open check runs: a quarter of the warning age, at most once a second,
    /// so a warning comes at most 25 % (or 1 s) late.
    static func checkInterval(for seconds: Double) -> Int64 {
        Int64(min(max(seconds / 4, 0.001), 1) * 1e9)
    }

    /// ``takeOverdue(olderThan:)``, unless the last check was less than ``checkInterval(for:)`` ago.
    /// `now` is ``monotonicNanos()``.
    func takeOverdueIfDue(
        olderThan seconds: Double, now: Int64 = monotonicNanos()
    ) -> [(label: String, transactionID: TransactionID, age: Double)] {
        let due = nextCheckNanos.load(ordering: .relaxed)
        guard now >= due else { return [] }
        // One thread wins the check; the others skip it.
        guard nextCheckNanos.compareExchange(expected: due, desired: now + Self.checkInterval(for: seconds),
                                             ordering: .relaxed).exchanged
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
                let (label, id, age) = e.snapshot._withUnsafeGuaranteedRef {
                    ($0.label, $0.transactionID, Double(now - $0.openedAtNanos) / 1e9)
                }
                guard age > seconds else { continue }
                s.entries[i]?.warned = true
                out.append((label, id, age))
            }
            return out
        }
    }

    /// Returns once no ``closeAll()`` is inside a registered snapshot (it holds the lock while it
    /// is): for the `deinit` of a snapshot whose transaction it took. On the thread running
    /// ``closeAll()`` itself (the snapshot's last reference went while it took the transaction,
    /// after it let go of the snapshot's lock) it returns at once: that thread holds the lock,
    /// and is done with the snapshot.
    func waitForCloseAll() {
        if closingThread.load(ordering: .acquiring) == UInt(bitPattern: Int(bitPattern: pthread_self())) { return }
        slots.withLock { _ in }
    }
    /// The thread inside ``closeAll()``'s lock (`pthread_self`), 0 when none.
    private let closingThread = Atomic<UInt>(0)

    /// Ends every registered snapshot's transaction and frees its slot (the store is closing).
    /// A snapshot in the middle of a read on another thread, or of its own `close()`, is waited
    /// for, without holding the registry's lock while waiting (the read may itself need it), so
    /// when this returns no transaction of the store's environments is in use.
    func closeAll() {
        while true {
            let busy = slots.withLock { s -> Bool in
                closingThread.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .releasing)
                defer { closingThread.store(0, ordering: .releasing) }
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
