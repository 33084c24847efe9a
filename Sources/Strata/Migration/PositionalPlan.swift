/// One hop's record transform for an entity without a custom step, worked out once from the
/// steps: for each attribute of the new version, the old attribute it comes from (by position)
/// and the conversions applied to it, or a constant (an added attribute's default). Applying it
/// gives what the steps applied one by one to a ``MigrationRecord`` give — the name-keyed record
/// the steps need costs a dictionary per record, which is most of a migration's transform time
/// when every record goes through it (`strata-bench probe migration`, BENCHMARKS.md). Tests
/// compare both on every attribute kind.
struct PositionalPlan: Sendable {
    struct Conversion: Sendable {
        let conversion: TypeConversion
        /// The entity's and attribute's names at that step (for the error message).
        let entity: String
        let attribute: String
    }

    struct Source: Sendable {
        enum Base: Sendable {
            case old(Int)
            case constant(Value)
        }
        var base: Base
        var conversions: [Conversion]
    }

    let new: EntityDescription
    /// One per attribute of `new`; nil: no value (null).
    let sources: [Source?]
    /// Positions (in the hop's step list) of the steps that apply to this entity.
    let steps: [Int]
    /// Whether each old attribute is optional (one that becomes required may take its default).
    let oldOptional: [Bool]

    /// Nil when a custom step applies to the entity (its effect is only known by running it).
    init?(old: EntityDescription, new: EntityDescription, steps: [MigrationStep]) {
        var name = old.name
        // Attribute name → its source, as the steps change the record; a value that is null at
        // run time is simply absent from the step-by-step record, which `Source` reproduces
        // (a null base stays null through the conversions that map null to null).
        var symbols: [String: Source] = [:]
        for (i, a) in old.attributes.enumerated() { symbols[a.name] = Source(base: .old(i), conversions: []) }
        var applying: [Int] = []
        for (position, step) in steps.enumerated() {
            switch step {
            case .renameEntity(let f, let t):
                if name == f { name = t; applying.append(position) }
            case .renameAttribute(let e, let f, let t) where e == name:
                if let s = symbols.removeValue(forKey: f) { symbols[t] = s }
                applying.append(position)
            case .addAttribute(let e, let a) where e == name:
                // The shape check guarantees `a` is absent here, so the default always applies.
                if symbols[a] == nil, let d = new.attribute(named: a)?.defaultValue {
                    symbols[a] = Source(base: .constant(d), conversions: [])
                }
                applying.append(position)
            case .removeAttribute(let e, let a) where e == name:
                symbols[a] = nil
                applying.append(position)
            case .changeType(let e, let a, let c) where e == name:
                var s = symbols[a] ?? Source(base: .constant(.null), conversions: [])
                s.conversions.append(Conversion(conversion: c, entity: e, attribute: a))
                symbols[a] = s
                applying.append(position)
            case .custom(let e, _) where e == name:
                return nil
            default:
                break
            }
        }
        self.new = new
        self.steps = applying
        sources = new.attributes.map { symbols[$0.name] }
        oldOptional = old.attributes.map(\.isOptional)
    }

    /// The old positions the attributes of `d` (an index or unique of the new entity) come from,
    /// when every one is an old attribute carried over unconverted; nil otherwise. Keys over
    /// them are then the keys an old index or unique over those positions held.
    func unchangedPositions(_ d: IndexDescription) -> [Int]? {
        var out: [Int] = []
        for a in d.attributes {
            guard let source = sources[a], source.conversions.isEmpty,
                  case .old(let j) = source.base else { return nil }
            // An optional attribute that becomes required with a default takes it in place of a
            // null (``MigrationHop/checked``): its keys change.
            if j < oldOptional.count, oldOptional[j], !new.attributes[a].isOptional, new.attributes[a].defaultValue != nil {
                return nil
            }
            out.append(j)
        }
        return out
    }

    func apply(_ id: ObjectID, _ values: [Value], version: Int) throws -> [Value] {
        var out: [Value] = []
        out.reserveCapacity(sources.count)
        for (i, source) in sources.enumerated() {
            var v: Value = .null
            if let source {
                switch source.base {
                case .old(let j): v = j < values.count ? values[j] : .null
                case .constant(let c): v = c
                }
                for c in source.conversions {
                    do { v = try c.conversion.convert(v) } catch let f as ValueConversion.Failure {
                        throw MigrationError(reason: "\(c.entity) \(id): \(c.attribute): \(f.reason)")
                    }
                }
            }
            out.append(try MigrationHop.checked(v, new.attributes[i], new, id, version: version))
        }
        return out
    }
}
