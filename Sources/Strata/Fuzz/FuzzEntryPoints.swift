/// Entry points for the libFuzzer targets of `Tools/Fuzz` and the reliability harness only
/// (`@_spi(Fuzz) import Strata`). They are not API: they expose the internal binary codecs of log
/// entries and state records so that arbitrary bytes can be fed to the decoders, and so that
/// round trips can be checked.
///
/// The decoders must never crash, trap or read out of bounds, whatever the bytes: they either
/// return a value or throw ``StrataError/corruptLogEntry(transaction:reason:)`` /
/// ``StrataError/corruptRecord(id:reason:)``.
///
/// ```swift
/// @_spi(Fuzz) import Strata
///
/// let body: [UInt8] = …                       // an entry without its checksum
/// let sealed = FuzzEntryPoints.sealLogEntry(body, transaction: 7)
/// if let entry = try? FuzzEntryPoints.decodeLogEntry(sealed, transaction: 7) {
///     let again = FuzzEntryPoints.encodeLogEntry(entry)   // the canonical bytes
/// }
/// ```
@_spi(Fuzz) public enum FuzzEntryPoints {
    /// The bytes of the CRC-32C that ends every stored log entry and record.
    public static let checksumBytes = 4

    /// Decodes `bytes` as the stored log entry of transaction `transaction` (checksum included,
    /// over the 8 big-endian key bytes of `transaction` followed by the body).
    ///
    /// - Throws: ``StrataError/corruptLogEntry(transaction:reason:)`` for anything that is not a
    ///   valid entry of that transaction.
    /// - Complexity: O(`bytes.count`).
    public static func decodeLogEntry(_ bytes: [UInt8], transaction: UInt64) throws -> LogEntry {
        try bytes.withUnsafeBytes { try LogEntryCodec.decode($0, transactionID: TransactionID(transaction)) }
    }

    /// Whether ``LogEntryCodec``'s scan (what `verify` reads the log with, decoding nothing)
    /// agrees with its decoder on `bytes` as the stored entry of `transaction`: both refuse it with
    /// `corruptLogEntry`, or both accept it and report the same changes (kinds, ids, attribute
    /// positions, and values equal to the decoder's when decoded from the places the scan gives,
    /// in the entry's plain form: a compressed entry decompressed).
    /// Nil when they agree, else what differs.
    public static func scanDisagreement(_ bytes: [UInt8], transaction: UInt64) -> String? {
        bytes.withUnsafeBytes { raw -> String? in
            let tx = TransactionID(transaction)
            var scanned: [LogEntryCodec.ScannedChange] = []
            let scanResult = Result { try LogEntryCodec.scan(raw, transactionID: tx) { scanned.append($0) } }
            let decodeResult = Result { try LogEntryCodec.decode(raw, transactionID: tx) }
            switch (scanResult, decodeResult) {
            case (.failure(let a), .failure(let b)):
                guard case StrataError.corruptLogEntry(let ta, _) = a, case StrataError.corruptLogEntry(let tb, _) = b,
                      ta == tx, tb == tx else {
                    return "unexpected errors: scan \(a), decode \(b)"
                }
                return nil
            case (.success, .failure(let e)): return "the scan accepts what the decoder refuses: \(e)"
            case (.failure(let e), .success): return "the scan refuses what the decoder accepts: \(e)"
            case (.success(let count), .success(let entry)):
                guard count == entry.changes.count else {
                    return "the scan counts \(count) changes, the decoder \(entry.changes.count)"
                }
                // The scan's places are in the entry's plain form (a compressed entry's is its
                // decompressed copy).
                guard let plain = try? LogEntryCodec.plainEntry(raw, transactionID: tx) else {
                    return "the decoder accepts an entry whose plain form cannot be made"
                }
                return plain.withUnsafeBytes { scanMatches(scanned, entry.changes, $0) }
            }
        }
    }

    /// Nil when `scanned` describes `changes`, its places decoding to the same values.
    private static func scanMatches(_ scanned: [LogEntryCodec.ScannedChange], _ changes: [LoggedChange],
                                    _ raw: UnsafeRawBufferPointer) -> String? {
        func encoded(_ values: [Value]) -> [UInt8] {
            var w = ByteWriter()
            for v in values { ValueCodec.encode(v, into: &w) }
            return w.bytes
        }
        func decodedList(_ span: Range<Int>) -> [Value]? {
            guard span.lowerBound >= 0, span.upperBound <= raw.count else { return nil }
            var r = ByteReader(UnsafeRawBufferPointer(rebasing: raw[span]))
            guard let v = try? LogEntryCodec.decodeValueList(&r), r.isAtEnd else { return nil }
            return v
        }
        func decodedValue(_ span: Range<Int>) -> Value? {
            guard span.lowerBound >= 0, span.upperBound <= raw.count else { return nil }
            var r = ByteReader(UnsafeRawBufferPointer(rebasing: raw[span]))
            guard let v = try? ValueCodec.decode(from: &r), r.isAtEnd else { return nil }
            return v
        }
        var i = 0
        for (n, change) in changes.enumerated() {
            func next() -> LogEntryCodec.ScannedChange? {
                defer { i += 1 }
                return i < scanned.count ? scanned[i] : nil
            }
            let mismatch = "change \(n) (\(change)) differs from the scan"
            switch change {
            case .insert(let id, let values):
                guard case .insert(id, values.count, let span)? = next(), let v = decodedList(span),
                      encoded(v) == encoded(values) else { return mismatch }
            case .update(let id, let attributeChanges, _):
                guard case .update(id)? = next() else { return mismatch }
                for c in attributeChanges {
                    guard case .set(c.attribute, let span)? = next(), let v = decodedValue(span),
                          encoded([v]) == encoded([c.new]) else { return mismatch }
                }
            case .delete(let id, _, _):
                guard case .delete(id)? = next() else { return mismatch }
            case .link(let r, let a, let b):
                guard case .link(r, a, b)? = next() else { return mismatch }
            case .unlink(let r, let a, let b):
                guard case .unlink(r, a, b)? = next() else { return mismatch }
            }
        }
        return i == scanned.count ? nil : "the scan reports \(scanned.count - i) more changes"
    }

    /// Decodes `bytes` as the stored record of object `id` with `schema` (checksum included, over
    /// the 16 key bytes of `id` followed by the body).
    ///
    /// - Throws: ``StrataError/corruptRecord(id:reason:)`` for anything that is not a valid record
    ///   of that object.
    /// - Complexity: O(`bytes.count`).
    public static func decodeRecord(_ bytes: [UInt8], id: ObjectID, schema: Schema) throws -> Record {
        try bytes.withUnsafeBytes { try RecordCodec.decode($0, id: id, schema: schema) }
    }

    /// The stored bytes of `entry` (what the writer puts in the log), checksum included.
    public static func encodeLogEntry(_ entry: LogEntry) -> [UInt8] {
        LogEntryCodec.encode(entry)
    }

    /// The stored bytes of `record` (what the writer puts in the objects database), checksum included.
    public static func encodeRecord(_ record: Record) -> [UInt8] {
        RecordCodec.encode(record)
    }

    /// `body` followed by the checksum a log entry of `transaction` with that body carries, so a
    /// fuzz target can reach the decoder past the checksum with mutated bodies.
    public static func sealLogEntry(_ body: [UInt8], transaction: UInt64) -> [UInt8] {
        var w = ByteWriter(capacity: body.count + checksumBytes)
        w.append(body)
        w.u32(LogEntryCodec.checksum(TransactionID(transaction), body))
        return w.bytes
    }

    /// `body` followed by the checksum the record of `id` with that body carries.
    public static func sealRecord(_ body: [UInt8], id: ObjectID) -> [UInt8] {
        var w = ByteWriter(capacity: body.count + checksumBytes)
        w.append(body)
        w.u32(RecordCodec.checksum(id: id, body: body))
        return w.bytes
    }

    /// The 16 key bytes of `id` (big-endian high, then low), as stored in LMDB.
    public static func keyBytes(of id: ObjectID) -> [UInt8] { id.keyBytes }

    /// The object id whose key bytes are the first 16 of `bytes`; nil when there are fewer.
    public static func objectID(keyBytes bytes: [UInt8]) -> ObjectID? {
        guard bytes.count >= 16 else { return nil }
        return bytes.withUnsafeBytes { ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: $0[0..<16])) }
    }
}
