/// Object id → slot in ``LogFold``'s arrays: open addressing with linear probing, kept at most
/// half full. The fold looks an id up for every change; a `Dictionary` would hash the 16 bytes
/// with SipHash each time (a sixth of the fold in a profile).
struct SlotTable {
    /// Slot + 1 per bucket; 0 is an empty bucket.
    private var buckets: [Int32]
    private var mask: Int
    private var count = 0

    init(capacity: Int) {
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        buckets = Array(repeating: 0, count: size)
        mask = size - 1
    }

    @inline(__always)
    private static func bucket(_ id: ObjectID, mask: Int) -> Int {
        // Ids differ mostly in their low bits (time, counter): mix both words into every bit.
        var x = (id.high &* 0x9E37_79B9_7F4A_7C15) ^ id.low
        x ^= x >> 32
        x = x &* 0xD6E8_FEB8_6659_FD93
        x ^= x >> 32
        return Int(truncatingIfNeeded: x) & mask
    }

    /// The slot of `id`, whose id is `ids[slot]`.
    @inline(__always)
    func find(_ id: ObjectID, in ids: [ObjectID]) -> Int? {
        var b = Self.bucket(id, mask: mask)
        while true {
            let entry = Int(buckets[b])
            if entry == 0 { return nil }
            if ids[entry - 1] == id { return entry - 1 }
            b = (b + 1) & mask
        }
    }

    /// Records that `ids[slot]` (not yet in the table) lives at `slot`.
    mutating func insert(slot: Int, of ids: [ObjectID]) {
        precondition(slot < Int(Int32.max), "more than \(Int32.max) objects in one verification")
        if (count + 1) * 2 > buckets.count { grow(ids) }
        place(slot, ids)
        count += 1
    }

    private mutating func place(_ slot: Int, _ ids: [ObjectID]) {
        var b = Self.bucket(ids[slot], mask: mask)
        while buckets[b] != 0 { b = (b + 1) & mask }
        buckets[b] = Int32(slot + 1)
    }

    private mutating func grow(_ ids: [ObjectID]) {
        let old = buckets
        buckets = Array(repeating: 0, count: old.count * 2)
        mask = buckets.count - 1
        for entry in old where entry != 0 { place(Int(entry) - 1, ids) }
    }
}
