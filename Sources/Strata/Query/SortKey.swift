/// One sort key: an attribute position and a direction, optionally through to-one relationships
/// (sort tracks by their album's title).
public struct SortKey: Sendable, Equatable {
    /// Tags of the to-one relationships followed from the fetched entity, in order (empty: the
    /// attribute is the fetched entity's own). An object whose path ends at no object sorts as
    /// having no value.
    public let path: [UInt16]
    /// The attribute's position in the entity the path ends at.
    public let attribute: Int
    /// Whether the order is ascending (``Value`` order: no value first).
    public let ascending: Bool
    /// A sort key on the attribute at position `attribute`, ascending unless `ascending` is `false`.
    public init(attribute: Int, ascending: Bool = true) {
        self.init(path: [], attribute: attribute, ascending: ascending)
    }
    /// A sort key on the attribute at position `attribute` of the entity reached through the
    /// to-one relationships `path` (tags), ascending unless `ascending` is `false`.
    public init(path: [UInt16], attribute: Int, ascending: Bool = true) {
        self.path = path
        self.attribute = attribute
        self.ascending = ascending
    }
}
