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
    /// - Complexity: O(matching objects), read once in one pass; a group by a to-one target reads
    ///   the targets' edges instead of each object's, and counts alone per target (no filter) do
    ///   not read the objects at all.
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
        let aggregation = Aggregation(schema: schema, entity: e, key: key, functions: functions)
        if let reading = self as? any SourceReading {
            return try reading.withSource { source in try aggregation.run(source, query.predicate) }
        }
        return try aggregation.run(ReadingSource(reading: self), query.predicate)
    }
}

/// The readers whose reads go through an ``ObjectSource`` (every context of Strata's): an
/// aggregate streams their objects in one read.
protocol SourceReading {
    func withSource<R>(_ body: (any ObjectSource) throws -> R) throws -> R
}

extension ViewContext: SourceReading {
    func withSource<R>(_ body: (any ObjectSource) throws -> R) throws -> R { try read { try body($0) } }
}

extension ChildContext: SourceReading {
    func withSource<R>(_ body: (any ObjectSource) throws -> R) throws -> R { try read { try body($0) } }
}

extension Snapshot: SourceReading {
    func withSource<R>(_ body: (any ObjectSource) throws -> R) throws -> R { try read { try body($0) } }
}

/// Any other ``ObjectReading`` as a source: its objects through `fetch`, its edges through `relatedIDs`.
struct ReadingSource: ObjectSource {
    let reading: any ObjectReading
    var schema: Schema { reading.schema }
    func record(_ id: ObjectID) throws -> Record? { try reading.record(id) }
    func targets(_ tag: UInt16, from id: ObjectID) throws -> [ObjectID] {
        guard let r = schema.relationship(tag: tag) else { return [] }
        return try reading.relatedIDs(r, of: id)
    }
    func objectCount(_ entity: EntityDescription) throws -> Int { try reading.count(Query(entity: entity.name)) }
    /// In id order, as every other source gives them (a group's walk over to-one targets moves
    /// forward only): `fetch` of a conforming type promises its query's sort, and an unsorted
    /// query leaves the order to it.
    func candidates(_ e: EntityDescription, _ predicate: Filter, _ visit: (Record) throws -> Bool) throws {
        var records = try reading.fetch(Query(entity: e.name, predicate: predicate))
        if !records.isSorted(by: { $0.id < $1.id }) { records.sort { $0.id < $1.id } }
        for r in records where try !visit(r) { return }
    }
}

private extension Array where Element == Record {
    func isSorted(by less: (Record, Record) -> Bool) -> Bool {
        zip(self, dropFirst()).allSatisfy { !less($1, $0) }
    }
}

/// One aggregate over a source: groups, then per group a running state of each function.
struct Aggregation {
    let schema: Schema
    let entity: EntityDescription
    let key: GroupKey?
    let functions: [AggregateFunction]

    private func bad(_ reason: String) -> StrataError { .invalidQuery(entity: entity.name, reason: reason) }

    /// The groups met so far: each a slot with its key and its running state.
    final class Groups {
        let functions: [AggregateFunction]
        let entity: EntityDescription
        var keys: [Value] = []
        var states: [Accumulator] = []
        private var slots: [Value: Int] = [:]

        init(_ functions: [AggregateFunction], _ entity: EntityDescription) {
            self.functions = functions
            self.entity = entity
        }

        /// The slot of the group with key `v`, made when new. 0.0 and -0.0 are one key (they
        /// compare equal), shown as 0.0 whichever came first.
        func slot(_ v: Value) -> Int {
            if let s = slots[v] { return s }
            if case .double(let d) = v, d == 0 { return add(.double(0)) }
            return add(v)
        }

        /// A new slot (for keys known to be distinct, such as targets).
        func add(_ v: Value) -> Int {
            slots[v] = states.count
            keys.append(v)
            states.append(Accumulator(functions, entity))
            return states.count - 1
        }

        /// Every group's row, in key order. A result past what its type holds is an error that
        /// names its group (the first such in key order) when the rows are `grouped`.
        func rows(grouped: Bool) throws -> [AggregateRow] {
            let sorted = zip(keys, states).sorted { Value.compare($0.0, $1.0) < 0 }
            return try sorted.map { key, state in
                do {
                    return AggregateRow(group: key, count: state.count, values: try state.results())
                } catch StrataError.invalidQuery(let e, let reason) where grouped {
                    let shown = key.isNull ? "objects without a value" : "'\(ValueConversion.text(key))'"
                    throw StrataError.invalidQuery(entity: e, reason: "\(reason), in the group of \(shown)")
                }
            }
        }
    }

    func run(_ source: any ObjectSource, _ predicate: Filter) throws -> [AggregateRow] {
        try source.validate(predicate, entity)
        if functions.isEmpty, case .all = predicate, case .target(let tag)? = key,
           let rows = try targetCounts(source, tag) {
            return rows
        }
        if functions.isEmpty, case .all = predicate, case .attribute(let path, let a)? = key, path.isEmpty,
           a >= 0, a < entity.attributes.count, let counts = try source.valueCounts(entity, a) {
            return counts.map { c in
                // 0.0 and -0.0 count as one value (see ``Groups/slot(_:)``), shown as 0.0.
                let group: Value = if case .double(let d) = c.value, d == 0 { .double(0) } else { c.value }
                return AggregateRow(group: group, count: c.count, values: [])
            }
                .sorted { Value.compare($0.group, $1.group) < 0 }
        }
        let groups = Groups(functions, entity)
        let slotOf = try groupFunction(source, predicate, groups)
        func add(_ r: Record) throws -> Bool {
            try groups.states[try slotOf(r)].add(r)
            return true
        }
        if case .all = predicate {
            try source.scanAll(entity, only: attributesRead(), add)
        } else {
            let memo = PathMemo.for(predicate)
            try source.candidates(entity, predicate) { r in try source.matches(predicate, r, memo: memo) ? add(r) : true }
        }
        if key == nil, groups.keys.isEmpty { _ = groups.slot(.null) }
        // A target whose objects all failed the filter has a slot but no group.
        return try groups.rows(grouped: key != nil).filter { $0.count > 0 || key == nil }
    }

    /// The attributes of the entity the functions and the group key read (the others need not be
    /// decoded).
    private func attributesRead() -> [Bool] {
        var marks = Array(repeating: false, count: entity.attributes.count)
        for f in functions {
            switch f {
            case .sum(let a), .min(let a), .max(let a), .average(let a), .countValues(let a): marks[a] = true
            }
        }
        if case .attribute(let path, let a)? = key, path.isEmpty { marks[a] = true }
        return marks
    }

    /// Counts per target of the to-one `tag` of every object, from the targets' edges back: the
    /// objects are not read (packages per section reads the sections and their edges). Nil when
    /// `tag` is not a to-one of the entity.
    private func targetCounts(_ source: any ObjectSource, _ tag: UInt16) throws -> [AggregateRow]? {
        guard let r = entity.relationships.first(where: { $0.tag == tag }), !r.isToMany,
              let destination = schema.entity(named: r.destination) else { return nil }
        let inverse = schema.inverse(of: r).tag
        var rows: [AggregateRow] = []
        var linked = 0
        try source.candidates(destination, .all) { target in
            let n = try source.targets(inverse, from: target.id).count
            if n > 0 {
                linked += n
                rows.append(AggregateRow(group: .string(target.id.description), count: n, values: []))
            }
            return true
        }
        let unset = try source.objectCount(entity) - linked
        if unset > 0 { rows.append(AggregateRow(group: .null, count: unset, values: [])) }
        return rows.sorted { Value.compare($0.group, $1.group) < 0 }
    }

    /// The slot of a record's group under `key`. Records come in id order (the sources visit
    /// them so), which a group through a to-one relationship uses to walk a sorted list of
    /// (object, target) pairs alongside them.
    private func groupFunction(_ source: any ObjectSource, _ predicate: Filter,
                               _ groups: Groups) throws -> (Record) throws -> Int {
        let e = entity
        switch key {
        case nil:
            let slot = groups.slot(.null)
            return { _ in slot }
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
            if steps.isEmpty { return { r in groups.slot(r.values[a]) } }
            if steps.count == 1,
               let walk = try TargetWalk(source, schema, steps[0], predicate, slot: { groups.slot($0.values[a]) }) {
                return { r in walk.slot(of: r.id) ?? groups.slot(.null) }
            }
            return { r in
                var current: Record? = r
                for step in steps {
                    current = try current.flatMap { try source.targets(step.tag, from: $0.id).first }.flatMap { try source.record($0) }
                }
                return groups.slot(current?.values[a] ?? .null)
            }
        case .count(let tag):
            guard let r = e.relationships.first(where: { $0.tag == tag }), r.isToMany else {
                throw bad("relationship tag \(tag) is not a to-many relationship of \(e.name)")
            }
            return { rec in groups.slot(.int(Int64(try source.targets(r.tag, from: rec.id).count))) }
        case .target(let tag):
            guard let r = e.relationships.first(where: { $0.tag == tag }), !r.isToMany else {
                throw bad("relationship tag \(tag) is not a to-one relationship of \(e.name)")
            }
            // Targets are distinct keys: each gets a slot of its own without a lookup.
            if let walk = try TargetWalk(source, schema, r, predicate, slot: { groups.add(.string($0.id.description)) }) {
                return { rec in walk.slot(of: rec.id) ?? groups.slot(.null) }
            }
            return { rec in
                groups.slot(try source.targets(r.tag, from: rec.id).first.map { .string($0.description) } ?? .null)
            }
        }
    }
}

/// For a group through a to-one relationship: every (object, slot of its target) pair, from the
/// targets' edges back (one pass over the targets instead of one edge lookup per object), sorted
/// by object id and walked alongside records that come in id order.
final class TargetWalk {
    private var pairs: [(id: ObjectID, slot: Int)] = []
    private var next = 0

    /// Nil when the walk would read more than it saves: a filtered aggregate over many more
    /// targets than it is likely to match.
    init?(_ source: any ObjectSource, _ schema: Schema, _ r: RelationshipDescription, _ predicate: Filter,
          slot: (Record) -> Int) throws {
        guard let destination = schema.entity(named: r.destination) else { return nil }
        if case .all = predicate {} else if try source.objectCount(destination) > 1_000 { return nil }
        let inverse = schema.inverse(of: r).tag
        try source.candidates(destination, .all) { target in
            let edges = try source.targets(inverse, from: target.id)
            guard !edges.isEmpty else { return true }
            let s = slot(target)
            for id in edges { pairs.append((id, s)) }
            return true
        }
        pairs.sort { $0.id < $1.id }
    }

    /// The slot of `id`'s target; nil when it has none. Ids must come in ascending order.
    func slot(of id: ObjectID) -> Int? {
        while next < pairs.count, pairs[next].id < id { next += 1 }
        return next < pairs.count && pairs[next].id == id ? pairs[next].slot : nil
    }
}

/// The running state of a group: its count and one state per function.
struct Accumulator {
    enum State {
        case countValues(Int)
        case least(Value?), greatest(Value?)
        /// Int sums are kept in 128 bits, double sums exactly (``DoubleTotal``), so that only the
        /// total, not a running sum on the way to it, may be past what the result holds, and the
        /// answer is the exact total rounded once, whatever the order of the terms; decimal sums
        /// are exact however many digits they take on the way (``ExactDecimalSum``).
        case intSum(Int128), doubleSum(DoubleTotal), decimalSum(ExactDecimalSum)
        /// The exact sum and the count: the mean is the one over the other, as SQL's AVG.
        case intMean(Int128, Int), doubleMean(DoubleTotal, Int), decimalMean(ExactDecimalSum, Int)
    }

    let functions: [AggregateFunction]
    let entity: EntityDescription
    var count = 0
    var states: [State]

    init(_ functions: [AggregateFunction], _ e: EntityDescription) {
        self.functions = functions
        entity = e
        states = functions.map { f in
            switch f {
            case .countValues: .countValues(0)
            case .min: .least(nil)
            case .max: .greatest(nil)
            case .sum(let a):
                switch e.attributes[a].type {
                case .int: .intSum(0)
                case .decimal: .decimalSum(ExactDecimalSum())
                default: .doubleSum(DoubleTotal())
                }
            case .average(let a):
                switch e.attributes[a].type {
                case .int: .intMean(0, 0)
                case .decimal: .decimalMean(ExactDecimalSum(), 0)
                default: .doubleMean(DoubleTotal(), 0)
                }
            }
        }
    }

    private static func attribute(_ f: AggregateFunction) -> Int {
        switch f {
        case .sum(let a), .min(let a), .max(let a), .average(let a), .countValues(let a): a
        }
    }

    mutating func add(_ r: Record) throws {
        count += 1
        for k in states.indices {
            let a = Self.attribute(functions[k])
            let v = r.values[a]
            if v.isNull { continue }
            switch (states[k], v) {
            case (.countValues(let n), _): states[k] = .countValues(n + 1)
            case (.least(let m), _): if m.map({ Value.compare(v, $0) < 0 }) ?? true { states[k] = .least(v) }
            case (.greatest(let m), _): if m.map({ Value.compare(v, $0) > 0 }) ?? true { states[k] = .greatest(v) }
            case (.intSum(let t), .int(let x)):
                // 2^63 terms of at most 2^63 each stay below 2^127.
                states[k] = .intSum(t + Int128(x))
            case (.doubleSum(var t), .double(let x)):
                states[k] = .countValues(0)   // the state lets go of the sum's storage: added in place
                t.add(x)
                states[k] = .doubleSum(t)
            case (.decimalSum(var sum), .decimal(let x)):
                states[k] = .countValues(0)
                sum.add(Self.number(x))
                states[k] = .decimalSum(sum)
            case (.intMean(let t, let n), .int(let x)): states[k] = .intMean(t + Int128(x), n + 1)
            case (.doubleMean(var t, let n), .double(let x)):
                states[k] = .countValues(0)
                t.add(x)
                states[k] = .doubleMean(t, n + 1)
            case (.decimalMean(var sum, let n), .decimal(let x)):
                states[k] = .countValues(0)
                sum.add(Self.number(x))
                states[k] = .decimalMean(sum, n + 1)
            default: continue
            }
        }
    }


    /// The exact int sum `total` over `count`, rounded once: the rounded sum, corrected by what
    /// its rounding left (exact in 128 bits) and by what the division left (``correctedMean``).
    /// (Converting the sum and dividing rounded twice: the mean of 9007199254740993, 1 and 1 came
    /// out as 3002399751580332, not 3002399751580331.5.)
    static func mean(of total: Int128, count: Int) -> Double {
        let rounded = Double(total)
        // A sum of Int64 values stays far below 2^126; the guard keeps the conversion back exact.
        guard rounded.magnitude < 0x1p126 else { return rounded / Double(count) }
        return correctedMean(rounded, rest: Double(total - Int128(rounded)), count: count)
    }

    /// The exact parts of a stored decimal (never NaN: values are checked where they are made).
    private static func number(_ x: Decimal) -> DecimalNumber {
        guard let n = DecimalNumber(x) else {
            assertionFailure("a stored decimal is never NaN")
            return .zero
        }
        return n
    }

    /// Each function's result, in order.
    /// - Throws: ``StrataError/invalidQuery(entity:reason:)`` for a sum whose total is past what
    ///   its type holds: an int sum past Int64, a double sum past the largest double, a decimal
    ///   sum that needs more than 38 significant digits.
    func results() throws -> [Value] {
        try zip(states, functions).map { state, f in
            let name = entity.attributes[Self.attribute(f)].name
            switch state {
            case .countValues(let n): return .int(Int64(n))
            case .least(let v), .greatest(let v): return v ?? .null
            case .intSum(let t):
                guard let sum = Int64(exactly: t) else {
                    throw StrataError.invalidQuery(entity: entity.name, reason: "the sum of '\(name)' exceeds Int64")
                }
                return .int(sum)
            case .doubleSum(let t):
                // Past what a double holds, an error, as an int sum past Int64 is (an infinite sum
                // has no JSON form, and printed as null, "no value").
                guard let sum = t.sum else {
                    throw StrataError.invalidQuery(entity: entity.name, reason: "the sum of '\(name)' exceeds what a double holds")
                }
                return .double(sum)
            // The exact sum over the count, rounded once for each: never past what a double holds.
            case .intMean(let t, let n): return n == 0 ? .null : .double(Self.mean(of: t, count: n))
            case .doubleMean(let t, let n): return n == 0 ? .null : .double(t.mean(of: n))
            case .decimalSum(let sum):
                let total = sum.total
                guard (try? total.checked("")) != nil else {
                    // Too many digits, or a total past the decimal's range (9e164 + 9e164 has
                    // two digits; it was said to need more than 38).
                    let why = total.digits.count > DecimalNumber.maxDigits
                        ? "needs more than \(DecimalNumber.maxDigits) significant digits to be exact"
                        : total.exponent < DecimalNumber.minExponent
                        ? "is too small for a decimal (its last digit is below 10^\(DecimalNumber.minExponent))"
                        : "is too large for a decimal (\(DecimalNumber.maxDigits) digits times at most 10^\(DecimalNumber.maxExponent))"
                    throw StrataError.invalidQuery(entity: entity.name, reason: "the sum of '\(name)' \(why)")
                }
                return .decimal(total.decimal)
            // The exact sum divided and rounded once (``DecimalNumber/divided(by:)`` takes any
            // number of digits).
            case .decimalMean(let sum, let n): return n == 0 ? .null : .decimal(sum.total.divided(by: n).decimal)
            }
        }
    }
}

/// A double attribute's sum in an aggregate: its terms summed exactly (``ExactDoubleSum``), and
/// also scaled down by 2^64, which no sum of fewer than 2^64 doubles overflows on the way, with
/// what scaling loses of each term below 2^-958 kept beside (exactly: the term less its scaled
/// part scaled back). When a partial sum of the plain terms overflowed on the way, which depends
/// on their order, the scaled parts scaled back and the losses are summed exactly again: the same
/// exact sum, so the result never depends on the order of the terms.
struct DoubleTotal {
    private var plain = ExactDoubleSum()
    private var scaled = ExactDoubleSum()
    private var losses = ExactDoubleSum()

    mutating func add(_ x: Double) {
        plain.add(x)
        let part = x * Self.scaleDown
        scaled.add(part)
        // Exact: both are multiples of the smallest subnormal, and the difference is below 2^-1010.
        let lost = x - part * Self.scaleUp
        if lost != 0 { losses.add(lost) }
    }

    /// The terms' exact sum as non-overlapping partials, or nil when it is past what a double holds.
    private var exact: ExactDoubleSum? {
        if !plain.overflowed { return plain }
        // An infinite term (or 2^64 terms) leaves no exact sum to find.
        guard !scaled.overflowed, !losses.overflowed else { return nil }
        var again = ExactDoubleSum()
        // Increasing magnitude, so that no partial sum on the way passes the total.
        for p in losses.partials { again.add(p) }
        for p in scaled.partials { again.add(p * Self.scaleUp) }
        return again.overflowed ? nil : again
    }

    /// The exact sum rounded once; nil when it is past what a double holds.
    var sum: Double? {
        guard let total = exact?.total, total.isFinite else { return nil }
        return total
    }

    /// The exact sum over `n` (the terms' count, above 0), the sum scaled down where it is past
    /// what a double holds (the mean itself never is).
    ///
    /// Rounded once (``correctedMean``): what the sum's rounding left is the exact sum less the
    /// rounded one, summed exactly again.
    func mean(of n: Int) -> Double {
        if let exact, let mean = Self.mean(exact, n) { return mean }
        // Past the largest double: the mean of the terms scaled down, scaled back up (exact,
        // a power of two), held to the finite range, where the mean of finite terms lies:
        // rounding could carry it past for terms at the largest double. (What scaling lost is
        // far below the last place of a mean that large.)
        let largest = Double.greatestFiniteMagnitude
        return min(max((Self.mean(scaled, n) ?? 0) * Self.scaleUp, -largest), largest)
    }

    /// The exact mean of `sum`'s terms rounded once (``correctedMean``), or nil when their total
    /// is not a finite double.
    private static func mean(_ sum: ExactDoubleSum, _ n: Int) -> Double? {
        guard let total = sum.total, total.isFinite else { return nil }
        var rest = sum
        rest.add(-total)
        return correctedMean(total, rest: rest.total ?? 0, count: n)
    }

    /// 2^-64, and 2^64 undoing it.
    private static let scaleDown = Double(sign: .plus, exponent: -64, significand: 1)
    private static let scaleUp = Double(sign: .plus, exponent: 64, significand: 1)
}

/// The mean of a sum known as `total` (rounded) plus `rest` (what the rounding left), over
/// `count`, rounded once: the quotient `total / count` corrected by what the division left
/// (`fma`, exact) and `rest`, over `count`. The rounded total over the count alone rounds twice,
/// and can be a unit in the last place off (the mean of 9.73, 8.462, 3.9, 4.802, 7.97 and 6.65
/// came out as 6.9190000000000005, not 6.919).
func correctedMean(_ total: Double, rest: Double, count: Int) -> Double {
    let n = Double(count)
    let quotient = total / n
    let mean = quotient + (total.addingProduct(-quotient, n) + rest) / n
    return mean.isFinite ? mean : quotient
}

/// A sum of doubles kept exactly, as non-overlapping partial sums (Shewchuk's algorithm, as
/// Python's `math.fsum`): its ``total`` is the exact sum rounded once, whatever the order of the
/// terms. A partial sum past the largest double on the way makes the total unknown (nil); the
/// caller then sums the terms scaled down.
struct ExactDoubleSum {
    /// Non-overlapping, in increasing magnitude.
    private(set) var partials: [Double] = []
    /// Whether a partial sum passed the largest double on the way (the total is then unknown).
    private(set) var overflowed = false

    mutating func add(_ value: Double) {
        guard !overflowed else { return }
        var x = value, i = 0
        for j in partials.indices {
            var y = partials[j]
            if abs(x) < abs(y) { swap(&x, &y) }
            let hi = x + y
            let lo = y - (hi - x)
            if lo != 0 {
                partials[i] = lo
                i += 1
            }
            x = hi
        }
        guard x.isFinite else {
            overflowed = true
            return
        }
        partials.removeSubrange(i...)
        partials.append(x)
    }

    /// The exact sum rounded to the nearest double (ties to even), or nil when a partial sum
    /// overflowed on the way.
    var total: Double? {
        guard !overflowed else { return nil }
        var n = partials.count
        guard n > 0 else { return 0 }
        n -= 1
        var hi = partials[n], lo = 0.0
        while n > 0 {
            let x = hi
            n -= 1
            let y = partials[n]
            hi = x + y
            lo = y - (hi - x)
            if lo != 0 { break }
        }
        // Half-way between two doubles, the partials below decide the direction.
        if n > 0, (lo < 0 && partials[n - 1] < 0) || (lo > 0 && partials[n - 1] > 0) {
            let y = lo * 2
            let x = hi + y
            if y == x - hi { hi = x }
        }
        return hi
    }
}
