/// A typed attribute key: `Track.title` is an `Attribute<Track, String>`.
public struct Attribute<Root: Entity, V: StoredValue>: Sendable {
    /// The attribute's name in the schema.
    public let name: String
    /// Position in the entity's attributes.
    public let index: Int
    /// A key for the attribute `name` at position `index` of `Root`'s entity (generated code makes these).
    public init(name: String, index: Int) {
        self.name = name
        self.index = index
    }

    /// Ascending sort on this attribute.
    public var ascending: SortKey { SortKey(attribute: index, ascending: true, entityTag: Root.entityTag) }
    /// Descending sort on this attribute.
    public var descending: SortKey { SortKey(attribute: index, ascending: false, entityTag: Root.entityTag) }
}
