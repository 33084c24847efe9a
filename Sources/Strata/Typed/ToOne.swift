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
