/// Records an import holds back because a required to-one of theirs points at a record not
/// written yet (later in the input): a save of the record alone would be refused, so it waits
/// until its last missing target is written, then goes into the batch right after it (or a later
/// one: batches commit in input order).
///
/// Records whose required references form a cycle (a person requiring a passport that requires
/// that person) wait for each other until the end of the input, and so do the records waiting
/// for them; ``drain()`` then hands them back, each cycle together for one save, every group
/// after the ones it waits for.
///
/// Memory: each held record's operations and line, until it is written.
struct HeldRecords {
    /// A record ready to be written, or held.
    struct Entry {
        let changes: ChangeSet
        let item: RecordIterator.Item
        /// Digests of every reference to the record (``ImportRecord/digest(_:)`` of its aliases).
        let aliases: [UInt64]
        /// Digests of the unique keys its link operations name (``Batch``'s `referencedKeys`).
        let linkedKeys: [UInt64]
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

    /// Every record still held, emptying the list, in groups that must be saved together: at the
    /// end of the input the records left wait for each other, or for a target that never came.
    /// A group is a cycle of records each waiting, through the others, for itself (a strongly
    /// connected component of "waits for"), or one record in no cycle; the groups come in an
    /// order where every group comes after the groups it waits for (Tarjan's algorithm emits a
    /// component after every component it reaches), each group in input order. So a record
    /// waiting for a cycle (a passport's stamps, a tree's nodes under a root that names itself)
    /// is saved after it, alone, not pulled into one save with it and every other record waiting
    /// for it: that save took no batch size into account, and a refusal of any one of its records
    /// refused them all.
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
        // What each record waits for among the held ones, in a fixed order (a set's order
        // changes from one process to the next).
        let edges: [[Int]] = held.map { h in Set(h.missing.compactMap { byAlias[$0] }).sorted() }
        // Tarjan's strongly connected components, with an explicit stack: a chain of a million
        // held records would overflow the thread's.
        let n = held.count
        var index = [Int](repeating: -1, count: n), low = [Int](repeating: 0, count: n)
        var onStack = [Bool](repeating: false, count: n)
        var stack: [Int] = [], components: [[Int]] = [], counter = 0
        for start in 0..<n where index[start] < 0 {
            var work: [(node: Int, edge: Int)] = [(start, 0)]
            index[start] = counter
            low[start] = counter
            counter += 1
            stack.append(start)
            onStack[start] = true
            while let (v, e) = work.last {
                if e < edges[v].count {
                    work[work.count - 1].edge += 1
                    let w = edges[v][e]
                    if index[w] < 0 {
                        index[w] = counter
                        low[w] = counter
                        counter += 1
                        stack.append(w)
                        onStack[w] = true
                        work.append((w, 0))
                    } else if onStack[w] {
                        low[v] = min(low[v], index[w])
                    }
                    continue
                }
                work.removeLast()
                if let parent = work.last?.node { low[parent] = min(low[parent], low[v]) }
                guard low[v] == index[v] else { continue }
                var component: [Int] = []
                while let w = stack.popLast() {
                    onStack[w] = false
                    component.append(w)
                    if w == v { break }
                }
                components.append(component.sorted())
            }
        }
        assert(components.reduce(0) { $0 + $1.count } == n, "every held record is in exactly one group")
        return components.map { $0.map { held[$0].entry } }
    }
}
