import CLMDB
import Dispatch

/// Builds a new generation's state — objects, index and unique entries, links — from whole
/// records given in id order, for a migration.
///
/// Applying records one by one (``StateApplier``) puts every index and unique key at a random
/// place of its B-tree, so each batch copies and rewrites most of the tree's leaves. Here the
/// records go in with an appending cursor (they arrive in key order), and the index, unique and
/// link keys are gathered, sorted in memory and appended in key order, so every page is written
/// once, full. Memory is bounded: when the gathered keys pass ``runBudgetBytes`` they are
/// written as a run (appended if nothing is in that database yet, else put in key order) and
/// gathering starts again.
///
/// Object counts are not derived here: a migration keeps the objects, so the caller copies the
/// old counts and checks them against ``objectsPerEntity``.
struct BulkStateBuilder {
    let env: LMDBEnvironment
    let schema: Schema
    /// Bytes of gathered keys (with their bookkeeping) held before a run is written, by
    /// default: 256 MiB holds the four index and unique keys of about 1.5M library tracks, so a
    /// store of that size is written in one sorted pass.
    static let defaultRunBudgetBytes = 256 << 20
    let runBudgetBytes: Int
    /// Bytes of keys and values per write transaction (as ``LMDBEnvironment/copyDirect``).
    static let batchBytes = 4 << 20

    /// Live objects per entity tag, counted as they are added.
    private(set) var objectsPerEntity: [UInt16: Int] = [:]
    private var records = KeyRun()
    private var indexes = KeyRun()
    private var uniques = KeyRun()
    private var links = KeyRun()
    /// Databases a run has been written to (later runs cannot append).
    private var started: Set<DatabaseName> = []
    private var lastID: ObjectID?

    /// Objects the caller expects to add (0: unknown): after the first ``sampleObjects`` the
    /// key buffers are sized for them (up to the budget), instead of doubling as they grow.
    let expectedObjects: Int
    static let sampleObjects = 1_024
    private var added = 0

    init(env: LMDBEnvironment, schema: Schema, runBudgetBytes: Int = defaultRunBudgetBytes, expectedObjects: Int = 0) {
        precondition(runBudgetBytes > 0, "run budget must be positive")
        self.env = env
        self.schema = schema
        self.runBudgetBytes = runBudgetBytes
        self.expectedObjects = expectedObjects
    }

    /// Adds one object; ids must ascend (the order of the `objects` database they are read from).
    mutating func add(id: ObjectID, values: [Value], version: TransactionID) throws {
        guard let e = schema.entity(tag: id.entityTag) else {
            throw StrataError.corruptRecord(id: id, reason: "no entity with tag \(id.entityTag) in schema \(schema.model) v\(schema.version)")
        }
        if let lastID, Layout.compare(lastID.keyBytes, id.keyBytes) >= 0 {
            throw StrataError.corruptRecord(id: id, reason: "objects out of key order after \(lastID)")
        }
        lastID = id
        records.add(key: id.keyBytes, value: RecordCodec.encode(Record(entity: e, id: id, values: values, version: version)), sorted: true)
        for index in e.indexes {
            indexes.addKey { Layout.appendIndexKey(index, record: values, id: id, to: &$0) }
        }
        for unique in e.uniques {
            if let key = try Layout.uniqueKey(unique, record: values, entity: e, id: id) { uniques.add(key: key, value: id.keyBytes) }
        }
        objectsPerEntity[e.tag, default: 0] += 1
        added += 1
        if added == Self.sampleObjects, expectedObjects > added {
            let scale = Double(expectedObjects) / Double(added) * 1.05
            let total = indexes.byteCount + uniques.byteCount + links.byteCount
            let fit = min(1.0, Double(runBudgetBytes) / max(1.0, Double(total) * scale))
            for run in [\BulkStateBuilder.indexes, \.uniques] { self[keyPath: run].reserve(scale: scale * fit) }
        }
        if records.byteCount >= Self.batchBytes { try write(\.records, into: .objects) }
        if indexes.byteCount + uniques.byteCount + links.byteCount >= runBudgetBytes { try writeRuns() }
    }

    /// Adds one link key (relationship tag · from · to), in any order.
    mutating func addLink(_ key: [UInt8]) throws {
        links.add(key: key, value: [])
        if indexes.byteCount + uniques.byteCount + links.byteCount >= runBudgetBytes { try writeRuns() }
    }

    /// Writes everything still gathered.
    mutating func finish() throws {
        try write(\.records, into: .objects)
        try writeRuns()
    }

    private mutating func writeRuns() throws {
        // Records first: a unique clash reads the clashing object's values back.
        try write(\.records, into: .objects)
        try write(\.indexes, into: .indexes)
        try write(\.uniques, into: .uniques)
        try write(\.links, into: .links)
    }

    private mutating func write(_ which: WritableKeyPath<BulkStateBuilder, KeyRun>, into name: DatabaseName) throws {
        guard !self[keyPath: which].entries.isEmpty else { return }
        var run = self[keyPath: which]
        self[keyPath: which] = KeyRun()
        defer {
            // The records' buffer is refilled batch after batch: keep its memory.
            if which == \BulkStateBuilder.records {
                run.removeAll()
                self[keyPath: which] = run
            }
        }
        run.sortIfNeeded()
        // Objects arrive in key order (checked by `add`), so every batch appends.
        let append = name == .objects || !started.contains(name)
        let db = env[name]
        let isUnique = name == .uniques
        if isUnique, let (earlier, later) = run.firstDuplicate() {
            try env.read { txn -> Void in throw try clash(txn, key: run.key(later), id: run.value(later), owner: run.value(earlier)) }
        }
        var next = 0
        while next < run.entries.count {
            var end = next
            try env.writeGrowing { txn in
                end = next
                var bytes = 0
                func more() -> Bool { end < run.entries.count && bytes < Self.batchBytes }
                if append {
                    try txn.withAppender(db) { appender in
                        while more() {
                            try run.withEntry(end) { k, v in try appender.append(key: k, value: v); bytes += k.count + v.count }
                            end += 1
                        }
                    }
                } else {
                    while more() {
                        try run.withEntry(end) { k, v in
                            do {
                                try txn.put(db, key: k, value: v, flags: isUnique ? UInt32(MDB_NOOVERWRITE) : 0)
                            } catch let error as LMDBError where error.code == MDB_KEYEXIST {
                                let owner = try txn.withValue(db, key: k) { ObjectID(keyBytes: $0) }
                                throw try clash(txn, key: Array(k), id: ObjectID(keyBytes: v), owner: owner ?? ObjectID(keyBytes: v))
                            }
                            bytes += k.count + v.count
                        }
                        end += 1
                    }
                }
            }
            next = end
            // As a compaction's copy does: the disk starts on this batch while the next is
            // built, and a new generation's written pages leave the page cache.
            if env.options.noSync { env.startWriteback() }
        }
        started.insert(name)
    }

    /// The validation error of a unique key two objects hold (as ``StateApplier`` reports it).
    private func clash(_ txn: LMDBTransaction, key: [UInt8], id: ObjectID, owner: ObjectID) throws -> StrataError {
        let tag = UInt16(key[0]) << 8 | UInt16(key[1])
        guard let e = schema.entity(tag: id.entityTag), let unique = e.uniques.first(where: { $0.tag == tag }),
              let record = try txn.withValue(env[.objects], key: id.keyBytes, { try RecordCodec.decode($0, id: id, schema: schema) }) else {
            return StrataError.corruptRecord(id: id, reason: "unique key clash with \(owner) on an unknown unique (tag \(tag))")
        }
        return StrataError.uniqueClash(unique, e, record.values, id: id, owner: owner)
    }
}

/// Keys (and values) gathered in one flat buffer, sorted in LMDB's key order by reference.
struct KeyRun {
    struct Entry {
        /// The key's first 16 bytes as two big-endian integers (zero-padded): most comparisons
        /// end there. Eight were too few: within one index the tag and the type byte take three,
        /// and the sort then spent most of its time in `memcmp`.
        var prefix: UInt64
        var prefix2: UInt64
        var start: Int
        var keyCount: Int32
        var valueCount: Int32
    }
    private(set) var bytes: [UInt8] = []
    private(set) var entries: [Entry] = []
    /// False once an entry went in out of order.
    private var inOrder = true

    var byteCount: Int { bytes.count + entries.count * MemoryLayout<Entry>.stride }

    /// Empties the run, keeping its buffers.
    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        entries.removeAll(keepingCapacity: true)
        inOrder = true
    }

    /// Reserves room for `scale` times what the run holds now.
    mutating func reserve(scale: Double) {
        guard scale > 1 else { return }
        bytes.reserveCapacity(Int(Double(bytes.count) * scale))
        entries.reserveCapacity(Int(Double(entries.count) * scale))
    }

    /// Adds `key` with `value`; `sorted`: the caller guarantees key order (nothing is checked).
    mutating func add(key: [UInt8], value: [UInt8], sorted: Bool = false) {
        let start = bytes.count
        bytes.append(contentsOf: key)
        bytes.append(contentsOf: value)
        push(start: start, keyCount: key.count, valueCount: value.count, sorted: sorted)
    }

    /// Adds a key written by `body` at the end of the buffer, with no value.
    mutating func addKey(_ body: (inout [UInt8]) -> Void) {
        let start = bytes.count
        body(&bytes)
        push(start: start, keyCount: bytes.count - start, valueCount: 0, sorted: false)
    }

    private mutating func push(start: Int, keyCount: Int, valueCount: Int, sorted: Bool) {
        var prefix: UInt64 = 0, prefix2: UInt64 = 0
        bytes.withUnsafeBufferPointer { b in
            for i in 0..<min(8, keyCount) { prefix |= UInt64(b[start + i]) << UInt64(56 - 8 * i) }
            if keyCount > 8 { for i in 8..<min(16, keyCount) { prefix2 |= UInt64(b[start + i]) << UInt64(120 - 8 * i) } }
        }
        if !sorted { inOrder = false }
        entries.append(Entry(prefix: prefix, prefix2: prefix2, start: start, keyCount: Int32(keyCount), valueCount: Int32(valueCount)))
    }

    func key(_ i: Int) -> [UInt8] { let e = entries[i]; return Array(bytes[e.start..<e.start + Int(e.keyCount)]) }
    func value(_ i: Int) -> ObjectID {
        let e = entries[i]
        return bytes.withUnsafeBytes { ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: $0[e.start + Int(e.keyCount)..<e.start + Int(e.keyCount) + Int(e.valueCount)])) }
    }

    func withEntry(_ i: Int, _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        let e = entries[i]
        try bytes.withUnsafeBytes { all in
            let k = UnsafeRawBufferPointer(rebasing: all[e.start..<e.start + Int(e.keyCount)])
            let v = UnsafeRawBufferPointer(rebasing: all[e.start + Int(e.keyCount)..<e.start + Int(e.keyCount) + Int(e.valueCount)])
            try body(k, v)
        }
    }

    /// Three-way comparison in LMDB's key order (``Layout/compare(_:_:)``).
    static func compareKeys(_ all: UnsafeRawBufferPointer, _ a: Entry, _ b: Entry) -> Int {
        if a.prefix != b.prefix { return a.prefix < b.prefix ? -1 : 1 }
        if a.prefix2 != b.prefix2 { return a.prefix2 < b.prefix2 ? -1 : 1 }
        let ka = UnsafeRawBufferPointer(rebasing: all[a.start..<a.start + Int(a.keyCount)])
        let kb = UnsafeRawBufferPointer(rebasing: all[b.start..<b.start + Int(b.keyCount)])
        // Zero padding makes a short key's prefixes equal to a longer one's: compare in full.
        guard ka.count >= 16, kb.count >= 16 else { return Layout.compare(ka, kb) }
        // The first 16 bytes are equal: the rest 8 bytes at a time (keys are short, and a call
        // to memcmp per comparison was most of the sort's time).
        let n = min(ka.count, kb.count)
        var i = 16
        while i + 8 <= n {
            let x = ka.loadUnaligned(fromByteOffset: i, as: UInt64.self).bigEndian
            let y = kb.loadUnaligned(fromByteOffset: i, as: UInt64.self).bigEndian
            if x != y { return x < y ? -1 : 1 }
            i += 8
        }
        while i < n {
            if ka[i] != kb[i] { return ka[i] < kb[i] ? -1 : 1 }
            i += 1
        }
        return ka.count < kb.count ? -1 : (ka.count > kb.count ? 1 : 0)
    }

    /// Sorts the entries by key (equal keys keep the order they were added in). Keys with
    /// different 2-byte tags (index, unique or relationship) never interleave, so each tag's
    /// entries are sorted apart — on Dispatch's worker threads, both cores when there are
    /// several tags — and laid end to end in tag order.
    mutating func sortIfNeeded() {
        guard !inOrder else { return }
        var groups: [UInt16: [Entry]] = [:]
        for e in entries { groups[UInt16(truncatingIfNeeded: e.prefix >> 48), default: []].append(e) }
        entries = []
        let tags = groups.keys.sorted()
        let sortedGroups = Locked<[UInt16: [Entry]]>([:])
        let bytes = self.bytes
        let input = groups
        DispatchQueue.concurrentPerform(iterations: tags.count) { i in
            var group = input[tags[i]] ?? []
            bytes.withUnsafeBytes { all in
                group.sort { a, b in
                    let c = Self.compareKeys(all, a, b)
                    return c != 0 ? c < 0 : a.start < b.start
                }
            }
            sortedGroups.withLock { $0[tags[i]] = group }
        }
        groups = [:]
        let done = sortedGroups.withLock { $0 }
        entries.reserveCapacity(done.values.reduce(0) { $0 + $1.count })
        for tag in tags { entries.append(contentsOf: done[tag] ?? []) }
        inOrder = true
    }

    /// The first two adjacent entries with equal keys (after sorting), if any.
    func firstDuplicate() -> (Int, Int)? {
        bytes.withUnsafeBytes { all in
            for i in entries.indices.dropFirst() where Self.compareKeys(all, entries[i - 1], entries[i]) == 0 { return (i - 1, i) }
            return nil
        }
    }
}
