/// One object's current values: its entity, its permanent id, one ``Value`` per attribute (in
/// schema order) and the transaction that last changed it.
///
/// ```swift
/// var r = Record(entity: schema.entity(named: "Genre")!)
/// r["name"] = .string("Jazz")
/// ```
public struct Record: Sendable, Equatable, CustomStringConvertible {
    /// The entity the object belongs to.
    public let entity: EntityDescription
    /// The object's permanent id.
    public let id: ObjectID
    /// One value per attribute of ``entity``, in schema order (`.null` when unset).
    public var values: [Value]
    /// The transaction that last changed this object's attributes (``TransactionID/zero`` before
    /// it is saved).
    public internal(set) var version: TransactionID

    /// A new object of `entity` with a fresh id and every attribute unset.
    public init(entity: EntityDescription) {
        self.init(entity: entity, id: .make(entityTag: entity.tag),
                  values: Array(repeating: .null, count: entity.attributes.count), version: .zero)
    }

    init(entity: EntityDescription, id: ObjectID, values: [Value], version: TransactionID) {
        precondition(values.count == entity.attributes.count,
                     "record of \(entity.name) needs \(entity.attributes.count) values, got \(values.count)")
        precondition(id.entityTag == entity.tag, "id \(id) does not belong to entity \(entity.name)")
        self.entity = entity
        self.id = id
        self.values = values
        self.version = version
    }

    /// The value of the attribute named `name`; `.null` for an unknown name.
    public subscript(name: String) -> Value {
        get { entity.attributeIndex[name].map { values[$0] } ?? .null }
        set {
            guard let i = entity.attributeIndex[name] else {
                preconditionFailure("entity \(entity.name) has no attribute '\(name)'")
            }
            values[i] = newValue
        }
    }

    /// Whether two records are the same object with the same values at the same version (of the same schema's
    /// entity).
    public static func == (a: Record, b: Record) -> Bool {
        a.entity === b.entity && a.id == b.id && a.values == b.values && a.version == b.version
    }

    /// The record as `Entity(id, name: value, …)`, listing the attributes that have a value.
    public var description: String {
        let fields = zip(entity.attributes, values).filter { !$0.1.isNull }.map { "\($0.0.name): \($0.1)" }
        return fields.isEmpty ? "\(entity.name)(\(id))" : "\(entity.name)(\(id), \(fields.joined(separator: ", ")))"
    }
}
