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
    public var ascending: SortKey { SortKey(attribute: index, ascending: true) }
    /// Descending sort on this attribute.
    public var descending: SortKey { SortKey(attribute: index, ascending: false) }
}

/// A typed to-one relationship key: `Track.album` is a `ToOne<Track, Album>`.
public struct ToOne<Root: Entity, Target: Entity>: Sendable {
    /// The relationship's name in the schema.
    public let name: String
    /// The relationship's tag in the schema.
    public let tag: UInt16
    /// A key for the relationship `name` with tag `tag` in `Root`'s entity (generated code makes these).
    public init(name: String, tag: UInt16) {
        self.name = name
        self.tag = tag
    }
}

/// A typed to-many relationship key: `Album.tracks` is a `ToMany<Album, Track>`.
public struct ToMany<Root: Entity, Target: Entity>: Sendable {
    /// The relationship's name in the schema.
    public let name: String
    /// The relationship's tag in the schema.
    public let tag: UInt16
    /// A key for the relationship `name` with tag `tag` in `Root`'s entity (generated code makes these).
    public init(name: String, tag: UInt16) {
        self.name = name
        self.tag = tag
    }
}
