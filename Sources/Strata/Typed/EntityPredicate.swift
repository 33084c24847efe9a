/// A predicate over the objects of `Root`, built from typed keys:
///
/// ```swift
/// let p: EntityPredicate<Track> = Track.durationSeconds > 300 && Track.title.hasPrefix("Jó")
/// let q = Track.album.matches(Album.year >= 1990) || Track.genre == nil
/// let r = Playlist.tracks.any(Track.explicit == true)
/// ```
public struct EntityPredicate<Root: Entity>: Sendable {
    /// The untyped filter this predicate wraps.
    public let predicate: Filter
    /// Wraps an untyped filter over the objects of `Root` (attribute positions and relationship tags of `Root`'s
    /// entity).
    public init(_ predicate: Filter) { self.predicate = predicate }

    /// Matches every object.
    public static var all: EntityPredicate { EntityPredicate(.all) }

    /// Matches the objects that both predicates match.
    public static func && (a: EntityPredicate, b: EntityPredicate) -> EntityPredicate {
        EntityPredicate(a.predicate && b.predicate)
    }
    /// Matches the objects that either predicate matches.
    public static func || (a: EntityPredicate, b: EntityPredicate) -> EntityPredicate {
        EntityPredicate(a.predicate || b.predicate)
    }
    /// Matches the objects that the predicate does not match.
    public static prefix func ! (a: EntityPredicate) -> EntityPredicate { EntityPredicate(.not(a.predicate)) }

    /// Objects whose id is one of `ids`.
    public static func id(in ids: Set<ObjectID>) -> EntityPredicate { EntityPredicate(.idIn(ids)) }
}

/// The attribute's value equals `v` (for an optional attribute, `nil` matches objects without a value).
public func == <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> {
    EntityPredicate(.compare(attribute: k.index, .equal, v.storedValue))
}
/// The attribute's value differs from `v` (an object without a value matches a non-`nil` `v`).
public func != <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> {
    EntityPredicate(.compare(attribute: k.index, .notEqual, v.storedValue))
}
/// The attribute's value is less than `v`. An object without a value matches: no value is less than any value.
public func < <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> {
    EntityPredicate(.compare(attribute: k.index, .less, v.storedValue))
}
/// The attribute's value is less than or equal to `v` (an object without a value matches).
public func <= <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> {
    EntityPredicate(.compare(attribute: k.index, .lessOrEqual, v.storedValue))
}
/// The attribute's value is greater than `v` (an object without a value never matches a non-`nil` `v`).
public func > <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> {
    EntityPredicate(.compare(attribute: k.index, .greater, v.storedValue))
}
/// The attribute's value is greater than or equal to `v`.
public func >= <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> {
    EntityPredicate(.compare(attribute: k.index, .greaterOrEqual, v.storedValue))
}

extension Attribute {
    /// `low <= value <= high`.
    public func between(_ low: V, _ high: V) -> EntityPredicate<Root> {
        EntityPredicate(.between(attribute: index, low.storedValue, high.storedValue))
    }
    /// The value is one of `values`.
    public func `in`(_ values: [V]) -> EntityPredicate<Root> {
        EntityPredicate(.isIn(attribute: index, values.map(\.storedValue)))
    }
}

extension Attribute where V == String {
    /// The string contains `s`; with `caseInsensitive`, both are compared lowercased.
    public func contains(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .contains, s, caseInsensitive: caseInsensitive))
    }
    /// The string starts with `s`; with `caseInsensitive`, both are compared lowercased.
    public func hasPrefix(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .hasPrefix, s, caseInsensitive: caseInsensitive))
    }
    /// The string ends with `s`; with `caseInsensitive`, both are compared lowercased.
    public func hasSuffix(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .hasSuffix, s, caseInsensitive: caseInsensitive))
    }
    /// The whole string matches the glob `pattern` (``GlobPattern``: `*`, `?`, `[a-z]`, `[^…]`); with
    /// `caseInsensitive`, both are compared lowercased. A pattern that does not parse makes the
    /// fetch throw ``StrataError/invalidQuery(entity:reason:)``.
    public func matches(_ pattern: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .matches, pattern, caseInsensitive: caseInsensitive))
    }
}

extension Attribute where V == String? {
    /// The attribute has a value that ends with `s`; with `caseInsensitive`, both are compared lowercased.
    public func hasSuffix(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .hasSuffix, s, caseInsensitive: caseInsensitive))
    }
    /// The attribute has a value that matches the glob `pattern` (``GlobPattern``) whole; with
    /// `caseInsensitive`, both are compared lowercased.
    public func matches(_ pattern: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .matches, pattern, caseInsensitive: caseInsensitive))
    }
    /// The attribute has a value that contains `s`; with `caseInsensitive`, both are compared lowercased.
    public func contains(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .contains, s, caseInsensitive: caseInsensitive))
    }
    /// The attribute has a value that starts with `s`; with `caseInsensitive`, both are compared lowercased.
    public func hasPrefix(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .hasPrefix, s, caseInsensitive: caseInsensitive))
    }
}

/// The to-one relationship points at `target` (`nil`: is unset).
public func == <R, T>(k: ToOne<R, T>, target: ObjectID?) -> EntityPredicate<R> {
    EntityPredicate(.related(relationship: k.tag, target))
}
/// The to-one relationship does not point at `target` (`nil`: is set).
public func != <R, T>(k: ToOne<R, T>, target: ObjectID?) -> EntityPredicate<R> {
    EntityPredicate(.not(.related(relationship: k.tag, target)))
}

extension ToOne {
    /// The target exists and matches `p` (a key path through the relationship).
    public func matches(_ p: EntityPredicate<Target>) -> EntityPredicate<Root> {
        EntityPredicate(.through(relationship: tag, p.predicate))
    }
}

extension ToMany {
    /// Some target matches `p`.
    public func any(_ p: EntityPredicate<Target>) -> EntityPredicate<Root> {
        EntityPredicate(.any(relationship: tag, p.predicate))
    }
    /// `target` is among the targets.
    public func contains(_ target: ObjectID) -> EntityPredicate<Root> {
        EntityPredicate(.any(relationship: tag, .idIn([target])))
    }
    /// The relationship has no target (a playlist without tracks).
    public var isEmpty: EntityPredicate<Root> { EntityPredicate(.not(.any(relationship: tag, .all))) }
    /// The relationship has at least one target.
    public var isNotEmpty: EntityPredicate<Root> { EntityPredicate(.any(relationship: tag, .all)) }
}
