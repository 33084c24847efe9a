import Foundation

/// The state a log implies, built in memory with the same rules as ``StateApplier``: the last
/// values and version of every object, the relationship edges (both directions) and the
/// per-entity counts.
///
/// Values are not held as Swift values: each object keeps where its insert's value list is in the
/// store's map and a chain of the attribute values its updates set since, one entry per
/// attribute (the newest). They are decoded only when the implied state is digested, one object at
/// a time, and freed at once. So the fold holds about 60 bytes an object, plus 24 per attribute an
/// update set, in a few large arrays, where decoded values took 300–500 bytes in millions of small
/// allocations, each faulted in as fresh heap (`verify` ran at two thirds of its speed the first
/// time in a process).
struct LogFold {
    let schema: Schema
    private var slots: SlotTable
    private var ids: [ObjectID] = []
    private var versions: [UInt64] = []
    private var alive: [Bool] = []
    /// Where each object's insert stored its value list, and how many values it has.
    private var inserted: [ValueListPlace] = []
    /// The first of each object's entries in ``patches`` since its insert, one per attribute set;
    /// -1 for none.
    private var patchHeads: [Int32] = []
    private var patches: [Patch] = []
    private var edges = Set<Edge>()
    private var counts: [UInt16: Int] = [:]
    /// The slot of the object the last ``FoldOp/Kind/version`` op named: its ``FoldOp/Kind/set``
    /// ops follow, so they need no lookup.
    private var updatedSlot = -1
    /// The count changes of the transaction being applied.
    private var deltas: [UInt16: Int] = [:]
    /// Entities whose count the writer has written at least once (a transaction with a non-zero
    /// net change): those have a `count/` entry, possibly 0.
    private var countsWritten = Set<UInt16>()

    private struct ValueListPlace {
        var address: UInt
        var length: Int
        var count: Int32
    }

    /// The newest value an update set for one attribute of an object: where it is, and the
    /// object's next patch (another attribute).
    private struct Patch {
        var address: UInt
        var length: Int
        var attribute: Int32
        var next: Int32
    }

    /// A relationship edge as stored in `links` (relationship tag, from, to).
    private struct Edge: Hashable {
        let tag: UInt16
        let from: ObjectID
        let to: ObjectID
    }

    /// Objects held at most; an insert past it stops the fold (``exceededLimit``).
    let objectLimit: Int
    /// Patches held at most: ``patchesPerObject`` × ``objectLimit`` (and below 2³¹, patch links
    /// being 32-bit). Past it the fold stops as for ``objectLimit``, so the fold's memory is bounded
    /// by the object limit: about 60 + 4 × 24 bytes an object.
    let patchLimit: Int
    /// Distinct attributes set by updates an object may hold on average (a patch is kept per
    /// attribute, not per update; a deleted object's stay until the fold ends).
    static let patchesPerObject = 4
    /// Link entries held at most (each edge is two, one a direction): ``linksPerObject`` ×
    /// ``objectLimit``. Past it the fold stops as for ``objectLimit``, so that a store of few
    /// objects and very many edges is checked on disk too (an entry takes about 60 bytes here).
    let linkLimit: Int
    /// Link entries an object may hold on average (both directions of about four edges).
    static let linksPerObject = 8
    /// Whether ``apply(_:)`` stopped because of ``objectLimit``, ``patchLimit`` or ``linkLimit``.
    private(set) var exceededLimit = false

    init(schema: Schema, capacity: Int, objectLimit: Int) {
        self.schema = schema
        self.objectLimit = objectLimit
        let (product, overflow) = objectLimit.multipliedReportingOverflow(by: Self.patchesPerObject)
        patchLimit = overflow ? Int(Int32.max) : min(product, Int(Int32.max))
        let (links, linksOverflow) = objectLimit.multipliedReportingOverflow(by: Self.linksPerObject)
        linkLimit = linksOverflow ? Int.max : links
        slots = SlotTable(capacity: capacity)
        ids.reserveCapacity(capacity)
        versions.reserveCapacity(capacity)
        alive.reserveCapacity(capacity)
        inserted.reserveCapacity(capacity)
        patchHeads.reserveCapacity(capacity)
        // About one update per object; more grow the array (unused capacity is never touched).
        patches.reserveCapacity(capacity)
    }

    /// Applies one op; false when a change cannot apply (the rebuild reports why) or the fold would
    /// hold more than ``objectLimit`` objects, ``patchLimit`` patches or ``linkLimit`` link
    /// entries (``exceededLimit``).
    mutating func apply(_ op: FoldOp) -> Bool {
        switch op.kind {
        case .insert:
            guard let e = schema.entity(tag: op.id.entityTag), op.count == e.attributes.count else { return false }
            let place = ValueListPlace(address: op.address, length: op.length, count: Int32(op.count))
            if let s = slots.find(op.id, in: ids) {
                guard !alive[s] else { return false }
                inserted[s] = place
                patchHeads[s] = -1
                versions[s] = op.transaction
                alive[s] = true
            } else {
                guard ids.count < objectLimit else {
                    exceededLimit = true
                    return false
                }
                ids.append(op.id)
                slots.insert(slot: ids.count - 1, of: ids)
                inserted.append(place)
                patchHeads.append(-1)
                versions.append(op.transaction)
                alive.append(true)
            }
            deltas[op.id.entityTag, default: 0] += 1
        case .version:
            guard let s = slots.find(op.id, in: ids), alive[s] else { return false }
            versions[s] = op.transaction
            updatedSlot = s
        case .set:
            let s = updatedSlot >= 0 && ids[updatedSlot] == op.id ? updatedSlot : slots.find(op.id, in: ids)
            guard let s, alive[s], op.count >= 0, op.count < Int(inserted[s].count) else { return false }
            // A patch per attribute: a value set again replaces the one held.
            var p = patchHeads[s]
            while p >= 0 {
                if patches[Int(p)].attribute == Int32(op.count) {
                    patches[Int(p)].address = op.address
                    patches[Int(p)].length = op.length
                    return true
                }
                p = patches[Int(p)].next
            }
            guard patches.count < patchLimit else {
                exceededLimit = true
                return false
            }
            patches.append(
                Patch(address: op.address, length: op.length, attribute: Int32(op.count), next: patchHeads[s]))
            patchHeads[s] = Int32(patches.count - 1)
        case .delete:
            guard let s = slots.find(op.id, in: ids), alive[s] else { return false }
            alive[s] = false
            patchHeads[s] = -1
            deltas[op.id.entityTag, default: 0] -= 1
        case .link:
            guard let inverse = inverseTag(op.relationship) else { return false }
            guard edges.count <= linkLimit - 2 else {
                exceededLimit = true
                return false
            }
            edges.insert(Edge(tag: op.relationship, from: op.id, to: op.other))
            edges.insert(Edge(tag: inverse, from: op.other, to: op.id))
        case .unlink:
            guard let inverse = inverseTag(op.relationship) else { return false }
            edges.remove(Edge(tag: op.relationship, from: op.id, to: op.other))
            edges.remove(Edge(tag: inverse, from: op.other, to: op.id))
        case .end:
            // As StateApplier.flushCounts: once per transaction, clamped at zero.
            for (tag, delta) in deltas where delta != 0 {
                counts[tag] = max(0, counts[tag, default: 0] + delta)
                countsWritten.insert(tag)
            }
            deltas.removeAll(keepingCapacity: true)
        }
        return true
    }

    private func inverseTag(_ tag: UInt16) -> UInt16? {
        guard let r = schema.relationship(tag: tag) else { return nil }
        return schema.inverse(of: r).tag
    }

    /// Digests of the implied state, in the stored layout; nil when a value cannot be decoded
    /// again or a unique key cannot be formed (the rebuild reports it). The objects are split into
    /// at most `parts` ranges (one more per 10,000 objects) digested by Dispatch's worker threads
    /// (digests of parts add up to the digest of the whole).
    ///
    /// Reads the map: the map lock must still be held (see ``InMemoryVerification/foldLog``), and a
    /// snapshot as old as the one the places were read from still open.
    func impliedDigests(parts: Int) -> InMemoryVerification.StateDigests? {
        let n = ids.count, parts = max(1, min(parts, n / 10_000 + 1))
        let results = Locked<[InMemoryVerification.StateDigests?]>(Array(repeating: nil, count: parts))
        DispatchQueue.concurrentPerform(iterations: parts) { part in
            let d = digests(slots: n * part / parts..<n * (part + 1) / parts, withEdgesAndCounts: part == 0)
            results.withLock { $0[part] = d }
        }
        var total = InMemoryVerification.StateDigests()
        for d in results.withLock({ $0 }) {
            guard let d else { return nil }
            total.formUnion(d)
        }
        return total
    }

    private func digests(slots range: Range<Int>, withEdgesAndCounts: Bool) -> InMemoryVerification.StateDigests? {
        var d = InMemoryVerification.StateDigests()
        var record = ByteWriter(capacity: 256)
        var key: [UInt8] = []
        key.reserveCapacity(128)
        for s in range where alive[s] {
            guard let v = currentValues(s), add(s, v, to: &d, record: &record, key: &key) else { return nil }
        }
        guard withEdgesAndCounts else { return d }
        for edge in edges { d.links.add(key: Layout.linkKey(edge.tag, edge.from, edge.to), value: []) }
        for tag in countsWritten {
            d.counts.add(key: MetaKey.count(tag), value: MetaKey.countValue(counts[tag, default: 0]))
        }
        return d
    }

    /// The values of the live object in slot `s`: its insert's, with each attribute its updates
    /// set taking the newest value set (its patch). Nil when a value does not decode (the entry
    /// passed the same checks when it was read, so only if the map changed underneath).
    private func currentValues(_ s: Int) -> [Value]? {
        let place = inserted[s]
        var r =
            ByteReader(UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: place.address), count: place.length))
        guard var values = try? LogEntryCodec.decodeValueList(&r), values.count == Int(place.count) else { return nil }
        // One patch per attribute (``apply(_:)`` replaces a value set again), so their order
        // does not matter.
        var p = patchHeads[s]
        while p >= 0 {
            let patch = patches[Int(p)]
            p = patch.next
            var vr = ByteReader(
                UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: patch.address), count: patch.length))
            guard let value = try? ValueCodec.decode(from: &vr) else { return nil }
            values[Int(patch.attribute)] = value
        }
        return values
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
