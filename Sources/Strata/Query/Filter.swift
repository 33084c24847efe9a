/// A comparison of an attribute with a value.
public enum ComparisonOperator: String, Sendable, CaseIterable {
    case equal = "==", notEqual = "!=", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="

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
    case contains, hasPrefix, hasSuffix
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
    case compare(attribute: Int, ComparisonOperator, Value)
    /// `low <= attribute <= high`.
    case between(attribute: Int, Value, Value)
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
    case and([Filter])
    case or([Filter])
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

    public static func || (a: Filter, b: Filter) -> Filter {
        switch (a, b) {
        case (.or(let x), .or(let y)): .or(x + y)
        case (.or(let x), _): .or(x + [b])
        default: .or([a, b])
        }
    }

    public static prefix func ! (a: Filter) -> Filter { .not(a) }
}

/// One sort key: an attribute position and a direction.
public struct SortKey: Sendable, Equatable {
    public let attribute: Int
    public let ascending: Bool
    public init(attribute: Int, ascending: Bool = true) {
        self.attribute = attribute
        self.ascending = ascending
    }
}

/// A fetch over one entity: filter, order, window. Ties in the sort order are broken by object
/// id (creation order), so results are deterministic.
public struct Query: Sendable, Equatable {
    public let entity: String
    public var predicate: Filter
    public var sort: [SortKey]
    public var limit: Int?
    public var offset: Int

    public init(entity: String, predicate: Filter = .all, sort: [SortKey] = [], limit: Int? = nil, offset: Int = 0) {
        self.entity = entity
        self.predicate = predicate
        self.sort = sort
        self.limit = limit
        self.offset = offset
    }
}
