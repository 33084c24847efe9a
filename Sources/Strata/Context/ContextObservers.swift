import Synchronization

/// Local change notifications of a child context (its pending changes moved), for live queries.
final class ContextObservers: Sendable {
    private let subscribers = Locked<[Int: @Sendable () -> Void]>([:])
    private let nextID = Atomic<Int>(0)
    /// How many callbacks there are, so a change with none (a child without live queries, filled
    /// one insert at a time) skips the lock and the copy.
    private let count = Atomic<Int>(0)

    func add(_ callback: @escaping @Sendable () -> Void) -> Int {
        let id = nextID.add(1, ordering: .relaxed).newValue
        subscribers.withLock { $0[id] = callback }
        count.add(1, ordering: .releasing)
        return id
    }

    func remove(_ id: Int) {
        if subscribers.withLock({ $0.removeValue(forKey: id) }) != nil { count.subtract(1, ordering: .releasing) }
    }

    /// Calls every callback. A callback added while this runs may or may not be called (as before
    /// the count, when it could be added just after the copy).
    func changed() {
        guard count.load(ordering: .acquiring) > 0 else { return }
        for callback in subscribers.withLock({ Array($0.values) }) { callback() }
    }
}
