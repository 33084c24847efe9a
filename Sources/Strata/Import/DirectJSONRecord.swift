/// The names an NDJSON line's members may have, as UTF-8 bytes: each entity's name, and each
/// entity's attributes and relationships, for ``RecordBuilder/directParts(_:)``.
struct MemberNames: Sendable {
    /// What a member name of an entity's record names.
    enum Member: Sendable {
        case attribute(Int)
        /// The relationship's position, and its destination entity's in the schema.
        case relationship(Int, destination: Int)
    }

    /// Entity names, by the entity's position in the schema.
    let entities: [[UInt8]]
    /// Per entity (by position): each attribute's and relationship's name, with what it names.
    let members: [[(name: [UInt8], member: Member)]]
    /// Per entity with more than ``scannedAtMost`` members: each member's place in `members` by
    /// the hash of its name's bytes (``FNV1a``), so that a line of a wide entity finds each
    /// name in one probe, not by a scan of hundreds. Nil for a narrower entity, and for one two
    /// of whose names share a hash (scanned then, as it is rare).
    private let byHash: [[UInt64: Int]?]

    /// Members of an entity looked for by a scan of their names; past them, by hash.
    static let scannedAtMost = 16

    init(_ schema: Schema) {
        entities = schema.entities.map { Array($0.name.utf8) }
        let positions = Dictionary(schema.entities.enumerated().map { ($1.name, $0) }) { first, _ in first }
        members = schema.entities.map { e in
            e.attributes.enumerated().map { (Array($1.name.utf8), .attribute($0)) }
                + e.relationships.enumerated().compactMap { r, rel in
                    // A schema names existing destinations only (checked when it is loaded).
                    positions[rel.destination].map { (Array(rel.name.utf8), .relationship(r, destination: $0)) }
                }
        }
        byHash = members.map { list -> [UInt64: Int]? in
            guard list.count > Self.scannedAtMost else { return nil }
            var table: [UInt64: Int] = [:]
            for (i, m) in list.enumerated() {
                let h = m.name.withUnsafeBufferPointer(FNV1a.hash)
                guard table.updateValue(i, forKey: h) == nil else { return nil }
            }
            return table
        }
    }

    /// The position of the entity named by `name`'s bytes, or nil.
    func entity(_ name: UnsafeBufferPointer<UInt8>) -> Int? {
        entities.firstIndex { Self.same($0, name) }
    }

    /// What `name`'s bytes name in the entity at `position`, or nil.
    func member(of position: Int, _ name: UnsafeBufferPointer<UInt8>) -> Member? {
        if let table = byHash[position] {
            guard let i = table[FNV1a.hash(name)] else { return nil }
            let m = members[position][i]
            return Self.same(m.name, name) ? m.member : nil
        }
        for m in members[position] where Self.same(m.name, name) { return m.member }
        return nil
    }

    @inline(__always)
    static func same(_ a: [UInt8], _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        for i in 0..<b.count where a[i] != b[i] { return false }
        return true
    }
}

/// The members of a record given so far, by position (attributes, then relationships): bits of a
/// word for up to 64, an array past that.
private struct MemberSet {
    private var bits: UInt64 = 0
    private var many: [Bool]

    init(attributes: Int, relationships: Int) {
        let count = attributes + relationships
        many = count > 64 ? [Bool](repeating: false, count: count) : []
    }

    /// Notes member `i`; false when it was given before.
    mutating func insert(_ i: Int) -> Bool {
        if many.isEmpty {
            assert(i < 64, "a member set of at most 64 members is a word of bits")
            let bit: UInt64 = 1 << UInt64(i)
            defer { bits |= bit }
            return bits & bit == 0
        }
        defer { many[i] = true }
        return !many[i]
    }
}

/// What ``RecordBuilder/finish(_:_:_:_:givenNull:line:)`` makes a record of.
struct RecordParts {
    let entity: EntityDescription
    let explicitID: ObjectID?
    let values: [Value]
    let links: [ImportRecord.Link]
    let givenNull: [Int]
}

extension RecordBuilder {
    /// The parts of the record an NDJSON line holds, read in one pass over its bytes, with no tree
    /// of ``JSONValue``s, no array of members and no string made for a member's name: for a line
    /// that is one object whose first member is `"entity"`, whose member names are written
    /// without escapes, each naming the entity's id, an attribute or a relationship byte for byte,
    /// whose values are scalars (a relationship's: null for a to-one, an id, an object of scalars
    /// naming a unique key, or an array of ids and such objects) and that converts without a
    /// problem. Nil for any other line, and at the first problem, without saying which:
    /// ``fromJSON(_:line:)`` then reads the line the general way, which gives the same record or
    /// names the problem.
    ///
    /// Why the same record: a member name equal byte for byte to a schema name is equal to it as
    /// a string, and one that is not (a Kelvin sign for `K`) is left to the general way, which
    /// compares strings. Two members of one name are refused, as the general parser refuses them.
    /// Strings with escapes and numbers are read by the general parser's own readers; a value is
    /// converted by the general conversion (``convert(_:_:line:inexact:)``), or, for a UUID, a
    /// date or an id written plainly, by the function that conversion calls first on the string's
    /// bytes (``FastParse/uuid(utf8:)``, ``FastParse/date(utf8:)``, ``ObjectID/init(utf8:)``):
    /// a UUID or a date it does not read goes to the conversion, an id ends the attempt. A
    /// reference's key values are converted as they are read, before the unique key they name is
    /// known, where the general way converts only the key's values in the key's order: a
    /// difference only in which problem is met first, and at any problem this gives up.
    func directParts(_ b: UnsafeBufferPointer<UInt8>) -> RecordParts? {
        var p = JSONParser(b)
        p.exactDecimals = exactDecimals
        p.skipSpace()
        guard p.i < b.count, b[p.i] == UInt8(ascii: "{") else { return nil }
        p.i += 1
        p.skipSpace()
        guard let first = plainName(&p), MemberNames.same(Self.entityName, first),
              let entityName = plainString(&p), let position = memberNames.entity(entityName) else { return nil }
        let entity = schema.entities[position]
        var values = [Value](repeating: .null, count: entity.attributes.count)
        var seen = MemberSet(attributes: entity.attributes.count, relationships: entity.relationships.count)
        var links: [ImportRecord.Link] = []
        var explicitID: ObjectID?
        var givenNull: [Int] = []
        while true {
            guard let more = separator(&p, closing: UInt8(ascii: "}")) else { return nil }
            if !more { break }
            p.skipSpace()
            guard let name = plainName(&p) else { return nil }
            // A second "entity" is a duplicate member, whatever the schema's attribute names.
            if MemberNames.same(Self.entityName, name) { return nil }
            if MemberNames.same(Self.idName, name) {
                guard explicitID == nil, let text = plainString(&p), let id = ObjectID(utf8: text),
                      id.entityTag == entity.tag else { return nil }
                explicitID = id
                continue
            }
            switch memberNames.member(of: position, name) {
            case .attribute(let a)?:
                guard seen.insert(a), let v = attributeValue(&p, entity.attributes[a]) else { return nil }
                values[a] = v
                if v.isNull { givenNull.append(a) }
            case .relationship(let r, let destination)?:
                guard seen.insert(entity.attributes.count + r),
                      let targets = relationshipValue(&p, entity.relationships[r], destination: destination) else {
                    return nil
                }
                links.append((entity.relationships[r], targets))
            case nil:
                return nil
            }
        }
        p.skipSpace()
        guard p.i == b.count else { return nil }
        return RecordParts(entity: entity, explicitID: explicitID, values: values, links: links, givenNull: givenNull)
    }

    private static let entityName = Array("entity".utf8)
    private static let idName = Array("id".utf8)

    /// What follows a member or an item, spaces skipped: true after a `,`, false after `closer`
    /// (each taken), nil for anything else.
    private func separator(_ p: inout JSONParser, closing closer: UInt8) -> Bool? {
        p.skipSpace()
        guard p.i < p.b.count else { return nil }
        let c = p.b[p.i]
        guard c == UInt8(ascii: ",") || c == closer else { return nil }
        p.i += 1
        return c == UInt8(ascii: ",")
    }

    /// A member's name written without escapes and the `:` after it; the name's bytes (valid
    /// only as long as the line's), or nil.
    private func plainName(_ p: inout JSONParser) -> UnsafeBufferPointer<UInt8>? {
        guard let name = plainString(&p) else { return nil }
        p.skipSpace()
        guard p.i < p.b.count, p.b[p.i] == UInt8(ascii: ":") else { return nil }
        p.i += 1
        p.skipSpace()
        return name
    }

    /// The bytes between the quotes of a string at `p.i` written without escapes or control
    /// characters (the line is valid UTF-8 already), or nil (for any other string too).
    private func plainString(_ p: inout JSONParser) -> UnsafeBufferPointer<UInt8>? {
        let b = p.b
        guard p.i < b.count, b[p.i] == UInt8(ascii: "\"") else { return nil }
        let start = p.i + 1
        var i = start
        while i < b.count {
            let c = b[i]
            if c == UInt8(ascii: "\"") {
                p.i = i + 1
                return UnsafeBufferPointer(rebasing: b[start..<i])
            }
            if c == UInt8(ascii: "\\") || c < 0x20 { return nil }
            i += 1
        }
        return nil
    }

    /// A scalar at `p.i` as the general parser reads it (``JSONParser/parseValue()``: strings with
    /// their escapes, numbers, `true`, `false`, `null`), or nil for an array, an object or a problem.
    private func scalar(_ p: inout JSONParser) -> JSONValue? {
        guard p.i < p.b.count, p.b[p.i] != UInt8(ascii: "["), p.b[p.i] != UInt8(ascii: "{") else { return nil }
        return try? p.parseValue()
    }

    /// The value of attribute `a` at `p.i`, converted and checked as ``convert(_:_:line:inexact:)``
    /// does, or nil. A UUID or a date written plainly is read from its bytes
    /// (``FastParse/uuid(utf8:)``, ``FastParse/date(utf8:)``: what the conversion tries first, and
    /// for a date all it tries), not through a string.
    private func attributeValue(_ p: inout JSONParser, _ a: AttributeDescription) -> Value? {
        // What the conversion would make of the string, read from its bytes where it can.
        if a.type == .uuid || a.type == .date {
            let at = p.i
            if let text = plainString(&p) {
                let v: Value? = a.type == .uuid ? FastParse.uuid(utf8: text).map(Value.uuid)
                    : FastParse.date(utf8: text).map(Value.date)
                if let v, (try? checkSize(v, a, line: 0)) != nil { return v }
            }
            p.i = at
        }
        guard let json = scalar(&p) else { return nil }
        return try? convert(json, a, line: 0)
    }

    /// The targets of relationship `r` at `p.i`, as ``references(_:_:line:inexact:)`` reads them
    /// (nil inside: a to-one cleared), or nil (outside) for anything else.
    private func relationshipValue(_ p: inout JSONParser, _ r: RelationshipDescription,
                                   destination position: Int) -> [ObjectReference]?? {
        let b = p.b
        guard p.i < b.count else { return nil }
        let destination = schema.entities[position]
        switch b[p.i] {
        case UInt8(ascii: "n"):
            guard !r.isToMany, (try? p.literal("null")) != nil else { return nil }
            return .some(nil)
        case UInt8(ascii: "["):
            guard r.isToMany else { return nil }
            p.i += 1
            p.skipSpace()
            var targets: [ObjectReference] = []
            if p.i < b.count, b[p.i] == UInt8(ascii: "]") {
                p.i += 1
                return .some(targets)
            }
            while true {
                p.skipSpace()
                guard let t = reference(&p, destination, position) else { return nil }
                targets.append(t)
                guard let more = separator(&p, closing: UInt8(ascii: "]")) else { return nil }
                if !more { return .some(targets) }
            }
        default:
            guard !r.isToMany, let t = reference(&p, destination, position) else { return nil }
            return .some([t])
        }
    }

    /// A reference at `p.i`, as ``reference(_:_:_:line:inexact:)`` reads it: an id string of
    /// `destination` (at `position` in the schema), or an object whose members are the
    /// attributes of one of its unique constraints, each given once, none null; nil otherwise.
    private func reference(_ p: inout JSONParser, _ destination: EntityDescription, _ position: Int) -> ObjectReference? {
        let b = p.b
        guard p.i < b.count else { return nil }
        if b[p.i] == UInt8(ascii: "\"") {
            guard let text = plainString(&p), let id = ObjectID(utf8: text), id.entityTag == destination.tag else {
                return nil
            }
            return .id(id)
        }
        guard b[p.i] == UInt8(ascii: "{") else { return nil }
        p.i += 1
        // The members: attribute positions with their values (each converted as its attribute
        // says: a member that does not convert leaves the line to the general reading, which
        // refuses it or finds no unique key of these members), in the order written. The first
        // in variables: most keys have one attribute, and an array a reference was a
        // fifth of the line's allocations.
        var first: (attribute: Int, value: Value)?
        var more: [(attribute: Int, value: Value)] = []
        func given(_ a: Int) -> Value? {
            if let first, first.attribute == a { return first.value }
            return more.first { $0.attribute == a }?.value
        }
        p.skipSpace()
        if p.i < b.count, b[p.i] == UInt8(ascii: "}") { return nil }
        while true {
            p.skipSpace()
            guard let name = plainName(&p),
                  case .attribute(let a)? = memberNames.member(of: position, name),
                  given(a) == nil,
                  let value = attributeValue(&p, destination.attributes[a]), !value.isNull else { return nil }
            if first == nil { first = (a, value) } else { more.append((a, value)) }
            guard let next = separator(&p, closing: UInt8(ascii: "}")) else { return nil }
            if !next { break }
        }
        let count = more.count + 1
        guard let (ci, u) = destination.uniques.enumerated().first(where: { _, u in
            u.attributes.count == count && u.attributes.allSatisfy { given($0) != nil }
        }) else { return nil }
        var values: [Value] = []
        values.reserveCapacity(u.attributes.count)
        for a in u.attributes {
            guard let v = given(a) else { return nil }
            values.append(v)
        }
        return .unique(entityTag: destination.tag, constraint: ci, values: values)
    }
}
