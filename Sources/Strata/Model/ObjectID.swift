import Foundation

/// The permanent identity of an object, assigned at insert and never changed.
///
/// 128 bits: the entity's 16-bit tag, a 48-bit millisecond timestamp, then 64 bits that start
/// at a random 62-bit value at each new millisecond and are incremented within it (the two spare
/// bits leave room to count without overflow). Ids of one entity therefore sort by
/// creation time (inserts append to the B-tree) and are unique across processes without
/// coordination. There are no temporary ids: the id you get from `insert` is valid in every
/// context, every process and every later version of the store.
///
/// ```swift
/// let id = ObjectID.make(entityTag: 3)
/// print(id)                       // "0003018f6c1e2a7b5f3c9d0e4a1b2c3d"
/// ObjectID(string: id.description) == id   // true
/// ```
public struct ObjectID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Entity tag (16 bits) then milliseconds since 1970 (48 bits).
    public let high: UInt64
    /// Random start per millisecond, incremented within it.
    public let low: UInt64

    /// An id from its two halves (as read from storage or made by ``make(entityTag:)``).
    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The hash `Dictionary` and `Set` use (a ``KeyedHash`` of both halves, seeded per process
    /// and per table): an id is the key of most of Strata's hot dictionaries, and SipHash, the
    /// default, cost a third of a child context's insert. Equal ids hash equally; `hash(into:)`
    /// (used when an id is part of a larger key) is unchanged. Not for direct use.
    public func _rawHashValue(seed: Int) -> Int { KeyedHash.hash(high, low, seed: seed) }

    /// The tag of the entity this object belongs to.
    public var entityTag: UInt16 { UInt16(truncatingIfNeeded: high >> 48) }

    /// The creation time encoded in the id (millisecond precision).
    public var createdAt: Date { Date(timeIntervalSince1970: Double(high & 0xFFFF_FFFF_FFFF) / 1000) }

    /// Makes a new id for an object of the entity with `entityTag`.
    public static func make(entityTag: UInt16) -> ObjectID {
        let nowMs = UInt64(max(0, Date().timeIntervalSince1970 * 1000)) & 0xFFFF_FFFF_FFFF
        let (ms, low) = generator.withLock { state -> (UInt64, UInt64) in
            if nowMs > state.ms {
                state = (nowMs, UInt64.random(in: 0...(UInt64.max >> 2)))
            } else {
                state.low &+= 1
            }
            return state
        }
        return ObjectID(high: UInt64(entityTag) << 48 | ms, low: low)
    }

    private static let generator = Locked<(ms: UInt64, low: UInt64)>((0, 0))

    /// 32 lowercase hex digits.
    public var description: String {
        let h = String(high, radix: 16), l = String(low, radix: 16)
        return String(repeating: "0", count: 16 - h.count) + h + String(repeating: "0", count: 16 - l.count) + l
    }

    /// Parses 32 hex digits; nil for anything else.
    public init?(string: String) {
        // Read from the string's UTF-8 storage where it has one (a native string): an import
        // parses every id of its input here, and copying the bytes into an array and two
        // substrings for `UInt64(_:radix:)` was about a tenth of a CSV import's parsing.
        guard let id = string.utf8.withContiguousStorageIfAvailable(ObjectID.init(utf8:))
            ?? Array(string.utf8).withUnsafeBufferPointer(ObjectID.init(utf8:)) else { return nil }
        self = id
    }

    /// Parses 32 hex digits given as UTF-8 bytes; nil for anything else.
    init?(utf8 bytes: UnsafeBufferPointer<UInt8>) {
        guard let (h, l) = Self.hexHalves(bytes) else { return nil }
        self.init(high: h, low: l)
    }

    /// The two 64-bit halves of exactly 32 hexadecimal digits (either case), or nil.
    private static func hexHalves(_ b: UnsafeBufferPointer<UInt8>) -> (UInt64, UInt64)? {
        guard b.count == 32 else { return nil }
        var halves: (UInt64, UInt64) = (0, 0)
        for i in 0..<32 {
            let c = b[i]
            let digit: UInt8
            switch c {
            case 48...57: digit = c &- 48          // 0-9
            case 97...102: digit = c &- 87         // a-f
            case 65...70: digit = c &- 55          // A-F
            default: return nil
            }
            if i < 16 { halves.0 = halves.0 << 4 | UInt64(digit) } else { halves.1 = halves.1 << 4 | UInt64(digit) }
        }
        return halves
    }

    /// Ids order by their 128 bits: by entity tag, then creation time, then the counter.
    public static func < (a: ObjectID, b: ObjectID) -> Bool { (a.high, a.low) < (b.high, b.low) }

    /// The 16 big-endian key bytes (the order of the bytes is the order of the ids).
    var keyBytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        appendKeyBytes(to: &bytes)
        return bytes
    }

    /// Calls `body` with the 16 key bytes on the stack (a point read needs no array).
    @inline(__always)
    func withKeyBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var key = (high.bigEndian, low.bigEndian)
        return try withUnsafeBytes(of: &key) { try body($0) }
    }

    /// Appends the 16 key bytes (hot path: index and link keys are built around ids).
    @inline(__always)
    func appendKeyBytes(to bytes: inout [UInt8]) {
        withUnsafeBytes(of: high.bigEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: low.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// An id read from the store where one must be: exactly 16 bytes (a `uniques` value, an
    /// object's key), or the last 16 bytes of a key (`links`, `indexes`), checked first. A
    /// corrupt entry is ``StrataError/corruptRecord(id:reason:)`` (naming `owner` when known),
    /// never a trap.
    static func stored(_ b: UnsafeRawBufferPointer, exactly: Bool = true, in database: String,
                       owner: ObjectID? = nil) throws -> ObjectID {
        guard exactly ? b.count == 16 : b.count >= 16 else {
            throw StrataError.corruptRecord(id: owner ?? ObjectID(high: 0, low: 0),
                                            reason: "\(database): \(b.count) bytes where an object id's 16 are stored")
        }
        return ObjectID(keyBytes: exactly ? b : UnsafeRawBufferPointer(rebasing: b[(b.count - 16)...]))
    }

    init(keyBytes b: UnsafeRawBufferPointer) {
        precondition(b.count >= 16, "object id needs 16 bytes")
        var r = ByteReader(b)
        // Cannot fail: 16 bytes were checked above.
        high = (try? r.u64()) ?? 0
        low = (try? r.u64()) ?? 0
    }
}
