/// Access paths: an index or unique range, a relationship's inverse edges, or a scan of the entity.
extension ReadView {
    private enum Path {
        case ids([ObjectID])
        case index(IndexDescription, low: Value?, high: Value?)
        case prefix(IndexDescription, String)
        case inverse(tag: UInt16, target: ObjectID)
        /// Through a relationship whose other side is selective: the objects of `destination` on
        /// `inner`'s path that match `inner`, then their edges back (`inverseTag`).
        indirect case via(inverseTag: UInt16, destination: EntityDescription, inner: Filter, innerPath: Path)
        case scan
    }

    /// Calls `visit` with every object that may match, in id order, until it returns false.
    /// `throughRelationships: false` keeps plans that read other entities' attributes (a filter
    /// through a relationship served from the other side): a child context's overlays may have
    /// changed those objects, which the state here does not show.
    func candidates(_ e: EntityDescription, _ predicate: Filter, _ visit: (Record) throws -> Bool) throws {
        try candidates(e, predicate, throughRelationships: true, visit)
    }

    /// ``candidates(_:_:_:)`` with plans through relationships allowed or not.
    func candidates(_ e: EntityDescription, _ predicate: Filter, throughRelationships: Bool,
                    _ visit: (Record) throws -> Bool) throws {
        guard let ids = try candidateIDs(e, predicate, throughRelationships: throughRelationships) else {
            try scanObjects(e, after: nil, visit)
            return
        }
        for id in ids {
            guard let r = try candidate(id, of: e) else { continue }
            if try !visit(r) { return }
        }
    }

    /// The ids ``candidates(_:_:_:)`` visits, in id order, when its plan is a list of ids (an
    /// index or unique range, inverse edges, `id in [...]`); nil when it scans every object of
    /// `e` (``scanObjects(_:after:_:)``). With ``candidate(_:of:)`` and ``scanObjects(_:after:_:)``
    /// it lets a long read visit the candidates a chunk per read of a pinned snapshot.
    func candidateIDs(_ e: EntityDescription, _ predicate: Filter,
                      throughRelationships: Bool = true) throws -> [ObjectID]? {
        let path = plan(e, predicate, throughRelationships: throughRelationships)
        if case .scan = path { return nil }
        return try ids(for: path)
    }

    /// The record of `id` as a candidate of `e`: nil when `id` names another entity's object
    /// (an id list may: `id in [...]`; they never match) or no object.
    func candidate(_ id: ObjectID, of e: EntityDescription) throws -> Record? {
        guard id.entityTag == e.tag else { return nil }
        return try record(id)
    }

    /// Calls `visit` with every object of `e` whose id follows `after` (every one when nil), in
    /// id order, until it returns false.
    func scanObjects(_ e: EntityDescription, after: ObjectID?, _ visit: (Record) throws -> Bool) throws {
        let start = after?.keyBytes
        var seeking = start != nil
        try txn.scan(env[.objects], from: start, prefix: Layout.entityPrefix(e.tag)) { key, value in
            if seeking, let start {
                if Value.compareBytes(key, start) <= 0 { return true }
                seeking = false
            }
            let id = try ObjectID.stored(key, in: "objects")
            return try visit(try RecordCodec.decode(value, id: id, schema: schema))
        }
    }

    /// Every object of `e` in id order, decoding only the attributes `only` marks (the others'
    /// bytes are checked, not decoded: no string is made for an attribute nobody reads).
    func scanAll(_ e: EntityDescription, only: [Bool], _ visit: (Record) throws -> Bool) throws {
        precondition(only.count == e.attributes.count, "one mark per attribute of \(e.name)")
        try txn.scan(env[.objects], prefix: Layout.entityPrefix(e.tag)) { key, value in
            try visit(try RecordCodec.decode(value, id: try ObjectID.stored(key, in: "objects"), schema: schema, only: only))
        }
    }

    /// The number of targets of to-many `tag` of every object of `e` that has any, from one pass
    /// over the relationship's edges (runs of one source in key order): no object is read.
    /// - Complexity: O(edges of the relationship).
    func targetCounts(_ e: EntityDescription, _ tag: UInt16) throws -> [(id: ObjectID, count: Int)]? {
        var counts: [(id: ObjectID, count: Int)] = []
        var current: ObjectID?
        var n = 0
        try txn.scan(env[.links], prefix: [UInt8(tag >> 8), UInt8(tag & 0xFF)]) { key, _ in
            guard key.count == 34 else {
                throw StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                                reason: "links key of \(key.count) bytes (expected 34)")
            }
            let from = try ObjectID.stored(UnsafeRawBufferPointer(rebasing: key[2..<18]), in: "links")
            if from != current {
                if let current { counts.append((current, n)) }
                current = from
                n = 0
            }
            n += 1
            return true
        }
        if let current { counts.append((current, n)) }
        return counts
    }

    /// How many objects hold each value of attribute `a`, from an index of `a` alone: runs of
    /// equal value bytes among its entries, each run's value read from one of its objects (one
    /// record per distinct value). From a unique constraint (which holds no null) the objects
    /// without a value are the rest of the entity's count. Nil without such an index, or for a
    /// string or bytes attribute with only a plain index, whose keys may be cut (two long values
    /// would share a run).
    /// - Complexity: O(objects) index entries, O(distinct values) records.
    func valueCounts(_ e: EntityDescription, _ a: Int) throws -> [(value: Value, count: Int)]? {
        let unique = e.uniques.first { $0.attributes == [a] }
        let type = e.attributes[a].type
        guard let index = unique ?? (type == .string || type == .bytes ? nil : e.indexes.first { $0.attributes == [a] })
        else { return nil }
        let db = index.isUnique ? env[.uniques] : env[.indexes]
        var runs: [(first: ObjectID, count: Int)] = []
        var current: [UInt8] = []
        try txn.scan(db, prefix: Layout.u16(index.tag)) { key, value in
            // A unique key is the value's bytes (the id is the entry's value); an index key ends
            // with the id.
            let end = index.isUnique ? key.count : key.count - 16
            guard end >= 2 else {
                throw StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                                reason: "\(index.isUnique ? "uniques" : "indexes") key of \(key.count) bytes")
            }
            let bytes = UnsafeRawBufferPointer(rebasing: key[2..<end])
            if let last = runs.indices.last, bytes.elementsEqual(current) {
                runs[last].count += 1
                return true
            }
            current = Array(bytes)
            let id = index.isUnique ? try ObjectID.stored(value, in: "uniques")
                                    : try ObjectID.stored(UnsafeRawBufferPointer(rebasing: key[end...]), in: "indexes")
            runs.append((id, 1))
            return true
        }
        var counts: [(value: Value, count: Int)] = []
        var total = 0
        for run in runs {
            guard let r = try record(run.first) else {
                throw StrataError.corruptRecord(id: run.first, reason: "an index entry names no object")
            }
            counts.append((r.values[a], run.count))
            total += run.count
        }
        if index.isUnique {
            let none = try objectCount(e) - total
            if none > 0 { counts.insert((.null, none), at: 0) }
        }
        return counts
    }

    private func plan(_ e: EntityDescription, _ predicate: Filter, throughRelationships: Bool) -> Path {
        rankedPlan(e, predicate, throughRelationships: throughRelationships)?.path ?? .scan
    }

    /// The plan and its rank (lower is preferred); nil for a scan.
    private func rankedPlan(_ e: EntityDescription, _ predicate: Filter,
                            throughRelationships: Bool) -> (rank: Int, path: Path)? {
        // Nested `and`s flattened (`--where A --where "B and C"` is `and([A, and([B, C])])`):
        // every conjunct is a candidate for an index.
        func flattened(_ f: Filter) -> [Filter] {
            if case .and(let list) = f { return list.flatMap(flattened) }
            return [f]
        }
        let conjuncts = flattened(predicate)
        var best: (rank: Int, path: Path)?
        func offer(_ rank: Int, _ path: Path) {
            if best == nil || rank < best!.rank { best = (rank, path) }
        }
        for c in conjuncts {
            switch c {
            case .idIn(let ids):
                offer(0, .ids(ids.sorted()))
            case .compare(let a, let op, let v) where op != .notEqual:
                // `<` and `<=` have no lower bound, so they also match nulls.
                let nullable = v.isNull || op == .less || op == .lessOrEqual
                guard let index = leadingIndex(e, a, matchesNull: nullable) else { continue }
                switch op {
                case .equal:
                    offer(index.isUnique && index.attributes.count == 1 ? 1 : 2, .index(index, low: v, high: v))
                case .less, .lessOrEqual: offer(4, .index(index, low: nil, high: v))
                default: offer(4, .index(index, low: v, high: nil))
                }
            case .between(let a, let lo, let hi):
                if let index = leadingIndex(e, a, matchesNull: lo.isNull) { offer(4, .index(index, low: lo, high: hi)) }
            case .isIn(let a, let values):
                if let index = leadingIndex(e, a, matchesNull: values.contains(.null)), values.count <= 64,
                   let lo = values.min(), let hi = values.max() {
                    offer(3, .index(index, low: lo, high: hi))
                }
            case .string(let a, .hasPrefix, let s, caseInsensitive: false):
                if let index = leadingIndex(e, a, matchesNull: false) { offer(4, .prefix(index, s)) }
            case .related(let tag, let target?):
                if let r = schema.relationship(tag: tag) {
                    offer(2, .inverse(tag: schema.inverse(of: r).tag, target: target))
                }
            case .through(let tag, let inner), .any(let tag, let inner):
                // `depends.name == 'libc6'`: the few packages named so, then who depends on them,
                // instead of every package's dependencies. Only where the other side has a plan
                // of its own (an index, a unique key, ids, edges), ranked one place after that
                // plan (the edges back are one more read): through a unique `==` it ties with an
                // `==` on an index here, through a range or a prefix it comes after those here.
                guard throughRelationships, let r = schema.relationship(tag: tag),
                      let destination = schema.entity(named: r.destination),
                      let innerPlan = rankedPlan(destination, inner, throughRelationships: true) else { continue }
                offer(innerPlan.rank + 1, .via(inverseTag: schema.inverse(of: r).tag, destination: destination,
                                               inner: inner, innerPath: innerPlan.path))
            default:
                continue
            }
        }
        return best
    }

    /// How many objects of `e` match `predicate`, when its plan answers it exactly without reading
    /// the objects: the edges back from a to-one's target (`album == X`), a filter through a
    /// relationship served from the other side (`depends.name == 'libc6'`), or a closed range of
    /// a one-attribute index on a type whose index keys hold the whole value (not strings or
    /// bytes, which an index may cut). Nil otherwise: the objects are read.
    /// - Complexity: O(ids the plan yields), with no record decoded (but the few of the other
    ///   side a path through a relationship reads).
    func exactCount(_ e: EntityDescription, _ predicate: Filter) throws -> Int? {
        switch predicate {
        case .related(let tag, let target?):
            guard let r = e.relationships.first(where: { $0.tag == tag }), !r.isToMany else { return nil }
            return try targets(schema.inverse(of: r).tag, from: target).count
        case .through, .any:
            let path = plan(e, predicate, throughRelationships: true)
            guard case .via(let inverseTag, let destination, let inner, let innerPath) = path else { return nil }
            let ends = try ids(for: innerPath)
            if ends.count == 1 {
                // One object on the other side (a unique key): its edges back, each a distinct object.
                guard let r = try candidate(ends[0], of: destination), try matches(inner, r) else { return 0 }
                return try targets(inverseTag, from: ends[0]).count
            }
            return try ids(for: path).count
        case .compare(let a, .equal, _), .compare(let a, .lessOrEqual, _), .compare(let a, .greaterOrEqual, _),
             .between(let a, _, _):
            guard e.attributes[a].type != .string, e.attributes[a].type != .bytes else { return nil }
            let path = plan(e, predicate, throughRelationships: true)
            guard case .index(let index, let low, let high) = path, index.attributes == [a] else { return nil }
            // One entry per object in a one-attribute index: the entries in range are the count.
            return try rangeIDs(index, low: low, high: high, counting: true).count
        default:
            return nil
        }
    }

    /// An index or unique constraint whose first attribute is `a` (uniques first: they are exact).
    /// Unique constraints hold no entry for a null key (nulls never clash), so when the condition
    /// can match a null value only a plain index, which stores nulls, may serve it.
    private func leadingIndex(_ e: EntityDescription, _ a: Int, matchesNull: Bool) -> IndexDescription? {
        let mayBeNull = matchesNull && e.attributes[a].isOptional
        // A unique constraint holds an entry only for an object with a value for every one of
        // its attributes: it finds every match only when the filter cannot match a null `a` and
        // its other attributes are required (an object with a null one has no entry at all).
        let unique = mayBeNull ? nil : e.uniques.first { u in
            u.attributes.first == a && u.attributes.dropFirst().allSatisfy { !e.attributes[$0].isOptional }
        }
        return unique ?? e.indexes.first { $0.attributes.first == a }
    }

    private func ids(for path: Path) throws -> [ObjectID] {
        switch path {
        case .ids(let ids): return ids
        case .scan: return []
        case .inverse(let tag, let target): return try targets(tag, from: target)
        case .via(let inverseTag, let destination, let inner, let innerPath):
            var sources = Set<ObjectID>()
            for d in try ids(for: innerPath) {
                guard let r = try candidate(d, of: destination), try matches(inner, r) else { continue }
                sources.formUnion(try targets(inverseTag, from: d))
            }
            return sources.sorted()
        case .index(let index, let low, let high):
            return try rangeIDs(index, low: low, high: high, counting: false).ids
        case .prefix(let index, let text):
            var p = Layout.u16(index.tag) + [0x01]
            let budget = index.isUnique ? Int.max : Layout.componentBudget(index)
            for b in text.utf8.prefix(budget) {
                p.append(b)
                if b == 0 { p.append(0xFF) }
            }
            return try rangeIDs(index, start: p, stop: nil, prefix: p)
        }
    }

    /// The ids of the entries of `index` from `low` to `high` (both included; nil: open), in id
    /// order; with `counting`, only how many entries there are (no id is kept).
    private func rangeIDs(_ index: IndexDescription, low: Value?, high: Value?,
                          counting: Bool) throws -> (ids: [ObjectID], count: Int) {
        let budget = index.isUnique ? Int.max : Layout.componentBudget(index)
        var start = Layout.u16(index.tag)
        if let low { SortableEncoding.encode(low, into: &start, truncateBytes: budget) }
        var stop: [UInt8]?
        if let high {
            var h = Layout.u16(index.tag)
            SortableEncoding.encode(high, into: &h, truncateBytes: budget)
            stop = h
        }
        if counting {
            var n = 0
            let db = index.isUnique ? env[.uniques] : env[.indexes]
            try txn.scan(db, from: start, prefix: Layout.u16(index.tag)) { key, _ in
                if let stop, !key.starts(with: stop), Value.compareBytes(key, stop) > 0 { return false }
                n += 1
                return true
            }
            return ([], n)
        }
        let ids = try rangeIDs(index, start: start, stop: stop, prefix: Layout.u16(index.tag))
        return (ids, ids.count)
    }

    /// Ids in an index from `start` while keys begin with `prefix` and are not past `stop`
    /// (a key past `stop` that still begins with it belongs to the stop value: kept).
    private func rangeIDs(_ index: IndexDescription, start: [UInt8], stop: [UInt8]?,
                          prefix: [UInt8]) throws -> [ObjectID] {
        var ids: [ObjectID] = []
        let db = index.isUnique ? env[.uniques] : env[.indexes]
        try txn.scan(db, from: start, prefix: prefix) { key, value in
            if let stop, !key.starts(with: stop), Value.compareBytes(key, stop) > 0 { return false }
            ids.append(index.isUnique ? try ObjectID.stored(value, in: "uniques")
                       : try ObjectID.stored(key, exactly: false, in: "indexes"))
            return true
        }
        // Entries come in value order; visiting in id order keeps unsorted results deterministic.
        return Array(Set(ids)).sorted()
    }
}
