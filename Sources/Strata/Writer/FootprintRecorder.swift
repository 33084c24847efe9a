/// The hashes a replica's group of saves touches while it is validated and applied (see
/// ``ReplicationFootprint``). One builder spans the whole group, the saves that fail included:
/// their refusals were judged on what they read too.
///
/// Used only on the writer's queue, by one group at a time.
final class FootprintBuilder {
    private var keys: Set<Int64> = []
    /// More keys than ``ReplicationFootprint/maxKeys``: the group has no footprint.
    private(set) var overflowed = false

    /// The group's footprint, or nil when it touched too much to have one.
    var footprint: ReplicationFootprint? {
        overflowed ? nil : ReplicationFootprint(keys: keys)
    }

    func add(_ id: ObjectID) {
        insert(id.keyBytes.withUnsafeBytes { Self.hash(kind: 1, $0) })
    }

    func add(uniqueKey key: [UInt8]) {
        insert(key.withUnsafeBytes { Self.hash(kind: 2, $0) })
    }

    private func insert(_ hash: Int64) {
        guard !overflowed else { return }
        keys.insert(hash)
        if keys.count > ReplicationFootprint.maxKeys {
            overflowed = true
            keys = []
        }
    }

    /// FNV-1a (64 bits) over the kind byte and `bytes`, then the splitmix64 finalizer (FNV's
    /// low bits mix poorly on their own). Stable: the same on every machine and every run.
    static func hash(kind: UInt8, _ bytes: UnsafeRawBufferPointer) -> Int64 {
        var f = FNV1a()
        f.add(kind)
        f.add(bytes)
        var h = f.value
        h ^= h >> 30
        h = h &* 0xBF58_476D_1CE4_E5B9
        h ^= h >> 27
        h = h &* 0x94D0_49BB_1331_11EB
        h ^= h >> 31
        return Int64(bitPattern: h)
    }
}

/// A ``StateStore`` that notes in a ``FootprintBuilder`` every object and unique key the saves
/// read or write through it, and otherwise does what `base` does.
///
/// Reads: an object read or checked (by id), the edges of an object (its id: an edge added or
/// removed by another machine names both its ends), one edge (both ends), a unique key's owner
/// (the key). Writes: the object a change is about, both ends of an edge, and the unique keys
/// an object holds before and after the change (those it takes and those it gives up).
struct FootprintRecorder<Base: StateStore>: StateStore {
    var base: Base
    let footprint: FootprintBuilder

    var schema: Schema { base.schema }

    func record(_ id: ObjectID) throws -> Record? {
        footprint.add(id)
        return try base.record(id)
    }

    func exists(_ id: ObjectID) throws -> Bool {
        footprint.add(id)
        return try base.exists(id)
    }

    func targets(_ tag: UInt16, from: ObjectID) throws -> [ObjectID] {
        footprint.add(from)
        return try base.targets(tag, from: from)
    }

    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool {
        footprint.add(from)
        footprint.add(to)
        return try base.linked(tag, from: from, to: to)
    }

    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? {
        footprint.add(uniqueKey: key)
        return try base.uniqueOwner(key)
    }

    mutating func apply(_ change: LoggedChange) throws {
        switch change {
        case .insert(let id, let values):
            footprint.add(id)
            try addUniqueKeys(values, of: id)
        case .update(let id, let changes, _):
            footprint.add(id)
            if let before = try base.record(id) {
                try addUniqueKeys(before.values, of: id)
                var after = before.values
                for c in changes where after.indices.contains(c.attribute) { after[c.attribute] = c.new }
                try addUniqueKeys(after, of: id)
            }
        case .delete(let id, let values, _):
            footprint.add(id)
            try addUniqueKeys(values, of: id)
        case .link(_, let a, let b), .unlink(_, let a, let b):
            footprint.add(a)
            footprint.add(b)
        }
        try base.apply(change)
    }

    private func addUniqueKeys(_ values: [Value], of id: ObjectID) throws {
        guard let entity = schema.entity(tag: id.entityTag) else { return }
        for unique in entity.uniques {
            if let key = try Layout.uniqueKey(unique, record: values, entity: entity, id: id) {
                footprint.add(uniqueKey: key)
            }
        }
    }

    mutating func flushCounts() throws { try base.flushCounts() }

    var defersUniqueClashes: Bool {
        get { base.defersUniqueClashes }
        set { base.defersUniqueClashes = newValue }
    }

    mutating func takeDeferredUniqueKeys() throws { try base.takeDeferredUniqueKeys() }
}
