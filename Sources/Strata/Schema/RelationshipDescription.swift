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

/// The part of a relationship and its inverse that every link a save writes is checked against,
/// as plain values (``Schema/linkRule(tag:)``): reading it copies none of the names a
/// ``RelationshipDescription`` holds.
struct LinkRule: Sendable {
    /// The relationship's tag.
    let tag: UInt16
    /// Its inverse's tag (0 where the schema has none, which a loaded schema never lacks).
    let inverseTag: UInt16
    /// The tag of the entity it belongs to (the high byte of ``tag``).
    let sourceTag: UInt16
    /// The tag of the entity it points at (0 where the schema has none).
    let destinationTag: UInt16
    let isToMany: Bool
    let inverseIsToMany: Bool
}
