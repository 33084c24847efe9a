/// A secondary index or unique constraint over one or more attributes.
public struct IndexDescription: Sendable, Equatable {
    /// Attribute positions, in key order.
    public let attributes: [Int]
    /// Whether this is a unique constraint (no two objects share the key) rather than a plain index.
    public let isUnique: Bool
    /// Stable tag used as the key prefix: entity tag in the high byte, position + 1 in the low byte.
    public let tag: UInt16
}

extension IndexDescription {
    /// The key of a unique constraint as the store writes it for an object with `values` (one
    /// per attribute of the entity): the constraint's tag, then each of its attributes' sortable
    /// encoding; nil when one of them is null (nulls never clash, as in SQL). Its size is not
    /// checked here: the store refuses one over LMDB's key limit.
    func uniqueKeyBytes(_ values: [Value]) -> [UInt8]? { keyBytes { values[attributes[$0]] } }

    /// ``uniqueKeyBytes(_:)`` from the key's own values, one per attribute of the constraint in
    /// key order (a reference by unique key carries just those): nil when one is null or missing.
    func uniqueKeyBytes(keyValues: [Value]) -> [UInt8]? {
        guard keyValues.count >= attributes.count else { return nil }
        return keyBytes { keyValues[$0] }
    }

    /// Whether the key of this constraint for `values` (one per attribute of the entity) may be
    /// longer than `limit`: false when an upper bound of its length
    /// (``SortableEncoding/sizeBound(_:)`` of each value, after the tag) is within it, so that
    /// no key is built just to be measured, or when a value is null (there is no key).
    func uniqueKeyMayBeLonger(than limit: Int, _ values: [Value]) -> Bool {
        var bound = 2
        for a in attributes {
            if values[a].isNull { return false }
            guard let n = SortableEncoding.sizeBound(values[a]) else { return true }
            bound += n
        }
        return bound > limit
    }

    /// The constraint's tag, then the sortable encoding of `value(i)` for each of its attributes'
    /// positions `i`; nil at the first null.
    private func keyBytes(_ value: (Int) -> Value) -> [UInt8]? {
        // One allocation for the usual key (tag and a few short values) instead of regrowing.
        var k: [UInt8] = []
        k.reserveCapacity(48)
        k.append(UInt8(tag >> 8))
        k.append(UInt8(tag & 0xff))
        for i in attributes.indices {
            let v = value(i)
            if v.isNull { return nil }
            SortableEncoding.encode(v, into: &k)
        }
        return k
    }
}
