/// The checks every inserted or updated value passes, shared by the writer's ``SaveResolver`` and a
/// child context's single-insert path (``ChildContext/insert(_:)-(E)``), so the two cannot drift.
enum ValueRules {
    static func failure(_ kind: ValidationFailure.Kind, _ entity: String, _ id: ObjectID?, _ field: String?,
                        _ reason: String) -> StrataError {
        .validation(ValidationFailure(kind: kind, entity: entity, objectID: id, field: field, reason: reason))
    }

    /// The entity an id's tag names.
    /// - Throws: a validation failure (`unknownEntity`) when the schema has no entity with that tag.
    static func entity(_ schema: Schema, _ id: ObjectID) throws -> EntityDescription {
        guard let e = schema.entity(tag: id.entityTag) else {
            throw failure(.unknownEntity, "tag \(id.entityTag)", id, nil,
                          "no entity with this tag in \(schema.model) v\(schema.version)")
        }
        return e
    }

    /// `input` with defaults filled in, after checking the count, types, required values and sizes.
    ///
    /// The loop reads ``EntityDescription/valueRules`` (plain values), not the attributes: copying
    /// an ``AttributeDescription`` (its name, its default value) cost a retain and a release per
    /// field per attribute, about a tenth of a child context's insert (`perf` of W7).
    /// With `fillDefaults` false (an import's records, whose nulls the import kept where the
    /// input said `null`), a null stays null.
    static func prepared(_ e: EntityDescription, _ id: ObjectID, _ input: [Value],
                         maxValueBytes: Int, fillDefaults: Bool = true) throws -> [Value] {
        guard input.count == e.valueRules.count else {
            throw failure(.unknownAttribute, e.name, id, nil,
                          "\(input.count) values given, entity has \(e.attributes.count) attributes")
        }
        var values = input
        try e.valueRules.withUnsafeBufferPointer { rules in
            for i in rules.indices {
                if fillDefaults, rules[i].hasDefault, values[i].isNull, let d = e.attributes[i].defaultValue {
                    values[i] = d
                }
                try check(e, id, attribute: i, rules[i], values[i], maxValueBytes: maxValueBytes)
            }
        }
        return values
    }

    /// Checks one value against the attribute at position `attribute` of `e`: required, type,
    /// finite doubles and dates, `maxValueBytes`.
    static func check(_ e: EntityDescription, _ id: ObjectID, attribute: Int, _ v: Value, maxValueBytes: Int) throws {
        try check(e, id, attribute: attribute, e.valueRules[attribute], v, maxValueBytes: maxValueBytes)
    }

    @inline(__always)
    private static func check(_ e: EntityDescription, _ id: ObjectID, attribute: Int,
                              _ rule: EntityDescription.ValueRule, _ v: Value, maxValueBytes: Int) throws {
        if case .null = v {
            guard rule.isOptional else {
                throw failure(.requiredAttribute, e.name, id, e.attributes[attribute].name, "a value is required")
            }
            return
        }
        let size = v.sizeInBytes
        guard v.type == rule.type else {
            throw failure(.wrongType, e.name, id, e.attributes[attribute].name,
                          "expected \(rule.type.rawValue), got \(v.type?.rawValue ?? "null")")
        }
        if let reason = v.unstorableReason {
            throw failure(.wrongType, e.name, id, e.attributes[attribute].name, reason)
        }
        if size > maxValueBytes {
            throw failure(.valueTooLarge, e.name, id, e.attributes[attribute].name,
                          "\(size) bytes exceed maxValueBytes (\(maxValueBytes))")
        }
    }
}
