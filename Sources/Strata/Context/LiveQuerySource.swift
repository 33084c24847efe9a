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
    /// It re-runs after each commit (of this process or, within ``StoreConfiguration/otherProcessPollMilliseconds``,
    /// of another process) that changes an object of the query's entity or of an entity
    /// its filter reaches through a relationship (on a context that follows commits: the main context, a view
    /// context with `autoRefresh`, and their children), when this context's or an ancestor's pending changes move,
    /// and at a pinned root's ``ViewContext/refresh()``. Results equal to the previous ones are not delivered.
    /// Cancel the consuming task to stop it. An evaluation that fails for a passing reason is
    /// tried again after 10 ms (doubling to at most a second); the sequence ends when the query is
    /// invalid or the store is closed, migrated or used after `fork()`.
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
            // The stream ended: the store closed, or this instance migrated the store. One more
            // evaluation meets the error that ends the live query.
            trigger.yield()
        }
        // A context that takes no commits (a pinned one) still ends with the store: its
        // evaluation then meets the close or the migration (a pinned snapshot alone would still
        // read).
        let endToken = followsCommits ? nil : store.hub.onFinish { trigger.yield() }
        let tokens = observerChain.map { o in (o, o.add { trigger.yield() }) }
        let evaluator = Task { [self] in
            var previous: [Record]?
            var failures = 0
            trigger.yield()
            for await _ in triggers {
                let current: [Record]
                do {
                    try store.checkUsable()
                    current = try fetch(query)
                    failures = 0
                } catch let error as StrataError where error.endsLiveQueries {
                    out.finish()
                    return
                } catch {
                    // A failure that passes (too many snapshots or readers at this moment): the
                    // query is evaluated again after 10 ms, doubling to at most a second, so the
                    // results do not stay stale until the next change.
                    failures += 1
                    let delay = min(1_000, 10 << min(failures - 1, 7))
                    Task {
                        try? await Task.sleep(for: .milliseconds(delay))
                        trigger.yield()
                    }
                    continue
                }
                if previous != current { out.yield(current) }
                previous = current
            }
        }
        out.onTermination = { _ in
            commitTask.cancel()
            changes?.cancel()
            evaluator.cancel()
            trigger.finish()
            if let endToken { store.hub.removeEndListener(endToken) }
            for (o, t) in tokens { o.remove(t) }
        }
        return LiveQuery(results: output)
    }

    /// The query's entity and every entity its predicate or its sort reaches through
    /// relationships (tracks sorted by their album's title change order when an album is
    /// renamed; a count key changes with the targets linked). The walk stops at
    /// ``Filter/maxNesting`` levels: a filter nested deeper is refused by its first evaluation,
    /// which ends the live query, and walking it all would have overflowed the stack first.
    func relevantEntities(_ query: Query) -> Set<String> {
        var names: Set<String> = [query.entity]
        func walk(_ p: Filter, _ depth: Int) {
            guard depth <= Filter.maxNesting else { return }
            switch p {
            case .related(let tag, _):
                if let r = schema.relationship(tag: tag) { names.insert(r.destination) }
            case .through(let tag, let inner), .any(let tag, let inner):
                if let r = schema.relationship(tag: tag) { names.insert(r.destination) }
                walk(inner, depth + 1)
            case .and(let list), .or(let list): for q in list { walk(q, depth + 1) }
            case .not(let q): walk(q, depth + 1)
            default: break
            }
        }
        walk(query.predicate, 0)
        for key in query.sort {
            for tag in key.path + (key.countOf.map { [$0] } ?? []) {
                if let r = schema.relationship(tag: tag) { names.insert(r.destination) }
            }
        }
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

extension StrataError {
    /// Whether a live query's evaluation failing so ends it (trying again cannot succeed).
    var endsLiveQueries: Bool {
        switch self {
        case .invalidQuery, .closed, .migrated, .usedAfterFork, .schema, .entityMismatch: true
        default: false
        }
    }
}
