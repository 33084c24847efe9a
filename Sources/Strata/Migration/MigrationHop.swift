/// One hop (version N-1 → N), checked against both schemas and compiled into record and
/// relationship transforms.
struct MigrationHop: Sendable {
    let from: Schema
    let to: Schema
    let steps: [MigrationStep]
    let registry: MigrationRegistry
    /// Old relationship tag → new tag (absent: the relationship is gone).
    let relationshipTags: [UInt16: UInt16]
    /// Old entity tag → the entity's name in the new schema.
    let entityNames: [UInt16: String]

    /// Old entity tag → where each new attribute's value comes from, for the entities no custom
    /// step touches (see ``PositionalPlan``).
    let plans: [UInt16: PositionalPlan]

    /// The longest string or bytes value a custom step may write (the store's
    /// ``StoreConfiguration/maxValueBytes``, which a save enforces).
    let maxValueBytes: Int

    init(from: Schema, to: Schema, registry: MigrationRegistry,
         maxValueBytes: Int = StoreConfiguration().maxValueBytes) throws {
        self.from = from
        self.to = to
        self.steps = to.migrationSteps
        self.registry = registry
        self.maxValueBytes = maxValueBytes
        var shape = Shape(from)
        // The steps find an entity's new form by its tag: each entity must keep it, checked
        // first (a changed tag made a later step fail as if the new version lacked what it declares).
        try Shape.checkTagsKept(from: from, to: to, steps: steps)
        for (i, step) in steps.enumerated() { try shape.apply(step, index: i, target: to, registry: registry) }
        try shape.check(against: to)
        entityNames = shape.entityNames
        var tags: [UInt16: UInt16] = [:]
        for (oldTag, newName) in shape.relationshipNames {
            let (entityName, relName) = newName
            if let r = to.entity(named: entityName)?.relationship(named: relName) { tags[oldTag] = r.tag }
        }
        relationshipTags = tags
        var plans: [UInt16: PositionalPlan] = [:]
        for e in from.entities {
            if let name = entityNames[e.tag], let new = to.entity(named: name),
               let plan = PositionalPlan(old: e, new: new, steps: steps) {
                plans[e.tag] = plan
            }
        }
        self.plans = plans
    }

    /// Transforms one record's values (entity tag is unchanged: ids stay valid).
    ///
    /// An entity without a custom step goes through its ``PositionalPlan`` (the same result,
    /// without a record keyed by name; with `timings`, its time is shared among the steps that
    /// apply to the entity); the others, and every call with `stepByStep`, apply the steps one
    /// by one to a ``MigrationRecord``.
    /// - Parameter timings: when given, each step's time is added to it (reading the clock twice
    ///   per step costs more than most steps, so callers time a sample of the records).
    func transform(_ id: ObjectID, _ values: [Value], timings: UnsafeMutableBufferPointer<Duration>? = nil,
                   stepByStep: Bool = false) throws -> [Value] {
        if !stepByStep, let plan = plans[id.entityTag] {
            guard let timings, !plan.steps.isEmpty else { return try plan.apply(id, values, version: to.version) }
            // The plan does its steps' work at once: its time is shared among them.
            let clock = ContinuousClock()
            let start = clock.now
            let result = try plan.apply(id, values, version: to.version)
            let share = (clock.now - start) / plan.steps.count
            for i in plan.steps { timings[i] += share }
            return result
        }
        guard let old = from.entity(tag: id.entityTag), let newName = entityNames[old.tag],
              let new = to.entity(named: newName) else {
            throw MigrationError(reason: "object \(id) has no entity in \(from.model) v\(from.version)")
        }
        var record = MigrationRecord(entity: old.name, id: id,
                                     values: Dictionary(minimumCapacity: old.attributes.count + 4))
        for (a, v) in zip(old.attributes, values) where !v.isNull { record.values[a.name] = v }
        if let timings {
            let clock = ContinuousClock()
            for (i, step) in steps.enumerated() {
                let start = clock.now
                try apply(step, to: &record, new: new)
                timings[i] += clock.now - start
            }
        } else {
            for step in steps { try apply(step, to: &record, new: new) }
        }
        return try new.attributes.map { a in
            try Self.checked(record.values[a.name] ?? .null, a, new, id, version: to.version)
        }
    }

    /// A value of the new version's attribute `a`, checked against its declaration. A required
    /// attribute with a default takes it where the steps leave no value (an attribute that
    /// becomes required, or an added one); without a default, that is an error.
    static func checked(_ v: Value, _ a: AttributeDescription, _ new: EntityDescription, _ id: ObjectID,
                        version: Int) throws -> Value {
        if v.isNull && !a.isOptional {
            if let d = a.defaultValue, !d.isNull { return d }
            throw MigrationError(
                reason: "\(new.name) \(id): required attribute '\(a.name)' has no value after migration to v\(version)")
        }
        if !v.isNull && v.type != a.type {
            throw MigrationError(reason: "\(new.name) \(id): '\(a.name)' is \(v.type!.rawValue) after the steps, " +
                                         "v\(version) declares \(a.type.rawValue)")
        }
        return v
    }

    private func apply(_ step: MigrationStep, to r: inout MigrationRecord, new: EntityDescription) throws {
        switch step {
        case .renameEntity(let f, let t):
            if r.entity == f { r = MigrationRecord(entity: t, id: r.id, values: r.values) }
        case .renameAttribute(let e, let f, let t) where e == r.entity:
            if let v = r.values.removeValue(forKey: f) { r.values[t] = v }
        case .addAttribute(let e, let a) where e == r.entity:
            if r.values[a] == nil, let d = new.attribute(named: a)?.defaultValue { r.values[a] = d }
        case .removeAttribute(let e, let a) where e == r.entity:
            r.values[a] = nil
        case .changeType(let e, let a, let c) where e == r.entity:
            do { r.values[a] = try c.convert(r.values[a] ?? .null) } catch let f as ValueConversion.Failure {
                throw MigrationError(reason: "\(e) \(r.id): \(a): \(f.reason)")
            }
            if r.values[a]?.isNull == true { r.values[a] = nil }
        case .custom(let e, let name) where e == r.entity:
            guard let f = registry.steps[name] else {
                throw MigrationError(reason: "custom step '\(name)' is not registered")
            }
            let before = r.values
            do {
                try f(&r)
            } catch {
                throw MigrationError(reason: "\(e) \(r.id): custom step '\(name)' failed: \(error)")
            }
            // What a save refuses, the step may not write either (a NaN, a date past the range).
            // Values it left as they were are not judged: a store written before a rule was
            // added may hold them, in its state or in the history the steps rewrite.
            for (k, v) in r.values where before[k] != v {
                if let reason = v.unstorableReason {
                    throw MigrationError(reason: "\(e) \(r.id): custom step '\(name)' set '\(k)' to \(v): \(reason)")
                }
                if v.sizeInBytes > maxValueBytes {
                    throw MigrationError(reason: "\(e) \(r.id): custom step '\(name)' set '\(k)' to \(v.sizeInBytes) bytes, " +
                                                 "over maxValueBytes (\(maxValueBytes)), which a save refuses")
                }
            }
            for (k, v) in r.values where v.isNull { r.values[k] = nil }
        default:
            break
        }
    }
}

/// The structure of a schema as the steps change it, to check that they lead to the new version.
private struct Shape {
    struct Entity {
        var name: String
        var tag: UInt16
        var attributes: [String: (type: AttributeType, optional: Bool)]
        var relationships: [String: UInt16]  // name → old tag
        var indexes: Set<[String]>
        var uniques: Set<[String]>
    }
    var entities: [Entity]
    /// Old relationship tag → its destination's entity tag and its inverse's old tag: links are
    /// carried over as they are, so a relationship must keep both.
    let pairing: [UInt16: (destination: UInt16, inverse: UInt16)]
    /// Old relationship tags of the to-many relationships: one may not become to-one (its
    /// objects, now or at any transaction of the log, may hold several targets).
    let toMany: Set<UInt16>

    init(_ s: Schema) {
        var pairing: [UInt16: (destination: UInt16, inverse: UInt16)] = [:]
        var toMany: Set<UInt16> = []
        for e in s.entities {
            for r in e.relationships {
                if let d = s.entity(named: r.destination) { pairing[r.tag] = (d.tag, s.inverse(of: r).tag) }
                if r.isToMany { toMany.insert(r.tag) }
            }
        }
        self.pairing = pairing
        self.toMany = toMany
        entities = s.entities.map { e in
            Entity(name: e.name, tag: e.tag,
                   attributes: Dictionary(
                       uniqueKeysWithValues: e.attributes.map { ($0.name, ($0.type, $0.isOptional)) }),
                   relationships: Dictionary(uniqueKeysWithValues: e.relationships.map { ($0.name, $0.tag) }),
                   indexes: Set(e.indexes.map { $0.attributes.map { e.attributes[$0].name } }),
                   uniques: Set(e.uniques.map { $0.attributes.map { e.attributes[$0].name } }))
        }
    }

    var entityNames: [UInt16: String] { Dictionary(uniqueKeysWithValues: entities.map { ($0.tag, $0.name) }) }
    var relationshipNames: [UInt16: (String, String)] {
        var out: [UInt16: (String, String)] = [:]
        for e in entities { for (n, tag) in e.relationships { out[tag] = (e.name, n) } }
        return out
    }

    mutating func apply(_ step: MigrationStep, index: Int, target: Schema, registry: MigrationRegistry) throws {
        func fail(_ reason: String) -> SchemaError {
            SchemaError(file: "v\(target.version).json", entity: nil, field: "migration.steps[\(index)]",
                        reason: reason)
        }
        func entity(_ name: String) throws -> Int {
            guard let i = entities.firstIndex(where: { $0.name == name }) else {
                throw fail("no entity '\(name)' at this step")
            }
            return i
        }
        switch step {
        case .renameEntity(let f, let t):
            let i = try entity(f)
            guard !entities.contains(where: { $0.name == t }) else { throw fail("entity '\(t)' already exists") }
            entities[i].name = t
        case .renameAttribute(let e, let f, let t):
            let i = try entity(e)
            guard let a = entities[i].attributes.removeValue(forKey: f) else {
                throw fail("\(e) has no attribute '\(f)'")
            }
            guard entities[i].attributes[t] == nil else { throw fail("\(e) already has an attribute '\(t)'") }
            entities[i].attributes[t] = a
            entities[i].indexes = Set(entities[i].indexes.map { $0.map { $0 == f ? t : $0 } })
            entities[i].uniques = Set(entities[i].uniques.map { $0.map { $0 == f ? t : $0 } })
        case .renameRelationship(let e, let f, let t):
            let i = try entity(e)
            guard entities[i].relationships[t] == nil else { throw fail("\(e) already has a relationship '\(t)'") }
            guard let tag = entities[i].relationships.removeValue(forKey: f) else {
                throw fail("\(e) has no relationship '\(f)'")
            }
            entities[i].relationships[t] = tag
        case .addAttribute(let e, let a):
            let i = try entity(e)
            guard entities[i].attributes[a] == nil else { throw fail("\(e) already has an attribute '\(a)'") }
            // The entity keeps its tag through renames: find its final form by tag.
            guard let d = target.entity(tag: entities[i].tag)?.attribute(named: a) else {
                throw fail("v\(target.version) declares no attribute \(e).\(a) to add")
            }
            entities[i].attributes[a] = (d.type, d.isOptional)
        case .removeAttribute(let e, let a):
            let i = try entity(e)
            guard entities[i].attributes.removeValue(forKey: a) != nil else {
                throw fail("\(e) has no attribute '\(a)'")
            }
            if entities[i].indexes.contains(where: { $0.contains(a) })
                || entities[i].uniques.contains(where: { $0.contains(a) }) {
                throw fail("remove the indexes and uniques on \(e).\(a) first")
            }
        case .changeType(let e, let a, let c):
            let i = try entity(e)
            guard let current = entities[i].attributes[a] else { throw fail("\(e) has no attribute '\(a)'") }
            guard current.type == c.from else {
                throw fail("\(c.rawValue) converts \(c.from.rawValue), \(e).\(a) is \(current.type.rawValue)")
            }
            let optional = target.entity(tag: entities[i].tag)?.attribute(named: a)?.isOptional ?? current.optional
            entities[i].attributes[a] = (c.to, optional)
        case .addIndex(let e, let attrs), .addUnique(let e, let attrs):
            let i = try entity(e)
            for a in attrs where entities[i].attributes[a] == nil { throw fail("\(e) has no attribute '\(a)'") }
            if case .addIndex = step {
                guard entities[i].indexes.insert(attrs).inserted else { throw fail("\(e) already has that index") }
            } else {
                guard entities[i].uniques.insert(attrs).inserted else {
                    throw fail("\(e) already has that unique constraint")
                }
            }
        case .removeIndex(let e, let attrs):
            let i = try entity(e)
            guard entities[i].indexes.remove(attrs) != nil else {
                throw fail("\(e) has no index (\(attrs.joined(separator: ", ")))")
            }
        case .removeUnique(let e, let attrs):
            let i = try entity(e)
            guard entities[i].uniques.remove(attrs) != nil else {
                throw fail("\(e) has no unique (\(attrs.joined(separator: ", ")))")
            }
        case .custom(let e, let name):
            _ = try entity(e)
            guard registry.steps[name] != nil else { throw fail("custom step '\(name)' is not registered") }
        }
    }

    /// Throws ``SchemaError`` for an entity of `from` whose tag is not its tag in `to` (under the
    /// name `steps`' renames give it): object ids carry the tag, so it never changes.
    /// A rename onto a name an entity bears at that step is refused first, as that step's error
    /// (`entity 'Customer' already exists`): the tag check below would otherwise take the two
    /// entities for one and blame its tag.
    static func checkTagsKept(from: Schema, to: Schema, steps: [MigrationStep]) throws {
        var names = Set(from.entities.map(\.name))
        for (index, step) in steps.enumerated() {
            guard case .renameEntity(let f, let t) = step, names.contains(f) else { continue }
            guard !names.contains(t) else {
                throw SchemaError(file: "v\(to.version).json", entity: nil, field: "migration.steps[\(index)]",
                                  reason: "entity '\(t)' already exists")
            }
            names.remove(f)
            names.insert(t)
        }
        for e in from.entities {
            var name = e.name
            for case .renameEntity(let f, let t) in steps where f == name { name = t }
            guard let now = to.entity(named: name), now.tag != e.tag else { continue }
            throw SchemaError(file: "v\(to.version).json", entity: name, field: "migration",
                              reason: "must keep tag \(e.tag) (object ids carry it); declare \"tag\": \(e.tag)")
        }
    }

    /// The shape the steps lead to must be the new version's.
    func check(against s: Schema) throws {
        func fail(_ entity: String?, _ reason: String) -> SchemaError {
            SchemaError(file: "v\(s.version).json", entity: entity, field: "migration", reason: reason)
        }
        let names = Set(entities.map(\.name)), declared = Set(s.entities.map(\.name))
        guard names == declared else {
            throw fail(nil, "after the steps the entities are \(names.sorted().joined(separator: ", ")); " +
                            "v\(s.version) declares \(declared.sorted().joined(separator: ", "))")
        }
        for shape in entities {
            let e = s.entity(named: shape.name)!
            guard e.tag == shape.tag else {
                throw fail(e.name, "must keep tag \(shape.tag) (object ids carry it); declare \"tag\": \(shape.tag)")
            }
            let declaredAttributes =
                Dictionary(uniqueKeysWithValues: e.attributes.map { ($0.name, ($0.type, $0.isOptional)) })
            guard Set(declaredAttributes.keys) == Set(shape.attributes.keys) else {
                throw fail(
                    e.name,
                    "after the steps the attributes are \(shape.attributes.keys.sorted().joined(separator: ", ")); " +
                    "v\(s.version) declares \(declaredAttributes.keys.sorted().joined(separator: ", "))")
            }
            for (n, a) in shape.attributes where declaredAttributes[n]!.0 != a.type {
                throw fail(e.name, "attribute '\(n)' is \(a.type.rawValue) after the steps, v\(s.version) declares " +
                                   "\(declaredAttributes[n]!.0.rawValue) (add a changeType step)")
            }
            guard Set(e.relationships.map(\.name)) == Set(shape.relationships.keys) else {
                throw fail(e.name, "after the steps the relationships are " +
                                   "\(shape.relationships.keys.sorted().joined(separator: ", ")); v\(s.version) " +
                                   "declares \(e.relationships.map(\.name).sorted().joined(separator: ", "))")
            }
            for r in e.relationships {
                guard let oldTag = shape.relationships[r.name], let was = pairing[oldTag] else { continue }
                let destination = s.entity(named: r.destination)
                let inverseOldTag = entities.first { $0.tag == destination?.tag }?.relationships[r.inverseName]
                guard destination?.tag == was.destination, inverseOldTag == was.inverse else {
                    throw fail(e.name, "relationship '\(r.name)' must keep its destination and inverse (existing " +
                                       "links are carried over as they are)")
                }
                guard r.isToMany || !toMany.contains(oldTag) else {
                    throw fail(e.name, "relationship '\(r.name)' is to-many in v\(s.version - 1) and to-one in " +
                                       "v\(s.version): its links are carried over as they are, and an object may hold " +
                                       "several, now or in its history (a to-one may become to-many, not the reverse)")
                }
            }
            // Which ones differ, each as its attribute list: `[a, b]`.
            func listed(_ keys: Set<[String]>) -> String {
                keys.isEmpty ? "none" : keys.map { "[\($0.joined(separator: ", "))]" }.sorted().joined(separator: ", ")
            }
            let idx = Set(e.indexes.map { $0.attributes.map { e.attributes[$0].name } })
            guard idx == shape.indexes else {
                throw fail(e.name,
                           "indexes after the steps differ from v\(s.version)'s: v\(s.version) declares " +
                           "\(listed(idx.subtracting(shape.indexes))) the steps do not add, and the steps leave " +
                           "\(listed(shape.indexes.subtracting(idx))) it does not declare (add addIndex/removeIndex steps)")
            }
            let uni = Set(e.uniques.map { $0.attributes.map { e.attributes[$0].name } })
            guard uni == shape.uniques else {
                throw fail(e.name,
                           "unique constraints after the steps differ from v\(s.version)'s: v\(s.version) declares " +
                           "\(listed(uni.subtracting(shape.uniques))) the steps do not add, and the steps leave " +
                           "\(listed(shape.uniques.subtracting(uni))) it does not declare (add addUnique/removeUnique steps)")
            }
        }
    }
}
