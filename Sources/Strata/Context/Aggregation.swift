import Foundation

/// What an aggregate computes over the objects of a group (``ObjectReading/aggregate(_:groupedBy:_:)``).
public enum AggregateFunction: Sendable, Equatable {
    /// The sum of an `int`, `double` or `decimal` attribute (objects without a value skipped): an
    /// `int` for `int` attributes (a sum beyond `Int` throws ``StrataError/invalidQuery(entity:reason:)``),
    /// a `double` for `double` ones, an exact `decimal` for `decimal` ones (a sum that needs more
    /// than 38 significant digits throws); `0` for a group where no object has a value.
    case sum(attribute: Int)
    /// The least value of an attribute (``Value`` order, objects without a value skipped; no value
    /// when none has one).
    case min(attribute: Int)
    /// The greatest value of an attribute (as ``min(attribute:)``).
    case max(attribute: Int)
    /// The mean of an `int` or `double` attribute as a `double`, of a `decimal` attribute as a
    /// `decimal` (the exact sum divided, rounded to 38 significant digits); objects without a
    /// value skipped; no value when none has one.
    case average(attribute: Int)
    /// How many objects of the group have a value for the attribute.
    case countValues(attribute: Int)
}

/// How an aggregate groups objects.
public enum GroupKey: Sendable, Equatable {
    /// By an attribute's value, of the object itself (`path` empty) or of the object reached
    /// through the to-one relationships `path` (tags; no value when the path ends at no object).
    case attribute(path: [UInt16], attribute: Int)
    /// By the number of targets of a to-many relationship.
    case count(relationship: UInt16)
    /// By the target of a to-one relationship: its id (`.string` of the id's text), no value when
    /// unset.
    case target(relationship: UInt16)
}

/// One group of an aggregate: its key, how many objects it holds, and one value per function.
public struct AggregateRow: Sendable, Equatable {
    /// The group's key (``Value/null`` for the group of objects without one; for an ungrouped
    /// aggregate, the one row's key is ``Value/null`` too).
    public let group: Value
    /// How many objects matched in this group.
    public let count: Int
    /// The functions' results, in the order they were asked for.
    public let values: [Value]
    /// A row (built by ``ObjectReading/aggregate(_:groupedBy:_:)``; public for tests and previews).
    public init(group: Value, count: Int, values: [Value]) {
        self.group = group
        self.count = count
        self.values = values
    }
}

extension ObjectReading {
    /// Counts, sums, minima, maxima and means of the objects matching `query` (its sort and
    /// window are ignored), in groups by `groupedBy` (one row for all when nil), the rows in the
    /// order of their keys (no value first). Works on every context: snapshots, view contexts,
    /// child contexts with their pending changes.
    ///
    /// ```swift
    /// // tracks per genre, with their total length
    /// let rows = try context.aggregate(Query(entity: "Track"), groupedBy: .target(relationship: Track.genre.tag),
    ///                                  [.sum(attribute: Track.durationSeconds.index)])
    /// ```
    /// - Complexity: O(matching objects), plus one relationship read per object for a group
    ///   through a relationship. The objects are read as `fetch` reads them.
    public func aggregate(_ query: Query, groupedBy key: GroupKey? = nil,
                          _ functions: [AggregateFunction] = []) throws -> [AggregateRow] {
        guard let e = schema.entity(named: query.entity) else {
            throw StrataError.invalidQuery(entity: query.entity, reason: "no such entity in \(schema.model)")
        }
        func bad(_ reason: String) -> StrataError { .invalidQuery(entity: e.name, reason: reason) }
        func attribute(_ a: Int) throws -> AttributeDescription {
            guard a >= 0, a < e.attributes.count else { throw bad("attribute position \(a) out of range") }
            return e.attributes[a]
        }
        for f in functions {
            switch f {
            case .sum(let a), .average(let a):
                let d = try attribute(a)
                guard d.type == .int || d.type == .double || d.type == .decimal else {
                    throw bad("'\(d.name)' is \(d.type.rawValue): sums and averages need an int, double or " +
                              "decimal attribute")
                }
            case .min(let a), .max(let a), .countValues(let a): _ = try attribute(a)
            }
        }
        if functions.isEmpty, case .all = query.predicate, case .target(let tag)? = key,
           let rows = try targetCounts(e, tag) {
            return rows
        }
        let groupOf = try groupFunction(key, e)
        var where_ = query
        where_.sort = []
        where_.limit = nil
        where_.offset = 0
        var groups: [Value: [Record]] = [:]
        for r in try fetch(where_) { groups[try groupOf(r), default: []].append(r) }
        if key == nil, groups.isEmpty { groups[.null] = [] }
        return try groups.keys.sorted { Value.compare($0, $1) < 0 }.map { g in
            let members = groups[g] ?? []
            return AggregateRow(group: g, count: members.count,
                                values: try functions.map { try Self.compute($0, members, e) })
        }
    }

    /// Counts per target of the to-one `tag` of every object of `e`, from the targets' edges back:
    /// the objects of `e` are not read (packages per section reads the sections and their
    /// edges). Nil when `tag` is not a to-one of `e`.
    private func targetCounts(_ e: EntityDescription, _ tag: UInt16) throws -> [AggregateRow]? {
        guard let r = e.relationships.first(where: { $0.tag == tag }), !r.isToMany,
              let destination = schema.entity(named: r.destination) else { return nil }
        let inverse = schema.inverse(of: r)
        var rows: [AggregateRow] = []
        var linked = 0
        for target in try fetch(Query(entity: destination.name)) {
            let n = try relatedIDs(inverse, of: target.id).count
            guard n > 0 else { continue }
            linked += n
            rows.append(AggregateRow(group: .string(target.id.description), count: n, values: []))
        }
        let unset = try count(Query(entity: e.name)) - linked
        if unset > 0 { rows.append(AggregateRow(group: .null, count: unset, values: [])) }
        return rows.sorted { Value.compare($0.group, $1.group) < 0 }
    }

    /// The group key of a record under `key`.
    private func groupFunction(_ key: GroupKey?, _ e: EntityDescription) throws -> (Record) throws -> Value {
        func bad(_ reason: String) -> StrataError { .invalidQuery(entity: e.name, reason: reason) }
        switch key {
        case nil: return { _ in .null }
        case .attribute(let path, let a):
            var at = e
            var steps: [RelationshipDescription] = []
            for tag in path {
                guard let r = at.relationships.first(where: { $0.tag == tag }), !r.isToMany,
                      let next = schema.entity(named: r.destination) else {
                    throw bad("a group path step (tag \(tag)) is not a to-one relationship of \(at.name)")
                }
                steps.append(r)
                at = next
            }
            guard a >= 0, a < at.attributes.count else { throw bad("group attribute position \(a) out of range") }
            return { r in
                var current: Record? = r
                for step in steps {
                    current = try current.flatMap { try self.relatedIDs(step, of: $0.id).first }.flatMap { try self.record($0) }
                }
                return current?.values[a] ?? .null
            }
        case .count(let tag):
            guard let r = e.relationships.first(where: { $0.tag == tag }), r.isToMany else {
                throw bad("relationship tag \(tag) is not a to-many relationship of \(e.name)")
            }
            return { rec in .int(Int64(try self.relatedIDs(r, of: rec.id).count)) }
        case .target(let tag):
            guard let r = e.relationships.first(where: { $0.tag == tag }), !r.isToMany else {
                throw bad("relationship tag \(tag) is not a to-one relationship of \(e.name)")
            }
            return { rec in try self.relatedIDs(r, of: rec.id).first.map { .string($0.description) } ?? .null }
        }
    }

    /// The exact sum of decimal values, or an error when it needs more than 38 significant digits.
    private static func decimalSum(_ values: [Value], _ e: EntityDescription, _ a: Int) throws -> Decimal {
        var total = Decimal()
        for case .decimal(var x) in values {
            var sum = Decimal()
            let status = NSDecimalAdd(&sum, &total, &x, .plain)
            guard status == .noError, DecimalNumber(sum).map({ $0.digits.count <= DecimalNumber.maxDigits }) ?? false else {
                throw StrataError.invalidQuery(entity: e.name, reason: "the sum of '\(e.attributes[a].name)' needs more " +
                                               "than \(DecimalNumber.maxDigits) significant digits to be exact")
            }
            total = sum
        }
        return total
    }

    private static func compute(_ f: AggregateFunction, _ members: [Record], _ e: EntityDescription) throws -> Value {
        func values(_ a: Int) -> [Value] { members.map { $0.values[a] }.filter { !$0.isNull } }
        switch f {
        case .countValues(let a): return .int(Int64(values(a).count))
        case .min(let a): return values(a).min { Value.compare($0, $1) < 0 } ?? .null
        case .max(let a): return values(a).max { Value.compare($0, $1) < 0 } ?? .null
        case .sum(let a):
            if e.attributes[a].type == .int {
                var total: Int64 = 0
                for case .int(let x) in values(a) {
                    let (s, overflow) = total.addingReportingOverflow(x)
                    guard !overflow else {
                        throw StrataError.invalidQuery(entity: e.name,
                                                       reason: "the sum of '\(e.attributes[a].name)' exceeds Int64")
                    }
                    total = s
                }
                return .int(total)
            }
            if e.attributes[a].type == .decimal { return .decimal(try decimalSum(values(a), e, a)) }
            var total = 0.0
            for case .double(let x) in values(a) { total += x }
            return .double(total)
        case .average(let a):
            let vs = values(a)
            guard !vs.isEmpty else { return .null }
            if e.attributes[a].type == .decimal {
                var sum = try decimalSum(vs, e, a), count = Decimal(vs.count), mean = Decimal()
                _ = NSDecimalDivide(&mean, &sum, &count, .plain)  // rounds to 38 digits; cannot overflow
                return .decimal(mean)
            }
            var total = 0.0
            for v in vs {
                switch v {
                case .int(let x): total += Double(x)
                case .double(let x): total += x
                default: continue
                }
            }
            return .double(total / Double(vs.count))
        }
    }
}
