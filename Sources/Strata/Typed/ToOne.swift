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

extension ToOne {
    /// Ascending sort on an attribute of the target (`Track.album.ascending(Album.title)`);
    /// objects without a target first.
    public func ascending<V>(_ key: Attribute<Target, V>) -> SortKey {
        SortKey(path: [tag], attribute: key.index, ascending: true)
    }
    /// Descending sort on an attribute of the target; objects without a target last.
    public func descending<V>(_ key: Attribute<Target, V>) -> SortKey {
        SortKey(path: [tag], attribute: key.index, ascending: false)
    }
}
