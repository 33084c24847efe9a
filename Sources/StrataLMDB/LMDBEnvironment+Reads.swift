import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

/// Read transactions: a pool of reset handles, the last reader's time, the published head.
extension LMDBEnvironment {
    // MARK: Read transactions

    /// Begins (or renews a pooled) read-only transaction. Pair with ``endRead(_:)``.
    /// Beginning reads the meta pages in the map, so it holds ``mapLock`` shared.
    @usableFromInline package func beginRead() throws -> OpaquePointer {
        activeReads.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if closed.load(ordering: .sequentiallyConsistent) {
            activeReads.wrappingSubtract(1, ordering: .sequentiallyConsistent)
            throw options.policy.closed(path: path)
        }
        do {
            return try beginCountedRead()
        } catch {
            activeReads.wrappingSubtract(1, ordering: .releasing)
            throw error
        }
    }

    /// ``beginRead()`` once the read is counted and the environment known open.
    func beginCountedRead() throws -> OpaquePointer {
        var pooled: ReadTxnBox?
        if let cached = OpaquePointer(bitPattern: cachedReadTxn.exchange(0, ordering: .acquiring)) {
            pooled = ReadTxnBox(txn: cached)
        } else {
            pooled = readPool.withLock { $0.popLast() }
        }
        while true {
            let attempt: Result<OpaquePointer, LMDBError>? = mapLock.withShared {
                if let lost = lostMapError {
                    if let box = pooled { mdb_txn_abort(box.txn) }
                    pooled = nil
                    return .failure(lost)
                }
                if let box = pooled {
                    pooled = nil
                    let rc = mdb_txn_renew(box.txn)
                    if rc == MDB_SUCCESS { return .success(box.txn) }
                    mdb_txn_abort(box.txn)
                    if rc == MDB_MAP_RESIZED { return nil }
                    return .failure(LMDBError(code: rc, operation: "mdb_txn_renew"))
                }
                var txn: OpaquePointer?
                let rc = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &txn)
                if rc == MDB_MAP_RESIZED { return nil }
                guard rc == MDB_SUCCESS, let txn else {
                    return .failure(LMDBError(code: rc == 0 ? EINVAL : rc, operation: "mdb_txn_begin(read-only)"))
                }
                return .success(txn)
            }
            guard let attempt else {
                try adoptMapSize()
                continue
            }
            return try attempt.get()
        }
    }

    /// Records that a reader of the store's data (a snapshot, a context's read) is at work now:
    /// see ``hadReadersRecently``. Strata's own reads while opening or maintaining the store do
    /// not call it.
    package func noteReader() { noteReader(second: Self.monotonicSecond()) }

    /// ``noteReader()`` with the time already read (`CLOCK_MONOTONIC_COARSE` nanoseconds).
    package func noteReader(monotonicNanos: Int64) { noteReader(second: Int(monotonicNanos / 1_000_000_000) + 1) }

    func noteReader(second now: Int) {
        if lastReadSecond.load(ordering: .relaxed) != now { lastReadSecond.store(now, ordering: .relaxed) }
    }

    /// Whether a reader was noted (``noteReader()``) in the current or the previous monotonic
    /// second. The writer then leaves mapped pages alone
    /// while it applies a bulk save: dropping them would make those readers fault their
    /// working set back in again and again (W6's p99 tripled); it still drops them after the
    /// commit.
    package var hadReadersRecently: Bool {
        let last = lastReadSecond.load(ordering: .relaxed)
        return last != 0 && Self.monotonicSecond() - last <= 1
    }

    /// `CLOCK_MONOTONIC_COARSE` in whole seconds, from 1 (a few nanoseconds through the vDSO).
    static func monotonicSecond() -> Int {
        var ts = timespec()
        // Fails only for a clock the system lacks; Linux has this one (then 0, from 1).
        _ = clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return Int(ts.tv_sec) + 1
    }

    /// Ends a read transaction from ``beginRead()``: it is reset and pooled, or aborted.
    @usableFromInline package func endRead(_ txn: OpaquePointer) {
        // Last, on every path: the transaction is reset and pooled (or aborted) before a waiting
        // close() goes on.
        defer { activeReads.wrappingSubtract(1, ordering: .releasing) }
        mdb_txn_reset(txn)
        if cachedReadTxn.compareExchange(expected: 0, desired: UInt(bitPattern: txn), ordering: .releasing).exchanged {
            return
        }
        let pooled = readPool.withLock { pool -> Bool in
            guard pool.count < Self.readPoolCapacity else { return false }
            pool.append(ReadTxnBox(txn: txn))
            return true
        }
        if !pooled { mdb_txn_abort(txn) }
    }

    /// Records that LMDB write transaction `lmdbTransaction` committed with `transactionID` as the
    /// last key of the log. Call only after the commit succeeded, and only for a transaction that
    /// wrote (LMDB does not advance its transaction id for a commit without changes, so an id of
    /// an empty commit could later name another process's transaction).
    package func publishHead(lmdbTransaction: UInt64, head value: UInt64) {
        head.store(WordPair(first: UInt(lmdbTransaction), second: UInt(value)), ordering: .releasing)
    }

    /// The log's last transaction id as seen by read transaction `txn`, when this process
    /// committed the LMDB transaction `txn` reads (the common case: it is the newest one); nil
    /// otherwise (another process committed since, or nothing was published yet), and the caller
    /// reads the log. Exact: a read transaction sees precisely the state its LMDB id names.
    package func publishedHead(for txn: OpaquePointer) -> UInt64? {
        let pair = head.load(ordering: .acquiring)
        guard pair.first != 0, UInt(mdb_txn_id(txn)) == pair.first else { return nil }
        return UInt64(pair.second)
    }

    /// The id of the last LMDB transaction committed to the environment by any process, read from
    /// the shared meta pages without a read transaction: cheap enough to poll.
    /// Counted as a read, so a concurrent ``close()`` waits for it instead of freeing the
    /// environment under it.
    package func lastCommittedTransaction() throws -> UInt64 {
        activeReads.wrappingAdd(1, ordering: .sequentiallyConsistent)
        defer { activeReads.wrappingSubtract(1, ordering: .releasing) }
        if closed.load(ordering: .sequentiallyConsistent) { throw options.policy.closed(path: path) }
        // Under the map lock: liblmdb reads the meta pages through the data map, which a growth
        // of the map (this process's writer, or a reader adopting another process's size)
        // unmaps and maps again.
        var info = MDB_envinfo()
        try mapLock.withShared {
            if let lost = lostMapError { throw lost }
            try lmdbCheck(mdb_env_info(handle, &info), "mdb_env_info")
        }
        return UInt64(info.me_last_txnid)
    }

    /// The LMDB id of a transaction (a write transaction's id is the one its commit will carry).
    package static func lmdbTransactionID(_ txn: OpaquePointer) -> UInt64 { UInt64(mdb_txn_id(txn)) }

    /// Runs `body` in a short read transaction (holding the map lock shared throughout).
    @inlinable @inline(__always)
    public func read<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        let txn = try beginRead()
        defer { endRead(txn) }
        return try mapLock.withShared { try body(transaction(txn, isWrite: false)) }
    }
}
