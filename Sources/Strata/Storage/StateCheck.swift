/// Checks of the state databases that need no log: what a compaction must not carry into a new
/// generation (whose log no longer holds what the entries were made from), and what `verify` of a
/// compacted store checks beside the log after the horizon.
///
/// - `objects`: every key 16 bytes, every record passing its checksum and naming its own entity.
/// - `links`: every key 34 bytes (relationship tag, from id, to id) of a relationship of the
///   schema, its ids of the relationship's two entities, and every entry's inverse present: the
///   two directions of every edge balance in an order-independent sum of their hashes, so that a
///   damaged entry (a flipped bit in an id) shows without a lookup per entry. Only when they do
///   not balance is the links database read again to name an entry without its inverse.
struct StateCheck {
    let schema: Schema
    /// The signed sum of the edges' hashes: each edge is added from one direction and taken away
    /// from the other, so a sound links database leaves zero.
    private var balance: UInt64 = 0
    private(set) var links = 0

    /// Per relationship tag: its inverse's tag, its two entities' tags and its name (read once:
    /// a links database holds hundreds of thousands of entries).
    private let relationships: [UInt16: (inverse: UInt16, source: UInt16, destination: UInt16, name: String)]

    init(schema: Schema) {
        self.schema = schema
        var relationships: [UInt16: (inverse: UInt16, source: UInt16, destination: UInt16, name: String)] = [:]
        for e in schema.entities {
            for r in e.relationships {
                guard let inverse = schema.inverseTag(of: r.tag), let d = schema.entity(named: r.destination) else { continue }
                relationships[r.tag] = (inverse, e.tag, d.tag, "\(e.name).\(r.name)")
            }
        }
        self.relationships = relationships
    }

    /// Checks one entry of `objects`. Throws ``StrataError/corruptRecord(id:reason:)``.
    func object(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
        guard key.count == 16 else {
            throw StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                            reason: "objects: a key of \(key.count) bytes (16 expected)")
        }
        let id = ObjectID(keyBytes: key)
        _ = try RecordCodec.checkedBody(value, id: id)
        guard schema.entity(tag: id.entityTag) != nil else {
            throw StrataError.corruptRecord(id: id, reason: "entity tag \(id.entityTag) is not the schema's")
        }
    }

    /// The edge of a links key and its direction's sign in ``balance``, or a reason it is damaged.
    private func edge(_ key: UnsafeRawBufferPointer) -> Result<(from: ObjectID, hash: UInt64, sign: Int), LinkDamage> {
        guard key.count == 34 else {
            return .failure(LinkDamage(from: nil, reason: "a key of \(key.count) bytes (34 expected)"))
        }
        let tag = UInt16(key[0]) << 8 | UInt16(key[1])
        let from = ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: key[2..<18]))
        let to = ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: key[18..<34]))
        guard let r = relationships[tag] else {
            return .failure(LinkDamage(from: from, reason: "relationship tag \(tag) is not the schema's"))
        }
        let inverse = r.inverse
        guard from.entityTag == r.source, to.entityTag == r.destination else {
            return .failure(LinkDamage(from: from, reason: "\(r.name) from \(from) to \(to): an id of another entity"))
        }
        // The edge named the same way from both ends: by its lower-tagged direction (by the lower
        // id for a relationship that is its own inverse; an object linked to itself through one
        // is one entry, and left out).
        let forward = tag < inverse || (tag == inverse && from < to)
        if tag == inverse && from == to { return .success((from, 0, 0)) }
        let (t, a, b) = forward ? (tag, from, to) : (inverse, to, from)
        @inline(__always) func mix(_ h: UInt64, _ word: UInt64) -> UInt64 {
            let m = (h ^ word) &* 0xBF58_476D_1CE4_E5B9
            return m ^ (m >> 31)
        }
        let h = mix(mix(mix(mix(UInt64(t) &* 0x9E37_79B9_7F4A_7C15, a.high), a.low), b.high), b.low)
        return .success((from, h, forward ? 1 : -1))
    }

    struct LinkDamage: Error {
        let from: ObjectID?
        let reason: String
    }

    /// Checks one entry of `links` and adds its edge to the balance. Throws
    /// ``StrataError/corruptRecord(id:reason:)``.
    mutating func link(key: UnsafeRawBufferPointer) throws {
        switch edge(key) {
        case .failure(let damage):
            throw StrataError.corruptRecord(id: damage.from ?? ObjectID(high: 0, low: 0), reason: "links: \(damage.reason)")
        case .success(let e):
            balance = e.sign >= 0 ? balance &+ e.hash : balance &- e.hash
            links += 1
        }
    }

    /// Throws ``StrataError/corruptRecord(id:reason:)`` naming an entry of `links` (read again
    /// through `scan`) whose inverse is missing, when the entries seen do not balance.
    func finishLinks(rescan scan: ((UnsafeRawBufferPointer) -> Void) throws -> Void) throws {
        guard balance != 0 else { return }
        // Each edge's two entries cancel in a set; what is left has no partner.
        var unpaired: [UInt64: (from: ObjectID, key: [UInt8])] = [:]
        try scan { key in
            guard case .success(let e) = edge(key), e.sign != 0 else { return }
            if unpaired.removeValue(forKey: e.hash) == nil { unpaired[e.hash] = (e.from, Array(key)) }
        }
        guard let first = unpaired.values.min(by: { Layout.precedes($0.key, $1.key) }) else {
            throw StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                            reason: "links: the two directions of the edges do not match")
        }
        let tag = UInt16(first.key[0]) << 8 | UInt16(first.key[1])
        let to = first.key.withUnsafeBytes { ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: $0[18..<34])) }
        let name = relationships[tag]?.name ?? "relationship \(tag)"
        throw StrataError.corruptRecord(
            id: first.from, reason: "links: \(name) from \(first.from) to \(to) has no inverse entry" +
                (unpaired.count > 1 ? " (and \(unpaired.count - 1) more entries without theirs)" : ""))
    }
}
