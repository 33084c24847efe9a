/// Live queries: results re-evaluated when a change can affect them.
public protocol Observing: ObjectReading {
    /// Results of `query` now, then again after every committed change (or, on a child, pending
    /// change) that touches an entity the query reads. Deliveries whose results did not change are
    /// skipped; a slow consumer gets the newest results, each diffed against the previous
    /// results it received. Evaluation runs in its own task and takes no lock that a save or
    /// fetch holds.
    func observe(_ query: Query) -> LiveQuery
}

/// Typed results of a live query.
public struct LiveObjects<E: Entity>: Sendable {
    /// The complete results, as typed entity values.
    public let objects: [E]
    /// How ``objects`` differ from the results delivered before (all inserted for the first delivery).
    public let diff: ResultsDiff
}

extension Observing {
    /// Typed live query: `for await update in context.observe(FetchRequest<Track>(…)) { … }`.
    public func observe<E: Entity>(_ request: FetchRequest<E>) -> AsyncCompactMapSequence<LiveQuery, LiveObjects<E>> {
        observe(request.query).compactMap { results in
            guard let objects = try? results.records.map({ try E(id: $0.id, storedValues: $0.values) }) else {
                return nil
            }
            return LiveObjects(objects: objects, diff: results.diff)
        }
    }
}
