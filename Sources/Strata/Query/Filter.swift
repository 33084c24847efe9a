/// A filter over the objects of one entity. Attributes are named by position in the entity
/// (typed keys and the CLI's parser fill them in); relationships by tag.
///
/// Comparisons with `null` follow Swift, not SQL: `attribute == .null` matches unset values, and
/// an unset value is less than any set one.
///
/// ```swift
/// // typed (from generated keys):
/// let long = Track.durationSeconds > 600 && Track.album.matches(Album.year >= 1990)
/// // dynamic:
/// let p = Filter.compare(attribute: 2, .greater, .int(600))
/// ```
public indirect enum Filter: Sendable, Equatable {
    /// Every object.
    case all
    /// The attribute at this position compares with the value as the operator says (``Value`` order: no value
    /// first).
    case compare(attribute: Int, ComparisonOperator, Value)
    /// `low <= attribute <= high`.
    case between(attribute: Int, Value, Value)
    /// The string attribute at this position matches the text; with `caseInsensitive`, both are compared
    /// lowercased. An object without a value does not match.
    case string(attribute: Int, StringOperator, String, caseInsensitive: Bool)
    /// The attribute's value is one of these.
    case isIn(attribute: Int, [Value])
    /// The object's id is one of these.
    case idIn(Set<ObjectID>)
    /// A to-one relationship points at this object (nil: is unset).
    case related(relationship: UInt16, ObjectID?)
    /// A to-one relationship's target matches (`track.album.year > 1990`).
    case through(relationship: UInt16, Filter)
    /// Some target of a to-many relationship matches.
    case any(relationship: UInt16, Filter)
    /// Every filter of the list matches (an empty list matches every object).
    case and([Filter])
    /// Some filter of the list matches (an empty list matches nothing).
    case or([Filter])
    /// The filter does not match.
    case not(Filter)

    /// The deepest nesting a filter may have (`not`, `and`, `or` and relationship paths inside one
    /// another; `&&` and `||` chains are flat lists, one level): a query with a deeper one throws
    /// ``StrataError/invalidQuery(entity:reason:)``.
    public static let maxNesting = 256

    /// Conjunction, flattening nested ands.
    public static func && (a: Filter, b: Filter) -> Filter {
        switch (a, b) {
        case (.all, _): b
        case (_, .all): a
        case (.and(let x), .and(let y)): .and(x + y)
        case (.and(let x), _): .and(x + [b])
        case (_, .and(let y)): .and([a] + y)
        default: .and([a, b])
        }
    }

    /// Disjunction, flattening nested ors.
    public static func || (a: Filter, b: Filter) -> Filter {
        switch (a, b) {
        case (.or(let x), .or(let y)): .or(x + y)
        case (.or(let x), _): .or(x + [b])
        default: .or([a, b])
        }
    }

    /// Negation: ``not(_:)``.
    public static prefix func ! (a: Filter) -> Filter { .not(a) }
}
