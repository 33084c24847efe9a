/// Everything a context can read, over one LMDB read (or write) transaction: records by id,
/// relationship targets, and queries planned onto an index or a scan.
///
/// Values are decoded inside the transaction; nothing returned points into the map.
struct ReadView {
    let txn: LMDBTransaction
    let env: LMDBEnvironment
    let schema: Schema

    // MARK: Objects and relationships

    func record(_ id: ObjectID) throws -> Record? {
        guard schema.entity(tag: id.entityTag) != nil else { return nil }
        return try txn.withValue(env[.objects], key: id.keyBytes) { try RecordCodec.decode($0, id: id, schema: schema) }
    }

    func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID] {
        var result: [ObjectID] = []
        try txn.scan(env[.links], prefix: Layout.linkPrefix(tag, id)) { key, _ in
            result.append(ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: key[18..<34])))
            return true
        }
        return result
    }

    /// The last committed transaction visible here.
    func lastTransactionID() throws -> TransactionID {
        TransactionID(try txn.last(env[.log]) { k, _ -> UInt64 in
            var r = ByteReader(k)
            return try r.u64()
        } ?? 0)
    }

    /// Live objects of an entity (kept in `meta`, O(1)).
    func objectCount(_ entity: EntityDescription) throws -> Int {
        try txn.withValue(env[.meta], key: MetaKey.count(entity.tag)) { b -> Int in
            var r = ByteReader(b)
            return Int(try r.u64())
        } ?? 0
    }

    func entity(_ name: String) throws -> EntityDescription {
        guard let e = schema.entity(named: name) else { throw StrataError.invalidQuery(entity: name, reason: "no such entity in \(schema.model) v\(schema.version)") }
        return e
    }

    // MARK: Queries

    func fetch(_ query: Query) throws -> [Record] {
        let e = try entity(query.entity)
        try validate(query.predicate, e)
        for s in query.sort where s.attribute < 0 || s.attribute >= e.attributes.count {
            throw StrataError.invalidQuery(entity: e.name, reason: "sort attribute position \(s.attribute) out of range")
        }
        guard query.offset >= 0, (query.limit ?? 0) >= 0 else { throw StrataError.invalidQuery(entity: e.name, reason: "negative limit or offset") }
        // Without a sort, candidates come in id order, so the window can stop the scan early.
        let stopAfter = query.sort.isEmpty ? query.limit.map { $0 + query.offset } : nil
        var results: [Record] = []
        try candidates(e, query.predicate) { record in
            if try matches(query.predicate, record) { results.append(record) }
            return stopAfter.map { results.count < $0 } ?? true
        }
        if !query.sort.isEmpty { results.sort(by: Self.ordering(query.sort)) }
        return Self.window(results, offset: query.offset, limit: query.limit)
    }

    func count(_ query: Query) throws -> Int {
        let e = try entity(query.entity)
        if case .all = query.predicate { return try objectCount(e) }
        try validate(query.predicate, e)
        var n = 0
        try candidates(e, query.predicate) { record in
            if try matches(query.predicate, record) { n += 1 }
            return true
        }
        return n
    }

    static func window<T>(_ items: [T], offset: Int, limit: Int?) -> [T] {
        guard offset < items.count else { return [] }
        let end = limit.map { min(items.count, offset + $0) } ?? items.count
        return Array(items[offset..<end])
    }

    static func ordering(_ sort: [SortDescriptor]) -> (Record, Record) -> Bool {
        { a, b in
            for s in sort {
                let c = Value.compare(a.values[s.attribute], b.values[s.attribute])
                if c != 0 { return s.ascending ? c < 0 : c > 0 }
            }
            return a.id < b.id
        }
    }
}

extension ReadView {
    /// The object a reference names, if it exists.
    func resolve(_ ref: ObjectReference) throws -> ObjectID? {
        switch ref {
        case .id(let id):
            return try txn.contains(env[.objects], key: id.keyBytes) ? id : nil
        case .unique(let tag, let c, let values):
            guard let e = schema.entity(tag: tag), c >= 0, c < e.uniques.count, values.count == e.uniques[c].attributes.count else { return nil }
            var key = Layout.u16(e.uniques[c].tag)
            for v in values { SortableEncoding.encode(v, into: &key) }
            guard key.count <= LMDBLimits.maxKeyBytes else { return nil }
            return try txn.withValue(env[.uniques], key: key) { ObjectID(keyBytes: $0) }
        }
    }
}
