/// Names an object either by id or by the values of one of its entity's unique constraints
/// (so an import can point at "the genre named Jazz" without knowing its id).
public enum ObjectReference: Sendable, Equatable, CustomStringConvertible {
    /// The object with this id.
    case id(ObjectID)
    /// Entity tag, position of the unique constraint in the entity's `uniques`, and its values.
    case unique(entityTag: UInt16, constraint: Int, values: [Value])

    /// The id, or the unique constraint's values separated by commas.
    public var description: String {
        switch self {
        case .id(let id): id.description
        case .unique(_, _, let values): values.map(\.description).joined(separator: ", ")
        }
    }

    /// ``description`` as messages show it: each string value cut as ``Value/shown`` cuts it.
    package var shown: String {
        switch self {
        case .id(let id): id.description
        case .unique(_, _, let values): values.map(\.shown).joined(separator: ", ")
        }
    }
}
