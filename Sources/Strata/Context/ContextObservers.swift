import Synchronization

/// Local change notifications of a child context (its pending changes moved), for live queries.
final class ContextObservers: Sendable {
    private let subscribers = Mutex<[Int: @Sendable () -> Void]>([:])
    private let nextID = Atomic<Int>(0)

    func add(_ callback: @escaping @Sendable () -> Void) -> Int {
        let id = nextID.add(1, ordering: .relaxed).newValue
        subscribers.withLock { $0[id] = callback }
        return id
    }

    func remove(_ id: Int) { _ = subscribers.withLock { $0.removeValue(forKey: id) } }

    func changed() {
        for callback in subscribers.withLock({ Array($0.values) }) { callback() }
    }
}
