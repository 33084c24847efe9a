import Foundation
@testable import Strata

// A reference model of contexts: the store, pinned view contexts and trees of child contexts as
// plain values, with every rule written out once. The differential test (ContextModelTests)
// drives the real store and this model with the same steps and compares every read.
//
// Nothing here is fast or clever on purpose: a read materialises the whole view of a context
// (the store or a snapshot, then each layer applied by the rule), which is O(store) and fine for
// the few dozen objects the test uses. Comments quote the rule of the context semantics each
// piece implements; where the semantics leave a case open, the comment says "Decision:" and what
// was chosen (what a Core Data or GRDB user would expect).
//
// The model reads the schema (entities, attributes, relationships, inverses, delete rules,
// unique constraints, required to-ones) from a `Schema` value, so it follows the library schema
// and its variants without knowing their names.

// MARK: - Values

/// One object: its entity, one value per attribute, and its version ("version = id of the
/// transaction that last changed its attributes"; 0 for an object only a child holds).
struct ModelObject: Equatable, Sendable {
    var entity: UInt16
    var values: [Value]
    var version: UInt64
}

/// An edge (relationship r, from a, to b). "Every edge also exists as its inverse (inv r, b, a)":
/// the model stores every edge in both directions.
struct ModelEdge: Hashable, Comparable, Sendable {
    let rel: UInt16
    let from: ObjectID
    let to: ObjectID

    static func < (x: ModelEdge, y: ModelEdge) -> Bool { (x.rel, x.from, x.to) < (y.rel, y.from, y.to) }
}

/// A relationship key (r, a): the whole set of targets of `a` through `r`.
struct ModelKey: Hashable, Comparable, Sendable {
    let rel: UInt16
    let object: ObjectID

    static func < (x: ModelKey, y: ModelKey) -> Bool { (x.rel, x.object) < (y.rel, y.object) }
}

/// A state of the shape the semantics call S: live objects and edges. The store, a pinned
/// snapshot and the view of every context are states.
struct ModelState: Equatable, Sendable {
    var objects: [ObjectID: ModelObject] = [:]
    var edges: Set<ModelEdge> = []

    func exists(_ id: ObjectID) -> Bool { objects[id] != nil }

    /// The targets of `id` through `rel`, in id order ("relatedIDs(r, of: a) = the b with (r, a, b)
    /// visible, in id order").
    func targets(_ rel: UInt16, of id: ObjectID) -> [ObjectID] {
        edges.filter { $0.rel == rel && $0.from == id }.map(\.to).sorted()
    }
}

/// The schema facts the rules need.
struct ModelSchema: Sendable {
    let schema: Schema

    func entity(_ id: ObjectID) -> EntityDescription {
        guard let e = schema.entity(tag: id.entityTag) else { preconditionFailure("the model only uses ids of the schema's entities") }
        return e
    }

    func relationship(_ tag: UInt16) -> RelationshipDescription {
        guard let r = schema.relationship(tag: tag) else { preconditionFailure("the model only uses the schema's relationships") }
        return r
    }

    func inverse(_ tag: UInt16) -> UInt16 { schema.inverse(of: relationship(tag)).tag }

    func inverse(_ e: ModelEdge) -> ModelEdge { ModelEdge(rel: inverse(e.rel), from: e.to, to: e.from) }

    func isToOne(_ tag: UInt16) -> Bool { !relationship(tag).isToMany }
}

// MARK: - Failures

/// What a refused change or commit throws, as far as the public error type tells it apart.
enum ModelFailureKind: Hashable, Sendable, CustomStringConvertible {
    case validation(ValidationFailure.Kind)
    case conflict

    var description: String {
        switch self {
        case .validation(let k): "validation(\(k.rawValue))"
        case .conflict: "conflict"
        }
    }

    /// The kind of a real error (nil: neither a validation failure nor a conflict).
    init?(_ error: Error) {
        switch error as? StrataError {
        case .validation(let f): self = .validation(f.kind)
        case .conflict: self = .conflict
        default: return nil
        }
    }
}

/// A refusal. `kinds` holds every failure the model found: when a change breaks several rules,
/// which one a real implementation reports first is not part of the semantics, so any of them is
/// accepted. `culprits` names the objects concerned (the test uses them to make a fix).
struct ModelFailure: Error, Sendable, CustomStringConvertible {
    var kinds: Set<ModelFailureKind> = []
    var culprits: [ModelFailureKind: [ObjectID]] = [:]

    init() {}
    init(_ kind: ValidationFailure.Kind, _ id: ObjectID) { add(.validation(kind), id) }

    mutating func add(_ kind: ModelFailureKind, _ id: ObjectID) {
        kinds.insert(kind)
        culprits[kind, default: []].append(id)
    }

    mutating func add(_ other: ModelFailure) {
        for (k, ids) in other.culprits { for id in ids { add(k, id) } }
    }

    var isEmpty: Bool { kinds.isEmpty }
    var description: String { kinds.map(\.description).sorted().joined(separator: " or ") }
}

// MARK: - Operations and the writer's rules

/// An attribute position and a value.
struct ModelAttribute: Equatable, Sendable {
    let index: Int
    let value: Value
}

/// One requested change, as a `ChangeSet.Operation` (ids only, no upserts).
enum ModelOp: Equatable, Sendable {
    case insert(ObjectID, [Value])
    case update(ObjectID, [ModelAttribute])
    case delete(ObjectID)
    /// Adds an edge (to-many) or sets the target (to-one).
    case link(UInt16, ObjectID, ObjectID)
    /// Removes an edge; for a to-one, nil clears whatever is set.
    case unlink(UInt16, ObjectID, ObjectID?)
}

/// The writer's rules (SaveResolver) applied to a state, one operation at a time: the rules of
/// `store.save` and of every change made in a child ("each change is validated against view(C)
/// with the writer's rules ... a refused change throws and leaves L unchanged").
struct ModelWriter {
    let schema: ModelSchema
    var state: ModelState
    /// The version written records get: the transaction's id (0 inside a child).
    let version: UInt64
    /// Whether anything changed: the writer logs a transaction only then (a save that changes
    /// nothing returns the previous transaction's id).
    private(set) var changed = false

    init(schema: ModelSchema, state: ModelState, version: UInt64) {
        self.schema = schema
        self.state = state
        self.version = version
    }

    mutating func apply(_ op: ModelOp) throws {
        switch op {
        case .insert(let id, let values): try insert(id, values)
        case .update(let id, let attributes): try update(id, attributes)
        case .delete(let id): try delete(id)
        case .link(let r, let a, let b): try link(r, a, b)
        case .unlink(let r, let a, let b): try unlink(r, a, b)
        }
    }

    // Effects (no validation): the building blocks of the rules below and of commits.

    mutating func put(_ id: ObjectID, _ values: [Value]) {
        state.objects[id] = ModelObject(entity: id.entityTag, values: values, version: version)
        changed = true
    }

    mutating func addEdge(_ e: ModelEdge) {
        guard !state.edges.contains(e) else { return }
        state.edges.insert(e)
        state.edges.insert(schema.inverse(e))
        changed = true
    }

    mutating func removeEdge(_ e: ModelEdge) {
        guard state.edges.contains(e) else { return }
        state.edges.remove(e)
        state.edges.remove(schema.inverse(e))
        changed = true
    }

    /// Writes `attributes` over the object's values; returns the positions whose value changed
    /// (an update that changes nothing is no change: "only differences are logged").
    mutating func write(_ id: ObjectID, _ attributes: [ModelAttribute]) -> Set<Int> {
        guard var object = state.objects[id] else { return [] }
        var differing: Set<Int> = []
        for a in attributes where object.values[a.index] != a.value {
            object.values[a.index] = a.value
            differing.insert(a.index)
        }
        guard !differing.isEmpty else { return [] }
        object.version = version
        state.objects[id] = object
        changed = true
        return differing
    }

    /// Values with defaults filled in, checked for required values ("types, required values").
    func prepared(_ id: ObjectID, _ input: [Value]) throws -> [Value] {
        let e = schema.entity(id)
        var values = input
        for a in e.attributes {
            if values[a.index].isNull, let d = a.defaultValue { values[a.index] = d }
            if values[a.index].isNull, !a.isOptional { throw ModelFailure(.requiredAttribute, id) }
        }
        return values
    }

    /// The unique constraints of `id` that clash with another live object ("unique keys"):
    /// only the constraints named by `constraints` (nil: all of them).
    func uniqueClash(_ id: ObjectID, among constraints: Set<Int>? = nil) -> Bool {
        guard let object = state.objects[id] else { return false }
        let e = schema.entity(id)
        for (i, u) in e.uniques.enumerated() where constraints?.contains(i) ?? true {
            let key = u.attributes.map { object.values[$0] }
            if key.contains(where: \.isNull) { continue }
            for (other, o) in state.objects where other != id && o.entity == object.entity && u.attributes.map({ o.values[$0] }) == key {
                return true
            }
        }
        return false
    }

    /// Whether `id` clashes on one of `constraints` with another object that does not hold that
    /// key in `below` (a clash of this state's own making, not one `below` already shows).
    func uniqueClash(_ id: ObjectID, among constraints: Set<Int>, notHeldIn below: ModelState) -> Bool {
        guard let object = state.objects[id] else { return false }
        let e = schema.entity(id)
        for (i, u) in e.uniques.enumerated() where constraints.contains(i) {
            let key = u.attributes.map { object.values[$0] }
            if key.contains(where: \.isNull) { continue }
            for (other, o) in state.objects where other != id && o.entity == object.entity && u.attributes.map({ o.values[$0] }) == key {
                if let was = below.objects[other], u.attributes.map({ was.values[$0] }) == key { continue }
                return true
            }
        }
        return false
    }

    /// The unique constraints that contain one of `attributes`.
    func constraints(of id: ObjectID, touching attributes: Set<Int>) -> Set<Int> {
        Set(schema.entity(id).uniques.enumerated().filter { !attributes.isDisjoint(with: $0.element.attributes) }.map(\.offset))
    }

    // The rules, one operation at a time.

    mutating func insert(_ id: ObjectID, _ input: [Value]) throws {
        let values = try prepared(id, input)
        // "The id and unique keys are checked by the state as it applies the insert": either may
        // be reported when both are broken.
        var failure = ModelFailure()
        if state.exists(id) { failure.add(.validation(.duplicateID), id) }
        var probe = self
        probe.put(id, values)
        if probe.uniqueClash(id) { failure.add(.validation(.uniqueConstraint), id) }
        if !failure.isEmpty { throw failure }
        put(id, values)
    }

    mutating func update(_ id: ObjectID, _ attributes: [ModelAttribute]) throws {
        guard state.exists(id) else { throw ModelFailure(.objectNotFound, id) }
        let e = schema.entity(id)
        for a in attributes where a.value.isNull && !e.attributes[a.index].isOptional { throw ModelFailure(.requiredAttribute, id) }
        let differing = write(id, attributes)
        // Decision: an update checks the unique constraints whose attributes it changes (a
        // clash already present in a child's view, made by the store under an object the
        // child changed, is reported when that constraint is written, not on every change).
        if uniqueClash(id, among: constraints(of: id, touching: differing)) { throw ModelFailure(.uniqueConstraint, id) }
    }

    mutating func delete(_ id: ObjectID) throws {
        guard state.exists(id) else { throw ModelFailure(.objectNotFound, id) }
        var deleting: Set<ObjectID> = []
        try delete(id, &deleting, deny: true)
    }

    /// "Delete rules deny / cascade / nullify", relationship by relationship in schema order, as
    /// the writer does. `deny: false` is for commits, which check deny on the whole set first.
    /// `only` (a commit's net deletes): a cascade takes only those objects, the ones the child's
    /// view deleted; any other target (linked since by another writer, or kept by the merge
    /// policy) is unlinked, as the child showed it.
    mutating func delete(_ id: ObjectID, _ deleting: inout Set<ObjectID>, deny: Bool,
                         only: Set<ObjectID>? = nil) throws {
        guard deleting.insert(id).inserted, state.exists(id) else { return }
        for r in schema.entity(id).relationships {
            let targets = state.targets(r.tag, of: id)
            guard !targets.isEmpty else { continue }
            switch r.deleteRule {
            case .deny:
                // "A deny rule does not refuse a delete whose related objects the same delete is
                // removing" (the object whose cascade reached this one).
                if deny, targets.contains(where: { !deleting.contains($0) }) { throw ModelFailure(.deleteDenied, id) }
            case .cascade:
                for t in targets where !deleting.contains(t) && only?.contains(t) != false {
                    try delete(t, &deleting, deny: deny, only: only)
                }
            case .nullify: break
            }
            for t in state.targets(r.tag, of: id) { removeEdge(ModelEdge(rel: r.tag, from: id, to: t)) }
        }
        state.objects[id] = nil
        changed = true
    }

    mutating func link(_ rel: UInt16, _ a: ObjectID, _ b: ObjectID) throws {
        // "relationship ends exist"
        guard state.exists(a) else { throw ModelFailure(.objectNotFound, a) }
        guard state.exists(b) else { throw ModelFailure(.objectNotFound, b) }
        let r = schema.relationship(rel)
        let inverse = schema.inverse(rel)
        if r.isToMany, state.edges.contains(ModelEdge(rel: rel, from: a, to: b)) { return }
        // "to-one replacement"
        if !r.isToMany {
            for old in state.targets(rel, of: a) {
                if old == b { return }
                removeEdge(ModelEdge(rel: rel, from: a, to: old))
            }
        }
        if schema.isToOne(inverse) {
            for old in state.targets(inverse, of: b) where old != a { removeEdge(ModelEdge(rel: inverse, from: b, to: old)) }
        }
        addEdge(ModelEdge(rel: rel, from: a, to: b))
    }

    mutating func unlink(_ rel: UInt16, _ a: ObjectID, _ b: ObjectID?) throws {
        guard let b else {
            // Clearing a to-one checks no end: nothing linked, nothing to do.
            guard schema.isToOne(rel) else { throw ModelFailure(.unknownRelationship, a) }
            for old in state.targets(rel, of: a) { removeEdge(ModelEdge(rel: rel, from: a, to: old)) }
            return
        }
        guard state.exists(a) else { throw ModelFailure(.objectNotFound, a) }
        guard state.exists(b) else { throw ModelFailure(.objectNotFound, b) }
        removeEdge(ModelEdge(rel: rel, from: a, to: b))
    }

    /// "Required to-one relationships are checked only at the root commit" (and at every save).
    func requiredViolations() -> [ObjectID] {
        state.objects.keys.sorted().filter { id in
            schema.entity(id).relationships.contains { !$0.isToMany && !$0.isOptional && state.targets($0.tag, of: id).isEmpty }
        }
    }
}

// MARK: - Layers

/// A layer entry for an object: its full record, or deleted.
enum ModelEntry: Equatable, Sendable {
    case object(ModelObject)
    case deleted
}

/// A base: "version and values when this context chain first touched it".
struct ModelBase: Equatable, Sendable {
    var version: UInt64
    var values: [Value]
}

/// A layer L (a child's pending changes) or K (what a child of a pinned view committed that the
/// view does not show yet).
struct ModelLayer: Sendable {
    /// "records: id -> full record (all attribute values) | deleted."
    var records: [ObjectID: ModelEntry] = [:]
    /// "inserted: ids the child inserted (not visible below when inserted)."
    var inserted: Set<ObjectID> = []
    /// "edges: explicit facts (r, a, b) -> present | absent ... (each stored in both directions)."
    var edges: [ModelEdge: Bool] = [:]
    /// "replaced: keys (r, a) whose whole target set this layer defines."
    var replaced: Set<ModelKey> = []
    /// Whether each edge with a fact was visible when this layer first set one for it
    /// ("the edge as the child saw it at first touch"): a fact equal to it is no change.
    var edgeFirst: [ModelEdge: Bool] = [:]
    /// The values the child read when it first changed each object it did not insert ("the
    /// child's base of that object (the values it read at first touch)"): net updates are the
    /// attributes that differ from these.
    var firstRead: [ObjectID: [Value]] = [:]
    /// The base each changed existing object carries to the root ("version and values when this
    /// context chain first touched it").
    var bases: [ObjectID: ModelBase] = [:]

    var isEmpty: Bool { records.isEmpty && edges.isEmpty && replaced.isEmpty }

    /// "apply(L, lower)".
    func applied(over lower: ModelState, _ schema: ModelSchema) -> ModelState {
        var s = ModelState()
        // "record(id) = L.records[id] if it has an entry (nil when deleted), else lower.record(id)."
        s.objects = lower.objects
        for (id, entry) in records {
            switch entry {
            case .object(let o): s.objects[id] = o
            case .deleted: s.objects[id] = nil
            }
        }
        // "edge (r, a, b) is visible iff exists(a) and exists(b) and L.edges(r,a,b) == present, or
        //  L.edges(r,a,b) has no entry and (r,a) not in replaced and (inv r, b) not in replaced and
        //  the edge is visible in lower."
        for e in lower.edges where edges[e] == nil
            && !replaced.contains(ModelKey(rel: e.rel, object: e.from))
            && !replaced.contains(ModelKey(rel: schema.inverse(e.rel), object: e.to)) {
            s.edges.insert(e)
        }
        for (e, present) in edges where present { s.edges.insert(e) }
        s.edges = s.edges.filter { s.exists($0.from) && s.exists($0.to) }
        return s
    }

    /// Records in this layer a change of its view from `before` to `after` (the view a change or
    /// a commit into this context was made on, and its result). This is how every layer entry
    /// comes to be; it states the definitions of the layer:
    /// - "An object gets an entry when the child inserts, updates or deletes it (cascade deletes
    ///   included). The entry is the record as the child saw it when it first changed it, plus
    ///   its changes." An update that changes no value is no change (as the writer logs only
    ///   differences), so it makes no entry. (Decision.)
    /// - "inserted: ids the child inserted (not visible below when inserted)": an id deleted here
    ///   and inserted again is not an insert; it is a new object under the same id, which starts
    ///   without relationships (its keys stay replaced). (Decision.)
    /// - "edges: explicit facts ... for every edge the child added or removed".
    /// - "replaced: every to-one key (r, a) whose target changed here ... and every key (r, x) of
    ///   every object x deleted here."
    /// `base(id)` gives the base inherited for an object first touched here (nil: the values read).
    mutating func record(from before: ModelState, to after: ModelState, lower: ModelState, _ schema: ModelSchema,
                         base: (ObjectID) -> ModelBase?) {
        for id in Set(before.objects.keys).union(after.objects.keys).sorted() {
            let b = before.objects[id], a = after.objects[id]
            guard b?.values != a?.values else { continue }
            if records[id] == nil, let b {
                firstRead[id] = b.values
                bases[id] = base(id) ?? ModelBase(version: b.version, values: b.values)
            }
            records[id] = a.map { .object($0) } ?? .deleted
            if b == nil, a != nil, !lower.exists(id) { inserted.insert(id) }
            if b == nil, a != nil {
                // Decision: a new object starts without relationships, also when this layer holds
                // edges it gave an object of the same id that the state below deleted since.
                for (e, present) in edges where present && (e.from == id || e.to == id) { edges[e] = false }
            }
            if b != nil, a == nil {
                for r in schema.entity(id).relationships { replaced.insert(ModelKey(rel: r.tag, object: id)) }
                // The deleted object's edges are removed, including facts this layer holds about
                // it (so that an object inserted again under its id starts with none).
                for e in edges.keys where e.from == id || e.to == id { edges[e] = false }
            }
        }
        let changedEdges = before.edges.symmetricDifference(after.edges)
        for e in changedEdges {
            if edges[e] == nil { edgeFirst[e] = before.edges.contains(e) }
            edges[e] = after.edges.contains(e)
        }
        for e in changedEdges where schema.isToOne(e.rel) {
            let key = ModelKey(rel: e.rel, object: e.from)
            replaced.insert(key)
            // The key's targets are now exactly `after`'s.
            for old in edges.keys where old.rel == key.rel && old.from == key.object && !after.edges.contains(old) {
                edges[old] = false
                edges[schema.inverse(old)] = false
            }
        }
    }

    /// Sets this layer to `state` for the object `id` (its record and all its keys).
    mutating func pin(_ id: ObjectID, to state: ModelState, _ schema: ModelSchema) {
        if let o = state.objects[id] {
            records[id] = .object(o)
        } else {
            records[id] = .deleted
            for r in schema.entity(id).relationships { replaced.insert(ModelKey(rel: r.tag, object: id)) }
            for e in edges.keys where e.from == id || e.to == id { edges[e] = false }
        }
    }

    /// Sets this layer to `state` for the key `key` (its whole target set).
    mutating func pin(_ key: ModelKey, to state: ModelState, _ schema: ModelSchema) {
        replaced.insert(key)
        for e in edges.keys where e.rel == key.rel && e.from == key.object {
            edges[e] = false
            edges[schema.inverse(e)] = false
        }
        for t in state.targets(key.rel, of: key.object) {
            let e = ModelEdge(rel: key.rel, from: key.object, to: t)
            edges[e] = true
            edges[schema.inverse(e)] = true
        }
    }

    /// Sets this layer to `state` for the edge `e` (both directions).
    mutating func pin(_ e: ModelEdge, to state: ModelState, _ schema: ModelSchema) {
        edges[e] = state.edges.contains(e)
        edges[schema.inverse(e)] = state.edges.contains(e)
    }
}

// MARK: - Net change sets

/// "The net change set of a layer (what commit() sends). Derived from L (never a replay of the
/// operations made)."
struct ModelNetChanges: Sendable, CustomStringConvertible {
    struct Insert: Sendable { let id: ObjectID; let values: [Value] }
    struct Update: Sendable { let id: ObjectID; let attributes: [ModelAttribute] }
    struct ToOne: Sendable { let key: ModelKey; let target: ObjectID? }
    struct EdgeFact: Sendable { let edge: ModelEdge; let present: Bool }

    var inserts: [Insert] = []
    var updates: [Update] = []
    var toOnes: [ToOne] = []
    /// To-many keys the set defines whole: every edge the target state has for them goes first.
    var cleared: [ModelKey] = []
    var edges: [EdgeFact] = []
    var deletes: [ObjectID] = []

    var isEmpty: Bool { inserts.isEmpty && updates.isEmpty && toOnes.isEmpty && cleared.isEmpty && edges.isEmpty && deletes.isEmpty }

    var description: String {
        "\(inserts.count) insert(s), \(updates.count) update(s), \(toOnes.count + edges.count) edge edit(s), \(deletes.count) delete(s)"
    }

    init() {}

    /// The net change set of `layer`, whose context's view is `view` at commit time.
    init(_ layer: ModelLayer, view: ModelState, _ schema: ModelSchema) {
        // "1. inserts: every inserted id that still exists in L, with its values;"
        for id in layer.inserted.sorted() {
            if case .object(let o) = layer.records[id] { inserts.append(Insert(id: id, values: o.values)) }
        }
        // "2. updates: every non-inserted id with a record in L, with the attributes whose value
        //  differs from the child's base of that object (the values it read at first touch);"
        // Decision: an object whose values are back to those it read (changed and changed back)
        // sends no update, so it is not a changed object and is not judged by the merge policy.
        for (id, entry) in layer.records.sorted(by: { $0.key < $1.key }) where !layer.inserted.contains(id) {
            guard case .object(let o) = entry, let first = layer.firstRead[id] else { continue }
            let attributes = o.values.indices.filter { o.values[$0] != first[$0] }.map { ModelAttribute(index: $0, value: o.values[$0]) }
            if !attributes.isEmpty { updates.append(Update(id: id, attributes: attributes)) }
        }
        // "3. edges: for each replaced to-one key (r,a): link to its present target or clear it;
        //  every other explicit edge entry: link (present) or unlink (absent) — skipping entries
        //  whose ends do not exist in view(C) at commit time;"
        // Decision: the skip applies to replaced keys too (the key of an object that does not
        // exist is its delete's business).
        for key in layer.replaced.sorted() where schema.isToOne(key.rel) && view.exists(key.object) {
            toOnes.append(ToOne(key: key, target: view.targets(key.rel, of: key.object).first))
        }
        // Decision: a replaced to-many key of an object that lives in L (deleted and inserted
        // again here: "starts without relationships") is sent whole too: the object commits
        // without the edges the state below gave it, as the child shows it.
        for key in layer.replaced.sorted() where !schema.isToOne(key.rel) && view.exists(key.object) && !layer.inserted.contains(key.object) {
            cleared.append(key)
        }
        func covered(_ e: ModelEdge) -> Bool {
            let inverse = schema.inverse(e.rel)
            return (schema.isToOne(e.rel) && layer.replaced.contains(ModelKey(rel: e.rel, object: e.from)))
                || (schema.isToOne(inverse) && layer.replaced.contains(ModelKey(rel: inverse, object: e.to)))
        }
        for (e, present) in layer.edges.sorted(by: { $0.key < $1.key }) {
            // One direction of each fact: the one of the smaller relationship tag.
            let inverse = schema.inverse(e)
            guard e.rel < inverse.rel || (e.rel == inverse.rel && e.from <= e.to) else { continue }
            guard !covered(e), view.exists(e.from), view.exists(e.to) else { continue }
            // Decision: an edge between two objects the layer holds no record of (their edges
            // are what they are below), whose fact says what the child saw at first touch (added
            // and removed again), is no change, like a value changed back: it is not sent, so
            // what another writer did to that edge since stays.
            if layer.records[e.from] == nil, layer.records[e.to] == nil,
               !layer.replaced.contains(ModelKey(rel: e.rel, object: e.from)),
               !layer.replaced.contains(ModelKey(rel: inverse.rel, object: e.to)),
               layer.edgeFirst[e] == present { continue }
            edges.append(EdgeFact(edge: e, present: present))
        }
        // "4. deletes: every non-inserted id deleted in L"
        for (id, entry) in layer.records.sorted(by: { $0.key < $1.key }) where entry == .deleted && !layer.inserted.contains(id) {
            deletes.append(id)
        }
    }

    /// Every object id the set names as inserted, updated or deleted.
    var objectIDs: [ObjectID] { inserts.map(\.id) + updates.map(\.id) + deletes }
}

/// What a merge policy decides for one changed object at the root.
enum ModelDecision: Equatable, Sendable {
    case apply
    /// The object's changes (and edge edits touching it) are dropped.
    case skip
    /// Only attributes the store did not change, plus (preferring the context) all.
    case merge(storeChanged: Set<Int>, preferContext: Bool)
    /// The store deleted it: insert it again with these values.
    case reinsert([Value])
}

/// A child's merge policy (the non-custom `MergePolicy` cases).
enum ModelPolicy: Equatable, Sendable, CustomStringConvertible {
    case fail, storeWins, contextWins
    case propertyMerge(preferContext: Bool)

    var mergePolicy: MergePolicy {
        switch self {
        case .fail: .fail
        case .storeWins: .storeWins
        case .contextWins: .contextWins
        case .propertyMerge(let c): .propertyMerge(preferring: c ? .context : .store)
        }
    }

    var description: String {
        switch self {
        case .fail: ".fail"
        case .storeWins: ".storeWins"
        case .contextWins: ".contextWins"
        case .propertyMerge(let c): ".propertyMerge(\(c ? ".context" : ".store"))"
        }
    }
}

extension ModelWriter {
    /// Applies a net change set as one unit: to a parent child's view ("the parent applies the net
    /// change set with its own rules (validated against view(parent))") or, with `root`, to the
    /// latest committed state ("the writer applies the net change set to the latest committed S
    /// in one transaction, validating again (types, uniques, ends, delete rules, required
    /// to-ones)").
    ///
    /// Decision: the set is validated as a whole, on its result, not operation by operation in
    /// some order: a child whose every change was valid commits into an unchanged parent or store,
    /// whatever the order of its parts (a swap of two unique names, a delete and an insert of
    /// the same name, deleting a genre and the tracks that denied it). So:
    /// - unique keys are checked on the result, for the constraints the set writes;
    /// - deny is checked on the whole delete: refused when an object the set deletes (explicitly
    ///   or by cascade) keeps a deny target that the set does not delete;
    /// - a link needs both ends to exist (objectNotFound); an unlink whose end is gone is a no-op
    ///   (the edge went with it);
    /// - in a parent child, updating an object the parent no longer has is objectNotFound,
    ///   deleting one is a no-op (both sides want it gone); at the root those objects have bases
    ///   and the merge policy decides.
    mutating func apply(_ n: ModelNetChanges, decisions: [ObjectID: ModelDecision], root: Bool) throws {
        var failure = ModelFailure()
        var uniqueChecks: [(ObjectID, Set<Int>?)] = []
        func skipped(_ ids: ObjectID...) -> Bool { ids.contains { decisions[$0] == .skip } }

        for i in n.inserts {
            if state.exists(i.id) {
                failure.add(.validation(.duplicateID), i.id)
                continue
            }
            do {
                put(i.id, try prepared(i.id, i.values))
                uniqueChecks.append((i.id, nil))
            } catch let f as ModelFailure { failure.add(f) }
        }
        for u in n.updates {
            var attributes = u.attributes
            switch decisions[u.id] ?? .apply {
            case .skip: continue
            case .reinsert(let values):
                put(u.id, values)
                uniqueChecks.append((u.id, nil))
                continue
            case .merge(let storeChanged, let preferContext):
                attributes = attributes.filter { preferContext || !storeChanged.contains($0.index) }
            case .apply: break
            }
            guard state.exists(u.id) else {
                failure.add(.validation(.objectNotFound), u.id)
                continue
            }
            let differing = write(u.id, attributes)
            uniqueChecks.append((u.id, constraints(of: u.id, touching: differing)))
        }
        for key in n.cleared where !skipped(key.object) && state.exists(key.object) {
            for t in state.targets(key.rel, of: key.object) { removeEdge(ModelEdge(rel: key.rel, from: key.object, to: t)) }
        }
        for t in n.toOnes {
            guard !skipped(t.key.object), !skipped(t.target ?? t.key.object) else { continue }
            if let target = t.target {
                guard state.exists(t.key.object), state.exists(target) else {
                    failure.add(.validation(.objectNotFound), state.exists(target) ? t.key.object : target)
                    continue
                }
                do { try link(t.key.rel, t.key.object, target) } catch let f as ModelFailure { failure.add(f) }
            } else {
                for old in state.targets(t.key.rel, of: t.key.object) { removeEdge(ModelEdge(rel: t.key.rel, from: t.key.object, to: old)) }
            }
        }
        for f in n.edges {
            guard !skipped(f.edge.from, f.edge.to) else { continue }
            let ends = state.exists(f.edge.from) && state.exists(f.edge.to)
            if f.present {
                guard ends else {
                    failure.add(.validation(.objectNotFound), state.exists(f.edge.from) ? f.edge.to : f.edge.from)
                    continue
                }
                do { try link(f.edge.rel, f.edge.from, f.edge.to) } catch let x as ModelFailure { failure.add(x) }
            } else if ends {
                removeEdge(f.edge)
            }
        }
        // Deletes: "a delete of an object this save already deleted, e.g. by cascade, is a no-op".
        let deleting = n.deletes.filter { !skipped($0) && state.exists($0) }
        let named = Set(deleting)
        var doomed: Set<ObjectID> = []
        var probe = self
        for id in deleting { try? probe.delete(id, &doomed, deny: false, only: named) }
        for id in doomed.sorted() {
            for r in schema.entity(id).relationships where r.deleteRule == .deny {
                if state.targets(r.tag, of: id).contains(where: { !doomed.contains($0) }) { failure.add(.validation(.deleteDenied), id) }
            }
        }
        var done: Set<ObjectID> = []
        for id in deleting { try? delete(id, &done, deny: false, only: named) }
        for (id, constraints) in uniqueChecks where state.exists(id) && uniqueClash(id, among: constraints) {
            failure.add(.validation(.uniqueConstraint), id)
        }
        if root { for id in requiredViolations() { failure.add(.validation(.requiredRelationship), id) } }
        if !failure.isEmpty { throw failure }
    }
}

// MARK: - Contexts

/// A child context of the model.
struct ModelChild: Sendable {
    /// The context it commits into: a view context or another child.
    let parent: Int
    let parentIsView: Bool
    let policy: ModelPolicy
    /// L: the pending layer.
    var layer = ModelLayer()
    /// K: what it committed that its pinned parent view does not show yet (children of views only).
    var committed = ModelLayer()
}

/// What a commit did.
enum ModelCommitResult: Equatable, Sendable {
    /// Into a parent child (returns nil).
    case nested
    /// At the root: nothing to commit (returns nil).
    case nothing
    /// At the root, the set sent: `created` is the new transaction's id, nil when the set changed
    /// nothing in the store (the writer then returns the previous transaction's id).
    case root(created: UInt64?)
}

/// The store, its view contexts and its children.
struct ContextModel: Sendable {
    let schema: ModelSchema
    /// The latest committed state S.
    private(set) var store = ModelState()
    /// The id of the last transaction (0: none yet).
    private(set) var head: UInt64 = 0
    /// View contexts by number: nil for an auto-refreshing one, else the pinned snapshot.
    private(set) var views: [Int: ModelState?] = [:]
    private(set) var children: [Int: ModelChild] = [:]

    init(schema: Schema) {
        self.schema = ModelSchema(schema: schema)
    }

    func isView(_ ctx: Int) -> Bool { views[ctx] != nil }
    func isChild(_ ctx: Int) -> Bool { children[ctx] != nil }
    var contexts: [Int] { (Array(views.keys) + Array(children.keys)).sorted() }

    /// Nesting depth: 0 for a view, 1 for a child of a view.
    func depth(_ ctx: Int) -> Int {
        guard let c = children[ctx] else { return 0 }
        return 1 + depth(c.parent)
    }

    /// The view context at the root of `ctx`'s chain.
    func rootView(_ ctx: Int) -> Int {
        guard let c = children[ctx] else { return ctx }
        return rootView(c.parent)
    }

    // MARK: Reading

    /// What `ctx` reads.
    /// - "Main context / autoRefresh view: every read sees the latest committed S."
    /// - "Pinned view: reads the snapshot pinned at creation (or at the last refresh())."
    /// - "view(C) = apply(L, apply(K, view(P)))  (K only for children of views)"
    func view(_ ctx: Int) -> ModelState {
        if let v = views[ctx] { return v ?? store }
        guard let c = children[ctx] else { preconditionFailure("no context \(ctx) in the model") }
        return c.layer.applied(over: lowerView(ctx), schema)
    }

    /// The state under a child's L: apply(K, view(P)), or view(P) for a child of a child.
    func lowerView(_ ctx: Int) -> ModelState {
        guard let c = children[ctx] else { preconditionFailure("no child \(ctx) in the model") }
        let parent = view(c.parent)
        return c.parentIsView ? c.committed.applied(over: parent, schema) : parent
    }

    /// Objects whose record some layer of `ctx`'s chain (L or K) defines: their version in a child
    /// is not compared (Decision: the version of a pending record is not specified; only records
    /// read through from the store or a snapshot carry a version that must match).
    func layeredIDs(_ ctx: Int) -> Set<ObjectID> {
        guard let c = children[ctx] else { return [] }
        return Set(c.layer.records.keys).union(c.committed.records.keys).union(layeredIDs(c.parent))
    }

    /// The net change set `ctx` would commit now.
    func netChanges(_ ctx: Int) -> ModelNetChanges {
        guard let c = children[ctx] else { return ModelNetChanges() }
        return ModelNetChanges(c.layer, view: view(ctx), schema)
    }

    /// What no view may show, whatever the layers: an edge without its inverse or with a missing
    /// end, a to-one with two targets. (A check of the model itself.)
    func invariantViolations(_ ctx: Int) -> [String] {
        let s = view(ctx)
        var problems: [String] = []
        for e in s.edges.sorted() {
            if !s.edges.contains(schema.inverse(e)) { problems.append("edge \(e) has no inverse") }
            if !s.exists(e.from) || !s.exists(e.to) { problems.append("edge \(e) has a missing end") }
            if schema.isToOne(e.rel), s.targets(e.rel, of: e.from).count > 1 { problems.append("to-one \(e.rel) of \(e.from) has several targets") }
        }
        return problems
    }

    func hasPendingLayer(_ ctx: Int) -> Bool { !(children[ctx]?.layer.isEmpty ?? true) }

    // MARK: Contexts

    mutating func addView(_ ctx: Int, autoRefresh: Bool) {
        views[ctx] = autoRefresh ? .some(nil) : .some(store)
    }

    mutating func addChild(_ ctx: Int, parent: Int, policy: ModelPolicy) {
        children[ctx] = ModelChild(parent: parent, parentIsView: isView(parent), policy: policy)
    }

    /// Every context below `ctx` (children, their children, …).
    func descendants(_ ctx: Int) -> [Int] {
        children.filter { $0.value.parent == ctx }.keys.sorted().flatMap { [$0] + descendants($0) }
    }

    /// Drops a context and every context below it.
    mutating func drop(_ ctx: Int) {
        for d in descendants(ctx) { children[d] = nil }
        children[ctx] = nil
        views[ctx] = nil
    }

    /// "refresh() moves it to the latest committed S"; K of its children is emptied "when the
    /// view's snapshot includes C's last commit, i.e. after view.refresh()".
    mutating func refresh(_ view: Int) {
        guard let pinned = views[view], pinned != nil else { return }
        views[view] = .some(store)
        for (id, c) in children where c.parent == view && c.parentIsView { children[id]?.committed = ModelLayer() }
    }

    /// "discard(): L becomes empty (K is kept: it is committed)."
    mutating func discard(_ ctx: Int) {
        children[ctx]?.layer = ModelLayer()
    }

    /// "rebase(): every object C has a base for takes the store's current version as its new base."
    /// Decision: an object the store deleted has no current version and keeps its base (the next
    /// commit meets the delete again, through the merge policy).
    /// "Then the attributes C left as it first read them (equal to its first read) show what
    /// view below C shows now: applied as one net update (unique values judged when it ends; a
    /// refusal throws and changes nothing), and they become what C first read."
    /// (Which clashes refuse it: the decision below.)
    mutating func rebase(_ ctx: Int) throws {
        guard var c = children[ctx] else { return }
        let lower = lowerView(ctx), before = view(ctx)
        var refresh = ModelNetChanges()
        for id in c.layer.bases.keys.sorted() where store.objects[id] != nil {
            guard case .object(let shown)? = c.layer.records[id], let first = c.layer.firstRead[id],
                  let now = lower.objects[id] else { continue }
            let stale = shown.values.indices.filter { i in
                i < first.count && i < now.values.count && shown.values[i] == first[i] && now.values[i] != shown.values[i]
            }
            if !stale.isEmpty {
                refresh.updates.append(.init(id: id, attributes: stale.map { ModelAttribute(index: $0, value: now.values[$0]) }))
            }
        }
        if !refresh.isEmpty {
            var writer = ModelWriter(schema: schema, state: before, version: 0)
            // Decision: a refreshed value is refused only where it clashes with a value of the
            // child's own (an object holding the key in the child's view but not in the view below
            // C). A clash the view below already shows (a store's save under a parent's change) is
            // the parent's, reported when the parent commits: the child refreshed shows what its
            // parent shows.
            var failure = ModelFailure()
            let written = refresh.updates.map { ($0.id, writer.write($0.id, $0.attributes)) }
            for (id, differing) in written
            where writer.uniqueClash(id, among: writer.constraints(of: id, touching: differing), notHeldIn: lower) {
                failure.add(.validation(.uniqueConstraint), id)
            }
            if !failure.isEmpty { throw failure }
            c.layer.record(from: before, to: writer.state, lower: lower, schema) { inheritedBase(ctx, $0) }
            for u in refresh.updates {
                for a in u.attributes where (c.layer.firstRead[u.id]?.count ?? 0) > a.index {
                    c.layer.firstRead[u.id]?[a.index] = a.value
                }
            }
        }
        for id in c.layer.bases.keys {
            if let o = store.objects[id] { c.layer.bases[id] = ModelBase(version: o.version, values: o.values) }
        }
        children[ctx] = c
    }

    /// The base an ancestor child of `ctx` holds for `id` ("A nested child takes the base a parent
    /// already holds").
    func inheritedBase(_ ctx: Int, _ id: ObjectID) -> ModelBase? {
        guard let c = children[ctx], !c.parentIsView, let p = children[c.parent] else { return nil }
        return p.layer.bases[id] ?? inheritedBase(c.parent, id)
    }

    // MARK: Changing

    /// A change in a child: "validated against view(C) with the writer's rules ... and applied to
    /// L; a refused change throws and leaves L unchanged." Several operations (`apply` of a change
    /// set) are all or nothing, each validated against the state the earlier ones left.
    /// Each operation is recorded in L as it is applied (the same as one change at a time).
    mutating func change(_ ctx: Int, _ ops: [ModelOp]) throws {
        guard var c = children[ctx] else { preconditionFailure("no child \(ctx) in the model") }
        let lower = lowerView(ctx)
        var state = view(ctx)
        for op in ops {
            var writer = ModelWriter(schema: schema, state: state, version: 0)
            try writer.apply(op)
            c.layer.record(from: state, to: writer.state, lower: lower, schema) { inheritedBase(ctx, $0) }
            state = writer.state
        }
        children[ctx] = c
    }

    /// A save of another writer (`store.save`): the writer's rules, operation by operation, then
    /// the required to-ones; returns the transaction id the save returns.
    mutating func save(_ ops: [ModelOp]) throws -> UInt64 {
        var writer = ModelWriter(schema: schema, state: store, version: head + 1)
        for op in ops { try writer.apply(op) }
        var failure = ModelFailure()
        for id in writer.requiredViolations() { failure.add(.validation(.requiredRelationship), id) }
        if !failure.isEmpty { throw failure }
        if writer.changed {
            head += 1
            store = writer.state
        }
        return head
    }

    /// The merge policy's decision for every changed object whose version differs from its base.
    /// Under `.fail` the conflicts are returned instead.
    /// With `parentView` (a commit into a parent child): only the updated objects that the
    /// parent's view no longer has are judged ("an object the parent deleted that the child
    /// changed: the child's merge policy decides, as at the root for an object the store
    /// deleted").
    func decisions(_ n: ModelNetChanges, _ layer: ModelLayer, _ policy: ModelPolicy,
                   parentView: ModelState? = nil) -> ([ObjectID: ModelDecision], [ObjectID]) {
        var decisions: [ObjectID: ModelDecision] = [:]
        var conflicts: [ObjectID] = []
        let deleted = Set(n.deletes)
        for u in n.updates.map(\.id) + (parentView == nil ? n.deletes : []) {
            guard let base = layer.bases[u] else { continue }
            let current = parentView.map { $0.objects[u] } ?? store.objects[u]
            if parentView != nil, current != nil { continue }
            if let current, current.version == base.version { continue }
            switch policy {
            case .fail:
                // ".fail -> the whole commit is refused with conflict([...]); nothing is written"
                conflicts.append(u)
                decisions[u] = .skip
            case .storeWins:
                // ".storeWins -> that object's changes (and edge edits touching it) are dropped"
                decisions[u] = .skip
            case .contextWins:
                // ".contextWins -> the child's changed attributes are written over the store's; an
                //  object the store deleted is inserted again (base values + child's changes); a
                //  delete stays a delete"
                if current != nil {
                    decisions[u] = .apply
                } else if deleted.contains(u) {
                    decisions[u] = .skip
                } else {
                    // Decision: from the values the child first read (into a parent that deleted
                    // the object, they hold the parent's pending changes, which the base does not).
                    var values = parentView != nil ? layer.firstRead[u] ?? base.values : base.values
                    for a in n.updates.first(where: { $0.id == u })?.attributes ?? [] { values[a.index] = a.value }
                    decisions[u] = .reinsert(values)
                }
            case .propertyMerge(let preferContext):
                // ".propertyMerge(.store/.context) -> attributes changed on one side only merge; both
                //  sides: the preferred side; an object the store deleted stays deleted"
                // Decision: a delete of an object the store changed is done (the child's delete is
                // its change of every attribute).
                if let current {
                    let storeChanged = Set(current.values.indices.filter { current.values[$0] != base.values[$0] })
                    decisions[u] = .merge(storeChanged: storeChanged, preferContext: preferContext)
                } else {
                    decisions[u] = .skip
                }
            }
        }
        return (decisions, conflicts)
    }

    /// commit() of a child.
    mutating func commit(_ ctx: Int) throws -> ModelCommitResult {
        guard let c = children[ctx] else { preconditionFailure("no child \(ctx) in the model") }
        let n = netChanges(ctx)
        if !c.parentIsView {
            // "Into a parent child: the parent applies the net change set with its own rules
            //  (validated against view(parent)); on success C's L becomes empty; on failure C
            //  keeps L and the error is thrown."
            if !n.isEmpty {
                let before = view(c.parent)
                let (decisions, conflicts) = decisions(n, c.layer, c.policy, parentView: before)
                var writer = ModelWriter(schema: schema, state: before, version: 0)
                var failure = ModelFailure()
                for id in conflicts { failure.add(.conflict, id) }
                do {
                    try writer.apply(n, decisions: decisions, root: false)
                } catch let f as ModelFailure {
                    failure.add(f)
                }
                if !failure.isEmpty { throw failure }
                guard var p = children[c.parent] else { preconditionFailure("a child's parent child is in the model") }
                // An object the parent first touches now takes the child's base (the chain's
                // first touch), else one inherited from above; one it had changed too keeps the
                // earlier of its base and the child's ("earlier bases win": a store change made
                // between the child's edit and the parent's is judged at the root).
                p.layer.record(from: before, to: writer.state, lower: lowerView(c.parent), schema) { id in
                    c.layer.bases[id] ?? inheritedBase(c.parent, id)
                }
                for (id, base) in c.layer.bases where base.version != 0 {
                    if let mine = p.layer.bases[id], mine.version != 0, base.version < mine.version {
                        p.layer.bases[id] = base
                    }
                }
                children[c.parent] = p
            }
            children[ctx]?.layer = ModelLayer()
            return .nested
        }
        // Decision: a layer whose net change set is empty (an insert deleted again, a value
        // changed back) has nothing to commit: nil, and L becomes empty as after any commit.
        if n.isEmpty {
            children[ctx]?.layer = ModelLayer()
            return .nothing
        }
        // "At the root: the writer applies the net change set to the latest committed S in one
        //  transaction, validating again ... and applying the merge policy to every changed
        //  object whose version differs from its base"
        let (decisions, conflicts) = decisions(n, c.layer, c.policy)
        var writer = ModelWriter(schema: schema, state: store, version: head + 1)
        var failure = ModelFailure()
        for id in conflicts {
            failure.add(.conflict, id)
            // Decision: an object the store deleted may also be reported as not found (a
            // `rebase()` has no version to take for it, and may drop its base instead).
            if !store.exists(id) { failure.add(.validation(.objectNotFound), id) }
        }
        do {
            try writer.apply(n, decisions: decisions, root: true)
        } catch let f as ModelFailure {
            failure.add(f)
        }
        // "On success it returns the transaction id; on failure it throws and C keeps L"
        if !failure.isEmpty { throw failure }
        let before = store
        if writer.changed {
            head += 1
            store = writer.state
        }
        // "After a successful root commit, C reads what it committed: for a child of an
        //  auto-refreshing view the store now shows it; for a child of a pinned view it sits in K
        //  until the view refreshes."
        // Decision: K holds the store's state, right after the commit, of everything the commit
        // changed (cascades and to-one replacements included) or asked to change (what a merge
        // policy dropped reads as the store has it), so that a child of a pinned view reads its
        // committed objects exactly as a child of the main context would.
        if case .some(.some) = views[c.parent] {
            var k = c.committed
            k.record(from: before, to: store, lower: before, schema) { _ in nil }
            // Decision: an object the commit named reads as the store has it with its
            // relationships too (a new object under its id has none of the view's edges; another
            // writer's links and unlinks of a kept object show).
            for id in n.objectIDs {
                k.pin(id, to: store, schema)
                guard store.exists(id) else { continue }
                for r in schema.entity(id).relationships {
                    k.pin(ModelKey(rel: r.tag, object: id), to: store, schema)
                    // A target's to-one inverse too, or it could show its old target as well.
                    guard schema.isToOne(schema.inverse(r.tag)) else { continue }
                    for t in store.targets(r.tag, of: id) {
                        k.pin(ModelKey(rel: schema.inverse(r.tag), object: t), to: store, schema)
                    }
                }
            }
            for t in n.toOnes { k.pin(t.key, to: store, schema) }
            for f in n.edges { k.pin(f.edge, to: store, schema) }
            children[ctx]?.committed = k
        }
        children[ctx]?.layer = ModelLayer()
        // "Objects still pending take the committed version as their new base": here, the
        // objects pending in the contexts below (Decision: an object the chain itself committed
        // is not a conflict with its own commit). Decision: only a base the commit itself was
        // based on moves (the same version and values, or, for an object the commit inserted,
        // the unsaved version zero a descendant read it at): a descendant that read the object
        // earlier, before a change it never saw (another writer's, or a delete and a new object
        // under the id), keeps its base, and that change is still a conflict. Decision: and only
        // an object the commit wrote as the child sent it (at this commit's version, with the
        // values the child showed): one a merge policy resolved against the store (its values
        // kept, or merged) keeps the base too, and the policy judges the edits below again at
        // their commit; given the store's version, an attribute both sides changed was written
        // over the other writer's value with no judging.
        let written = Set(n.inserts.map(\.id) + n.updates.map(\.id))
        for d in descendants(ctx) {
            guard var dc = children[d] else { continue }
            for (id, base) in dc.layer.bases where written.contains(id)
                && (base == c.layer.bases[id] || (c.layer.bases[id] == nil && base.version == 0)) {
                guard writer.changed, let o = store.objects[id], o.version == head,
                      case .object(let sent)? = c.layer.records[id] else { continue }
                if sent.values == o.values {
                    dc.layer.bases[id] = ModelBase(version: o.version, values: o.values)
                } else if let was = c.layer.bases[id], was.values.count == o.values.count,
                          sent.values.count == o.values.count {
                    // Decision: resolved by a merge policy, the base keeps its version, and takes
                    // the store's value for each attribute the store holds as the chain sent it
                    // (the chain's own write, not a change of the other writer's).
                    var values = was.values
                    for i in values.indices where o.values[i] == sent.values[i] { values[i] = o.values[i] }
                    dc.layer.bases[id] = ModelBase(version: was.version, values: values)
                }
            }
            children[d] = dc
        }
        return .root(created: writer.changed ? head : nil)
    }
}

// MARK: - Queries over a state

extension ModelState {
    /// Whether `object` matches `filter` (as the query engine: comparisons with null follow
    /// Swift, an unset value is less than any set one; `related` compares the first target).
    func matches(_ filter: Filter, _ id: ObjectID) -> Bool {
        guard let o = objects[id] else { return false }
        switch filter {
        case .all: return true
        case .compare(let a, let op, let v): return op.holds(Value.compare(o.values[a], v))
        case .between(let a, let lo, let hi): return Value.compare(o.values[a], lo) >= 0 && Value.compare(o.values[a], hi) <= 0
        case .string(let a, let op, let s, let ci):
            guard case .string(let x) = o.values[a] else { return false }
            let (hay, needle) = ci ? (x.lowercased(), s.lowercased()) : (x, s)
            switch op {
            case .contains: return needle.isEmpty || hay.contains(needle)
            case .hasPrefix: return hay.hasPrefix(needle)
            case .hasSuffix: return hay.hasSuffix(needle)
            case .matches: return ReferenceGlob.matches(Array(hay.unicodeScalars)[...], Array(needle.unicodeScalars)[...])
            }
        case .isIn(let a, let values): return values.contains(o.values[a])
        case .idIn(let ids): return ids.contains(id)
        case .related(let rel, let target): return targets(rel, of: id).first == target
        case .through(let rel, let inner):
            guard let t = targets(rel, of: id).first else { return false }
            return matches(inner, t)
        case .any(let rel, let inner): return targets(rel, of: id).contains { matches(inner, $0) }
        case .and(let list): return list.allSatisfy { matches($0, id) }
        case .or(let list): return list.contains { matches($0, id) }
        case .not(let inner): return !matches(inner, id)
        }
    }

    /// "fetch / count / sort / window: over the objects that exist, relationship predicates over
    /// visible edges." Ties in the sort order are broken by id.
    func fetch(_ q: Query, _ schema: ModelSchema) -> [ObjectID] {
        guard let e = schema.schema.entity(named: q.entity) else { return [] }
        var ids = objects.keys.filter { $0.entityTag == e.tag && matches(q.predicate, $0) }.sorted()
        if !q.sort.isEmpty {
            ids.sort { a, b in
                for s in q.sort {
                    let c = Value.compare(objects[a]?.values[s.attribute] ?? .null, objects[b]?.values[s.attribute] ?? .null)
                    if c != 0 { return s.ascending ? c < 0 : c > 0 }
                }
                return a < b
            }
        }
        let start = min(q.offset, ids.count)
        let end = q.limit.map { min(ids.count, start + $0) } ?? ids.count
        return Array(ids[start..<end])
    }

    /// "count(entity) == fetch(entity).count always."
    func count(_ q: Query, _ schema: ModelSchema) -> Int {
        var all = q
        all.limit = nil
        all.offset = 0
        all.sort = []
        return fetch(all, schema).count
    }
}
