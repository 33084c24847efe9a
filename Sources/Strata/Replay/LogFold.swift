import Foundation

/// The state a log implies, built in memory with the same rules as ``StateApplier``: the last
/// values and version of every object, the relationship edges (both directions) and the
/// per-entity counts.
struct LogFold {
    let schema: Schema
    private var slots: SlotTable
    private var ids: [ObjectID] = []
    private var values: [[Value]] = []
    private var versions: [UInt64] = []
    private var alive: [Bool] = []
    private var edges = Set<Edge>()
    private var counts: [UInt16: Int] = [:]
    /// Entities whose count the writer has written at least once (a transaction with a non-zero
    /// net change): those have a `count/` entry, possibly 0.
    private var countsWritten = Set<UInt16>()

    /// A relationship edge as stored in `links` (relationship tag, from, to).
    private struct Edge: Hashable {
        let tag: UInt16
        let from: ObjectID
        let to: ObjectID
    }

    /// Objects held at most; an insert past it stops the fold (``exceededLimit``).
    let objectLimit: Int
    /// Whether ``apply(_:)`` stopped because of ``objectLimit``.
    private(set) var exceededLimit = false

    init(schema: Schema, capacity: Int, objectLimit: Int) {
        self.schema = schema
        self.objectLimit = objectLimit
        slots = SlotTable(capacity: capacity)
        ids.reserveCapacity(capacity)
        values.reserveCapacity(capacity)
        versions.reserveCapacity(capacity)
        alive.reserveCapacity(capacity)
    }

    /// Applies one transaction; false when a change cannot apply (the rebuild reports why) or
    /// an insert would hold more than ``objectLimit`` objects (``exceededLimit``).
    mutating func apply(_ entry: LogEntry) -> Bool {
        let tx = entry.transactionID.rawValue
        var deltas: [UInt16: Int] = [:]
        for change in entry.changes {
            switch change {
            case .insert(let id, let v):
                guard let e = schema.entity(tag: id.entityTag), v.count == e.attributes.count else { return false }
                if let s = slots.find(id, in: ids) {
                    guard !alive[s] else { return false }
                    values[s] = v
                    versions[s] = tx
                    alive[s] = true
                } else {
                    guard ids.count < objectLimit else {
                        exceededLimit = true
                        return false
                    }
                    ids.append(id)
                    slots.insert(slot: ids.count - 1, of: ids)
                    values.append(v)
                    versions.append(tx)
                    alive.append(true)
                }
                deltas[id.entityTag, default: 0] += 1
            case .update(let id, let changes, _):
                guard let s = slots.find(id, in: ids), alive[s] else { return false }
                for c in changes {
                    guard c.attribute >= 0, c.attribute < values[s].count else { return false }
                    values[s][c.attribute] = c.new
                }
                versions[s] = tx
            case .delete(let id, _, _):
                guard let s = slots.find(id, in: ids), alive[s] else { return false }
                alive[s] = false
                values[s] = []
                deltas[id.entityTag, default: 0] -= 1
            case .link(let tag, let a, let b):
                guard let inverse = inverseTag(tag) else { return false }
                edges.insert(Edge(tag: tag, from: a, to: b))
                edges.insert(Edge(tag: inverse, from: b, to: a))
            case .unlink(let tag, let a, let b):
                guard let inverse = inverseTag(tag) else { return false }
                edges.remove(Edge(tag: tag, from: a, to: b))
                edges.remove(Edge(tag: inverse, from: b, to: a))
            }
        }
        // As StateApplier.flushCounts: once per transaction, clamped at zero.
        for (tag, delta) in deltas where delta != 0 {
            counts[tag] = max(0, counts[tag, default: 0] + delta)
            countsWritten.insert(tag)
        }
        return true
    }

    private func inverseTag(_ tag: UInt16) -> UInt16? {
        guard let r = schema.relationship(tag: tag) else { return nil }
        return schema.inverse(of: r).tag
    }

    /// Digests of the implied state, in the stored layout; nil when a unique key cannot be
    /// formed (the rebuild reports it). The objects are split into at most `parts` ranges (one
    /// more per 10,000 objects) digested by Dispatch's worker threads (digests of parts add up to
    /// the digest of the whole). Each object's values are freed as soon as it is digested, while
    /// they are still in the cache (a separate pass over half a million arrays afterwards took a
    /// sixth of a verify), so the fold holds no values afterwards.
    mutating func takeDigests(parts: Int) -> InMemoryVerification.StateDigests? {
        let n = ids.count, parts = max(1, min(parts, n / 10_000 + 1))
        let results = Locked<[InMemoryVerification.StateDigests?]>(Array(repeating: nil, count: parts))
        var taken = values
        values = []
        let fold = self
        taken.withUnsafeMutableBufferPointer { buffer in
            let slots = DisjointSlots(base: buffer.baseAddress)
            DispatchQueue.concurrentPerform(iterations: parts) { part in
                let d = fold.digests(slots: n * part / parts..<n * (part + 1) / parts, values: slots, withEdgesAndCounts: part == 0)
                results.withLock { $0[part] = d }
            }
        }
        var total = InMemoryVerification.StateDigests()
        for d in results.withLock({ $0 }) {
            guard let d else { return nil }
            total.formUnion(d)
        }
        return total
    }

    /// The values buffer handed to the threads of ``takeDigests(parts:)``.
    ///
    /// `@unchecked Sendable` is safe: each thread reads and replaces only the elements of its own
    /// range (`n * part / parts ..< n * (part + 1) / parts`, disjoint for distinct parts), the
    /// buffer outlives `concurrentPerform`, which returns only after every thread is done, and
    /// nothing else touches the array meanwhile (it is borrowed `inout` by
    /// `withUnsafeMutableBufferPointer`).
    private struct DisjointSlots: @unchecked Sendable {
        let base: UnsafeMutablePointer<[Value]>?
    }

    private func digests(slots range: Range<Int>, values: DisjointSlots, withEdgesAndCounts: Bool) -> InMemoryVerification.StateDigests? {
        var d = InMemoryVerification.StateDigests()
        var record = ByteWriter(capacity: 256)
        var key: [UInt8] = []
        key.reserveCapacity(128)
        // No buffer means no objects (the range is empty); edges and counts are still digested.
        if let base = values.base {
            for s in range {
                // Moved out (and an empty array left): freed at the end of this iteration.
                let v = (base + s).move()
                (base + s).initialize(to: [])
                guard !alive[s] || add(s, v, to: &d, record: &record, key: &key) else { return nil }
            }
        }
        guard withEdgesAndCounts else { return d }
        for edge in edges { d.links.add(key: Layout.linkKey(edge.tag, edge.from, edge.to), value: []) }
        for tag in countsWritten { d.counts.add(key: MetaKey.count(tag), value: MetaKey.countValue(counts[tag, default: 0])) }
        return d
    }

    /// Adds the live object in slot `s`, with values `v`, to `d`: its record, index entries and
    /// unique keys, encoded in the reused buffers `record` and `key`. False when its entity is
    /// unknown or a unique key cannot be formed.
    private func add(_ s: Int, _ v: [Value], to d: inout InMemoryVerification.StateDigests,
                     record: inout ByteWriter, key: inout [UInt8]) -> Bool {
        let id = ids[s]
        guard let e = schema.entity(tag: id.entityTag) else { return false }
        record.bytes.removeAll(keepingCapacity: true)
        RecordCodec.encode(Record(entity: e, id: id, values: v, version: TransactionID(versions[s])), into: &record)
        id.withKeyBytes { k in record.bytes.withUnsafeBytes { d.objects.add(key: k, value: $0) } }
        for index in e.indexes {
            key.removeAll(keepingCapacity: true)
            Layout.appendIndexKey(index, record: v, id: id, to: &key)
            d.indexes.add(key: key, value: [])
        }
        for unique in e.uniques {
            let uniqueKey: [UInt8]?
            do { uniqueKey = try Layout.uniqueKey(unique, record: v, entity: e, id: id) } catch { return false }
            if let uniqueKey { id.withKeyBytes { d.uniques.add(key: uniqueKey, value: $0) } }
        }
        return true
    }
}
