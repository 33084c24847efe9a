/// One sort key: an attribute position and a direction.
public struct SortKey: Sendable, Equatable {
    /// The attribute's position in the entity.
    public let attribute: Int
    /// Whether the order is ascending (``Value`` order: no value first).
    public let ascending: Bool
    /// A sort key on the attribute at position `attribute`, ascending unless `ascending` is `false`.
    public init(attribute: Int, ascending: Bool = true) {
        self.attribute = attribute
        self.ascending = ascending
    }
}
