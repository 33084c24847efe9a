/// What one save asks for: inserts, updates, deletes and relationship edits, in order.
///
/// The writer turns it into exactly one log transaction, all or nothing: validation (types,
/// required values, unique constraints, delete rules, relationship targets) runs against the
/// state as of the previous transaction plus this set's earlier operations.
///
/// ```swift
/// var changes = ChangeSet()
/// let jazz = Genre(name: "Jazz")
/// changes.insert(jazz)
/// changes.set(Track.genre, of: trackID, to: jazz.id)
/// let tx = try await store.save(changes)
/// ```
public struct ChangeSet: Sendable {
    /// One requested change.
    public enum Operation: Sendable, Equatable {
        /// A new object with one value per attribute (`.null` takes the default).
        case insert(id: ObjectID, values: [Value])
        /// Insert, or update the object that has the same values for unique constraint
        /// `constraint`. Later operations may use `id` either way: it is aliased to the existing object
        /// (until an insert gives `id` to an object of its own; from then on it names that one).
        /// When no other object holds the key and an object exists under `id`, that one is
        /// updated (a repeated upsert with the same id; its key moves to these values).
        case upsert(id: ObjectID, values: [Value], constraint: Int)
        /// Insert with this id, or replace every attribute of the object that has it.
        case put(id: ObjectID, values: [Value])
        /// New values for some attributes (position, value).
        case update(id: ObjectID, attributes: [AttributeValue])
        /// Deletes the object; its relationships follow their delete rules.
        case delete(id: ObjectID)
        /// Adds an edge (to-many) or sets the target (to-one, replacing the previous one).
        case link(relationship: UInt16, from: ObjectReference, to: ObjectReference)
        /// Removes an edge; for a to-one, `to: nil` clears whatever is set.
        case unlink(relationship: UInt16, from: ObjectReference, to: ObjectReference?)
    }

    /// An attribute position and its new value.
    public struct AttributeValue: Sendable, Equatable {
        /// The attribute's position in its entity.
        public let attribute: Int
        /// The new value (``Value/null``: no value).
        public let value: Value
        /// A new `value` for the attribute at position `attribute`.
        public init(attribute: Int, value: Value) {
            self.attribute = attribute
            self.value = value
        }
    }

    /// The operations, in the order they will be applied.
    public private(set) var operations: [Operation] = []
    /// For optimistic concurrency: the version each changed object was read at. The writer
    /// compares it with the store's and applies ``mergePolicy`` on a difference.
    public var baseVersions: [ObjectID: BaseVersion] = [:]
    /// What to do with objects changed underneath (see ``baseVersions``).
    public var mergePolicy: MergePolicy = .fail
    /// Whether the set is a child context's net changes, judged on its result rather than step by
    /// step: unique keys are checked when the set ends (two objects may swap values), and a
    /// delete or an unlink of what is already gone is done.
    var isNetState = false
    /// Whether the values of its inserts, upserts and puts are complete, defaults filled in by
    /// whoever made them: a null is then no value, not the attribute's default. An import's
    /// records are (the import fills the defaults of attributes its input left out, and keeps a
    /// `null` it was given as no value).
    var valuesComplete = false
    /// Swift entity types whose keys built operations; checked against the schema at save.
    var entityTypes: [ObjectIdentifier: any Entity.Type] = [:]

    mutating func note<E: Entity>(_ type: E.Type) {
        if entityTypes[ObjectIdentifier(type)] == nil { entityTypes[ObjectIdentifier(type)] = type }
    }

    /// The first typed operation that named an object of another entity than its key's (an
    /// `Album` attribute set on a `Track`'s id): a save of the set is refused with it, since an
    /// attribute's position would otherwise change another entity's attribute.
    var misdirected: ValidationFailure?

    /// Notes `E`, and ``misdirected`` when `id` is not of `E`.
    mutating func note<E: Entity>(_ type: E.Type, id: ObjectID, field: String?) {
        note(type)
        if misdirected == nil { misdirected = Self.misdirection(type, id: id, field: field) }
    }

    /// The refusal of a typed operation that names `id` as an object of `E` when the id is of
    /// another entity; nil when it is `E`'s.
    static func misdirection<E: Entity>(_ type: E.Type, id: ObjectID, field: String?) -> ValidationFailure? {
        guard id.entityTag != E.entityTag else { return nil }
        return ValidationFailure(kind: .objectNotFound, entity: E.entityName, objectID: id, field: field,
                                 reason: "the id is of another entity than \(E.entityName)")
    }

    /// The checks of a typed change set against `schema` before it is applied: its Swift types
    /// match the schema, and no typed operation named an object of another entity.
    func checkTyped(against schema: Schema) throws {
        for type in entityTypes.values { try schema.check(type) }
        if let misdirected { throw StrataError.validation(misdirected) }
    }

    /// An empty change set.
    public init() {}

    /// A change set holding `operations` (shares their storage: O(1)).
    init(operations: [Operation], valuesComplete: Bool = false) {
        self.operations = operations
        self.valuesComplete = valuesComplete
    }

    /// Whether nothing was asked for.
    public var isEmpty: Bool { operations.isEmpty }
    /// The number of operations.
    public var count: Int { operations.count }

    /// Appends a raw operation.
    public mutating func append(_ operation: Operation) { operations.append(operation) }

    /// Appends every operation of `other`.
    public mutating func append(contentsOf other: ChangeSet) {
        operations += other.operations
        entityTypes.merge(other.entityTypes) { a, _ in a }
        if misdirected == nil { misdirected = other.misdirected }
    }

    /// Inserts a dynamic record (unset attributes take their defaults).
    public mutating func insert(_ record: Record) {
        operations.append(.insert(id: record.id, values: record.values))
    }

    /// Sets attributes of an existing object by name-resolved positions.
    public mutating func update(_ id: ObjectID, _ attributes: [AttributeValue]) {
        operations.append(.update(id: id, attributes: attributes))
    }

    /// Replaces every attribute of the stored object with the record's values (only differences
    /// are logged).
    public mutating func update(_ record: Record) {
        operations.append(
            .update(id: record.id,
                    attributes: record.values.enumerated().map { AttributeValue(attribute: $0, value: $1) }))
    }

    /// Deletes an object; its relationships follow their delete rules.
    public mutating func delete(_ id: ObjectID) { operations.append(.delete(id: id)) }

    /// Links `from` to `to` through the relationship with tag `relationship`.
    public mutating func link(_ relationship: RelationshipDescription, from: ObjectID, to: ObjectID) {
        operations.append(.link(relationship: relationship.tag, from: .id(from), to: .id(to)))
    }

    /// Removes the edge `from` → `to` (or, for a to-one with `to` nil, the current one).
    public mutating func unlink(_ relationship: RelationshipDescription, from: ObjectID, to: ObjectID?) {
        operations.append(.unlink(relationship: relationship.tag, from: .id(from), to: to.map { .id($0) }))
    }
}
