/// A predicate over the objects of `Root`, built from typed keys:
///
/// ```swift
/// let p: EntityPredicate<Track> = Track.durationSeconds > 300 && Track.title.hasPrefix("Jó")
/// let q = Track.album.matches(Album.year >= 1990) || Track.genre == nil
/// let r = Playlist.tracks.any(Track.explicit == true)
/// ```
public struct EntityPredicate<Root: Entity>: Sendable {
    public let predicate: Filter
    public init(_ predicate: Filter) { self.predicate = predicate }

    /// Matches every object.
    public static var all: EntityPredicate { EntityPredicate(.all) }

    public static func && (a: EntityPredicate, b: EntityPredicate) -> EntityPredicate { EntityPredicate(a.predicate && b.predicate) }
    public static func || (a: EntityPredicate, b: EntityPredicate) -> EntityPredicate { EntityPredicate(a.predicate || b.predicate) }
    public static prefix func ! (a: EntityPredicate) -> EntityPredicate { EntityPredicate(.not(a.predicate)) }

    /// Objects whose id is one of `ids`.
    public static func id(in ids: Set<ObjectID>) -> EntityPredicate { EntityPredicate(.idIn(ids)) }
}

public func == <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> { EntityPredicate(.compare(attribute: k.index, .equal, v.storedValue)) }
public func != <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> { EntityPredicate(.compare(attribute: k.index, .notEqual, v.storedValue)) }
public func < <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> { EntityPredicate(.compare(attribute: k.index, .less, v.storedValue)) }
public func <= <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> { EntityPredicate(.compare(attribute: k.index, .lessOrEqual, v.storedValue)) }
public func > <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> { EntityPredicate(.compare(attribute: k.index, .greater, v.storedValue)) }
public func >= <R, V>(k: Attribute<R, V>, v: V) -> EntityPredicate<R> { EntityPredicate(.compare(attribute: k.index, .greaterOrEqual, v.storedValue)) }

extension Attribute {
    /// `low <= value <= high`.
    public func between(_ low: V, _ high: V) -> EntityPredicate<Root> { EntityPredicate(.between(attribute: index, low.storedValue, high.storedValue)) }
    /// The value is one of `values`.
    public func `in`(_ values: [V]) -> EntityPredicate<Root> { EntityPredicate(.isIn(attribute: index, values.map(\.storedValue))) }
}

extension Attribute where V == String {
    public func contains(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .contains, s, caseInsensitive: caseInsensitive))
    }
    public func hasPrefix(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .hasPrefix, s, caseInsensitive: caseInsensitive))
    }
    public func hasSuffix(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .hasSuffix, s, caseInsensitive: caseInsensitive))
    }
}

extension Attribute where V == String? {
    public func hasSuffix(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .hasSuffix, s, caseInsensitive: caseInsensitive))
    }
    public func contains(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .contains, s, caseInsensitive: caseInsensitive))
    }
    public func hasPrefix(_ s: String, caseInsensitive: Bool = false) -> EntityPredicate<Root> {
        EntityPredicate(.string(attribute: index, .hasPrefix, s, caseInsensitive: caseInsensitive))
    }
}

/// The to-one relationship points at `target` (`nil`: is unset).
public func == <R, T>(k: ToOne<R, T>, target: ObjectID?) -> EntityPredicate<R> { EntityPredicate(.related(relationship: k.tag, target)) }
public func != <R, T>(k: ToOne<R, T>, target: ObjectID?) -> EntityPredicate<R> { EntityPredicate(.not(.related(relationship: k.tag, target))) }

extension ToOne {
    /// The target exists and matches `p` (a key path through the relationship).
    public func matches(_ p: EntityPredicate<Target>) -> EntityPredicate<Root> { EntityPredicate(.through(relationship: tag, p.predicate)) }
}

extension ToMany {
    /// Some target matches `p`.
    public func any(_ p: EntityPredicate<Target>) -> EntityPredicate<Root> { EntityPredicate(.any(relationship: tag, p.predicate)) }
    /// `target` is among the targets.
    public func contains(_ target: ObjectID) -> EntityPredicate<Root> { EntityPredicate(.any(relationship: tag, .idIn([target]))) }
}

/// A typed fetch: filter, sort, window.
public struct FetchRequest<E: Entity>: Sendable {
    public var predicate: EntityPredicate<E>
    public var sort: [SortKey]
    public var limit: Int?
    public var offset: Int

    public init(where predicate: EntityPredicate<E> = .all, sortedBy sort: [SortKey] = [], limit: Int? = nil, offset: Int = 0) {
        self.predicate = predicate
        self.sort = sort
        self.limit = limit
        self.offset = offset
    }

    /// The untyped query.
    public var query: Query { Query(entity: E.entityName, predicate: predicate.predicate, sort: sort, limit: limit, offset: offset) }
}
