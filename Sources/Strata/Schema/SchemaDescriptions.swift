import Foundation

/// An attribute of an entity, as declared in the schema.
public struct AttributeDescription: Sendable, Equatable {
    /// The attribute's name, unique within its entity.
    public let name: String
    /// The type every value of the attribute has.
    public let type: AttributeType
    /// Whether the attribute may be left without a value (`null`).
    public let isOptional: Bool
    /// Used when an insert leaves the attribute unset.
    public let defaultValue: Value?
    /// Position in the entity's attribute list; records are encoded by position.
    public let index: Int

    /// Whether `value` may be stored in this attribute.
    public func accepts(_ value: Value) -> Bool {
        if case .null = value { return isOptional }
        return value.type == type
    }
}

/// What deleting the source object does to the objects a relationship points at.
public enum DeleteRule: String, Sendable, CaseIterable {
    /// Unlink the targets (their inverse is cleared).
    case nullify
    /// Delete the targets too.
    case cascade
    /// Refuse the delete while any target is linked.
    case deny
}

/// A to-one or to-many relationship. Every relationship has a declared inverse.
public struct RelationshipDescription: Sendable, Equatable {
    /// The relationship's name, unique among the relationships of its entity.
    public let name: String
    /// The entity this relationship belongs to.
    public let entityName: String
    /// The entity it points at.
    public let destination: String
    /// Whether the relationship links to any number of objects (`true`) or to at most one (`false`).
    public let isToMany: Bool
    /// The name of the inverse relationship on ``destination``.
    public let inverseName: String
    /// What deleting an object of ``entityName`` does to the objects this relationship links it to.
    public let deleteRule: DeleteRule
    /// For to-one relationships: whether it may be left unset at commit.
    public let isOptional: Bool
    /// Stable tag used in link keys: entity tag in the high byte, position + 1 in the low byte.
    public let tag: UInt16
    /// Position in the entity's relationship list.
    public let index: Int
}

/// A secondary index or unique constraint over one or more attributes.
public struct IndexDescription: Sendable, Equatable {
    /// Attribute positions, in key order.
    public let attributes: [Int]
    /// Whether this is a unique constraint (no two objects share the key) rather than a plain index.
    public let isUnique: Bool
    /// Stable tag used as the key prefix: entity tag in the high byte, position + 1 in the low byte.
    public let tag: UInt16
}

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
        valueRules = attributes.map { ValueRule(type: $0.type, isOptional: $0.isOptional, hasDefault: $0.defaultValue != nil) }
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

/// One version of a model's schema: the entities a store holds.
///
/// Loaded from `Schemas/<model>/v<N>.json` (see README, "Schema files"):
/// ```swift
/// let schema = try Schema.load(directory: URL(fileURLWithPath: "Schemas/library"))
/// schema.entity(named: "Track")?.attribute(named: "title")?.type   // .string
/// ```
public struct Schema: Sendable {
    /// The values behind a schema, shared by its copies: a schema is copied into every read
    /// view and resolver, so a copy is one reference count, not one per field.
    private final class Storage: Sendable {
        let model: String
        let version: Int
        let entities: [EntityDescription]
        let canonicalJSON: String
        let migrationSteps: [MigrationStep]
        let byName: [String: EntityDescription]
        /// Indexed by entity tag (tags are 1...``Schema/maxEntities``): no hashing per record.
        let byTag: [EntityDescription?]
        /// The inverse's tag of every relationship, by tag (an unknown relationship is absent).
        let inverseTags: [UInt16: UInt16]
        let typeChecks = TypeCheckCache()

        init(model: String, version: Int, entities: [EntityDescription], canonicalJSON: String, migrationSteps: [MigrationStep]) {
            self.model = model
            self.version = version
            self.entities = entities
            self.canonicalJSON = canonicalJSON
            self.migrationSteps = migrationSteps
            byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
            var tags = [EntityDescription?](repeating: nil, count: Int(entities.map(\.tag).max() ?? 0) + 1)
            for e in entities { tags[Int(e.tag)] = e }
            byTag = tags
            var inverses: [UInt16: UInt16] = [:]
            for e in entities {
                for r in e.relationships {
                    if let inverse = byName[r.destination]?.relationship(named: r.inverseName) { inverses[r.tag] = inverse.tag }
                }
            }
            inverseTags = inverses
        }
    }
    private let storage: Storage

    /// The model name (`"library"`).
    public var model: String { storage.model }
    /// The version (the N of `vN.json`).
    public var version: Int { storage.version }
    /// The entities, in the order of the schema file.
    public var entities: [EntityDescription] { storage.entities }
    /// The schema as canonical JSON; stored in the store so tools can read it without the files.
    public var canonicalJSON: String { storage.canonicalJSON }
    /// Steps from version `version - 1` (empty for version 1).
    public var migrationSteps: [MigrationStep] { storage.migrationSteps }
    private var byName: [String: EntityDescription] { storage.byName }
    var typeChecks: TypeCheckCache { storage.typeChecks }

    init(model: String, version: Int, entities: [EntityDescription], canonicalJSON: String, migrationSteps: [MigrationStep] = []) {
        storage = Storage(model: model, version: version, entities: entities, canonicalJSON: canonicalJSON, migrationSteps: migrationSteps)
    }

    /// The entity named `name`, if the schema has one.
    public func entity(named name: String) -> EntityDescription? { byName[name] }
    /// The entity with tag `tag` (the tag stored in its objects' ids), if the schema has one.
    public func entity(tag: UInt16) -> EntityDescription? {
        let byTag = storage.byTag
        return Int(tag) < byTag.count ? byTag[Int(tag)] : nil
    }

    /// The relationship with link tag `tag`.
    func relationship(tag: UInt16) -> RelationshipDescription? {
        guard let e = entity(tag: tag >> 8), (tag & 0xff) >= 1, Int(tag & 0xff) <= e.relationships.count else { return nil }
        return e.relationships[Int(tag & 0xff) - 1]
    }

    /// The tag of the inverse of the relationship with tag `tag` (nil for an unknown tag).
    func inverseTag(of tag: UInt16) -> UInt16? { storage.inverseTags[tag] }

    /// The inverse of `relationship`.
    func inverse(of relationship: RelationshipDescription) -> RelationshipDescription {
        // The loader proved every inverse exists and points back.
        byName[relationship.destination]!.relationship(named: relationship.inverseName)!
    }
}

/// Limits on schemas, enforced by the loader.
public enum SchemaLimits {
    /// Entity tags are one byte inside link and index tags.
    public static let maxEntities = 255
    /// The most attributes an entity may have.
    public static let maxAttributesPerEntity = 1000
    /// Relationship, index and unique positions are one byte inside their tags.
    public static let maxRelationshipsPerEntity = 255
    /// The most unique constraints an entity may have, and the most indexes (each list on its own).
    public static let maxIndexesPerEntity = 255
    /// The most attributes one index or unique constraint may span.
    public static let maxAttributesPerIndex = 4
    /// The longest name of an entity, attribute or relationship, in bytes (names are ASCII identifiers).
    public static let maxNameBytes = 64
}
