/// One delivery of a live query: the full results and how they differ from the last delivery.
public struct LiveResults: Sendable, Equatable {
    /// The complete results, filtered, sorted and windowed as the query says.
    public let records: [Record]
    /// How ``records`` differ from the results delivered before (all inserted for the first delivery).
    public let diff: ResultsDiff
}

/// The stream of a live query. Each element's diff is computed when it is consumed, against the
/// results this iterator delivered before, so skipped intermediate states never leave the diff
/// describing results the consumer did not see.
public struct LiveQuery: AsyncSequence, Sendable {
    /// Each element is the complete results with their diff.
    public typealias Element = LiveResults
    let results: AsyncStream<[Record]>

    /// Delivers results that differ from the last ones this iterator delivered.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<[Record]>.AsyncIterator
        var previous: [Record]?

        /// The next results that differ from the previous ones, diffed against them; `nil` when the live query
        /// ends.
        public mutating func next() async -> LiveResults? {
            await next(accepting: { $0 }).map { LiveResults(records: $0.value, diff: $0.diff) }
        }

        /// The next results that differ from the last ones delivered and that `accept` makes a
        /// value of, with their diff against those; results `accept` refuses are skipped without
        /// becoming the ones delivered. `nil` when the live query ends.
        mutating func next<T>(accepting accept: ([Record]) -> T?) async -> (value: T, diff: ResultsDiff)? {
            while let current = await base.next() {
                if let previous, previous == current { continue }
                guard let value = accept(current) else { continue }
                defer { previous = current }
                return (value, ResultsDiff.between(previous ?? [], current))
            }
            return nil
        }
    }

    /// An iterator over the results; iterate a live query once.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: results.makeAsyncIterator(), previous: nil) }
}
