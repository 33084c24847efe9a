import Dispatch

/// Keys (and values) gathered in one flat buffer, sorted in LMDB's key order by reference: the
/// index entries of one save (``StateApplier``) and a migration's bulk build
/// (``BulkStateBuilder``). One buffer instead of an array per key, a 16-byte integer prefix per
/// entry, and an inline comparison past it: with separate arrays and a `memcmp` per comparison,
/// the comparisons take most of both sorts' time.
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
    /// Entries from which a sort groups the keys by tag and sorts the groups on several threads.
    static let parallelSortThreshold = 65_536

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

    /// Adds every entry of `other` after these, in its order.
    mutating func append(contentsOf other: KeyRun) {
        guard !other.entries.isEmpty else { return }
        inOrder = entries.isEmpty && other.inOrder
        let base = bytes.count
        // No reserveCapacity: it grows to exactly what is asked, so a run taking many small
        // runs one after another would be copied whole each time; append grows geometrically.
        bytes.append(contentsOf: other.bytes)
        for var e in other.entries {
            e.start += base
            entries.append(e)
        }
    }

    /// Adds `key` with `value`; `sorted`: the caller guarantees key order (nothing is checked).
    mutating func add(key: [UInt8], value: [UInt8], sorted: Bool = false) {
        key.withUnsafeBytes { k in value.withUnsafeBytes { v in add(key: k, value: v, sorted: sorted) } }
    }

    /// ``add(key:value:sorted:)`` from bytes held elsewhere (another run's entry).
    mutating func add(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, sorted: Bool = false) {
        let start = bytes.count
        bytes.append(contentsOf: key)
        bytes.append(contentsOf: value)
        push(start: start, keyCount: key.count, valueCount: value.count, sorted: sorted)
    }

    /// Adds a key written by `body` at the end of the buffer, with no value, or with the
    /// one-byte value `tag`.
    mutating func addKey(tag: UInt8? = nil, _ body: (inout [UInt8]) -> Void) {
        let start = bytes.count
        body(&bytes)
        let keyCount = bytes.count - start
        if let tag { bytes.append(tag) }
        push(start: start, keyCount: keyCount, valueCount: tag == nil ? 0 : 1, sorted: false)
    }

    /// The one-byte value of entry `i` (see ``addKey(tag:_:)``).
    func tag(_ i: Int) -> UInt8 {
        let e = entries[i]
        return bytes[e.start + Int(e.keyCount)]
    }

    /// Whether entries `i` and `j` have equal keys.
    func sameKey(_ i: Int, _ j: Int) -> Bool {
        bytes.withUnsafeBytes { Self.compareKeys($0, entries[i], entries[j]) == 0 }
    }

    private mutating func push(start: Int, keyCount: Int, valueCount: Int, sorted: Bool) {
        var prefix: UInt64 = 0, prefix2: UInt64 = 0
        bytes.withUnsafeBufferPointer { b in
            for i in 0..<min(8, keyCount) { prefix |= UInt64(b[start + i]) << UInt64(56 - 8 * i) }
            if keyCount > 8 {
                for i in 8..<min(16, keyCount) { prefix2 |= UInt64(b[start + i]) << UInt64(120 - 8 * i) }
            }
        }
        if !sorted { inOrder = false }
        entries.append(Entry(prefix: prefix, prefix2: prefix2, start: start, keyCount: Int32(keyCount),
                             valueCount: Int32(valueCount)))
    }

    func key(_ i: Int) -> [UInt8] { let e = entries[i]; return Array(bytes[e.start..<e.start + Int(e.keyCount)]) }
    func value(_ i: Int) -> ObjectID {
        let e = entries[i]
        return bytes.withUnsafeBytes {
            ObjectID(keyBytes: UnsafeRawBufferPointer(
                rebasing: $0[e.start + Int(e.keyCount)..<e.start + Int(e.keyCount) + Int(e.valueCount)]))
        }
    }

    func withEntry(_ i: Int, _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        let e = entries[i]
        try bytes.withUnsafeBytes { all in
            let k = UnsafeRawBufferPointer(rebasing: all[e.start..<e.start + Int(e.keyCount)])
            let v = UnsafeRawBufferPointer(
                rebasing: all[e.start + Int(e.keyCount)..<e.start + Int(e.keyCount) + Int(e.valueCount)])
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
        // Small runs (a save's index entries) are sorted in place: handing them to other
        // threads would cost more than the sort.
        if entries.count < Self.parallelSortThreshold {
            Self.sort(&entries, in: bytes)
            inOrder = true
            return
        }
        var groups: [UInt16: [Entry]] = [:]
        for e in entries { groups[UInt16(truncatingIfNeeded: e.prefix >> 48), default: []].append(e) }
        entries = []
        let tags = groups.keys.sorted()
        let sortedGroups = Locked<[UInt16: [Entry]]>([:])
        let bytes = self.bytes
        let input = groups
        DispatchQueue.concurrentPerform(iterations: tags.count) { i in
            var group = input[tags[i]] ?? []
            Self.sort(&group, in: bytes)
            sortedGroups.withLock { $0[tags[i]] = group }
        }
        groups = [:]
        let done = sortedGroups.withLock { $0 }
        entries.reserveCapacity(done.values.reduce(0) { $0 + $1.count })
        for tag in tags { entries.append(contentsOf: done[tag] ?? []) }
        inOrder = true
    }

    /// Sorts `entries` of `bytes` by key, equal keys in the order they were added (by offset).
    private static func sort(_ entries: inout [Entry], in bytes: [UInt8]) {
        bytes.withUnsafeBytes { all in
            entries.sort { a, b in
                let c = compareKeys(all, a, b)
                return c != 0 ? c < 0 : a.start < b.start
            }
        }
    }

    /// The first two adjacent entries with equal keys (after sorting), if any.
    func firstDuplicate() -> (Int, Int)? {
        bytes.withUnsafeBytes { all in
            for i in entries.indices.dropFirst() where Self.compareKeys(all, entries[i - 1], entries[i]) == 0 {
                return (i - 1, i)
            }
            return nil
        }
    }
}
