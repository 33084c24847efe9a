/// Key layouts of the named databases. All integers are big-endian so byte order is numeric order.
///
/// | database | key | value |
/// |---|---|---|
/// | `log` | transaction id (u64) | encoded ``LogEntry`` |
/// | `objects` | object id (16 bytes: entity tag, time, counter) | encoded record |
/// | `links` | relationship tag (u16) · from id · to id | empty |
/// | `indexes` | index tag (u16) · sortable values · object id | empty |
/// | `uniques` | unique tag (u16) · sortable values | object id |
/// | `meta` | ASCII name | see ``MetaKey`` |
/// | main (unnamed; ``DatabaseName/counts``) | `count/` · entity tag (u16) | live objects (u64) |
///
/// A format-1 store keeps the object counts in `meta` instead of the main database.
enum Layout {
    /// Three-way comparison in LMDB's default key order (memcmp, then length).
    static func compare(_ a: [UInt8], _ b: [UInt8]) -> Int { KeyOrder.compare(a, b) }

    /// ``compare(_:_:)`` of bytes in place (an LMDB key) with an array.
    static func compare(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Int { KeyOrder.compare(a, b) }

    /// ``compare(_:_:)`` of two byte buffers in place.
    static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int { KeyOrder.compare(a, b) }

    static func precedes(_ a: [UInt8], _ b: [UInt8]) -> Bool { compare(a, b) < 0 }

    static func u16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xff)] }

    static func entityPrefix(_ tag: UInt16) -> [UInt8] { u16(tag) }

    static func linkPrefix(_ relationship: UInt16, _ from: ObjectID) -> [UInt8] {
        var k: [UInt8] = []
        k.reserveCapacity(34)
        k.append(UInt8(relationship >> 8))
        k.append(UInt8(relationship & 0xff))
        from.appendKeyBytes(to: &k)
        return k
    }

    static func linkKey(_ relationship: UInt16, _ from: ObjectID, _ to: ObjectID) -> [UInt8] {
        var k = linkPrefix(relationship, from)
        to.appendKeyBytes(to: &k)
        return k
    }

    /// Bytes of each component of an index key, chosen so the longest key fits in LMDB's 511.
    static func componentBudget(_ index: IndexDescription) -> Int {
        // tag (2) + id (16); each component: type byte + escaped bytes (worst case doubled) + terminator (2).
        let perComponent = (LMDBLimits.maxKeyBytes - 2 - 16) / index.attributes.count
        return max(8, (perComponent - 3) / 2)
    }

    static func indexKey(_ index: IndexDescription, record values: [Value], id: ObjectID) -> [UInt8] {
        var k: [UInt8] = []
        k.reserveCapacity(64)
        appendIndexKey(index, record: values, id: id, to: &k)
        return k
    }

    /// Appends the index key of `values` to `k` (a caller building many keys reuses one buffer).
    static func appendIndexKey(_ index: IndexDescription, record values: [Value], id: ObjectID, to k: inout [UInt8]) {
        k.append(UInt8(index.tag >> 8))
        k.append(UInt8(index.tag & 0xff))
        let budget = componentBudget(index)
        for a in index.attributes { SortableEncoding.encode(values[a], into: &k, truncateBytes: budget) }
        id.appendKeyBytes(to: &k)
    }

    /// The unique key a reference by key names (``ObjectReference/unique(entityTag:constraint:values:)``:
    /// the constraint's values in order), or nil when the schema has no such constraint, the values
    /// do not fit it, or the key is over LMDB's limit (no object can hold it).
    static func referenceKey(entity tag: UInt16, constraint: Int, values: [Value], schema: Schema) -> [UInt8]? {
        guard let e = schema.entity(tag: tag), constraint >= 0, constraint < e.uniques.count,
              values.count == e.uniques[constraint].attributes.count else { return nil }
        var key = u16(e.uniques[constraint].tag)
        for v in values { SortableEncoding.encode(v, into: &key) }
        return key.count <= LMDBLimits.maxKeyBytes ? key : nil
    }

    /// The unique key of `values`, or nil when a component is null (nulls never clash, as in SQL).
    /// - Throws: ``ValidationFailure`` when the key would exceed LMDB's key size.
    static func uniqueKey(_ index: IndexDescription, record values: [Value], entity: EntityDescription,
                          id: ObjectID) throws -> [UInt8]? {
        try checkedUniqueKey(index.uniqueKeyBytes(values), index, entity: entity, id: id)
    }

    /// ``uniqueKey(_:record:entity:id:)`` from the key's own values, in key order (a reference by
    /// unique key): no record-sized array of values is built for it.
    static func uniqueKey(_ index: IndexDescription, keyValues: [Value], entity: EntityDescription,
                          id: ObjectID) throws -> [UInt8]? {
        try checkedUniqueKey(index.uniqueKeyBytes(keyValues: keyValues), index, entity: entity, id: id)
    }

    private static func checkedUniqueKey(_ key: [UInt8]?, _ index: IndexDescription, entity: EntityDescription,
                                         id: ObjectID) throws -> [UInt8]? {
        guard let k = key else { return nil }
        guard k.count <= LMDBLimits.maxKeyBytes else {
            throw StrataError.validation(ValidationFailure(
                kind: .valueTooLarge, entity: entity.name, objectID: id, field: uniqueFieldName(index, entity),
                reason: "unique key of \(k.count) bytes exceeds LMDB's \(LMDBLimits.maxKeyBytes)-byte key limit"))
        }
        return k
    }

    static func uniqueFieldName(_ index: IndexDescription, _ entity: EntityDescription) -> String {
        index.attributes.map { entity.attributes[$0].name }.joined(separator: "+")
    }
}
