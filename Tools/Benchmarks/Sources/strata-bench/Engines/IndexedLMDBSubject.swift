import CLMDBBench
import Foundation
import Synchronization

/// Raw LMDB doing the writes Strata's data model implies: the equal-work floor for W1–W3.
///
/// The plain baseline (``LMDBSubject``) writes one record per track into one B-tree. Strata writes,
/// per track, the record, its share of a log entry, three secondary-index entries (title,
/// duration, addedAt), a unique-index entry (mbid) and the entity's count. This engine writes the
/// same entries through the C API, in four named databases and LMDB's main one, with the same key
/// shapes and about the same sizes as Strata's (`Layout` and `SortableEncoding` in the library):
///
/// | database | key | value |
/// |---|---|---|
/// | `objects` | the 16-byte id (`MDB_NOOVERWRITE`, as Strata checks new ids) | version (u64) + ``PlainTrack`` bytes |
/// | `log` | transaction id (u64, `MDB_APPEND`) | per record: op (1) + id (16) + length (u16) + the record bytes |
/// | `indexes` | tag (u16) + 0x01 + escaped title + 0x00 0x01 + id; tag + 0x01 + duration (8, sign-flipped) + id; tag + 0x01 + addedAt (8, ordered double bits) + id | empty |
/// | `uniques` | tag (u16) + 0x01 + mbid (16) (`MDB_NOOVERWRITE`: a clash is found by the put) | id (16) |
/// | main (unnamed; where Strata's store formats 2 and 3 keep counts) | `count/` + tag | u64 |
///
/// Written in the order Strata writes them: a transaction's index keys sorted first (one
/// left-to-right pass per index), unique keys put record by record in input order (Strata puts
/// each one at once, so that later operations of the same save see it). In relaxed mode it
/// asks for a flush every 100 ms under load, run on a background queue while it commits on,
/// as Strata's writer does (`relaxedSyncIntervalMs`).
/// What it leaves out of Strata's work: checksums, schema checks, change streams, Swift values
/// (`Track`, `Value`). All preparation (encoding, keys, sorting) is inside the timed call, as
/// Strata's is.
final class IndexedLMDBSubject: BenchSubject {
    let engine = Engine.lmdbIndexed
    let savesBlockThread = true
    let db: RawLMDB
    private var objects: MDB_dbi { db.dbis[0] }
    private var log: MDB_dbi { db.dbis[1] }
    private var indexes: MDB_dbi { db.dbis[2] }
    private var uniques: MDB_dbi { db.dbis[3] }
    private var counts: MDB_dbi { db.dbis[4] }
    private static let countKey = Array("count/".utf8) + [0x00, 0x07]

    init(directory: URL, setup: BenchSetup, sync: SyncLevel) throws {
        db = try RawLMDB(directory: directory, mapSizeBytes: setup.mapSizeBytes, noSync: sync == .relaxed,
                         databaseNames: ["objects", "log", "indexes", "uniques", nil])
    }

    func save(_ batch: [TrackData]) async throws { try saveBlocking(batch) }

    func saveBlocking(_ batch: [TrackData]) throws {
        // Every record's bytes, then every index and unique key, each run in one buffer.
        var records = KeyBuffer(capacity: batch.count * 112)
        var indexKeys = KeyBuffer(capacity: batch.count * 3 * 56)
        var uniqueKeys = KeyBuffer(capacity: batch.count * 19)
        var plain: [UInt8] = []
        plain.reserveCapacity(128)
        var id = [UInt8](repeating: 0, count: 16)
        for t in batch {
            TrackData.writeKey(t.index, into: &id, at: 0)
            PlainTrack.encode(t, into: &plain)
            records.add(plain)
            indexKeys.add { k in
                k.append(contentsOf: [0x00, 0x01, 0x01])
                k.append(contentsOf: t.title.utf8)
                k.append(contentsOf: [0x00, 0x01])
                k.append(contentsOf: id)
            }
            indexKeys.add { k in
                k.append(contentsOf: [0x00, 0x02, 0x01])
                Self.appendU64(UInt64(bitPattern: Int64(t.durationSeconds)) ^ (1 << 63), to: &k)
                k.append(contentsOf: id)
            }
            indexKeys.add { k in
                k.append(contentsOf: [0x00, 0x03, 0x01])
                Self.appendU64(Self.orderedBits(t.addedAt.timeIntervalSinceReferenceDate), to: &k)
                k.append(contentsOf: id)
            }
            uniqueKeys.add { k in
                k.append(contentsOf: [0x00, 0x04, 0x01])
                withUnsafeBytes(of: t.mbid.uuid) { k.append(contentsOf: $0) }
            }
        }
        let indexOrder = indexKeys.sortedOrder()
        try db.write { txn in
            let tx = try db.lastKeyU64(txn, log) + 1
            var entry: [UInt8] = []
            entry.reserveCapacity(batch.count * 136)
            var value: [UInt8] = []
            value.reserveCapacity(128)
            for (n, t) in batch.enumerated() {
                TrackData.writeKey(t.index, into: &id, at: 0)
                let bytes = records[n]
                value.removeAll(keepingCapacity: true)
                Self.appendU64(tx, to: &value)
                value.append(contentsOf: bytes)
                try id.withUnsafeBytes { k in try value.withUnsafeBytes { try db.put(txn, objects, key: k, value: $0, flags: MDB_NOOVERWRITE) } }
                entry.append(1)
                entry.append(contentsOf: id)
                entry.append(UInt8(truncatingIfNeeded: bytes.count >> 8))
                entry.append(UInt8(truncatingIfNeeded: bytes.count))
                entry.append(contentsOf: bytes)
            }
            var txKey: [UInt8] = []
            Self.appendU64(tx, to: &txKey)
            try txKey.withUnsafeBytes { k in try entry.withUnsafeBytes { try db.put(txn, log, key: k, value: $0, flags: MDB_APPEND) } }
            // An empty value at a valid address (LMDB copies zero bytes from it).
            let one: [UInt8] = [0]
            try one.withUnsafeBytes { b in
                let none = UnsafeRawBufferPointer(rebasing: b[0..<0])
                for i in indexOrder { try indexKeys.withKey(i) { try db.put(txn, indexes, key: $0, value: none) } }
            }
            for i in 0..<uniqueKeys.count {
                TrackData.writeKey(batch[i].index, into: &id, at: 0)
                try uniqueKeys.withKey(i) { k in try id.withUnsafeBytes { try db.put(txn, uniques, key: k, value: $0, flags: MDB_NOOVERWRITE) } }
            }
            let count = try Self.countKey.withUnsafeBytes { k in
                try db.get(txn, counts, key: k) { v in v.count == 8 ? UInt64(bigEndian: v.loadUnaligned(as: UInt64.self)) : 0 } ?? 0
            }
            var countValue: [UInt8] = []
            Self.appendU64(count + UInt64(batch.count), to: &countValue)
            try Self.countKey.withUnsafeBytes { k in try countValue.withUnsafeBytes { try db.put(txn, counts, key: k, value: $0) } }
        }
        if db.noSync {
            let now = MonotonicClock.nanoseconds()
            if now &- lastSync.load(ordering: .relaxed) >= Self.relaxedSyncIntervalNanos {
                try db.requestFlush()
                lastSync.store(now, ordering: .relaxed)
            }
        }
    }

    /// Strata's default `relaxedSyncIntervalMs` (100 ms).
    static let relaxedSyncIntervalNanos: UInt64 = 100_000_000
    /// When the relaxed mode last flushed (monotonic ns).
    private let lastSync = Atomic<UInt64>(MonotonicClock.nanoseconds())

    static func appendU64(_ v: UInt64, to out: inout [UInt8]) {
        withUnsafeBytes(of: v.bigEndian) { out.append(contentsOf: $0) }
    }

    /// A double's bits in an order that sorts like the number (Strata's `SortableEncoding`).
    static func orderedBits(_ d: Double) -> UInt64 {
        let bits = (d == 0 ? 0.0 : d).bitPattern
        return bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
    }

    func count() throws -> Int {
        let txn = try db.beginRead()
        defer { mdb_txn_abort(txn) }
        var st = MDB_stat()
        try lmdbCheck(mdb_stat(txn, objects, &st), "mdb_stat")
        return Int(st.ms_entries)
    }

    // Reads are the plain baseline's (one B-tree lookup by id): W4–W6 leave this engine out.
    func timedPointReads(_ indexes: [Int]) throws -> (seconds: Double, checksum: Int) {
        throw Unsupported(what: "lmdb-indexed measures writes only (W1–W3)")
    }

    func timedSnapshotOpens(_ count: Int) throws -> Double {
        throw Unsupported(what: "lmdb-indexed measures writes only (W1–W3)")
    }

    func readerLatencies(_ indexes: [Int], until stop: StopFlag?) throws -> [UInt64] {
        throw Unsupported(what: "lmdb-indexed measures writes only (W1–W3)")
    }

    func close() {
        if db.noSync { try? db.sync() }
        db.close()
    }
}

/// Variable-length byte strings in one buffer, with their offsets; sortable in LMDB's key order.
struct KeyBuffer {
    private(set) var bytes: [UInt8] = []
    private var starts: [Int] = [0]

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    var count: Int { starts.count - 1 }

    mutating func add(_ b: [UInt8]) {
        bytes.append(contentsOf: b)
        starts.append(bytes.count)
    }

    mutating func add(_ build: (inout [UInt8]) -> Void) {
        build(&bytes)
        starts.append(bytes.count)
    }

    subscript(i: Int) -> ArraySlice<UInt8> { bytes[starts[i]..<starts[i + 1]] }

    func withKey<R>(_ i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[starts[i]..<starts[i + 1]])) }
    }

    /// Positions of the strings in memcmp-then-length order (LMDB's default key order).
    func sortedOrder() -> [Int] {
        guard count > 0 else { return [] }
        return bytes.withUnsafeBytes { all -> [Int] in
            let base = all.baseAddress!
            return (0..<count).sorted { a, b in
                let la = starts[a + 1] - starts[a], lb = starts[b + 1] - starts[b]
                let c = memcmp(base + starts[a], base + starts[b], min(la, lb))
                return c != 0 ? c < 0 : la < lb
            }
        }
    }
}
