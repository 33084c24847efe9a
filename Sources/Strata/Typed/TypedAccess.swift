extension ObjectReading {
    /// Objects of `E` matching a request.
    public func fetch<E: Entity>(_ request: FetchRequest<E>) throws -> [E] {
        try schema.check(E.self)
        return try fetch(request.query).map { try E(id: $0.id, storedValues: $0.values) }
    }

    /// Objects of `E` matching `predicate`, sorted and windowed.
    public func fetch<E: Entity>(_ type: E.Type, where predicate: EntityPredicate<E> = .all,
                                 sortedBy sort: [SortKey] = [], limit: Int? = nil, offset: Int = 0) throws -> [E] {
        try fetch(FetchRequest(where: predicate, sortedBy: sort, limit: limit, offset: offset))
    }

    /// How many objects of `E` match `predicate`.
    public func count<E: Entity>(_ type: E.Type, where predicate: EntityPredicate<E> = .all) throws -> Int {
        try schema.check(E.self)
        return try count(Query(entity: E.entityName, predicate: predicate.predicate))
    }

    /// The object of type `E` with `id`, or nil.
    public func object<E: Entity>(_ type: E.Type, id: ObjectID) throws -> E? {
        try schema.check(E.self)
        guard id.entityTag == E.entityTag, let r = try record(id) else { return nil }
        return try E(id: r.id, storedValues: r.values)
    }

    /// The target of a to-one relationship.
    public func related<R: Entity, T: Entity>(_ id: ObjectID, _ relationship: ToOne<R, T>) throws -> T? {
        guard let target = try relatedIDs(description(of: relationship.tag), of: id).first else { return nil }
        return try object(T.self, id: target)
    }

    /// The targets of a to-many relationship, in id order.
    public func related<R: Entity, T: Entity>(_ id: ObjectID, _ relationship: ToMany<R, T>) throws -> [T] {
        try relatedIDs(description(of: relationship.tag), of: id).compactMap { try object(T.self, id: $0) }
    }

    /// The id of a to-one relationship's target, without reading the target.
    public func relatedID<R: Entity, T: Entity>(_ id: ObjectID, _ relationship: ToOne<R, T>) throws -> ObjectID? {
        try relatedIDs(description(of: relationship.tag), of: id).first
    }

    /// The ids of a to-many relationship's targets, in id order, without reading the targets.
    public func relatedIDs<R: Entity, T: Entity>(_ id: ObjectID, _ relationship: ToMany<R, T>) throws -> [ObjectID] {
        try relatedIDs(description(of: relationship.tag), of: id)
    }

    private func description(of tag: UInt16) throws -> RelationshipDescription {
        guard let r = schema.relationship(tag: tag) else {
            throw StrataError.invalidQuery(entity: "tag \(tag >> 8)", reason: "no relationship with tag \(tag)")
        }
        return r
    }
}

extension ChangeSet.Operation {
    /// The insert of a typed object (its id and stored values), as a change set's and a child
    /// context's typed `insert` append it.
    static func inserting<E: Entity>(_ object: E) -> Self { .insert(id: object.id, values: object.storedValues) }
}

extension ChangeSet {
    /// Inserts a typed object (attributes left at their Swift defaults are saved as given).
    public mutating func insert<E: Entity>(_ object: E) {
        // An id of another entity would insert an object of that entity with `E`'s values.
        note(E.self, id: object.id, field: nil)
        append(.inserting(object))
    }

    /// Replaces every attribute of the stored object with `object`'s (only differences are logged).
    public mutating func update<E: Entity>(_ object: E) {
        note(E.self, id: object.id, field: nil)
        append(.update(id: object.id,
                       attributes: object.storedValues.enumerated().map { AttributeValue(attribute: $0, value: $1) }))
    }

    /// Sets one attribute of an existing object.
    public mutating func set<E: Entity, V>(_ key: Attribute<E, V>, of id: ObjectID, to value: V) {
        note(E.self, id: id, field: key.name)
        append(.update(id: id, attributes: [AttributeValue(attribute: key.index, value: value.storedValue)]))
    }

    /// Sets (or with nil, clears) a to-one relationship.
    public mutating func set<E: Entity, T: Entity>(_ relationship: ToOne<E, T>, of id: ObjectID, to target: ObjectID?) {
        note(E.self)
        if let target {
            append(.link(relationship: relationship.tag, from: .id(id), to: .id(target)))
        } else {
            append(.unlink(relationship: relationship.tag, from: .id(id), to: nil))
        }
    }

    /// Adds `target` to a to-many relationship of `id`.
    public mutating func add<E: Entity, T: Entity>(_ target: ObjectID, to relationship: ToMany<E, T>, of id: ObjectID) {
        note(E.self)
        append(.link(relationship: relationship.tag, from: .id(id), to: .id(target)))
    }

    /// Removes `target` from a to-many relationship of `id`.
    public mutating func remove<E: Entity, T: Entity>(_ target: ObjectID, from relationship: ToMany<E, T>,
                                                      of id: ObjectID) {
        note(E.self)
        append(.unlink(relationship: relationship.tag, from: .id(id), to: .id(target)))
    }
}
