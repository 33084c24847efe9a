import CLMDB
import Foundation

/// The fast check behind ``Store/verify(rebuild:progress:)``: the log folded in memory into the state it
/// implies, digested (``EntryDigest``) and compared with a digest of the stored state, without
/// writing a second store.
///
/// It answers only "consistent" or "something differs". When anything differs — a log entry
/// that is missing or fails its checksum, a change that does not apply, a digest that does not
/// match, a key a lookup cannot find — `verify` runs the full rebuild in a scratch environment,
/// which names every problem precisely. A healthy store is therefore verified at the cost of
/// reading it twice; a damaged one costs the rebuild on top.
///
/// What it holds in memory is every object the log ever inserted (id, values, version): about
/// 300–500 bytes per object for typical records. ``StoreConfiguration/verifyInMemoryObjectLimit``
/// bounds it; a larger store goes straight to the rebuild.
///
/// - Complexity: O(changes) to fold the log, O(live entries) to digest each side.
enum InMemoryVerification {
    /// Digests of the state databases `verify` compares (for `meta`, only the per-entity counts).
    struct StateDigests: Equatable {
        var objects = EntryDigest()
        var links = EntryDigest()
        var indexes = EntryDigest()
        var uniques = EntryDigest()
        var counts = EntryDigest()

        var entries: Int { objects.count + links.count + indexes.count + uniques.count + counts.count }

        mutating func formUnion(_ other: StateDigests) {
            objects.formUnion(other.objects)
            links.formUnion(other.links)
            indexes.formUnion(other.indexes)
            uniques.formUnion(other.uniques)
            counts.formUnion(other.counts)
        }
    }

    /// The stored state's digests; nil when the scan returns keys out of order (a digest does not
    /// see order, and range seeks depend on it), or when a key found by the scan is not found by
    /// a lookup (a corrupt branch page misroutes point reads, which a scan never notices).
    static func digestStoredState(_ view: ReadView) throws -> StateDigests? {
        var d = StateDigests()
        var damaged = false
        func digest(_ name: DatabaseName, into digest: inout EntryDigest, lookUp: Bool, prefix: [UInt8]? = nil) throws {
            let db = view.env[name]
            // Keys point into the map, valid for the whole read transaction.
            var previous: UnsafeRawBufferPointer?
            try view.txn.scan(db, prefix: prefix) { key, value in
                digest.add(key: key, value: value)
                if let previous, Layout.compare(previous, key) >= 0 {
                    damaged = true
                    return false
                }
                previous = key
                if lookUp, try view.txn.withValue(db, key: key, { _ in true }) == nil {
                    damaged = true
                    return false
                }
                return true
            }
        }
        try digest(.objects, into: &d.objects, lookUp: true)
        guard !damaged else { return nil }
        try digest(.uniques, into: &d.uniques, lookUp: true)
        guard !damaged else { return nil }
        try digest(.links, into: &d.links, lookUp: false)
        guard !damaged else { return nil }
        try digest(.indexes, into: &d.indexes, lookUp: false)
        guard !damaged else { return nil }
        try digest(.meta, into: &d.counts, lookUp: false, prefix: Array("count/".utf8))
        return damaged ? nil : d
    }

    /// What folding the log found.
    enum FoldResult {
        /// The log is complete and every change applied; the implied state's digests.
        case folded(StateDigests, transactions: Int, changes: Int)
        /// Something the full rebuild has to look at (it will report it precisely).
        case differs
        /// More objects than the limit: the full rebuild verifies this store.
        case tooLarge
    }

    /// Log entries decoded per batch handed from the reading thread to the folding one.
    static let batchChanges = 4_096

    /// Reads transactions 1…`head` of `view`'s log in order, checking that none is missing and
    /// that each passes its checksum, and hands them to `deliver` in batches. Returns false when
    /// an entry is missing, out of order or corrupt, or when `deliver` returned false (stop).
    static func readLog(_ view: ReadView, head: TransactionID, deliver: ([LogEntry]) -> Bool) throws -> Bool {
        guard head.rawValue >= 1 else { return true }
        var next: UInt64 = 1
        var batch: [LogEntry] = [], pending = 0
        var ok = true
        try view.txn.scan(view.env[.log], from: TransactionID(1).keyBytes) { key, value in
            var r = ByteReader(key)
            let tx = try r.u64()
            guard tx <= head.rawValue else { return false }
            guard tx == next, let entry = try? LogEntryCodec.decode(value, transactionID: TransactionID(tx)) else {
                ok = false
                return false
            }
            next += 1
            pending += entry.changes.count
            batch.append(entry)
            if pending >= batchChanges {
                guard deliver(batch) else { ok = false; return false }
                batch.removeAll(keepingCapacity: true)
                pending = 0
            }
            return true
        }
        guard ok, next == head.rawValue + 1 else { return false }
        return batch.isEmpty || deliver(batch)
    }

    /// Folds transactions 1…`head` (a store never compacted) and digests the state they imply.
    /// `entries` produces the log (``readLog(_:head:deliver:)`` here or on another thread) and
    /// returns whether it was complete and sound; its `deliver` returns false to stop it.
    static func foldLog(schema: Schema, head: TransactionID, objectLimit: Int, capacity: Int,
                        progress: ((Int) -> Void)?,
                        entries: (_ deliver: ([LogEntry]) -> Bool) throws -> Bool) throws -> FoldResult {
        var fold = LogFold(schema: schema, capacity: min(objectLimit, capacity), objectLimit: objectLimit)
        var changes = 0, sinceProgress = 0
        var stopped: FoldResult?
        let complete = try entries { batch in
            for entry in batch {
                guard fold.apply(entry) else {
                    stopped = fold.exceededLimit ? .tooLarge : .differs
                    return false
                }
                changes += entry.changes.count
                sinceProgress += entry.changes.count
            }
            if sinceProgress >= 50_000, let last = batch.last {
                progress?(Int(last.transactionID.rawValue))
                sinceProgress = 0
            }
            return true
        }
        if let stopped { return stopped }
        // Small parts, taken by whichever thread is free: the other side's digest runs meanwhile,
        // and two halves on a busy pair of cores left one half running alone at the end.
        guard complete, let digests = fold.takeDigests(parts: 16) else { return .differs }
        progress?(Int(head.rawValue))
        return .folded(digests, transactions: Int(head.rawValue), changes: changes)
    }
}

/// Batches of log entries handed from the thread reading the log to the thread folding it, at
/// most ``capacity`` batches ahead, then how the reading ended.
///
/// `@unchecked Sendable` is safe: every stored property is read and written only while
/// `condition` is locked.
final class LogEntryChannel: @unchecked Sendable {
    /// Batches the reader may run ahead of the folder.
    let capacity = 8
    private let condition = NSCondition()
    private var batches: [[LogEntry]] = []
    private var end: Result<Bool, Error>?
    private var cancelled = false

    /// Queues a batch, waiting while ``capacity`` are queued; false once the folder stopped.
    func put(_ batch: [LogEntry]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while batches.count >= capacity && !cancelled { condition.wait() }
        guard !cancelled else { return false }
        batches.append(batch)
        condition.broadcast()
        return true
    }

    /// The reader is done: whether the log was complete and sound, or its error.
    func finish(_ result: Result<Bool, Error>) {
        condition.lock()
        end = result
        condition.broadcast()
        condition.unlock()
    }

    /// Whether the folder stopped before the end.
    var wasCancelled: Bool {
        condition.lock()
        defer { condition.unlock() }
        return cancelled
    }

    /// The folder stopped: the reader's next ``put(_:)`` returns false.
    func cancel() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        condition.unlock()
    }

    /// Feeds every batch to `deliver` as it arrives; returns the reader's result. Stops (and
    /// cancels the reader) when `deliver` returns false.
    func drain(into deliver: ([LogEntry]) -> Bool) throws -> Bool {
        while true {
            condition.lock()
            while batches.isEmpty && end == nil { condition.wait() }
            if batches.isEmpty, let end {
                condition.unlock()
                return try end.get()
            }
            let batch = batches.removeFirst()
            condition.broadcast()
            condition.unlock()
            guard deliver(batch) else {
                cancel()
                return false
            }
        }
    }
}

/// The state a log implies, built in memory with the same rules as ``StateApplier``: the last
/// values and version of every object, the relationship edges (both directions) and the
/// per-entity counts.
private struct LogFold {
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
        for s in range {
            guard let base = values.base else { break }
            // Moved out (and an empty array left): freed at the end of this iteration.
            let v = (base + s).move()
            (base + s).initialize(to: [])
            guard alive[s] else { continue }
            let id = ids[s]
            guard let e = schema.entity(tag: id.entityTag) else { return nil }
            record.bytes.removeAll(keepingCapacity: true)
            RecordCodec.encode(Record(entity: e, id: id, values: v, version: TransactionID(versions[s])), into: &record)
            id.withKeyBytes { k in record.bytes.withUnsafeBytes { d.objects.add(key: k, value: $0) } }
            for index in e.indexes {
                key.removeAll(keepingCapacity: true)
                Layout.appendIndexKey(index, record: v, id: id, to: &key)
                d.indexes.add(key: key, value: [])
            }
            for unique in e.uniques {
                let key: [UInt8]?
                do { key = try Layout.uniqueKey(unique, record: v, entity: e, id: id) } catch { return nil }
                if let key { id.withKeyBytes { d.uniques.add(key: key, value: $0) } }
            }
        }
        guard withEdgesAndCounts else { return d }
        for edge in edges { d.links.add(key: Layout.linkKey(edge.tag, edge.from, edge.to), value: []) }
        for tag in countsWritten {
            var w = ByteWriter(capacity: 8)
            w.u64(UInt64(counts[tag, default: 0]))
            d.counts.add(key: MetaKey.count(tag), value: w.bytes)
        }
        return d
    }
}

/// Object id → slot in ``LogFold``'s arrays: open addressing with linear probing, kept at most
/// half full. The fold looks an id up for every change; a `Dictionary` would hash the 16 bytes
/// with SipHash each time (a sixth of the fold in a profile).
private struct SlotTable {
    /// Slot + 1 per bucket; 0 is an empty bucket.
    private var buckets: [Int32]
    private var mask: Int
    private var count = 0

    init(capacity: Int) {
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        buckets = Array(repeating: 0, count: size)
        mask = size - 1
    }

    @inline(__always)
    private static func bucket(_ id: ObjectID, mask: Int) -> Int {
        // Ids differ mostly in their low bits (time, counter): mix both words into every bit.
        var x = (id.high &* 0x9E37_79B9_7F4A_7C15) ^ id.low
        x ^= x >> 32
        x = x &* 0xD6E8_FEB8_6659_FD93
        x ^= x >> 32
        return Int(truncatingIfNeeded: x) & mask
    }

    /// The slot of `id`, whose id is `ids[slot]`.
    @inline(__always)
    func find(_ id: ObjectID, in ids: [ObjectID]) -> Int? {
        var b = Self.bucket(id, mask: mask)
        while true {
            let entry = Int(buckets[b])
            if entry == 0 { return nil }
            if ids[entry - 1] == id { return entry - 1 }
            b = (b + 1) & mask
        }
    }

    /// Records that `ids[slot]` (not yet in the table) lives at `slot`.
    mutating func insert(slot: Int, of ids: [ObjectID]) {
        precondition(slot < Int(Int32.max), "more than \(Int32.max) objects in one verification")
        if (count + 1) * 2 > buckets.count { grow(ids) }
        place(slot, ids)
        count += 1
    }

    private mutating func place(_ slot: Int, _ ids: [ObjectID]) {
        var b = Self.bucket(ids[slot], mask: mask)
        while buckets[b] != 0 { b = (b + 1) & mask }
        buckets[b] = Int32(slot + 1)
    }

    private mutating func grow(_ ids: [ObjectID]) {
        let old = buckets
        buckets = Array(repeating: 0, count: old.count * 2)
        mask = buckets.count - 1
        for entry in old where entry != 0 { place(Int(entry) - 1, ids) }
    }
}
