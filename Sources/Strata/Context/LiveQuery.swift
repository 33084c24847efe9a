import Foundation

/// How one result list differs from the previous one.
public struct ResultsDiff: Sendable, Equatable {
    /// A record that kept its identity but changed position.
    public struct Move: Sendable, Equatable {
        /// The record's position in the old results.
        public let from: Int
        /// The record's position in the new results.
        public let to: Int
    }
    /// Positions in the new results of records that were not there before.
    public var inserted: [Int] = []
    /// Positions in the old results of records that are gone.
    public var removed: [Int] = []
    /// Records present in both whose relative order changed (a minimal set: the rest keep their order).
    public var moved: [Move] = []
    /// Positions in the new results of records present before whose values changed.
    public var updated: [Int] = []

    /// Whether nothing was inserted, removed, moved or updated.
    public var isEmpty: Bool { inserted.isEmpty && removed.isEmpty && moved.isEmpty && updated.isEmpty }

    /// The diff from `old` to `new` (records matched by id).
    /// - Complexity: O(n log n).
    public static func between(_ old: [Record], _ new: [Record]) -> ResultsDiff {
        var diff = ResultsDiff()
        let oldIndex = Dictionary(old.enumerated().map { ($1.id, $0) }, uniquingKeysWith: { a, _ in a })
        let newIndex = Dictionary(new.enumerated().map { ($1.id, $0) }, uniquingKeysWith: { a, _ in a })
        diff.removed = old.indices.filter { newIndex[old[$0].id] == nil }
        var common: [(old: Int, new: Int)] = []
        for (i, r) in new.enumerated() {
            guard let o = oldIndex[r.id] else {
                diff.inserted.append(i)
                continue
            }
            common.append((o, i))
            if old[o] != r { diff.updated.append(i) }
        }
        // Records outside the longest increasing run of old positions are the ones that moved.
        let keep = longestIncreasing(common.map(\.old))
        for (k, pair) in common.enumerated() where !keep.contains(k) { diff.moved.append(Move(from: pair.old, to: pair.new)) }
        return diff
    }

    private static func longestIncreasing(_ a: [Int]) -> Set<Int> {
        var tails: [Int] = []
        var tailIndex: [Int] = []
        var previous = [Int](repeating: -1, count: a.count)
        for (i, x) in a.enumerated() {
            var lo = 0, hi = tails.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if tails[mid] < x { lo = mid + 1 } else { hi = mid }
            }
            if lo > 0 { previous[i] = tailIndex[lo - 1] }
            if lo == tails.count {
                tails.append(x)
                tailIndex.append(i)
            } else {
                tails[lo] = x
                tailIndex[lo] = i
            }
        }
        var result = Set<Int>()
        var k = tailIndex.last ?? -1
        while k >= 0 {
            result.insert(k)
            k = previous[k]
        }
        return result
    }
}

/// One delivery of a live query: the full results and how they differ from the last delivery.
public struct LiveResults: Sendable, Equatable {
    /// The complete results, filtered, sorted and windowed as the query says.
    public let records: [Record]
    /// How ``records`` differ from the results delivered before (all inserted for the first delivery).
    public let diff: ResultsDiff
}

/// Live queries: results re-evaluated when a change can affect them.
public protocol Observing: ObjectReading {
    /// Results of `query` now, then again after every committed change (or, on a child, pending
    /// change) that touches an entity the query reads. Deliveries whose results did not change are
    /// skipped; a slow consumer gets the newest results, each diffed against the previous
    /// results it received. Evaluation runs in its own task and takes no lock that a save or
    /// fetch holds.
    func observe(_ query: Query) -> LiveQuery
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
            while let current = await base.next() {
                if let previous, previous == current { continue }
                defer { previous = current }
                return LiveResults(records: current, diff: ResultsDiff.between(previous ?? [], current))
            }
            return nil
        }
    }

    /// An iterator over the results; iterate a live query once.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: results.makeAsyncIterator(), previous: nil) }
}

/// The triggers a context's live queries listen to.
protocol LiveQuerySource: ObjectReading {
    var store: Store { get }
    /// Whether store commits change what this context reads (false for a pinned root).
    var followsCommits: Bool { get }
    /// Local change notifications: this context's and its ancestors'.
    var observerChain: [ContextObservers] { get }
}

extension LiveQuerySource {
    /// A live query: the results of `query` now, then again whenever a change can affect them.
    ///
    /// It re-runs after each commit of this process that changes an object of the query's entity or of an entity
    /// its filter reaches through a relationship (on a context that follows commits: the main context, a view
    /// context with `autoRefresh`, and their children), when this context's or an ancestor's pending changes move,
    /// and at a pinned root's ``ViewContext/refresh()``. Results equal to the previous ones are not delivered.
    /// Cancel the consuming task to stop it.
    public func observe(_ query: Query) -> LiveQuery {
        let (triggers, trigger) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let (output, out) = AsyncStream.makeStream(of: [Record].self, bufferingPolicy: .bufferingNewest(1))
        let entities = relevantEntities(query)
        let changes = followsCommits ? store.changes() : nil
        let commitTask = Task {
            guard let changes else { return }
            for await event in changes {
                switch event {
                case .fellBehind: trigger.yield()
                case .committed(let tx):
                    if tx.changedObjects.keys.contains(where: entities.contains) { trigger.yield() }
                }
            }
        }
        let tokens = observerChain.map { o in (o, o.add { trigger.yield() }) }
        let evaluator = Task { [self] in
            var previous: [Record]?
            trigger.yield()
            for await _ in triggers {
                guard let current = try? fetch(query) else { continue }
                if previous != current { out.yield(current) }
                previous = current
            }
        }
        out.onTermination = { _ in
            commitTask.cancel()
            changes?.cancel()
            evaluator.cancel()
            trigger.finish()
            for (o, t) in tokens { o.remove(t) }
        }
        return LiveQuery(results: output)
    }

    /// The query's entity and every entity its predicate reaches through relationships.
    func relevantEntities(_ query: Query) -> Set<String> {
        var names: Set<String> = [query.entity]
        func walk(_ p: Filter) {
            switch p {
            case .related(let tag, _):
                if let r = schema.relationship(tag: tag) { names.insert(r.destination) }
            case .through(let tag, let inner), .any(let tag, let inner):
                if let r = schema.relationship(tag: tag) { names.insert(r.destination) }
                walk(inner)
            case .and(let list), .or(let list): list.forEach(walk)
            case .not(let q): walk(q)
            default: break
            }
        }
        walk(query.predicate)
        return names
    }
}

extension ViewContext: LiveQuerySource, Observing {
    var followsCommits: Bool { autoRefresh }
    var observerChain: [ContextObservers] { [observers] }
}

extension ChildContext: LiveQuerySource, Observing {
    var followsCommits: Bool {
        switch parent {
        case .view(let v): v.autoRefresh
        case .child(let c): c.followsCommits
        }
    }
    var observerChain: [ContextObservers] {
        switch parent {
        case .view(let v): [observers] + v.observerChain
        case .child(let c): [observers] + c.observerChain
        }
    }
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
            guard let objects = try? results.records.map({ try E(id: $0.id, storedValues: $0.values) }) else { return nil }
            return LiveObjects(objects: objects, diff: results.diff)
        }
    }
}
