/// Turns one ``ChangeSet`` into logged changes inside the writer's transaction: validates each
/// operation against the current state, applies schema rules (defaults, delete rules, to-one
/// replacement) and applies the result through ``StateApplier`` as it goes, so later operations
/// of the same save see earlier ones.
struct SaveResolver<S: StateStore> {
    var applier: S
    let limits: StoreConfiguration
    private(set) var changes: [LoggedChange] = []
    private var aliases: [ObjectID: ObjectID] = [:]
    /// Objects whose required to-one relationships must be checked at the end.
    private var toOneChecks: Set<ObjectID> = []
    /// Whether ``run(_:checkRequired:)`` checks required to-one relationships at the end (a child
    /// context's changes are checked at the root's commit): inserts then skip recording their
    /// ids for it, a set insert per object.
    private var checkingRequired = true
    private var bases: [ObjectID: BaseVersion] = [:]
    private var policy: MergePolicy = .fail
    private var decisions: [ObjectID: Decision] = [:]
    /// Every attribute change and delete the set makes of each object it has a base for: a
    /// conflict is judged on the object's whole change, whichever operation meets it first (a
    /// relationship edit before the update, which was judged as no change at all).
    private var changesOfBased: [ObjectID: (attributes: [ChangeSet.AttributeValue], deletes: Bool)] = [:]
    private var conflicts: [MergeConflict] = []
    /// Objects this save deleted (cascades included); an insert that gives an id back removes it.
    private var deleted: Set<ObjectID> = []
    /// Whether the set is judged on its result (see ``run(_:bases:policy:checkRequired:netState:)``).
    private var netState = false
    /// The set's inserts, upserts and puts carry every value (``ChangeSet/valuesComplete``).
    private var valuesComplete = false
    /// With ``netState``: the objects the set deletes by name.
    private var deletesAsked: Set<ObjectID> = []
    /// With ``netState``: everything the set's deletes remove, cascades included, worked out at
    /// its first delete rule check (``doomedBySet()``).
    private var doomed: Set<ObjectID>?

    /// What to do with an object the store changed after the context read it.
    private enum Decision {
        case apply
        case skip
        /// Apply only the attributes the store did not change (plus, preferring the context, all).
        case merge(storeChanged: Set<Int>, preferContext: Bool)
        case replace([Value])
        /// The object was deleted underneath: insert it again with these values.
        case reinsert([Value])
    }
    private var schema: Schema { applier.schema }

    /// Whether ``changes`` keeps what was applied (the writer logs it; a child context keeps
    /// its operations instead and needs none).
    private let collectsChanges: Bool

    init(applier: S, limits: StoreConfiguration, collectsChanges: Bool = true) {
        self.applier = applier
        self.limits = limits
        self.collectsChanges = collectsChanges
    }

    private func fail(_ kind: ValidationFailure.Kind, _ entity: String, _ id: ObjectID?, _ field: String?,
                      _ reason: String) -> StrataError {
        ValueRules.failure(kind, entity, id, field, reason)
    }

    private mutating func emit(_ change: LoggedChange) throws {
        try applier.apply(change)
        if collectsChanges { changes.append(change) }
    }

    private func resolved(_ id: ObjectID) -> ObjectID { aliases[id] ?? id }

    private func entity(_ id: ObjectID) throws -> EntityDescription { try ValueRules.entity(schema, id) }

    /// Resolves and applies every operation. `checkRequired` runs the end-of-save check of required
    /// to-one relationships (off inside a child context, where a commit is not a save yet).
    mutating func run(_ set: ChangeSet, checkRequired: Bool = true) throws {
        valuesComplete = set.valuesComplete
        defer { valuesComplete = false }
        try run(set.operations, bases: set.baseVersions, policy: set.mergePolicy, checkRequired: checkRequired,
                netState: set.isNetState)
    }

    /// ``run(_:checkRequired:)`` for operations without a change set around them.
    /// With `netState` (a child context's net changes, ``ChangeSet/isNetState``) the set is judged
    /// on its result: unique keys are checked when it ends, and removing what is gone is done.
    mutating func run(_ operations: [ChangeSet.Operation], bases: [ObjectID: BaseVersion], policy: MergePolicy,
                      checkRequired: Bool, netState: Bool = false) throws {
        self.bases = bases
        self.policy = policy
        changesOfBased = [:]
        if !bases.isEmpty {
            for op in operations {
                switch op {
                case .update(let id, let attributes) where bases[id] != nil:
                    changesOfBased[id, default: ([], false)].attributes += attributes
                case .delete(let id) where bases[id] != nil:
                    changesOfBased[id, default: ([], false)].deletes = true
                default: continue
                }
            }
        }
        checkingRequired = checkRequired
        self.netState = netState
        applier.defersUniqueClashes = netState
        if netState {
            // Judged whole: every changed object's base is compared with the store as it was
            // before the set, before any step (a cascade of the set must not hide a conflict).
            for op in operations {
                switch op {
                case .update(let id, let attributes): _ = try decide(resolved(id), changing: attributes)
                case .delete(let id):
                    deletesAsked.insert(id)
                    let target = resolved(id)
                    // Deleted by the store and by this set: it stays deleted, and edge edits of the
                    // set that touch it are dropped with it (``decide`` never reinserts it).
                    _ = try decide(target, changing: [], deleting: true)
                default: continue
                }
            }
        }
        if collectsChanges { changes.reserveCapacity(operations.count) }
        do {
            try runOperations(operations)
        } catch StrataError.validation where !conflicts.isEmpty {
            // Under `.fail` a conflicting object's changes are skipped, and a later operation is
            // most often refused because of that (a unique key the skipped rename would have
            // freed): the conflicts are what the caller has to settle first, so they are thrown,
            // not the refusal they led to (found so far: the operations stopped at the refusal).
            throw StrataError.conflict(conflicts)
        }
        if !conflicts.isEmpty { throw StrataError.conflict(conflicts) }
        if netState { try applier.takeDeferredUniqueKeys() }
        if checkRequired { try checkRequiredRelationships() }
        try applier.flushCounts()
    }

    /// Applies each operation in order (``run(_:bases:policy:checkRequired:netState:)``).
    private mutating func runOperations(_ operations: [ChangeSet.Operation]) throws {
        for op in operations {
            switch op {
            case .insert(let id, let values): try insert(id, values, prepared: netState)
            case .upsert(let id, let values, let constraint): try upsert(id, values, constraint)
            case .put(let id, let values):
                if try applier.exists(id) {
                    let e = try entity(id)
                    try update(id, try prepared(e, id, values).enumerated().map {
                        ChangeSet.AttributeValue(attribute: $0, value: $1)
                    })
                } else {
                    try insert(id, values)
                }
            case .update(let id, let attributes): try update(resolved(id), attributes)
            case .delete(let id):
                let target = resolved(id)
                // Deleted already by this set (a cascade of an earlier delete): done, for a child's
                // net changes, which list every object it deleted, cascades included.
                if netState, deleted.contains(target) { continue }
                switch try decide(target, changing: [], deleting: true) {
                case .skip: continue
                case .reinsert:
                    // Never for a delete: deleted by the store and by this set, it stays deleted
                    // (``decide`` makes that a skip, for the set's other operations on it too).
                    assertionFailure("an object this set deletes is never inserted again")
                    continue
                case .replace:
                    // A custom resolver kept the object with values of its own: they are written,
                    // and the delete is dropped (they were thrown away and the object deleted).
                    try update(target, [])
                    continue
                default: break
                }
                guard try applier.exists(target) else {
                    if netState { continue }   // gone already: what the set asks for
                    throw fail(.objectNotFound, try entity(target).name, target, nil, "cannot delete: no such object")
                }
                try delete(target)
            case .link(let tag, let from, let to):
                let a = try reference(from, tag, source: true)
                let b = try reference(to, tag, from: a)
                guard try followsPolicy(a, b) else { continue }
                try link(tag, a, b)
            case .unlink(let tag, let from, let to):
                let a = try reference(from, tag, source: true)
                let b = try to.map { try reference($0, tag, from: a) }
                guard try followsPolicy(a, b) else { continue }
                // An edge with an end that is gone went with it.
                if netState, try !applier.exists(a) || b.map({ try !applier.exists($0) }) ?? false { continue }
                try unlink(tag, a, b)
            }
        }
    }

    // MARK: Conflicts

    /// For a relationship edit: the merge decision of each end the context based changes on
    /// (an end it also updated or deleted). False when the edit is dropped with that object's
    /// changes (a conflict under `.fail`, the store's version kept); an end the store deleted
    /// and the policy keeps is inserted again first, with the context's values. Without this the
    /// edit met the deleted object as a missing one (`objectNotFound`) before the policy ran.
    private mutating func followsPolicy(_ ends: ObjectID?...) throws -> Bool {
        for case let id? in ends where bases[id] != nil {
            switch try decide(id, changing: []) {
            case .skip: return false
            case .reinsert(let values):
                decisions[id] = .apply
                try reinsert(id, values)
            case .apply, .merge, .replace: break
            }
        }
        return true
    }

    private mutating func decide(_ id: ObjectID, changing attributes: [ChangeSet.AttributeValue],
                                 deleting: Bool = false) throws -> Decision {
        guard let base = bases[id] else { return .apply }
        if let d = decisions[id] { return d }
        let e = try entity(id)
        // A base given by the caller (``BaseVersion/init(version:values:)``) is read one value
        // per attribute below.
        guard base.values.count == e.attributes.count else {
            throw fail(.wrongType, e.name, id, nil,
                       "its base version holds \(base.values.count) values for \(e.attributes.count) attributes")
        }
        let current = try applier.record(id)
        if let current, current.version == base.version {
            decisions[id] = .apply
            return .apply
        }
        // The conflict shows the object's whole change; an object inserted again takes only what
        // the operation meeting it sets (the set's later operations then apply in their order,
        // as they would to an object the store had kept).
        let whole = changesOfBased[id]
        var contextValues = base.values
        for a in whole?.attributes ?? attributes where a.attribute >= 0 && a.attribute < contextValues.count {
            contextValues[a.attribute] = a.value
        }
        var reinserted = base.values
        for a in attributes where a.attribute >= 0 && a.attribute < reinserted.count {
            reinserted[a.attribute] = a.value
        }
        let storeChanged = current.map { c in
            Set(e.attributes.indices.filter { c.values[$0] != base.values[$0] })
        } ?? []
        let conflict = MergeConflict(
            kind: current == nil ? .deleted : .changed, objectID: id, entity: e.name, baseVersion: base.version,
            storeVersion: current?.version,
            changedByStore: storeChanged.sorted().map { e.attributes[$0].name },
            changedByContext: e.attributes.indices.filter { contextValues[$0] != base.values[$0] }
                .map { e.attributes[$0].name },
            baseValues: base.values, storeValues: current?.values ?? [], contextValues: contextValues,
            contextDeletes: deleting || whole?.deletes == true)
        var decision: Decision
        switch policy {
        case .fail:
            conflicts.append(conflict)
            decision = .skip
        case .storeWins: decision = .skip
        case .contextWins: decision = current == nil ? .reinsert(reinserted) : .apply
        case .propertyMerge(let side):
            decision = current == nil ? .skip : .merge(storeChanged: storeChanged, preferContext: side == .context)
        case .custom(let resolve):
            switch resolve(conflict) {
            case .keepContext: decision = current == nil ? .reinsert(reinserted) : .apply
            case .keepStore: decision = .skip
            case .values(let v):
                // Exactly one value per attribute: fewer or more is the resolver's mistake, never
                // a partial write (an empty array committed the set without the object's changes).
                guard v.count == e.attributes.count else {
                    throw fail(.unknownAttribute, e.name, id, nil,
                               "the merge policy's resolver gave \(v.count) value(s) for an object of \(e.name), " +
                               "which has \(e.attributes.count) attributes (`.values` takes one per attribute)")
                }
                decision = current == nil ? .reinsert(v) : .replace(v)
            }
        }
        // Deleted by the store and by this set too: it stays deleted, and the set's edits of it
        // go with it (never a reinsertion only to delete it again), whichever operation came first.
        if case .reinsert = decision, deleting || whole?.deletes == true { decision = .skip }
        decisions[id] = decision
        return decision
    }

    // MARK: Attributes

    /// Fills defaults and checks types, required values and sizes (``ValueRules``).
    private func prepared(_ e: EntityDescription, _ id: ObjectID, _ input: [Value]) throws -> [Value] {
        try ValueRules.prepared(e, id, input, maxValueBytes: limits.maxValueBytes, fillDefaults: !valuesComplete)
    }

    /// Inserts again an object the store deleted, with the values a merge policy kept (the
    /// context's, or a custom resolver's): as they are, a null included, never filled with
    /// defaults (an optional attribute the object had cleared came back holding its default).
    private mutating func reinsert(_ id: ObjectID, _ values: [Value]) throws {
        let e = try entity(id)
        let checked = try ValueRules.prepared(e, id, values, maxValueBytes: limits.maxValueBytes, fillDefaults: false)
        try insert(id, checked, prepared: true)
    }

    /// Inserts one object. `prepared` says that `input` passed ``prepared(_:_:_:)`` already: an
    /// upsert that found no owner prepared it just before (preparing is idempotent: defaults fill
    /// nulls, then checks), or it is a context's record as the context
    /// shows it (a net-state set sends each inserted object's values so): it passed
    /// ``ValueRules/prepared(_:_:_:maxValueBytes:)`` with this schema and these limits when the
    /// context inserted it, and every later change of an attribute passed
    /// ``ValueRules/check(_:_:attribute:_:maxValueBytes:)``. Its defaults are not filled in again:
    /// an optional attribute the context cleared after the insert stays null, as the context
    /// shows it and as a save of the same insert and change stores it. Checking the values again
    /// cost about a twentieth of a child's commit (`perf` of W7) and cannot fail.
    private mutating func insert(_ id: ObjectID, _ input: [Value], prepared isPrepared: Bool = false) throws {
        let e = try entity(id)
        let values: [Value]
        if isPrepared {
            assert((try? prepared(e, id, input)) != nil, "an insert marked prepared carries values that pass the checks")
            values = input
        } else {
            values = try prepared(e, id, input)
        }
        // The id and unique keys are checked by the state as it applies the insert (the same
        // B-tree search that stores them): a clash throws before anything is committed.
        try emit(.insert(id: id, values: values))
        if !deleted.isEmpty { deleted.remove(id) }
        // From here on the id names the object it was just given to, not the owner an earlier
        // upsert of this set aliased it to. (A child applies each change set alone and commits
        // them as one set: without this, the root commit read later operations on the id as
        // operations on the alias's owner, which the child had not.)
        if !aliases.isEmpty { aliases[id] = nil }
        if checkingRequired, e.hasRequiredToOne { toOneChecks.insert(id) }
    }

    private mutating func upsert(_ id: ObjectID, _ input: [Value], _ constraint: Int) throws {
        let e = try entity(id)
        guard constraint >= 0, constraint < e.uniques.count else {
            throw fail(.unknownAttribute, e.name, id, nil, "entity has no unique constraint #\(constraint)")
        }
        let values = try prepared(e, id, input)
        guard let key = try Layout.uniqueKey(e.uniques[constraint], record: values, entity: e, id: id) else {
            throw fail(.requiredAttribute, e.name, id, Layout.uniqueFieldName(e.uniques[constraint], e),
                       "an upsert needs a value for every attribute of its unique key")
        }
        let attributes = values.enumerated().map { ChangeSet.AttributeValue(attribute: $0, value: $1) }
        if let owner = try applier.uniqueOwner(key), owner != id {
            aliases[id] = owner
            return try update(owner, attributes)
        }
        // The key is free, or the upsert's own object holds it: an object stored under the id is
        // updated (an upsert repeated with the same id was inserted again and refused as a
        // duplicate id), a new one inserted.
        if try applier.exists(id) {
            try update(id, attributes)
        } else {
            try insert(id, values, prepared: true)
        }
    }

    private mutating func update(_ id: ObjectID, _ requested: [ChangeSet.AttributeValue]) throws {
        var attributes = requested
        switch try decide(id, changing: requested) {
        case .apply: break
        case .skip: return
        case .merge(let storeChanged, let preferContext):
            // Only what the context changed is its to write; of that, what the store changed too
            // goes to the preferred side. A child's net changes list exactly what it changed (the
            // attributes that differ from what it first read, also after a rebase moved its base);
            // in any other set, an attribute equal to its base value is not a change.
            let base = bases[id]?.values ?? []
            attributes = requested.filter { a in
                let changedHere = netState || (a.attribute < base.count && base[a.attribute] != a.value)
                return changedHere && (preferContext || !storeChanged.contains(a.attribute))
            }
        case .replace(let values):
            attributes = values.enumerated().map { ChangeSet.AttributeValue(attribute: $0, value: $1) }
        case .reinsert(let values):
            decisions[id] = .apply
            return try reinsert(id, values)
        }
        let e = try entity(id)
        guard let record = try applier.record(id) else {
            throw fail(.objectNotFound, e.name, id, nil, "cannot update: no such object")
        }
        var values = record.values
        var changed: [AttributeChange] = []
        for av in attributes {
            guard av.attribute >= 0, av.attribute < e.attributes.count else {
                throw fail(.unknownAttribute, e.name, id, nil, "attribute position \(av.attribute) out of range")
            }
            let i = av.attribute
            try ValueRules.check(e, id, attribute: i, av.value, maxValueBytes: limits.maxValueBytes)
            if values[i] != av.value {
                // One change per attribute in the log (its first old value, its last new one): an
                // update naming an attribute twice logged two, which undoing had to reverse.
                if let k = changed.firstIndex(where: { $0.attribute == i }) {
                    changed[k] = AttributeChange(attribute: i, old: changed[k].old, new: av.value)
                } else {
                    changed.append(AttributeChange(attribute: i, old: values[i], new: av.value))
                }
                values[i] = av.value
            }
        }
        // Set and set back within the update: no change.
        changed.removeAll { $0.old == $0.new }
        guard !changed.isEmpty else { return }
        // Unique keys are checked as the state re-indexes them.
        try emit(.update(id: id, changes: changed, previousVersion: record.version))
    }

    // MARK: Deletes

    private mutating func delete(_ id: ObjectID) throws {
        // Depth first, as a recursion over the cascade would go, but on a stack of its own: a
        // chain of cascades tens of thousands of objects deep (a list, a deep tree) overflowed
        // the thread's stack and ended the process.
        func enter(_ id: ObjectID) throws -> CascadeFrame? {
            guard deleted.insert(id).inserted, let record = try applier.record(id) else { return nil }
            return CascadeFrame(id: id, record: record)
        }
        guard let root = try enter(id) else { return }
        // A deny is judged once the whole delete is known: a target that one of the deleted
        // objects' cascades removes (also through a relationship declared after the deny one)
        // does not refuse it. Each entry: the denying object, its relationship, every target then.
        var denials: [(id: ObjectID, entity: String, relationship: RelationshipDescription, targets: [ObjectID])] = []
        var stack = [root]
        frames: while var f = stack.popLast() {
            let relationships = f.record.entity.relationships
            if var c = f.cascade {
                while c.next < c.targets.count {
                    let t = c.targets[c.next]
                    c.next += 1
                    guard !deleted.contains(t), c.taken?.contains(t) != false, let target = try enter(t) else { continue }
                    f.cascade = c
                    stack.append(f)
                    stack.append(target)
                    continue frames
                }
                try unlinkRemaining(relationships[f.relationship], from: f.id)
                f.cascade = nil
                f.relationship += 1
            }
            while f.relationship < relationships.count {
                let r = relationships[f.relationship]
                let targets = try applier.targets(r.tag, from: f.id)
                if !targets.isEmpty {
                    switch r.deleteRule {
                    case .deny:
                        // Targets this delete is removing already (the object whose cascade reached
                        // this one) do not deny; in a child's net changes, judged whole, neither do
                        // those the set deletes by name or by a cascade.
                        let gone = netState ? try doomedBySet() : []
                        if !targets.allSatisfy({ deleted.contains($0) || gone.contains($0) }) {
                            denials.append((f.id, f.record.entity.name, r, targets.filter { !gone.contains($0) }))
                        }
                    case .cascade:
                        // A child's net changes list every object it deletes, cascades included, as
                        // its view showed them: a cascade takes only those. An object another writer
                        // linked since, or one the merge policy keeps, is unlinked below instead, as
                        // the child showed it (and a required to-one it leaves unset refuses the commit).
                        f.cascade = (targets, 0, netState ? try doomedBySet() : nil)
                        stack.append(f)
                        continue frames
                    case .nullify:
                        break
                    }
                    try unlinkRemaining(r, from: f.id)
                }
                f.relationship += 1
            }
            try emit(.delete(id: f.id, values: f.record.values, previousVersion: f.record.version))
            toOneChecks.remove(f.id)
        }
        // Refused: the save ends here, and what this delete emitted goes with it.
        for d in denials where !d.targets.allSatisfy({ deleted.contains($0) }) {
            throw fail(.deleteDenied, d.entity, d.id, d.relationship.name,
                       "\(d.targets.count) related \(d.relationship.destination) object(s) exist and the delete rule is deny")
        }
    }

    /// Unlinks whatever `id` still has through `r` as it is deleted (nullify, or a cascade target
    /// that was already going).
    private mutating func unlinkRemaining(_ r: RelationshipDescription, from id: ObjectID) throws {
        for t in try applier.targets(r.tag, from: id) {
            try emit(.unlink(relationship: r.tag, from: id, to: t))
            let inverse = schema.inverse(of: r)
            if !inverse.isToMany { toOneChecks.insert(t) }
        }
    }

    /// Everything a child's net changes delete: the objects it deletes by name that its merge
    /// policy does not keep (the set names every object its deletes remove, cascades included,
    /// and sends its deletes last).
    private mutating func doomedBySet() throws -> Set<ObjectID> {
        if let doomed { return doomed }
        var out = Set<ObjectID>()
        for id in deletesAsked.map(resolved) {
            if case .skip? = decisions[id] { continue }
            if try applier.exists(id) { out.insert(id) }
        }
        doomed = out
        return out
    }

    // MARK: Relationships

    private func relationship(_ tag: UInt16) throws -> RelationshipDescription {
        guard let r = schema.relationship(tag: tag) else {
            throw fail(.unknownRelationship, "tag \(tag >> 8)", nil, nil, "no relationship with tag \(tag)")
        }
        return r
    }

    /// The object `ref` names, for an end of relationship `tag`. A key no object holds is
    /// refused naming the relationship's source `from` when it is known (the object whose
    /// reference it is: an import finds its record by it).
    private mutating func reference(_ ref: ObjectReference, _ tag: UInt16, source: Bool = false,
                                    from: ObjectID? = nil) throws -> ObjectID {
        switch ref {
        case .id(let id): return resolved(id)
        case .unique(let entityTag, let constraint, let values):
            // The relationship's names are read only for an error: a link of an import is
            // resolved here, and copying its description cost a retain and release per name.
            // An unknown relationship is refused first, before anything else about the reference.
            _ = try rule(tag)
            guard let e = schema.entity(tag: entityTag), constraint >= 0, constraint < e.uniques.count else {
                let r = try relationship(tag)
                throw fail(.unknownEntity, r.destination, nil, r.name,
                           "reference names an unknown entity or unique constraint")
            }
            let u = e.uniques[constraint]
            guard let key = try Layout.uniqueKey(u, keyValues: values, entity: e,
                                                 id: ObjectID(high: UInt64(entityTag) << 48, low: 0)),
                  let owner = try applier.uniqueOwner(key) else {
                let r = try relationship(tag)
                throw fail(.objectNotFound, r.entityName, from, r.name,
                           "no \(e.name) with \(Layout.uniqueFieldName(u, e)) = \(ref.shown)\(source ? " (source)" : "")")
            }
            return owner
        }
    }

    private func rule(_ tag: UInt16) throws -> LinkRule {
        guard let rule = schema.linkRule(tag: tag) else {
            throw fail(.unknownRelationship, "tag \(tag >> 8)", nil, nil, "no relationship with tag \(tag)")
        }
        return rule
    }

    /// ``checkEnds(_:_:_:)`` by entity tags: both ends of the right entities and there. Where a
    /// tag differs, the description's check throws what is wrong, by name.
    private func checkEnds(_ rule: LinkRule, _ from: ObjectID, _ to: ObjectID) throws {
        guard from.entityTag == rule.sourceTag, to.entityTag == rule.destinationTag else {
            try checkEnds(try relationship(rule.tag), from, to)
            assertionFailure("ends of the wrong entities pass the check by name")
            return
        }
        guard try applier.exists(from) else {
            throw fail(.objectNotFound, try entity(from).name, from, try relationship(rule.tag).name,
                       "source object does not exist")
        }
        guard try applier.exists(to) else {
            throw fail(.objectNotFound, try entity(from).name, from, try relationship(rule.tag).name,
                       "target \(to) does not exist")
        }
    }

    private func checkEnds(_ r: RelationshipDescription, _ from: ObjectID, _ to: ObjectID) throws {
        let source = try entity(from)
        guard source.name == r.entityName else {
            throw fail(.wrongDestination, source.name, from, r.name, "relationship belongs to \(r.entityName)")
        }
        guard try applier.exists(from) else {
            throw fail(.objectNotFound, source.name, from, r.name, "source object does not exist")
        }
        let target = try entity(to)
        guard target.name == r.destination else {
            throw fail(.wrongDestination, source.name, from, r.name,
                       "target \(to) is a \(target.name), expected \(r.destination)")
        }
        guard try applier.exists(to) else {
            throw fail(.objectNotFound, source.name, from, r.name, "target \(to) does not exist")
        }
    }

    private mutating func link(_ tag: UInt16, _ from: ObjectID, _ to: ObjectID) throws {
        // By the relationship's ``LinkRule``: the link step of an import runs once per edge.
        let r = try rule(tag)
        try checkEnds(r, from, to)
        if r.isToMany, try applier.linked(r.tag, from: from, to: to) {
            return
        }
        if !r.isToMany {
            for old in try applier.targets(r.tag, from: from) {
                if old == to { return }
                try emit(.unlink(relationship: r.tag, from: from, to: old))
                if !r.inverseIsToMany { toOneChecks.insert(old) }
            }
        }
        if !r.inverseIsToMany {
            for old in try applier.targets(r.inverseTag, from: to) where old != from {
                try emit(.unlink(relationship: r.inverseTag, from: to, to: old))
                if !r.isToMany { toOneChecks.insert(old) }
            }
        }
        try emit(.link(relationship: r.tag, from: from, to: to))
    }

    private mutating func unlink(_ tag: UInt16, _ from: ObjectID, _ to: ObjectID?) throws {
        let r = try relationship(tag)
        guard let to else {
            // A child's net changes clear a to-many whole (an object deleted and inserted again).
            guard !r.isToMany || netState else {
                throw fail(.unknownRelationship, r.entityName, from, r.name, "unlinking a to-many needs a target")
            }
            for old in try applier.targets(r.tag, from: from) {
                try emit(.unlink(relationship: r.tag, from: from, to: old))
                if !schema.inverse(of: r).isToMany { toOneChecks.insert(old) }
            }
            toOneChecks.insert(from)
            return
        }
        try checkEnds(try rule(tag), from, to)
        guard try applier.linked(r.tag, from: from, to: to) else { return }
        try emit(.unlink(relationship: r.tag, from: from, to: to))
        toOneChecks.insert(from)
        toOneChecks.insert(to)
    }

    private func checkRequiredRelationships() throws {
        for id in toOneChecks.sorted() {
            // Most entities have no required to-one: no lookup for their objects.
            guard let e = schema.entity(tag: id.entityTag), e.hasRequiredToOne, try applier.exists(id) else { continue }
            for r in e.relationships where !r.isToMany && !r.isOptional {
                if try applier.targets(r.tag, from: id).isEmpty {
                    throw fail(.requiredRelationship, e.name, id, r.name, "a \(r.destination) is required")
                }
            }
        }
    }
}

/// One object of a delete's cascade, on ``SaveResolver``'s own stack (see its `delete`).
private struct CascadeFrame {
    let id: ObjectID
    let record: Record
    /// The relationship of `record.entity` being handled.
    var relationship = 0
    /// While cascading through it: its targets, the next one to visit, and the objects a child's
    /// net changes let a cascade take (nil: every target).
    var cascade: (targets: [ObjectID], next: Int, taken: Set<ObjectID>?)?
}
