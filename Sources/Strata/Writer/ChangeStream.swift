/// An `AsyncSequence` of committed transactions. The writer never waits for a subscriber: each
/// has a bounded buffer (``StoreConfiguration/changeStreamBufferSize``) and is told when it fell
/// behind.
///
/// ```swift
/// for await event in store.changes() {
///     if case .committed(let tx) = event { print(tx.id, tx.changedObjects["Track"]?.count ?? 0) }
/// }
/// ```
public struct ChangeStream: AsyncSequence, Sendable {
    /// Each element is a committed transaction or a notice that the subscriber fell behind.
    public typealias Element = ChangeEvent
    let subscriber: ChangeSubscriber

    /// Delivers the subscriber's events in commit order.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let subscriber: ChangeSubscriber
        /// The next event; waits for the next commit when none is buffered, and returns `nil` once the stream is
        /// cancelled and its buffered events are delivered.
        public mutating func next() async -> ChangeEvent? { await subscriber.next() }
    }

    /// An iterator over this subscriber's events (one subscriber: iterate a stream once, from
    /// one task at a time; a second task waiting on it while another waits gets `nil` at once).
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(subscriber: subscriber) }

    /// Stops the stream: a pending `next()` returns nil.
    public func cancel() { subscriber.finish() }
}
