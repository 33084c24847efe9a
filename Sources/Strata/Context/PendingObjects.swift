/// What a child context would commit, by object: Core Data's `insertedObjects`,
/// `updatedObjects` and `deletedObjects`, as ids (``ChildContext/pendingObjects``).
public struct PendingObjects: Sendable, Equatable {
    /// Objects the child inserted (and did not delete again), in the order it inserted them.
    public var inserted: [ObjectID] = []
    /// Objects of the state below whose attributes differ from what the child first read, or whose
    /// relationships it edited, in id order.
    public var updated: [ObjectID] = []
    /// Objects of the state below that the child deleted (cascades included), in the order it
    /// deleted them.
    public var deleted: [ObjectID] = []

    /// Whether nothing is pending.
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }

    /// An empty list.
    public init() {}
}

extension Overlay {
    /// The layer's pending objects (see ``PendingObjects``).
    /// - Complexity: O(records and edge keys of the layer).
    var pendingObjects: PendingObjects {
        var p = PendingObjects()
        var seen = Set<ObjectID>()
        var updated = Set<ObjectID>()
        var new = Set<ObjectID>()
        for t in order where seen.insert(t.id).inserted {
            guard let entry = records[t.id] else { continue }
            if t.isNew {
                new.insert(t.id)
                if entry != nil { p.inserted.append(t.id) }
            } else if let r = entry {
                if originals[t.id] != r.values { updated.insert(t.id) }
            } else {
                p.deleted.append(t.id)
            }
        }
        for (key, facts) in edges where !facts.isEmpty && !new.contains(key.from) {
            // An object deleted here has facts too (its edges removed): it is deleted, not updated.
            if case .some(.none) = records[key.from] { continue }
            if facts.contains(where: { isChange(key, $0.key, $0.value) }) { updated.insert(key.from) }
        }
        // A relationship whose whole target set this layer defines (an object deleted and inserted
        // again here starts without its edges) is sent by a commit even without a fact.
        for key in replaced where !new.contains(key.from) {
            if case .some(.none) = records[key.from] { continue }
            updated.insert(key.from)
        }
        p.updated = updated.sorted()
        return p
    }

    /// Whether the fact that the edge `key` → `to` is `present` is a change a commit sends:
    /// not when both ends are objects this layer did not write and the edge was so below when
    /// the layer first changed it (added and removed again), which the commit leaves out
    /// (``netChanges(schema:bases:view:below:)``). A key the layer defines whole (a to-one it
    /// changed) is sent whatever its facts: the loops over ``replaced`` count it.
    func isChange(_ key: LinkKey, _ to: ObjectID, _ present: Bool) -> Bool {
        records[key.from] != nil || records[to] != nil || edgeOriginals[key]?[to] != present
    }
}

extension Overlay {
    /// Whether ``pendingObjects`` would list anything, found at the first such object: an insert
    /// still alive, an object of the state below changed from what the layer first read or
    /// deleted, or an edited relationship of one. A value set and set back, or an object inserted
    /// and deleted again, is nothing.
    /// - Complexity: O(1) for a layer whose first change is one; O(layer) at most.
    var hasPendingObjects: Bool {
        // An object's first touch tells whether it is new here, as in ``pendingObjects``. The
        // sets are filled only past objects that are no change (the usual first one is), so a
        // call that finds a change at once allocates nothing.
        var new = Set<ObjectID>(), seen = Set<ObjectID>()
        for t in order where !seen.contains(t.id) {
            if let entry = records[t.id] {
                if t.isNew {
                    if entry != nil { return true }
                    new.insert(t.id)
                } else if let r = entry {
                    if originals[t.id] != r.values { return true }
                } else {
                    return true
                }
            }
            seen.insert(t.id)
        }
        for (key, facts) in edges where !facts.isEmpty && !new.contains(key.from) {
            if case .some(.none) = records[key.from] { continue }
            if facts.contains(where: { isChange(key, $0.key, $0.value) }) { return true }
        }
        for key in replaced where !new.contains(key.from) {
            if case .some(.none) = records[key.from] { continue }
            return true
        }
        return false
    }
}
