/// One sort key: an attribute position and a direction, optionally through to-one relationships
/// (sort tracks by their album's title), or the number of targets of a to-many relationship (sort
/// packages by how many depend on them).
public struct SortKey: Sendable, Equatable {
    /// Tags of the to-one relationships followed from the fetched entity, in order (empty: the
    /// attribute is the fetched entity's own). An object whose path ends at no object sorts as
    /// having no value.
    public let path: [UInt16]
    /// The attribute's position in the entity the path ends at (unused for a count key).
    public let attribute: Int
    /// Whether the order is ascending (``Value`` order: no value first).
    public let ascending: Bool
    /// For a count key: the tag of the to-many relationship whose targets are counted.
    public let countOf: UInt16?
    /// The entity a typed key (`Track.title.ascending`) was made for: a query of another entity
    /// refuses it, since its attribute position would name another attribute there. Nil for keys
    /// made from positions.
    let entityTag: UInt16?

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
        countOf = nil
        entityTag = nil
    }
    /// A sort key on the attribute at position `attribute` of the entity with tag `entityTag`
    /// (typed keys).
    init(attribute: Int, ascending: Bool, entityTag: UInt16) {
        path = []
        self.attribute = attribute
        self.ascending = ascending
        countOf = nil
        self.entityTag = entityTag
    }
    /// A sort key on the number of targets of the to-many relationship `relationship` (its tag),
    /// ascending unless `ascending` is `false`: `SortKey(countOf: Package.dependents.tag,
    /// ascending: false)` with a limit of 10 gives the ten most depended-on packages.
    public init(countOf relationship: UInt16, ascending: Bool = true) {
        path = []
        attribute = 0
        self.ascending = ascending
        countOf = relationship
        entityTag = nil
    }

    /// Keys are equal when they sort alike (whoever made them).
    public static func == (a: SortKey, b: SortKey) -> Bool {
        a.path == b.path && a.attribute == b.attribute && a.ascending == b.ascending && a.countOf == b.countOf
    }
}
