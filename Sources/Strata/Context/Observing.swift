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
    /// Each delivery's diff is against the objects delivered before. Results holding an object
    /// that does not decode as `E` are skipped (the next delivery is diffed against the last one
    /// delivered, not against the skipped one); a type that does not match the schema (which
    /// ``ObjectReading/fetch(_:)`` reports) ends the stream at once.
    public func observe<E: Entity>(_ request: FetchRequest<E>) -> LiveObjectsQuery<E> {
        guard (try? schema.check(E.self)) != nil else {
            return LiveObjectsQuery(query: LiveQuery(results: AsyncStream { $0.finish() }))
        }
        return LiveObjectsQuery(query: observe(request.query))
    }
}

/// The stream of a typed live query (``Observing/observe(_:)-(FetchRequest<E>)``).
public struct LiveObjectsQuery<E: Entity>: AsyncSequence, Sendable {
    /// Each element is the complete results as entity values, with their diff.
    public typealias Element = LiveObjects<E>
    let query: LiveQuery

    /// Delivers results that differ from the last ones this iterator delivered.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: LiveQuery.AsyncIterator

        /// The next results that differ from the previous ones delivered and decode as `E`,
        /// diffed against those; `nil` when the live query ends.
        public mutating func next() async -> LiveObjects<E>? {
            await base.next(accepting: { records in
                try? records.map { try E(id: $0.id, storedValues: $0.values) }
            }).map { LiveObjects(objects: $0.value, diff: $0.diff) }
        }
    }

    /// An iterator over the results; iterate a live query once.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: query.makeAsyncIterator()) }
}
