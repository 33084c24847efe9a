/// The state of a store read back to an earlier transaction: the later transactions' changes
/// undone, from the log's previous values, over a read of the current state. As-of contexts,
/// replay and a pinned child's committed layer read through it.
enum StateBackward {
    /// The changes that take the state of `view` (at `head`) back to the state right after `target`.
    /// - Complexity: O(changes between them) time; memory for the objects and edges they touched,
    ///   not for the entries (each is read, undone and dropped, newest first).
    static func undoOverlay(_ view: ReadView, back target: TransactionID, from head: TransactionID) throws -> Overlay {
        var applier = OverlayApplier(base: view, parents: [], leaf: Overlay())
        try applier.prepareCounts()
        guard target < head else { return applier.leaf }
        var tx = head
        while tx > target {
            guard let entry = try view.logEntry(tx) else {
                throw StrataError.corruptLogEntry(
                    transaction: tx, reason: "missing from the log (needed to read back to \(target) from \(head))")
            }
            // Undone as the save was judged, on its result: objects that exchanged unique values
            // in it exchange them back, a clash in between put off to the entry's end.
            applier.defersUniqueClashes = true
            for change in entry.changes.reversed() { try undo(change, &applier) }
            try applier.takeDeferredUniqueKeys()
            tx = TransactionID(tx.rawValue - 1)
        }
        return applier.leaf
    }

    private static func undo(_ change: LoggedChange, _ a: inout OverlayApplier) throws {
        switch change {
        case .insert(let id, let values):
            try a.apply(.delete(id: id, values: values, previousVersion: .zero))
        case .update(let id, let changes, let previous):
            // In reverse, as the entries and their changes are: an update that set one attribute
            // twice (`a→b`, then `b→c`, as a log written before repeated positions were merged
            // holds) is undone `c→b`, then `b→a`; in forward order it ended on `b`.
            try a.apply(
                .update(id: id,
                        changes: changes.reversed().map { AttributeChange(attribute: $0.attribute, old: $0.new, new: $0.old) },
                        previousVersion: .zero))
            a.setVersion(id, previous)
        case .delete(let id, let values, let previous):
            try a.apply(.insert(id: id, values: values))
            a.setVersion(id, previous)
        case .link(let tag, let from, let to):
            try a.apply(.unlink(relationship: tag, from: from, to: to))
        case .unlink(let tag, let from, let to):
            try a.apply(.link(relationship: tag, from: from, to: to))
        }
    }
}
