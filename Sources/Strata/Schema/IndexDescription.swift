/// A secondary index or unique constraint over one or more attributes.
public struct IndexDescription: Sendable, Equatable {
    /// Attribute positions, in key order.
    public let attributes: [Int]
    /// Whether this is a unique constraint (no two objects share the key) rather than a plain index.
    public let isUnique: Bool
    /// Stable tag used as the key prefix: entity tag in the high byte, position + 1 in the low byte.
    public let tag: UInt16
}
