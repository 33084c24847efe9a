/// A to-one or to-many relationship. Every relationship has a declared inverse.
///
/// Its four names are held in one shared box: a description is copied wherever a relationship
/// is read (an import's records carry theirs), and a copy then costs one reference count, not
/// one per name.
public struct RelationshipDescription: Sendable, Equatable {
    /// The relationship's name, unique among the relationships of its entity.
    public var name: String { names.name }
    /// The entity this relationship belongs to.
    public var entityName: String { names.entityName }
    /// The entity it points at.
    public var destination: String { names.destination }
    /// Whether the relationship links to any number of objects (`true`) or to at most one (`false`).
    public let isToMany: Bool
    /// The name of the inverse relationship on ``destination``.
    public var inverseName: String { names.inverseName }
    /// What deleting an object of ``entityName`` does to the objects this relationship links it to.
    public let deleteRule: DeleteRule
    /// For to-one relationships: whether it may be left unset at commit.
    public let isOptional: Bool
    /// Stable tag used in link keys: entity tag in the high byte, position + 1 in the low byte.
    public let tag: UInt16
    /// Position in the entity's relationship list.
    public let index: Int

    private let names: Names

    /// The four names, shared by every copy of a description. Its properties are constants of
    /// a `Sendable` type.
    private final class Names: Sendable {
        let name: String, entityName: String, destination: String, inverseName: String
        init(name: String, entityName: String, destination: String, inverseName: String) {
            self.name = name
            self.entityName = entityName
            self.destination = destination
            self.inverseName = inverseName
        }
    }

    init(name: String, entityName: String, destination: String, isToMany: Bool, inverseName: String,
         deleteRule: DeleteRule, isOptional: Bool, tag: UInt16, index: Int) {
        names = Names(name: name, entityName: entityName, destination: destination, inverseName: inverseName)
        self.isToMany = isToMany
        self.deleteRule = deleteRule
        self.isOptional = isOptional
        self.tag = tag
        self.index = index
    }

    /// Equal when every field is (the names by value).
    public static func == (a: RelationshipDescription, b: RelationshipDescription) -> Bool {
        a.isToMany == b.isToMany && a.deleteRule == b.deleteRule && a.isOptional == b.isOptional
            && a.tag == b.tag && a.index == b.index && a.name == b.name && a.entityName == b.entityName
            && a.destination == b.destination && a.inverseName == b.inverseName
    }
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
