/// How a Swift type declares one relationship.
public struct RelationshipDeclaration: Sendable, Equatable {
    /// The relationship's name in the schema.
    public let name: String
    /// The name of the entity the relationship points at.
    public let destination: String
    /// Whether the relationship is to-many.
    public let isToMany: Bool
    /// Declares the relationship `name` to `destination`, to-one or to-many.
    public init(name: String, destination: String, isToMany: Bool) {
        self.name = name
        self.destination = destination
        self.isToMany = isToMany
    }
}
