/// Something queries run against: the LMDB state of one transaction (``ReadView``) or that
/// state with child-context overlays merged over it (``MergedSource``). Planning differs (an
/// overlay adds its dirty objects to the candidates); evaluation, sorting and windowing are shared.
protocol ObjectSource {
    var schema: Schema { get }
    func record(_ id: ObjectID) throws -> Record?
    func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID]
    func objectCount(_ entity: EntityDescription) throws -> Int
    /// Calls `visit` with a superset of the objects of `e` that may match `predicate`, each with
    /// its current record, in id order, until `visit` returns false.
    func candidates(_ e: EntityDescription, _ predicate: Filter, _ visit: (Record) throws -> Bool) throws
    /// How many objects of `e` match `predicate` when an access path answers it exactly without
    /// reading the objects; nil when the objects must be read.
    func exactCount(_ e: EntityDescription, _ predicate: Filter) throws -> Int?
    /// Calls `visit` with every object of `e`, in id order, until it returns false; only the
    /// attributes `only` marks need to hold their values (a source may leave the others unset).
    func scanAll(_ e: EntityDescription, only: [Bool], _ visit: (Record) throws -> Bool) throws
    /// The number of targets of to-many `tag` of every object of `e` that has one or more, when
    /// the source can count them from its edges alone; nil otherwise.
    func targetCounts(_ e: EntityDescription, _ tag: UInt16) throws -> [(id: ObjectID, count: Int)]?
    /// How many objects of `e` hold each value of attribute `a` (no value included), when an
    /// index gives it without reading the objects; nil otherwise.
    func valueCounts(_ e: EntityDescription, _ a: Int) throws -> [(value: Value, count: Int)]?
}

extension ObjectSource {
    /// No exact count: the objects are read (a source with pending changes over its state).
    func exactCount(_ e: EntityDescription, _ predicate: Filter) throws -> Int? { nil }

    /// Not from the edges alone (pending changes over them).
    func targetCounts(_ e: EntityDescription, _ tag: UInt16) throws -> [(id: ObjectID, count: Int)]? { nil }

    /// Not from an index (pending changes over it).
    func valueCounts(_ e: EntityDescription, _ a: Int) throws -> [(value: Value, count: Int)]? { nil }

    /// Every object, whole.
    func scanAll(_ e: EntityDescription, only: [Bool], _ visit: (Record) throws -> Bool) throws {
        try candidates(e, .all, visit)
    }

    func entity(_ name: String) throws -> EntityDescription {
        guard let e = schema.entity(named: name) else {
            throw StrataError.invalidQuery(entity: name, reason: "no such entity in \(schema.model) v\(schema.version)")
        }
        return e
    }

    func fetch(_ query: Query) throws -> [Record] {
        let e = try entity(query.entity)
        try validate(query.predicate, e)
        for s in query.sort { try validate(s, e) }
        guard query.offset >= 0, (query.limit ?? 0) >= 0 else {
            throw StrataError.invalidQuery(entity: e.name, reason: "negative limit or offset")
        }
        if let top = try mostTargets(e, query) { return top }
        // Without a sort, candidates come in id order, so the window can stop the scan early.
        // Saturating: a limit near Int.max means "no limit", not an overflow.
        let stopAfter = query.sort.isEmpty
            ? query.limit.map { $0.addingReportingOverflow(query.offset).overflow ? Int.max : $0 + query.offset } : nil
        if stopAfter == 0 { return [] }
        var results: [Record] = []
        let memo = PathMemo.for(query.predicate)
        try candidates(e, query.predicate) { record in
            if try matches(query.predicate, record, memo: memo) { results.append(record) }
            return stopAfter.map { results.count < $0 } ?? true
        }
        if query.sort.contains(where: { !$0.path.isEmpty || $0.countOf != nil }) {
            results = try sortedThroughPaths(results, query.sort)
        } else if !query.sort.isEmpty {
            results.sort(by: ordering(query.sort))
        }
        return window(results, offset: query.offset, limit: query.limit)
    }

    /// Checks a sort key: every step of its path a to-one relationship, its attribute in range.
    func validate(_ s: SortKey, _ e: EntityDescription) throws {
        if let tag = s.countOf {
            guard let r = e.relationships.first(where: { $0.tag == tag }), r.isToMany else {
                throw StrataError.invalidQuery(entity: e.name,
                                               reason: "a count sort key (tag \(tag)) is not a to-many relationship of \(e.name)")
            }
            return
        }
        if let tag = s.entityTag, tag != e.tag {
            let other = schema.entity(tag: tag)?.name ?? "entity tag \(tag)"
            throw StrataError.invalidQuery(entity: e.name, reason: "a sort key on an attribute of \(other), not of \(e.name)")
        }
        var at = e
        for tag in s.path {
            guard let r = at.relationships.first(where: { $0.tag == tag }), !r.isToMany,
                  let next = schema.entity(named: r.destination) else {
                throw StrataError.invalidQuery(entity: e.name,
                                               reason: "a sort path step (tag \(tag)) is not a to-one relationship " +
                                                       "of \(at.name)")
            }
            at = next
        }
        guard s.attribute >= 0, s.attribute < at.attributes.count else {
            throw StrataError.invalidQuery(entity: e.name, reason: "sort attribute position \(s.attribute) out of range")
        }
    }

    /// The first objects by most targets of a to-many (`-count(dependents)` with a limit, no
    /// filter), from the edges' counts: only the objects returned are read. Nil when the query is
    /// not of that shape, or the objects with targets are fewer than the window (the others,
    /// with none, would have to be listed too).
    private func mostTargets(_ e: EntityDescription, _ query: Query) throws -> [Record]? {
        guard case .all = query.predicate, let first = query.sort.first, let tag = first.countOf, !first.ascending,
              let limit = query.limit, case let (end, overflow) = limit.addingReportingOverflow(query.offset), !overflow,
              let counts = try targetCounts(e, tag), counts.count >= end else { return nil }
        // Ties: the further keys decide, then the id; only the objects tied at the window's edge
        // need reading for them.
        let sorted = counts.sorted { $0.count != $1.count ? $0.count > $1.count : $0.id < $1.id }
        guard end > 0 else { return [] }
        let edge = sorted[end - 1].count
        let taken = sorted.prefix { $0.count >= edge }
        var records = try taken.compactMap { try record($0.id) }
        records = try sortedThroughPaths(records, query.sort)
        return window(records, offset: query.offset, limit: query.limit)
    }

    /// `records` sorted by keys some of which go through relationships or count targets: each
    /// key's value is looked up once per record (no value when a path ends at no object), then
    /// compared.
    /// - Complexity: O(n · path lookups + n log n comparisons).
    func sortedThroughPaths(_ records: [Record], _ sort: [SortKey]) throws -> [Record] {
        let keys: [[Value]] = try records.map { r in
            try sort.map { s in
                if let tag = s.countOf { return .int(Int64(try targets(tag, from: r.id).count)) }
                var current: Record? = r
                for tag in s.path {
                    current = try current.flatMap { try targets(tag, from: $0.id).first }.flatMap { try record($0) }
                }
                return current?.values[s.attribute] ?? .null
            }
        }
        let order = records.indices.sorted { a, b in
            for (k, s) in sort.enumerated() {
                let c = Value.compare(keys[a][k], keys[b][k])
                if c != 0 { return s.ascending ? c < 0 : c > 0 }
            }
            return records[a].id < records[b].id
        }
        return order.map { records[$0] }
    }

    func count(_ query: Query) throws -> Int {
        let e = try entity(query.entity)
        if case .all = query.predicate { return try objectCount(e) }
        try validate(query.predicate, e)
        if let n = try exactCount(e, query.predicate) { return n }
        var n = 0
        let memo = PathMemo.for(query.predicate)
        try candidates(e, query.predicate) { record in
            if try matches(query.predicate, record, memo: memo) { n += 1 }
            return true
        }
        return n
    }

    func window<T>(_ items: [T], offset: Int, limit: Int?) -> [T] {
        guard offset < items.count else { return [] }
        let end = limit.map { offset + min(items.count - offset, $0) } ?? items.count
        return Array(items[offset..<end])
    }

    func ordering(_ sort: [SortKey]) -> (Record, Record) -> Bool {
        { a, b in
            for s in sort {
                let c = Value.compare(a.values[s.attribute], b.values[s.attribute])
                if c != 0 { return s.ascending ? c < 0 : c > 0 }
            }
            return a.id < b.id
        }
    }

    // MARK: Evaluation

    /// Whether `r` matches `p`. A filter with paths of more than one relationship (`a.b.c`)
    /// remembers, for the one record, whether each object met at each step of a path matches the
    /// rest of it: objects reached again by other paths (a graph of dependencies, or of tags)
    /// are judged once, not once per path to them, whose number grows with each step.
    func matches(_ p: Filter, _ r: Record) throws -> Bool {
        try matches(p, r, memo: PathMemo.for(p))
    }

    /// ``matches(_:_:)`` with a memo kept across the records of one query (``PathMemo/for(_:)``):
    /// the state read does not change within it, so an object met on a path is judged once for
    /// all of them.
    func matches(_ p: Filter, _ r: Record, memo: PathMemo?) throws -> Bool {
        try matches(p, r, node: 0, memo: memo)
    }

    /// ``matches(_:_:)`` of the node numbered `node` (in preorder, ``Filter/nodeCount``) of the
    /// filter asked, remembering in `memo` whether an object reached through a relationship
    /// matches the node below it.
    private func matches(_ p: Filter, _ r: Record, node: Int, memo: PathMemo?) throws -> Bool {
        switch p {
        case .all: return true
        case .compare(let a, let op, let v): return op.holds(Value.compare(r.values[a], v))
        case .between(let a, let lo, let hi):
            return Value.compare(r.values[a], lo) >= 0 && Value.compare(r.values[a], hi) <= 0
        case .string(let a, let op, let s, let ci):
            guard case .string(let x) = r.values[a] else { return false }
            // Case-insensitive forms compare case foldings (Unicode full case folding: a final
            // sigma as a sigma, ß as ss), where lowercasing each character left ΟΔΟΣ (οδοσ) and
            // οδος apart.
            let (hay, needle) = ci ? (Self.folded(x), Self.folded(s)) : (x, s)
            switch op {
            case .contains: return needle.isEmpty || hay.utf8.firstRange(of: needle.utf8) != nil
            case .hasPrefix: return hay.utf8.starts(with: needle.utf8)
            case .hasSuffix: return hay.utf8.reversed().starts(with: needle.utf8.reversed())
            // Checked when the query was validated: a pattern that does not parse never gets here.
            case .matches:
                let pattern = ci ? try? GlobPattern(caseInsensitive: s, fold: Self.folded) : try? GlobPattern(s)
                return pattern?.matches(hay) ?? false
            }
        case .isIn(let a, let values): return values.contains(r.values[a])
        case .idIn(let ids): return ids.contains(r.id)
        case .related(let tag, let target): return try targets(tag, from: r.id).first == target
        case .through(let tag, let inner):
            guard let t = try targets(tag, from: r.id).first else { return false }
            return try reached(t, inner, node: node + 1, memo: memo)
        case .any(let tag, let inner):
            for t in try targets(tag, from: r.id) where try reached(t, inner, node: node + 1, memo: memo) {
                return true
            }
            return false
        case .and(let list):
            var child = node + 1
            for q in list {
                if try !matches(q, r, node: child, memo: memo) { return false }
                // Numbered only where remembered: counting nodes costs a walk of the term.
                if memo != nil { child += q.nodeCount }
            }
            return true
        case .or(let list):
            var child = node + 1
            for q in list {
                if try matches(q, r, node: child, memo: memo) { return true }
                // Numbered only where remembered: counting nodes costs a walk of the term.
                if memo != nil { child += q.nodeCount }
            }
            return false
        case .not(let q): return try !matches(q, r, node: node + 1, memo: memo)
        }
    }

    /// `text`'s Unicode case folding, as case-insensitive string terms compare it.
    static func folded(_ text: String) -> String { text.folding(options: [.caseInsensitive], locale: nil) }

    /// Whether the object `id`, reached through a relationship, matches `inner` (node `node`):
    /// false for one that does not exist; remembered in `memo`.
    private func reached(_ id: ObjectID, _ inner: Filter, node: Int, memo: PathMemo?) throws -> Bool {
        let step = PathMemo.Step(node: node, object: id)
        if let known = memo?.known[step] { return known }
        guard let record = try record(id) else { return false }
        let result = try matches(inner, record, node: node, memo: memo)
        memo?.known[step] = result
        return result
    }

    /// Checks positions, value types and relationship kinds against the entity, and the nesting
    /// (at most ``Filter/maxNesting`` levels: reading a filter recurses once per level, and a
    /// filter built in code nested thousands deep overflowed the stack).
    func validate(_ p: Filter, _ e: EntityDescription, depth: Int = 0) throws {
        func bad(_ reason: String) -> StrataError { .invalidQuery(entity: e.name, reason: reason) }
        guard depth < Filter.maxNesting else {
            throw bad("the filter is nested more than \(Filter.maxNesting) levels deep (not, and, or and " +
                      "relationship paths inside one another)")
        }
        func attribute(_ a: Int) throws -> AttributeDescription {
            guard a >= 0, a < e.attributes.count else { throw bad("attribute position \(a) out of range") }
            return e.attributes[a]
        }
        func typed(_ a: Int, _ v: Value) throws {
            let d = try attribute(a)
            if let t = v.type, t != d.type {
                throw bad("'\(d.name)' is \(d.type.rawValue), compared with a \(t.rawValue)")
            }
            // The store holds no NaN or infinite double or date; a query value must be one it could hold.
            if let reason = v.notFiniteReason { throw bad("'\(d.name)' compared with \(v): \(reason)") }
        }
        func relationship(_ tag: UInt16, toMany: Bool) throws -> RelationshipDescription {
            guard let r = schema.relationship(tag: tag),
                  r.entityName == e.name else { throw bad("relationship tag \(tag) is not on \(e.name)") }
            guard r.isToMany == toMany else {
                throw bad("'\(r.name)' is \(r.isToMany ? "to-many: use any" : "to-one")")
            }
            return r
        }
        switch p {
        case .all, .idIn: return
        case .compare(let a, _, let v): try typed(a, v)
        case .between(let a, let lo, let hi): try typed(a, lo); try typed(a, hi)
        case .isIn(let a, let vs): for v in vs { try typed(a, v) }
        case .string(let a, let op, let text, _):
            let d = try attribute(a)
            guard d.type == .string else { throw bad("'\(d.name)' is \(d.type.rawValue), not string") }
            if op == .matches {
                do { _ = try GlobPattern(text) } catch let invalid as GlobPattern.Invalid {
                    throw bad("pattern for '\(d.name)': \(invalid.reason)")
                }
            }
        case .related(let tag, let target):
            let r = try relationship(tag, toMany: false)
            if let target, schema.entity(tag: target.entityTag)?.name != r.destination {
                throw bad("\(target) is not a \(r.destination)")
            }
        case .through(let tag, let inner):
            let r = try relationship(tag, toMany: false)
            try validate(inner, schema.entity(named: r.destination)!, depth: depth + 1)
        case .any(let tag, let inner):
            let r = try relationship(tag, toMany: true)
            try validate(inner, schema.entity(named: r.destination)!, depth: depth + 1)
        case .and(let list), .or(let list): for q in list { try validate(q, e, depth: depth + 1) }
        case .not(let q): try validate(q, e, depth: depth + 1)
        }
    }
}

/// What ``ObjectSource/matches(_:_:)`` found of the objects met on a filter's paths, for one
/// record or the records of one query (one state): whether the object at each step matches the
/// node of the filter below it. At most one entry per node of the filter and object of the
/// store.
final class PathMemo {
    struct Step: Hashable {
        let node: Int
        let object: ObjectID
    }
    var known: [Step: Bool] = [:]

    /// A memo for `p` when it has paths of more than one relationship; nil otherwise (a path of
    /// one is judged once per record anyway).
    static func `for`(_ p: Filter) -> PathMemo? { p.relationshipDepth > 1 ? PathMemo() : nil }
}

extension Filter {
    /// Nodes of this filter, itself included (how ``ObjectSource/matches(_:_:)`` numbers them).
    var nodeCount: Int {
        switch self {
        case .all, .compare, .between, .string, .isIn, .idIn, .related: 1
        case .through(_, let inner), .any(_, let inner), .not(let inner): 1 + inner.nodeCount
        case .and(let list), .or(let list): 1 + list.reduce(0) { $0 + $1.nodeCount }
        }
    }

    /// The most relationships a path of this filter goes through (`a.b.c == x`: 2).
    var relationshipDepth: Int {
        switch self {
        case .all, .compare, .between, .string, .isIn, .idIn, .related: 0
        case .through(_, let inner), .any(_, let inner): 1 + inner.relationshipDepth
        case .not(let inner): inner.relationshipDepth
        case .and(let list), .or(let list): list.map(\.relationshipDepth).max() ?? 0
        }
    }
}
