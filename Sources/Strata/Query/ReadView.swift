/// Everything a context can read, over one LMDB read (or write) transaction: records by id,
/// relationship targets, and queries planned onto an index or a scan.
///
/// Values are decoded inside the transaction; nothing returned points into the map.
struct ReadView: ObjectSource {
    let txn: LMDBTransaction
    let env: LMDBEnvironment
    let schema: Schema

    /// Names the state this view reads: its environment and LMDB's id of its transaction (the same
    /// for every read of one committed state, another after every commit or in another
    /// generation, whose LMDB ids start again).
    var stateID: StateID { StateID(environment: env.serial, transaction: LMDBEnvironment.lmdbTransactionID(txn.handle)) }

    // MARK: Objects and relationships

    func record(_ id: ObjectID) throws -> Record? {
        guard schema.entity(tag: id.entityTag) != nil else { return nil }
        return try id.withKeyBytes { key in
            try txn.withValue(env[.objects], key: key) { try RecordCodec.decode($0, id: id, schema: schema) }
        }
    }

    func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID] {
        var result: [ObjectID] = []
        try txn.scan(env[.links], prefix: Layout.linkPrefix(tag, id)) { key, _ in
            // tag (2) + from (16) + to (16)
            guard key.count == 34 else {
                throw StrataError.corruptRecord(id: id, reason: "links: a key of \(key.count) bytes (34 expected)")
            }
            result.append(ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: key[18..<34])))
            return true
        }
        return result
    }

    /// The last committed transaction visible here: the log's last key, or the compaction
    /// horizon when compaction emptied the log.
    func lastTransactionID() throws -> TransactionID {
        let last = try txn.last(env[.log]) { k, _ -> UInt64 in
            // Every log key is a transaction id of 8 bytes; a shorter or longer one sorts among
            // them (a short one last) and is damage, named here rather than misread.
            guard k.count == 8 else {
                throw StrataError.damagedStore(path: env.path, reason: "log: the last key is \(k.count == 1 ? "1 byte" : "\(k.count) bytes"), not a transaction id's 8")
            }
            var r = ByteReader(k)
            return try r.u64()
        }
        if let last { return try Self.checked(TransactionID(last), "the log's last key") }
        return try horizon()
    }

    /// `id`, read from the store as `what`, if it is not past ``TransactionID/largest``.
    static func checked(_ id: TransactionID, _ what: String) throws -> TransactionID {
        guard id <= .largest else {
            throw StrataError.corruptLogEntry(transaction: id, reason: "\(what) is past the largest transaction id, \(TransactionID.largest)")
        }
        return id
    }

    /// Live objects of an entity (kept in ``DatabaseName/counts``, O(1)).
    func objectCount(_ entity: EntityDescription) throws -> Int {
        try txn.withValue(env[.counts], key: MetaKey.count(entity.tag)) { b -> Int in
            try MetaKey.countValue(b, entity.tag)
        } ?? 0
    }

}

extension ReadView {
    /// The object a reference names, if it exists.
    func resolve(_ ref: ObjectReference) throws -> ObjectID? {
        switch ref {
        case .id(let id):
            return try txn.contains(env[.objects], key: id.keyBytes) ? id : nil
        case .unique(let tag, let c, let values):
            guard let key = Layout.referenceKey(entity: tag, constraint: c, values: values, schema: schema) else {
                return nil
            }
            return try txn.withValue(env[.uniques], key: key) { try ObjectID.stored($0, in: "uniques") }
        }
    }
}

extension ReadView {
    /// The compaction horizon (0 when the store was never compacted).
    func horizon() throws -> TransactionID {
        let horizon = TransactionID(try txn.withValue(env[.meta], key: MetaKey.horizon) { b -> UInt64 in
            guard b.count == 8 else {
                throw StrataError.damagedStore(path: env.path, reason: "meta: the compaction horizon is \(b.count == 1 ? "1 byte" : "\(b.count) bytes"), not 8")
            }
            var r = ByteReader(b)
            return try r.u64()
        } ?? 0)
        // The horizon is not a log entry: a value past any transaction is damage to `meta`.
        guard horizon <= .largest else {
            throw StrataError.damagedStore(path: env.path, reason: """
                meta: the compaction horizon is \(horizon), past the largest transaction id, \(TransactionID.largest)
                """)
        }
        return horizon
    }

    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? {
        try txn.withValue(env[.uniques], key: key) { try ObjectID.stored($0, in: "uniques") }
    }
}

/// One committed state of a store: the environment (``LMDBEnvironment/serial``) and LMDB's
/// transaction id in it.
struct StateID: Equatable, Sendable {
    let environment: UInt64
    let transaction: UInt64
}
