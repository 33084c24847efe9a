import Glibc

/// Binary form of a log entry, in one of two formats:
///
/// - plain (format 1): `[1 u8][flags u8][body][crc32c u32]`;
/// - compressed (format 2): `[2 u8][flags u8][body length varint][zstd frame of the body][crc32c u32]`,
///
/// where the body is `[schema version u32][time ms u64][author][metadata count varint]
/// [(key, value)*][change count varint][change*]` and the checksum covers the transaction id and
/// every byte before it as stored. An entry whose body has at least ``compressMinBytes`` is
/// written compressed when that saves at least an eighth of it (a bulk import's entries keep
/// about two fifths of their bytes); smaller ones, and ones that do not compress, stay plain.
/// Readers take both, so a log may mix them (entries written before compression existed are
/// plain).
enum LogEntryCodec {
    /// The plain format's byte.
    static let format: UInt8 = 1
    /// The compressed format's byte.
    static let compressedFormat: UInt8 = 2
    /// Bodies shorter than this are never compressed (a small save's entry gains little, and it
    /// shares its B-tree page with others anyway).
    static let compressMinBytes = 1_024

    /// The entry's bytes, compressed when that pays (see the type's documentation): for a store
    /// of the current format (a new generation, a migration's log).
    static func encode(_ e: LogEntry) -> [UInt8] { encode(e, compressIf: { true }) }

    /// The entry's bytes, compressed when that pays and `compressIf` (asked only of an entry
    /// large enough to be compressed) says the log takes compressed entries
    /// (``MetaKey/logTakesCompressedEntries(_:meta:)``).
    static func encode(_ e: LogEntry, compressIf: () throws -> Bool) rethrows -> [UInt8] {
        // ~160 bytes a change for a small save (an insert carries every value: a library track's
        // ~150 bytes), so it never grows; a large one grows by doubling, as before.
        var w = ByteWriter(capacity: 64 + min(e.changes.count, 64) * 160)
        w.u8(format)
        w.u8(0)
        w.u32(UInt32(e.schemaVersion))
        w.u64(UInt64(bitPattern: e.timestampMs))
        w.string(e.author)
        w.varint(UInt64(e.metadata.count))
        for (k, v) in e.metadata.sorted(by: { $0.key < $1.key }) {
            w.string(k)
            w.string(v)
        }
        w.varint(UInt64(e.changes.count))
        for c in e.changes { encode(c, into: &w) }
        if w.bytes.count - 2 >= compressMinBytes, try compressIf(), let packed = compressed(w.bytes) { w.bytes = packed }
        w.u32(checksum(e.transactionID, w.bytes))
        return w.bytes
    }

    /// A plain entry without its checksum (format, flags, body) in the compressed format, or nil
    /// when it does not shrink by an eighth or would grow past what a reader accepts
    /// (``Compression/allowed(plain:compressed:)``).
    private static func compressed(_ plain: [UInt8]) -> [UInt8]? {
        let bodyCount = plain.count - 2
        var w = ByteWriter(capacity: 16)
        w.u8(compressedFormat)
        w.u8(plain[1])
        w.varint(UInt64(bodyCount))
        let header = w.bytes
        // The whole entry must come out at least an eighth smaller: the frame gets the room left.
        let room = plain.count - plain.count / 8 - header.count
        guard room > 0 else { return nil }
        var frameCount: Int?
        let out = [UInt8](unsafeUninitializedCapacity: header.count + room) { buffer, initialized in
            let all = UnsafeMutableRawBufferPointer(buffer)
            all.copyBytes(from: header)
            frameCount = plain.withUnsafeBytes { p in
                Compression.compress(UnsafeRawBufferPointer(rebasing: p[2...]),
                                     into: UnsafeMutableRawBufferPointer(rebasing: all[header.count...]))
            }
            initialized = header.count + (frameCount ?? 0)
        }
        guard let frameCount, Compression.allowed(plain: bodyCount, compressed: frameCount) else { return nil }
        return out
    }

    /// Whether `bytes` (a stored entry) is in the compressed format.
    static func isCompressed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.first == compressedFormat
    }

    /// The entry `bytes` (stored under `tx`) in the plain format, with its checksum for `tx`:
    /// the same bytes for a plain entry; a compressed one's checksum is checked, its body
    /// decompressed, and the result checksummed again. The body itself is not checked here.
    /// - Throws: ``StrataError/corruptLogEntry(transaction:reason:)``.
    static func plainEntry(_ bytes: UnsafeRawBufferPointer, transactionID tx: TransactionID) throws -> [UInt8] {
        guard isCompressed(bytes) else { return Array(bytes) }
        var scratch: UnsafeMutableRawBufferPointer?
        defer { free(scratch?.baseAddress) }
        let plain = try plainEntry(bytes, transactionID: tx) { count in
            scratch = try allocatePlain(count, tx)
            return scratch
        }
        return plain.map(Array.init) ?? []
    }

    /// The plain form of the compressed entry `bytes` (stored under `tx`), checksum for `tx`
    /// included, decompressed straight into the buffer of the size asked that `allocate` gives
    /// (a caller that keeps the plain form, verify's fold, gives its own); nil when `allocate`
    /// gives none. The stored checksum is checked and the declared size checked against the frame
    /// before `allocate` is called.
    /// - Throws: ``StrataError/corruptLogEntry(transaction:reason:)``, or what `allocate` throws.
    static func plainEntry(_ bytes: UnsafeRawBufferPointer, transactionID tx: TransactionID,
                           allocate: (Int) throws -> UnsafeMutableRawBufferPointer?) throws -> UnsafeRawBufferPointer? {
        precondition(isCompressed(bytes), "plainEntry(allocate:) is for compressed entries")
        return try withCheckedContent(bytes, tx) { content in
            var r = ByteReader(content)
            _ = try r.u8()
            let flags = try r.u8()
            let (count, frame) = try compressedBody(&r)
            guard let destination = try allocate(count + 4) else { return nil }
            precondition(destination.count == count + 4, "plainEntry(allocate:) needs the size it asked for")
            let plain = UnsafeMutableRawBufferPointer(rebasing: destination[0..<count])
            try expand(frame, flags: flags, into: plain)
            withUnsafeBytes(of: checksum(tx, UnsafeRawBufferPointer(plain)).bigEndian) {
                UnsafeMutableRawBufferPointer(rebasing: destination[count...]).copyMemory(from: $0)
            }
            return UnsafeRawBufferPointer(destination)
        }
    }

    /// Checks a stored entry's size and checksum without decoding it (what a compaction copies
    /// or squashes: damage refused, not carried over or dropped unnoticed).
    ///
    /// - Throws: ``StrataError/corruptLogEntry(transaction:reason:)``.
    static func checkStored(_ bytes: UnsafeRawBufferPointer, _ tx: TransactionID) throws {
        try withCheckedContent(bytes, tx) { _ in }
    }

    /// The bytes of a stored entry before its checksum, once the checksum is checked; a
    /// `DecodingError` from `body` becomes ``StrataError/corruptLogEntry(transaction:reason:)``.
    @inline(__always)
    private static func withCheckedContent<R>(_ bytes: UnsafeRawBufferPointer, _ tx: TransactionID,
                                              _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        guard bytes.count >= 4 + 2 + 4 + 8 + 1 + 1 + 1 else {
            throw StrataError.corruptLogEntry(transaction: tx, reason: "entry of \(bytes.count) bytes is too short")
        }
        let content = UnsafeRawBufferPointer(rebasing: bytes[0..<bytes.count - 4])
        var tail = ByteReader(UnsafeRawBufferPointer(rebasing: bytes[bytes.count - 4..<bytes.count]))
        let stored = try tail.u32()
        guard checksum(tx, content) == stored else {
            throw StrataError.corruptLogEntry(transaction: tx, reason: "checksum mismatch")
        }
        do {
            return try body(content)
        } catch let e as DecodingError {
            throw StrataError.corruptLogEntry(transaction: tx, reason: e.description)
        }
    }

    /// After a compressed entry's format and flags bytes: the size of its plain form without
    /// the checksum (format, flags, body), checked against the frame before anything that size is
    /// allocated, and the frame (the rest of `r`) with its offset in the entry.
    private static func compressedBody(_ r: inout ByteReader) throws -> (count: Int, frame: Frame) {
        let at = r.offset
        let declared = try r.varint()
        let frame = UnsafeRawBufferPointer(rebasing: r.buffer[r.offset...])
        guard declared <= UInt64(Int.max - 6), Compression.allowed(plain: Int(declared), compressed: frame.count) else {
            throw DecodingError(offset: at, reason: "compressed body declares \(declared) bytes from \(frame.count)")
        }
        return (2 + Int(declared), Frame(bytes: frame, offset: r.offset))
    }

    /// `count` bytes (from `malloc`: free them with `free`) for a compressed entry's plain form.
    /// The size a damaged entry declares is checked against its frame first, but one whose
    /// checksum was made to match may still declare gigabytes: past what the process can
    /// allocate it is refused as damaged (an allocation that fails would end the process).
    private static func allocatePlain(_ count: Int, _ tx: TransactionID) throws -> UnsafeMutableRawBufferPointer {
        guard let p = malloc(max(1, count)) else {
            throw StrataError.corruptLogEntry(transaction: tx, reason: """
                its compressed body declares \(count) bytes, more than this process can allocate
                """)
        }
        return UnsafeMutableRawBufferPointer(start: p, count: count)
    }

    /// A compressed entry's zstd frame, and where it starts in the stored entry (for errors).
    private struct Frame {
        let bytes: UnsafeRawBufferPointer
        let offset: Int
    }

    /// Writes the plain format's two bytes and `frame` decompressed into `destination` (of the
    /// size ``compressedBody(_:)`` gave), so offsets into it are those of the plain entry.
    private static func expand(_ frame: Frame, flags: UInt8, into destination: UnsafeMutableRawBufferPointer) throws {
        destination[0] = format
        destination[1] = flags
        do {
            try Compression.decompress(frame.bytes, into: UnsafeMutableRawBufferPointer(rebasing: destination[2...]))
        } catch let e as DecodingError {
            throw DecodingError(offset: frame.offset, reason: e.reason)
        }
    }

    /// CRC-32C over the transaction id (the LMDB key) and the body: an entry moved to another
    /// key fails it.
    static func checksum(_ tx: TransactionID, _ body: [UInt8]) -> UInt32 {
        body.withUnsafeBytes { checksum(tx, $0) }
    }

    static func checksum(_ tx: TransactionID, _ body: UnsafeRawBufferPointer) -> UInt32 {
        let running = withUnsafeBytes(of: tx.rawValue.bigEndian) { CRC32C.update(0xFFFF_FFFF, $0) }
        return ~CRC32C.update(running, body)
    }

    /// The checksums an entry with `body` would carry under `count` consecutive transaction ids
    /// from `first`: the body is read once, and each id's CRC moved past it (``CRC32C/combine``).
    static func checksums(_ body: UnsafeRawBufferPointer, from first: TransactionID, count: Int) -> [UInt32] {
        let ofBody = CRC32C.checksum(body), shift = CRC32C.shift(bytes: body.count)
        return (0..<UInt64(max(0, count))).map { i in
            let ofID = withUnsafeBytes(of: (first.rawValue &+ i).bigEndian) { CRC32C.checksum($0) }
            return CRC32C.combine(ofID, ofBody, shiftOfB: shift)
        }
    }

    private static func encode(_ c: LoggedChange, into w: inout ByteWriter) {
        switch c {
        case .insert(let id, let values):
            w.u8(1); id16(id, &w); valueList(values, &w)
        case .update(let id, let changes, let previous):
            w.u8(2); id16(id, &w); w.u64(previous.rawValue)
            w.varint(UInt64(changes.count))
            for ch in changes {
                w.varint(UInt64(ch.attribute))
                ValueCodec.encode(ch.old, into: &w)
                ValueCodec.encode(ch.new, into: &w)
            }
        case .delete(let id, let values, let previous):
            w.u8(3); id16(id, &w); w.u64(previous.rawValue); valueList(values, &w)
        case .link(let r, let a, let b):
            w.u8(4); w.u16(r); id16(a, &w); id16(b, &w)
        case .unlink(let r, let a, let b):
            w.u8(5); w.u16(r); id16(a, &w); id16(b, &w)
        }
    }

    private static func id16(_ id: ObjectID, _ w: inout ByteWriter) {
        w.u64(id.high)
        w.u64(id.low)
    }

    /// Values of an insert/delete: count, then (position, value) for the non-null ones.
    private static func valueList(_ values: [Value], _ w: inout ByteWriter) {
        w.varint(UInt64(values.count))
        var present = 0
        for v in values where !v.isNull { present += 1 }
        w.varint(UInt64(present))
        for (i, v) in values.enumerated() where !v.isNull {
            w.varint(UInt64(i))
            ValueCodec.encode(v, into: &w)
        }
    }

    static func decode(_ bytes: UnsafeRawBufferPointer, transactionID tx: TransactionID) throws -> LogEntry {
        try read(bytes, tx) { r in
            let version = Int(try r.u32())
            let time = Int64(bitPattern: try r.u64())
            let author = try r.string()
            var metadata: [String: String] = [:]
            let m = try r.varint()
            guard m <= UInt64(r.remaining) else { throw DecodingError(offset: r.offset, reason: "metadata count \(m)") }
            for _ in 0..<m { metadata[try r.string()] = try r.string() }
            let n = try r.varint()
            guard n <= UInt64(r.remaining) else { throw DecodingError(offset: r.offset, reason: "change count \(n)") }
            var changes: [LoggedChange] = []
            // Room for what the bytes left can hold (a change takes at least its kind and an
            // id, 17 bytes), not for what a damaged count says.
            changes.reserveCapacity(Int(min(n, UInt64(r.remaining / 17))))
            for _ in 0..<n { changes.append(try decodeChange(&r)) }
            return LogEntry(transactionID: tx, schemaVersion: version, timestampMs: time, author: author,
                            metadata: metadata, changes: changes)
        }
    }

    /// What every reading of an entry (``decode(_:transactionID:)``, ``scan(_:transactionID:visit:)``)
    /// starts and ends with: the id at most ``TransactionID/largest``, the length and the
    /// checksum, the format byte and the flags byte, then `body` on the rest, which must read it
    /// to the end. A `DecodingError` becomes ``StrataError/corruptLogEntry(transaction:reason:)``
    /// of `tx`.
    @inline(__always)
    private static func read<R>(_ bytes: UnsafeRawBufferPointer, _ tx: TransactionID,
                                _ body: (inout ByteReader) throws -> R) throws -> R {
        guard tx <= .largest else {
            throw StrataError.corruptLogEntry(transaction: tx, reason: "an id past the largest transaction id, \(TransactionID.largest)")
        }
        return try withCheckedContent(bytes, tx) { content in
            var r = ByteReader(content)
            let f = try r.u8()
            switch f {
            case format:
                _ = try r.u8()
                return try readBody(&r, body)
            case compressedFormat:
                let flags = try r.u8()
                let (count, frame) = try compressedBody(&r)
                let plain = try allocatePlain(count, tx)
                defer { free(plain.baseAddress) }
                try expand(frame, flags: flags, into: plain)
                // Offsets (of errors, of scanned values) are those of the plain entry.
                var pr = ByteReader(UnsafeRawBufferPointer(plain))
                _ = try pr.u8()
                _ = try pr.u8()
                return try readBody(&pr, body)
            default:
                throw StrataError.corruptLogEntry(
                    transaction: tx, reason: "entry format \(f) is newer than this Strata reads (\(compressedFormat))")
            }
        }
    }

    /// `body` on the rest of `r`, which it must read to the end.
    @inline(__always)
    private static func readBody<R>(_ r: inout ByteReader, _ body: (inout ByteReader) throws -> R) throws -> R {
        let result = try body(&r)
        guard r.isAtEnd else { throw DecodingError(offset: r.offset, reason: "\(r.remaining) trailing bytes") }
        return result
    }

    private static func readID(_ r: inout ByteReader) throws -> ObjectID {
        ObjectID(high: try r.u64(), low: try r.u64())
    }

    /// An update's or delete's previous version: a transaction id, at most ``TransactionID/largest``.
    private static func readPrevious(_ r: inout ByteReader) throws -> TransactionID {
        let at = r.offset
        let v = try r.u64()
        guard v <= TransactionID.largest.rawValue else {
            throw DecodingError(offset: at, reason: "previous version \(v) past the largest transaction id")
        }
        return TransactionID(v)
    }

    /// A value list as an insert or a delete stores it (count, present count, (position, value)*).
    static func decodeValueList(_ r: inout ByteReader) throws -> [Value] {
        let count = try r.varint()
        guard count <= UInt64(SchemaLimits.maxAttributesPerEntity) else {
            throw DecodingError(offset: r.offset, reason: "value count \(count)")
        }
        var values = [Value](repeating: .null, count: Int(count))
        let present = try r.varint()
        guard present <= count else {
            throw DecodingError(offset: r.offset, reason: "present count \(present) > \(count)")
        }
        for _ in 0..<present {
            let i = try r.varint()
            guard i < count else { throw DecodingError(offset: r.offset, reason: "value index \(i) out of range") }
            values[Int(i)] = try ValueCodec.decode(from: &r)
        }
        return values
    }

    private static func decodeChange(_ r: inout ByteReader) throws -> LoggedChange {
        let at = r.offset
        switch try r.u8() {
        case 1: return .insert(id: try readID(&r), values: try decodeValueList(&r))
        case 2:
            let id = try readID(&r)
            let previous = try readPrevious(&r)
            let n = try r.varint()
            guard n <= UInt64(SchemaLimits.maxAttributesPerEntity) else {
                throw DecodingError(offset: r.offset, reason: "update count \(n)")
            }
            var changes: [AttributeChange] = []
            for _ in 0..<n {
                let at = r.offset
                let i = try r.varint()
                // Checked before Int(_:), which traps on a corrupt varint ≥ 2^63 (found by fuzz-log-entry).
                guard i < UInt64(SchemaLimits.maxAttributesPerEntity) else {
                    throw DecodingError(offset: at, reason: "attribute index \(i) out of range")
                }
                changes.append(AttributeChange(attribute: Int(i), old: try ValueCodec.decode(from: &r),
                                               new: try ValueCodec.decode(from: &r)))
            }
            return .update(id: id, changes: changes, previousVersion: previous)
        case 3:
            let id = try readID(&r)
            let previous = try readPrevious(&r)
            return .delete(id: id, values: try decodeValueList(&r), previousVersion: previous)
        case 4: return .link(relationship: try r.u16(), from: try readID(&r), to: try readID(&r))
        case 5: return .unlink(relationship: try r.u16(), from: try readID(&r), to: try readID(&r))
        case let k: throw DecodingError(offset: at, reason: "unknown change kind \(k)")
        }
    }

    // MARK: Checking without decoding

    /// A change as ``scan(_:transactionID:visit:)`` reports it: kinds and ids, and where in the
    /// entry's plain form (``plainEntry(_:transactionID:)``) the values it sets are, none of them decoded.
    enum ScannedChange {
        /// `id` inserted with `count` values; its value list (``decodeValueList(_:)``) at `values`.
        case insert(id: ObjectID, count: Int, values: Range<Int>)
        /// `id` updated; one ``set(attribute:value:)`` per attribute change follows.
        case update(id: ObjectID)
        /// Attribute `attribute` of the updated object set to the value at `value`
        /// (``ValueCodec/decode(from:)``).
        case set(attribute: Int, value: Range<Int>)
        case delete(id: ObjectID)
        case link(relationship: UInt16, from: ObjectID, to: ObjectID)
        case unlink(relationship: UInt16, from: ObjectID, to: ObjectID)
    }

    /// Checks an entry exactly as ``decode(_:transactionID:)`` does — the checksum, the structure
    /// and every value, so it throws for exactly the entries `decode` refuses — without building
    /// it: no value, string or array is made. Each change is handed to `visit` as it is read
    /// (when it throws, what was visited is to be discarded). Returns the number of changes.
    /// The ranges it reports are offsets into the entry's plain form (``plainEntry(_:transactionID:)``):
    /// into `bytes` themselves for a plain entry, into its decompressed copy for a compressed one.
    ///
    /// `verify` reads the log this way (``InMemoryVerification/readLog(_:head:expanded:deliver:)``); a test
    /// and the `log-entry` fuzz target hold it to agree with `decode`.
    static func scan(_ bytes: UnsafeRawBufferPointer, transactionID tx: TransactionID,
                     visit: (ScannedChange) -> Void) throws -> Int {
        try read(bytes, tx) { r in
            _ = try r.u32()
            _ = try r.u64()
            try r.checkString()
            let m = try r.varint()
            guard m <= UInt64(r.remaining) else { throw DecodingError(offset: r.offset, reason: "metadata count \(m)") }
            for _ in 0..<m {
                try r.checkString()
                try r.checkString()
            }
            let n = try r.varint()
            guard n <= UInt64(r.remaining) else { throw DecodingError(offset: r.offset, reason: "change count \(n)") }
            for _ in 0..<n { try scanChange(&r, visit) }
            return Int(n)
        }
    }

    /// ``decodeValueList(_:)``'s checks, without the values; returns their count.
    private static func scanValueList(_ r: inout ByteReader) throws -> Int {
        let count = try r.varint()
        guard count <= UInt64(SchemaLimits.maxAttributesPerEntity) else {
            throw DecodingError(offset: r.offset, reason: "value count \(count)")
        }
        let present = try r.varint()
        guard present <= count else {
            throw DecodingError(offset: r.offset, reason: "present count \(present) > \(count)")
        }
        for _ in 0..<present {
            let i = try r.varint()
            guard i < count else { throw DecodingError(offset: r.offset, reason: "value index \(i) out of range") }
            try ValueCodec.check(from: &r)
        }
        return Int(count)
    }

    /// ``decodeChange(_:)``'s checks, reporting the change to `visit`.
    private static func scanChange(_ r: inout ByteReader, _ visit: (ScannedChange) -> Void) throws {
        let at = r.offset
        switch try r.u8() {
        case 1:
            let id = try readID(&r)
            let start = r.offset
            let count = try scanValueList(&r)
            visit(.insert(id: id, count: count, values: start..<r.offset))
        case 2:
            let id = try readID(&r)
            _ = try readPrevious(&r)
            let n = try r.varint()
            guard n <= UInt64(SchemaLimits.maxAttributesPerEntity) else {
                throw DecodingError(offset: r.offset, reason: "update count \(n)")
            }
            visit(.update(id: id))
            for _ in 0..<n {
                let at = r.offset
                let i = try r.varint()
                guard i < UInt64(SchemaLimits.maxAttributesPerEntity) else {
                    throw DecodingError(offset: at, reason: "attribute index \(i) out of range")
                }
                try ValueCodec.check(from: &r)
                let start = r.offset
                try ValueCodec.check(from: &r)
                visit(.set(attribute: Int(i), value: start..<r.offset))
            }
        case 3:
            let id = try readID(&r)
            _ = try readPrevious(&r)
            _ = try scanValueList(&r)
            visit(.delete(id: id))
        case 4: visit(.link(relationship: try r.u16(), from: try readID(&r), to: try readID(&r)))
        case 5: visit(.unlink(relationship: try r.u16(), from: try readID(&r), to: try readID(&r)))
        case let k: throw DecodingError(offset: at, reason: "unknown change kind \(k)")
        }
    }

}
