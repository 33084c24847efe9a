/// One change of the log as ``LogFold`` applies it: ids, the transaction, and where in the map
/// (or, for a compressed entry, in its decompressed copy) the values it sets are. ``InMemoryVerification/readLog(_:head:expanded:deliver:)`` makes these from each
/// entry as it checks it; the fold keeps the places, never decoded values.
///
/// An update becomes a ``Kind/version`` op followed by one ``Kind/set`` op per attribute it
/// changes; every transaction ends with an ``Kind/end`` op.
struct FoldOp: Sendable {
    enum Kind: UInt8, Sendable {
        /// `id` inserted with the value list at `address` (`count` values).
        case insert
        /// `id` updated in transaction `transaction` (its ``set`` ops follow).
        case version
        /// Attribute `count` of `id` set to the value at `address`.
        case set
        case delete
        /// The edge `relationship` from `id` to `other` added.
        case link
        case unlink
        /// Transaction `transaction`, of `count` changes, is complete.
        case end
    }

    var kind: Kind
    var relationship: UInt16 = 0
    var count = 0
    var id = ObjectID(high: 0, low: 0)
    var other = ObjectID(high: 0, low: 0)
    var transaction: UInt64
    /// `UnsafeRawPointer` bits of the bytes in the store's map: valid while the map lock is held
    /// shared without a break from when the op was made (so the map is not moved) and a snapshot
    /// at least as old as the one that read them is open (so LMDB reuses none of their pages).
    /// For a compressed entry, bits of its decompressed copy: valid while the
    /// ``InMemoryVerification/ExpandedEntries`` holding it lives.
    var address: UInt = 0
    var length = 0
}
