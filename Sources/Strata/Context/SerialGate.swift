
/// Runs async blocks one at a time, in the order they arrive; a block waiting for its turn
/// suspends (it never blocks a thread).
final class SerialGate: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Locked(State())

    /// Runs `body` once every block that arrived earlier has finished.
    func run<R>(_ body: () async throws -> R) async throws -> R {
        await enter()
        defer { leave() }
        return try await body()
    }

    /// Waits for the turn. Pair with ``leave()``.
    func enter() async {
        let free = state.withLock { s -> Bool in
            guard !s.busy else { return false }
            s.busy = true
            return true
        }
        if free { return }
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

    /// Hands the turn to the next waiting block (the gate stays busy), or frees the gate.
    func leave() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            precondition(s.busy, "SerialGate.leave() without enter()")
            guard !s.waiting.isEmpty else {
                s.busy = false
                return nil
            }
            return s.waiting.removeFirst()
        }
        next?.resume()
    }

    /// Blocks waiting for their turn (tests only).
    var waitingForTesting: Int { state.withLock { $0.waiting.count } }
}

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
typealias MaintenanceGate = SerialGate
