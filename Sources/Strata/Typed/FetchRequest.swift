/// A typed fetch: filter, sort, window.
public struct FetchRequest<E: Entity>: Sendable {
    /// Which objects to fetch.
    public var predicate: EntityPredicate<E>
    /// The sort order (``Attribute/ascending`` or ``Attribute/descending`` keys); ties are broken by object id.
    public var sort: [SortKey]
    /// The most objects to return after `offset` (`nil`: no limit).
    public var limit: Int?
    /// How many objects of the sorted results to skip.
    public var offset: Int

    /// A request for the objects matching `predicate`, sorted and windowed.
    ///
    /// - Parameters:
    ///   - predicate: Which objects to fetch (default: every object).
    ///   - sort: The sort order; ties are broken by object id.
    ///   - limit: The most objects to return (`nil`: no limit).
    ///   - offset: How many objects of the sorted results to skip.
    public init(where predicate: EntityPredicate<E> = .all, sortedBy sort: [SortKey] = [], limit: Int? = nil,
                offset: Int = 0) {
        self.predicate = predicate
        self.sort = sort
        self.limit = limit
        self.offset = offset
    }

    /// The untyped query.
    public var query: Query {
        Query(entity: E.entityName, predicate: predicate.predicate, sort: sort, limit: limit, offset: offset)
    }
}
