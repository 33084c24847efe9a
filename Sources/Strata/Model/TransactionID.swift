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

    var keyBytes: [UInt8] {
        var w = ByteWriter(capacity: 8)
        w.u64(rawValue)
        return w.bytes
    }
}
