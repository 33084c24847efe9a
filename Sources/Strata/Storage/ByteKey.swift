/// Bytes as a dictionary key, hashed once, in one pass, when the key is made (`[UInt8]`'s own
/// `Hashable` feeds the hasher one element at a time, which dominated unique-key lookups in child
/// contexts). A dictionary that grows rehashes its keys: from the stored hash that costs a
/// ``KeyedHash`` mix, not a second pass over the bytes.
struct ByteKey: Hashable, Sendable {
    let bytes: [UInt8]
    /// `Hasher`'s (SipHash, randomly seeded) hash of `bytes`.
    private let digest: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        var hasher = Hasher()
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        digest = hasher.finalize()
    }

    static func == (a: ByteKey, b: ByteKey) -> Bool { a.digest == b.digest && a.bytes == b.bytes }

    func hash(into hasher: inout Hasher) { hasher.combine(digest) }

    /// What `Dictionary` and `Set` use: the stored digest mixed with the table's seed.
    func _rawHashValue(seed: Int) -> Int { KeyedHash.hash(UInt64(bitPattern: Int64(digest)), 0, seed: seed) }
}
