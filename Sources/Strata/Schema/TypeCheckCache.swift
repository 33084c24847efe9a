import Synchronization

/// Types already checked against one schema.
final class TypeCheckCache: Sendable {
    private let checked = Locked<Set<ObjectIdentifier>>([])
    /// The type found or inserted last (its identifier's bits): typed reads of one type in a
    /// row answer from it without the lock and the hashing.
    private let last = Atomic<UInt>(0)
    func contains(_ key: ObjectIdentifier) -> Bool {
        let bits = UInt(bitPattern: key)
        if last.load(ordering: .relaxed) == bits { return true }
        guard checked.withLock({ $0.contains(key) }) else { return false }
        last.store(bits, ordering: .relaxed)
        return true
    }
    func insert(_ key: ObjectIdentifier) {
        _ = checked.withLock { $0.insert(key) }
        last.store(UInt(bitPattern: key), ordering: .relaxed)
    }
}
