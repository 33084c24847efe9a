import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

/// Flushing an `MDB_NOSYNC` environment: on demand (`sync`) and in the background.
extension LMDBEnvironment {
    /// Flushes buffers to disk (`mdb_env_sync(force)`), for `MDB_NOSYNC` environments.
    package func sync() throws {
        if closed.load(ordering: .acquiring) { throw options.policy.closed(path: path) }
        syncCalls.add(1, ordering: .relaxed)
        try checkWrite(mdb_env_sync(handle, 1), "mdb_env_sync")
        if let error = backgroundWritebackError {
            throw LMDBError(code: error, operation: "background writeback or flush of \(path)")
        }
    }

    /// Asks for a flush (`mdb_env_sync(force)`) on a background queue, for relaxed
    /// (`MDB_NOSYNC`) environments, so the writer commits on while the kernel writes the pages
    /// out. Requests coalesce: every request is followed by a flush that started after it (a
    /// request made while a flush runs waits for that one to end), and at most one flush runs at
    /// a time. A flush holds ``writebackGate``, which ``close()`` takes
    /// after marking the environment closed, so it never touches a closed environment (a request
    /// that runs after the close does nothing). `onError` gets a failed flush's error, which is
    /// also kept for the next ``sync()`` to throw (the flush consumed the kernel's one report of it).
    package func requestFlush(onError: @escaping @Sendable (LMDBError) -> Void) {
        // Without MDB_WRITEMAP a flush is an fdatasync of the descriptor, safe while the map
        // moves; with it, an msync of the map, which a growth could unmap underneath.
        precondition(!options.writeMap, "a background flush of an MDB_WRITEMAP environment would race map growth")
        let start = flushState.withLock { s -> Bool in
            s.requested = true
            guard !s.running else { return false }
            s.running = true
            return true
        }
        guard start else { return }
        flushQueue.async { [self] in
            while flushState.withLock({ s -> Bool in
                if s.requested {
                    s.requested = false
                    return true
                }
                s.running = false
                return false
            }) {
                beforeFlushForTesting.withLock { $0 }?()
                let rc = writebackGate.withLock { state -> Int32? in
                    guard !closed.load(ordering: .acquiring) else { return nil }
                    let rc = flushErrorForTesting.withLock { $0 } ?? mdb_env_sync(handle, 1)
                    if rc != MDB_SUCCESS, state.error == nil { state.error = rc }
                    return rc
                }
                guard let rc else { continue }
                flushState.withLock { $0.completed += 1 }
                if rc != MDB_SUCCESS {
                    onError(LMDBError(code: rc, operation: "mdb_env_sync (background flush of \(path))"))
                }
            }
        }
    }

    /// Whether a background flush is running or queued.
    package var flushInProgress: Bool { flushState.withLock { $0.running } }

    /// Background flushes that ran so far (``requestFlush(onError:)``; a request after
    /// ``close()`` runs none; tests).
    package var completedFlushes: Int { flushState.withLock { $0.completed } }

    /// Waits until every background flush requested so far has finished. Never call it from
    /// the flush queue itself (an ``onClose(_:)`` body can run there when the queue's block
    /// held the last reference): it would wait for itself.
    package func waitForFlushes() {
        dispatchPrecondition(condition: .notOnQueue(flushQueue))
        flushQueue.sync {}
    }
}
