/// Reads through a base (one LMDB transaction) with overlays merged over it, root-most first.
struct MergedSource: ObjectSource {
    let base: ReadView
    let overlays: [Overlay]

    var schema: Schema { base.schema }

    /// The state with the first `depth` overlays merged over the base.
    struct Level: LayeredState {
        let source: MergedSource
        let depth: Int

        private var layer: Overlay { source.overlays[depth - 1] }
        private var below: Level { Level(source: source, depth: depth - 1) }

        func record(_ id: ObjectID) throws -> Record? {
            // The newest layer holding the id decides; no recursion for the common miss.
            var i = depth
            while i > 0 {
                i -= 1
                if let entry = source.overlays[i].records[id] { return entry }
            }
            return try source.base.record(id)
        }

        func exists(_ id: ObjectID) throws -> Bool {
            var i = depth
            while i > 0 {
                i -= 1
                if let entry = source.overlays[i].records[id] { return entry != nil }
            }
            let objects = source.base.env[.objects]
            return try id.withKeyBytes { try source.base.txn.withValue(objects, key: $0) { _ in true } } ?? false
        }

        func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID] {
            depth == 0 ? try source.base.targets(tag, from: id)
                : try layer.targets(tag, from: id, schema: source.schema, over: below)
        }

        func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool {
            guard depth > 0 else {
                return try source.base.txn.contains(source.base.env[.links], key: Layout.linkKey(tag, from, to))
            }
            return try layer.linked(tag, from: from, to: to, schema: source.schema, over: below)
        }

        func uniqueOwner(_ key: ByteKey, excluding: Set<ObjectID>) throws -> ObjectID? {
            guard depth > 0 else {
                return try source.base.uniqueOwner(key.bytes).flatMap { excluding.contains($0) ? nil : $0 }
            }
            return try layer.uniqueOwner(key, over: below, excluding: excluding)
        }

        func objectCount(_ entity: EntityDescription) throws -> Int {
            guard depth > 0 else { return try source.base.objectCount(entity) }
            let lower = try below.objectCount(entity)
            let o = layer
            if let b = o.countBasis, b == below.basis { return lower + (o.countDelta[entity.tag] ?? 0) }
            return lower + (try o.computedCountDelta(entity.tag, over: below))
        }

        var basis: Overlay.CountBasis {
            Overlay.CountBasis(base: source.base.stateID,
                               lower: source.overlays.prefix(depth).map(\.revision))
        }
    }

    /// The whole merged state.
    var top: Level { Level(source: self, depth: overlays.count) }

    func record(_ id: ObjectID) throws -> Record? { try top.record(id) }
    func exists(_ id: ObjectID) throws -> Bool { try top.exists(id) }
    func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID] { try top.targets(tag, from: id) }
    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool { try top.linked(tag, from: from, to: to) }
    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? { try top.uniqueOwner(ByteKey(key), excluding: []) }
    /// ``uniqueOwner(_:)-([UInt8])`` with the key already hashed: one hash for the whole chain.
    func uniqueOwner(_ key: ByteKey) throws -> ObjectID? { try top.uniqueOwner(key, excluding: []) }
    func objectCount(_ entity: EntityDescription) throws -> Int { try top.objectCount(entity) }

    /// The base's candidates with dirty objects taken out, merged in id order with the dirty
    /// objects' current records (deleted ones skipped).
    func candidates(_ e: EntityDescription, _ predicate: Filter, _ visit: (Record) throws -> Bool) throws {
        var dirtySet = Set<ObjectID>()
        for o in overlays {
            for id in o.records.keys where id.entityTag == e.tag { dirtySet.insert(id) }
            if let linked = o.dirty[e.tag] { dirtySet.formUnion(linked) }
        }
        // Plans through relationships read other entities' objects as the base has them; with
        // changes pending in any layer, those may differ here.
        let through = overlays.allSatisfy(\.isEmpty)
        if dirtySet.isEmpty { return try base.candidates(e, predicate, throughRelationships: through, visit) }
        let dirty = dirtySet.sorted()
        var next = 0
        var stopped = false
        // Visits dirty objects with ids below `limit` (all when nil); false when the visitor stopped.
        func drain(below limit: ObjectID?) throws -> Bool {
            while next < dirty.count, limit.map({ dirty[next] < $0 }) ?? true {
                let id = dirty[next]
                next += 1
                if let r = try record(id), try !visit(r) { return false }
            }
            return true
        }
        try base.candidates(e, predicate, throughRelationships: through) { r in
            if try !drain(below: r.id) {
                stopped = true
                return false
            }
            if dirtySet.contains(r.id) { return true }
            if try !visit(r) {
                stopped = true
                return false
            }
            return true
        }
        if !stopped { _ = try drain(below: nil) }
    }
}
