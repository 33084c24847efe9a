/// Typed ways to name groups: `GroupKey.by(Track.genre)` (per target), `.by(Album.year)` (per
/// value), `.by(Track.album, Album.year)` (per value of the target's attribute),
/// `.size(of: Playlist.tracks)` (per number of targets).
extension GroupKey {
    /// Per value of an attribute of the object.
    public static func by<R, V>(_ key: Attribute<R, V>) -> GroupKey { .attribute(path: [], attribute: key.index) }
    /// Per target of a to-one relationship (its id; no value when unset).
    public static func by<R, T>(_ relationship: ToOne<R, T>) -> GroupKey { .target(relationship: relationship.tag) }
    /// Per value of an attribute of a to-one relationship's target (no value when unset).
    public static func by<R, T, V>(_ relationship: ToOne<R, T>, _ key: Attribute<T, V>) -> GroupKey {
        .attribute(path: [relationship.tag], attribute: key.index)
    }
    /// Per number of targets of a to-many relationship.
    public static func size<R, T>(of relationship: ToMany<R, T>) -> GroupKey { .count(relationship: relationship.tag) }
}

/// Typed aggregate functions: `.sum(Track.durationSeconds)`, `.average(Track.rating)`, …
extension AggregateFunction {
    /// The sum of a numeric attribute (see ``sum(attribute:)``).
    public static func sum<R, V>(_ key: Attribute<R, V>) -> AggregateFunction { .sum(attribute: key.index) }
    /// The least value of an attribute.
    public static func min<R, V>(_ key: Attribute<R, V>) -> AggregateFunction { .min(attribute: key.index) }
    /// The greatest value of an attribute.
    public static func max<R, V>(_ key: Attribute<R, V>) -> AggregateFunction { .max(attribute: key.index) }
    /// The mean of a numeric attribute.
    public static func average<R, V>(_ key: Attribute<R, V>) -> AggregateFunction { .average(attribute: key.index) }
    /// How many objects have a value for the attribute.
    public static func countValues<R, V>(_ key: Attribute<R, V>) -> AggregateFunction {
        .countValues(attribute: key.index)
    }
}

/// A group key of an aggregate of `E` (``ObjectReading/aggregate(_:where:groupedBy:_:)``): its
/// attributes and relationships are `E`'s, which the compiler checks (`.by(Album.year)` in an
/// aggregate of `Track` does not compile; a ``GroupKey`` is a position, read from whatever entity
/// is aggregated).
public struct EntityGroupKey<E: Entity>: Sendable, Equatable {
    /// The untyped key.
    public let key: GroupKey
    /// Per value of an attribute of the object.
    public static func by<V>(_ key: Attribute<E, V>) -> Self { Self(key: .attribute(path: [], attribute: key.index)) }
    /// Per target of a to-one relationship (its id; no value when unset).
    public static func by<T>(_ relationship: ToOne<E, T>) -> Self { Self(key: .target(relationship: relationship.tag)) }
    /// Per value of an attribute of a to-one relationship's target (no value when unset).
    public static func by<T, V>(_ relationship: ToOne<E, T>, _ key: Attribute<T, V>) -> Self {
        Self(key: .attribute(path: [relationship.tag], attribute: key.index))
    }
    /// Per number of targets of a to-many relationship.
    public static func size<T>(of relationship: ToMany<E, T>) -> Self { Self(key: .count(relationship: relationship.tag)) }
}

/// An aggregate function over an attribute of `E` (``ObjectReading/aggregate(_:where:groupedBy:_:)``),
/// checked by the compiler as ``EntityGroupKey`` is.
public struct EntityAggregate<E: Entity>: Sendable, Equatable {
    /// The untyped function.
    public let function: AggregateFunction
    /// The sum of a numeric attribute (see ``AggregateFunction/sum(attribute:)``).
    public static func sum<V>(_ key: Attribute<E, V>) -> Self { Self(function: .sum(attribute: key.index)) }
    /// The least value of an attribute.
    public static func min<V>(_ key: Attribute<E, V>) -> Self { Self(function: .min(attribute: key.index)) }
    /// The greatest value of an attribute.
    public static func max<V>(_ key: Attribute<E, V>) -> Self { Self(function: .max(attribute: key.index)) }
    /// The mean of a numeric attribute.
    public static func average<V>(_ key: Attribute<E, V>) -> Self { Self(function: .average(attribute: key.index)) }
    /// How many objects have a value for the attribute.
    public static func countValues<V>(_ key: Attribute<E, V>) -> Self { Self(function: .countValues(attribute: key.index)) }
}

extension ObjectReading {
    /// ``aggregate(_:groupedBy:_:)`` over the objects of `E` matching `predicate`, its key and
    /// functions over `E`'s own attributes and relationships (checked by the compiler).
    ///
    /// ```swift
    /// let perGenre = try context.aggregate(Track.self, groupedBy: .by(Track.genre), [.sum(Track.durationSeconds)])
    /// ```
    public func aggregate<E: Entity>(_ type: E.Type, where predicate: EntityPredicate<E> = .all,
                                     groupedBy key: EntityGroupKey<E>? = nil,
                                     _ functions: [EntityAggregate<E>] = []) throws -> [AggregateRow] {
        try schema.check(E.self)
        return try aggregate(Query(entity: E.entityName, predicate: predicate.predicate), groupedBy: key?.key,
                             functions.map(\.function))
    }
}

/// Typed count sort keys: `SortKey.count(of: Playlist.tracks, ascending: false)`.
extension SortKey {
    /// By the number of targets of a to-many relationship (ties by the next key, then the id).
    public static func count<R, T>(of relationship: ToMany<R, T>, ascending: Bool = true) -> SortKey {
        SortKey(countOf: relationship.tag, ascending: ascending)
    }
}
