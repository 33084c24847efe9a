/// An entity (a kind of object): its attributes, relationships, uniques and indexes.
public final class EntityDescription: Sendable, CustomStringConvertible {
    /// The entity's name, unique within the schema.
    public let name: String
    /// The 16-bit tag stored in every object id of this entity (1...255).
    public let tag: UInt16
    /// The attributes, in position order (``AttributeDescription/index``).
    public let attributes: [AttributeDescription]
    /// The relationships, in position order (``RelationshipDescription/index``).
    public let relationships: [RelationshipDescription]
    /// The unique constraints, in schema order; an import matches records by the first one.
    public let uniques: [IndexDescription]
    /// The secondary indexes that queries use for ranges and lookups.
    public let indexes: [IndexDescription]
    let attributeIndex: [String: Int]
    let relationshipIndex: [String: Int]
    /// Whether some to-one relationship of this entity is required (checked at the end of a save).
    let hasRequiredToOne: Bool
    /// What ``ValueRules`` checks of each attribute, in attribute order, as plain values: reading
    /// them copies no string and no default value (every save and child insert reads them all).
    let valueRules: [ValueRule]

    /// The part of an ``AttributeDescription`` every value is checked against.
    struct ValueRule {
        let type: AttributeType
        let isOptional: Bool
        let hasDefault: Bool
    }

    init(name: String, tag: UInt16, attributes: [AttributeDescription], relationships: [RelationshipDescription],
         uniques: [IndexDescription], indexes: [IndexDescription]) {
        self.name = name
        self.tag = tag
        self.attributes = attributes
        self.relationships = relationships
        self.uniques = uniques
        self.indexes = indexes
        attributeIndex = Dictionary(uniqueKeysWithValues: attributes.map { ($0.name, $0.index) })
        relationshipIndex = Dictionary(uniqueKeysWithValues: relationships.map { ($0.name, $0.index) })
        hasRequiredToOne = relationships.contains { !$0.isToMany && !$0.isOptional }
        valueRules = attributes.map {
            ValueRule(type: $0.type, isOptional: $0.isOptional, hasDefault: $0.defaultValue != nil)
        }
    }

    /// The attribute named `name`, if any.
    public func attribute(named name: String) -> AttributeDescription? {
        attributeIndex[name].map { attributes[$0] }
    }

    /// The relationship named `name`, if any.
    public func relationship(named name: String) -> RelationshipDescription? {
        relationshipIndex[name].map { relationships[$0] }
    }

    /// The entity's name.
    public var description: String { name }
}
