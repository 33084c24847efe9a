/// The checks every inserted or updated value passes, shared by the writer's ``SaveResolver`` and a
/// child context's single-insert path (``ChildContext/insert(_:)-(E)``), so the two cannot drift.
enum ValueRules {
    static func failure(_ kind: ValidationFailure.Kind, _ entity: String, _ id: ObjectID?, _ field: String?, _ reason: String) -> StrataError {
        .validation(ValidationFailure(kind: kind, entity: entity, objectID: id, field: field, reason: reason))
    }

    /// The entity an id's tag names.
    /// - Throws: a validation failure (`unknownEntity`) when the schema has no entity with that tag.
    static func entity(_ schema: Schema, _ id: ObjectID) throws -> EntityDescription {
        guard let e = schema.entity(tag: id.entityTag) else {
            throw failure(.unknownEntity, "tag \(id.entityTag)", id, nil, "no entity with this tag in \(schema.model) v\(schema.version)")
        }
        return e
    }

    /// `input` with defaults filled in, after checking the count, types, required values and sizes.
    ///
    /// Attributes are read a field at a time (`e.attributes[i].type`), never as a whole
    /// ``AttributeDescription``: copying one (its name, its default value) cost a retain and a
    /// release per field per attribute, about a tenth of a child context's insert (`perf` of W7).
    static func prepared(_ e: EntityDescription, _ id: ObjectID, _ input: [Value], maxValueBytes: Int) throws -> [Value] {
        let attributes = e.attributes
        guard input.count == attributes.count else {
            throw failure(.unknownAttribute, e.name, id, nil, "\(input.count) values given, entity has \(attributes.count) attributes")
        }
        var values = input
        for i in attributes.indices {
            if values[i].isNull, let d = attributes[i].defaultValue { values[i] = d }
            try check(e, id, attribute: i, values[i], maxValueBytes: maxValueBytes)
        }
        return values
    }

    /// Checks one value against the attribute at position `attribute` of `e`: required, type,
    /// finite doubles, `maxValueBytes`.
    static func check(_ e: EntityDescription, _ id: ObjectID, attribute: Int, _ v: Value, maxValueBytes: Int) throws {
        func name() -> String { e.attributes[attribute].name }
        let size: Int
        switch v {
        case .null:
            guard e.attributes[attribute].isOptional else { throw failure(.requiredAttribute, e.name, id, name(), "a value is required") }
            return
        case .string(let s): size = s.utf8.count
        case .bytes(let b): size = b.count
        default: size = 0
        }
        let type = e.attributes[attribute].type
        guard v.type == type else { throw failure(.wrongType, e.name, id, name(), "expected \(type.rawValue), got \(v.type?.rawValue ?? "null")") }
        if case .double(let d) = v, !d.isFinite { throw failure(.wrongType, e.name, id, name(), "doubles must be finite") }
        if size > maxValueBytes {
            throw failure(.valueTooLarge, e.name, id, name(), "\(size) bytes exceed maxValueBytes (\(maxValueBytes))")
        }
    }
}
