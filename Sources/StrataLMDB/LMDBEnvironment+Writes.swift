import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

/// Write transactions: one at a time per environment, nested ones inside them.
extension LMDBEnvironment {
    // MARK: Write transactions

    /// Runs `body` in one write transaction on the calling thread and commits it.
    ///
    /// Begin and commit happen on the same OS thread with no suspension between them, as LMDB
    /// requires. On any error the transaction is aborted and nothing is written.
    ///
    /// With `writebackDuringCommit` (a transaction that dirtied many pages: an import's), the
    /// kernel is asked to start writing the pages while LMDB still writes them out, so that the
    /// commit's sync waits for less (``withWritebackDuringCommit(_:)``).
    @discardableResult
    package func write<R>(writebackDuringCommit: Bool = false, _ body: (LMDBTransaction) throws -> R) throws -> R {
        precondition(!options.readOnly, "write transaction on a read-only environment")
        // After close the handle is freed: refused, not used (the store closes its writer
        // before its environment, but a caller holding the environment may come later).
        if closed.load(ordering: .acquiring) { throw options.policy.closed(path: path) }
        while true {
            // The map lock is held shared for the whole transaction: a reader adopting another
            // process's map size must not remap while the writer holds page pointers.
            let outcome: Result<R, Error>? = mapLock.withShared {
                if let lost = lostMapError { return .failure(lost) }
                var txn: OpaquePointer?
                let rc = mdb_txn_begin(handle, nil, 0, &txn)
                if rc == MDB_MAP_RESIZED { return nil }
                do {
                    try lmdbCheck(rc, "mdb_txn_begin")
                    guard let txn else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin") }
                    let result: R
                    do {
                        result = try body(transaction(txn, isWrite: true))
                    } catch {
                        mdb_txn_abort(txn)
                        throw error
                    }
                    if let refused = commitRefusalForTesting.withLock({ $0 }) {
                        // An error code: the transaction is aborted here and must not be committed.
                        precondition(refused != MDB_SUCCESS, "commitRefusalForTesting must be an error code")
                        mdb_txn_abort(txn)
                        try checkWrite(refused, "mdb_txn_commit")
                    }
                    // mdb_txn_commit frees the transaction whether or not it succeeds.
                    var rc = writebackDuringCommit
                        ? withWritebackDuringCommit { mdb_txn_commit(txn) } : mdb_txn_commit(txn)
                    if rc == MDB_SUCCESS, let injected = commitErrorForTesting.withLock({ $0 }) { rc = injected }
                    try checkWrite(rc, "mdb_txn_commit")
                    return .success(result)
                } catch {
                    return .failure(error)
                }
            }
            guard let outcome else {
                try adoptMapSize()
                continue
            }
            return try outcome.get()
        }
    }

    /// Runs `body` in a nested write transaction: its changes are kept when it returns and
    /// dropped (without touching the parent's) when it throws.
    @discardableResult
    package func nested<R>(in parent: LMDBTransaction, _ body: (LMDBTransaction) throws -> R) throws -> R {
        var child: OpaquePointer?
        try lmdbCheck(mdb_txn_begin(handle, parent.handle, 0, &child), "mdb_txn_begin(nested)")
        guard let child else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin(nested)") }
        let result: R
        do {
            result = try body(transaction(child, isWrite: true))
        } catch {
            mdb_txn_abort(child)
            throw error
        }
        try checkWrite(mdb_txn_commit(child), "mdb_txn_commit(nested)")
        return result
    }
}
