/// Records an import holds back because a required to-one of theirs points at a record not
/// written yet (later in the input): a save of the record alone would be refused, so it waits
/// until its last missing target is written, then goes into the batch right after it (or a later
/// one: batches commit in input order).
///
/// Records whose required references form a cycle (a person requiring a passport that requires
/// that person) wait for each other until the end of the input; ``drain()`` then hands all that
/// are left back together, for one save.
///
/// Memory: each held record's operations and line, until it is written.
struct HeldRecords {
    /// A record ready to be written, or held.
    struct Entry {
        let changes: ChangeSet
        let item: RecordIterator.Item
        /// Digests of every reference to the record (``ImportRecord/digest(_:)`` of its aliases).
        let aliases: [UInt64]
    }

    private var entries: [Int: (entry: Entry, missing: Set<UInt64>)] = [:]
    /// Held records by the digest of a target they wait for.
    private var waiting: [UInt64: [Int]] = [:]
    private var next = 0

    var isEmpty: Bool { entries.isEmpty }
    var count: Int { entries.count }

    /// Adds a record whose required targets `missing` (digests) are not written yet. Returns the
    /// records to write now, in order: `entry` itself when nothing is missing, followed by every
    /// held record that was waiting only for it or for another record in the list. The caller
    /// marks their aliases written.
    mutating func add(_ entry: Entry, missing: Set<UInt64>) -> [Entry] {
        guard missing.isEmpty else {
            let n = next
            next += 1
            entries[n] = (entry, missing)
            for d in missing { waiting[d, default: []].append(n) }
            return []
        }
        var ready = [entry]
        var i = 0
        while i < ready.count {
            for alias in ready[i].aliases {
                for n in waiting.removeValue(forKey: alias) ?? [] {
                    guard var held = entries[n] else { continue }
                    held.missing.remove(alias)
                    if held.missing.isEmpty {
                        entries[n] = nil
                        ready.append(held.entry)
                    } else {
                        entries[n] = held
                    }
                }
            }
            i += 1
        }
        return ready
    }

    /// Every record still held, emptying the list, in groups that must be saved together (at the
    /// end of the input the records left wait for each other, or for a target that never came):
    /// the records joined by what one waits for and another is, each group in input order, the
    /// groups in the input order of their first records. A record waiting for a target no held
    /// record gives is in a group of its own (unless another waits for it), so a refusal of it
    /// leaves the other groups alone.
    mutating func drain() -> [[Entry]] {
        defer {
            entries = [:]
            waiting = [:]
        }
        let held = entries.sorted { $0.key < $1.key }.map(\.value)
        var byAlias: [UInt64: Int] = [:]
        for (i, h) in held.enumerated() {
            for alias in h.entry.aliases { byAlias[alias] = i }
        }
        // Union-find over the held records.
        var parent = Array(held.indices)
        func root(_ i: Int) -> Int {
            var r = i
            while parent[r] != r { r = parent[r] }
            var j = i
            while parent[j] != r {
                let next = parent[j]
                parent[j] = r
                j = next
            }
            return r
        }
        for (i, h) in held.enumerated() {
            for d in h.missing {
                guard let j = byAlias[d] else { continue }
                let (a, b) = (root(i), root(j))
                if a != b { parent[max(a, b)] = min(a, b) }
            }
        }
        var groups: [Int: [Entry]] = [:]
        var order: [Int] = []
        for (i, h) in held.enumerated() {
            let r = root(i)
            if groups[r] == nil { order.append(r) }
            groups[r, default: []].append(h.entry)
        }
        return order.compactMap { groups[$0] }
    }
}
