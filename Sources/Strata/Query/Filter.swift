/// A comparison of an attribute with a value.
public enum ComparisonOperator: String, Sendable, CaseIterable {
    /// The values are equal (`==`).
    case equal = "=="
    /// The values differ (`!=`).
    case notEqual = "!="
    /// The attribute's value is less than the operand (`<`).
    case less = "<"
    /// The attribute's value is less than or equal to the operand (`<=`).
    case lessOrEqual = "<="
    /// The attribute's value is greater than the operand (`>`).
    case greater = ">"
    /// The attribute's value is greater than or equal to the operand (`>=`).
    case greaterOrEqual = ">="

    func holds(_ c: Int) -> Bool {
        switch self {
        case .equal: c == 0
        case .notEqual: c != 0
        case .less: c < 0
        case .lessOrEqual: c <= 0
        case .greater: c > 0
        case .greaterOrEqual: c >= 0
        }
    }
}

/// A text match on a string attribute.
public enum StringOperator: String, Sendable {
    /// The string contains the text (the empty text matches every string).
    case contains
    /// The string starts with the text.
    case hasPrefix
    /// The string ends with the text.
    case hasSuffix
}

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

/// A fetch over one entity: filter, order, window. Ties in the sort order are broken by object
/// id (creation order), so results are deterministic.
public struct Query: Sendable, Equatable {
    /// The name of the entity whose objects the query returns.
    public let entity: String
    /// Which objects match.
    public var predicate: Filter
    /// The order of the results; ties are broken by object id.
    public var sort: [SortKey]
    /// The most records to return after `offset` (`nil`: no limit).
    public var limit: Int?
    /// How many records of the sorted results to skip.
    public var offset: Int

    /// A query for the records of `entity` that match `predicate`, sorted and windowed.
    ///
    /// - Parameters:
    ///   - entity: The entity's name.
    ///   - predicate: Which objects match (default: every object).
    ///   - sort: The sort order; ties are broken by object id.
    ///   - limit: The most records to return (`nil`: no limit).
    ///   - offset: How many records of the sorted results to skip.
    public init(entity: String, predicate: Filter = .all, sort: [SortKey] = [], limit: Int? = nil, offset: Int = 0) {
        self.entity = entity
        self.predicate = predicate
        self.sort = sort
        self.limit = limit
        self.offset = offset
    }
}
