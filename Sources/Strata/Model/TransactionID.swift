/// The id of a committed transaction: its position in the log, starting at 1, gap-free.
public struct TransactionID: Hashable, Comparable, Sendable, CustomStringConvertible, Codable {
    /// The transaction's position in the log (0: none).
    public let rawValue: UInt64
    /// The transaction with id `rawValue`.
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    /// "No transaction yet": the state of an empty store.
    public static let zero = TransactionID(0)
    /// Earlier transactions order first.
    public static func < (a: TransactionID, b: TransactionID) -> Bool { a.rawValue < b.rawValue }
    /// The id in decimal.
    public var description: String { String(rawValue) }
    /// The id that follows this one.
    public var next: TransactionID { TransactionID(rawValue + 1) }
    /// The largest id a store holds: 2^63 − 2, so that every id and the one after it fit a signed
    /// 64-bit integer (JSON output, PostgreSQL's `bigint`). A larger id read from a store is
    /// damage (``StrataError/corruptLogEntry(transaction:reason:)``), and a store whose log
    /// reached it takes no more saves.
    public static let largest = TransactionID(UInt64(Int64.max) - 1)

    var keyBytes: [UInt8] {
        var w = ByteWriter(capacity: 8)
        w.u64(rawValue)
        return w.bytes
    }
}
