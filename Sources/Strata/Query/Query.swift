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
