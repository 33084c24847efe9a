
/// Lets one compaction or migration of a store run at a time in this process; the next waits for
/// its turn (first come, first served) without holding a thread.
///
/// Both build a new generation from the live one and switch to it on the writer's queue. Two at
/// once could each switch: a compaction whose switch was queued behind a migration's would put
/// back a compacted copy of the old, unmigrated generation (the migration lost); a migration
/// after a compaction's switch would have built from the generation just retired, without the
/// saves committed since. Run one after the other, the second sees what the first did: after a
/// migration the old instance refuses with ``StrataError/migrated(path:toVersion:)``; after a
/// compaction a migration starts from the compacted generation.
final class MaintenanceGate: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Locked(State())

    /// Waits until no other compaction or migration runs, then takes the gate. Pair with ``leave()``.
    func enter() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if !s.busy {
                    s.busy = true
                    return true
                }
                s.waiting.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    /// Hands the gate to the next waiter, or frees it.
    func leave() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            precondition(s.busy, "MaintenanceGate.leave() without enter()")
            if s.waiting.isEmpty {
                s.busy = false
                return nil
            }
            return s.waiting.removeFirst()
        }
        next?.resume()
    }

    /// How many compactions or migrations wait for the gate (for tests).
    var waitingForTesting: Int { state.withLock { $0.waiting.count } }
}
