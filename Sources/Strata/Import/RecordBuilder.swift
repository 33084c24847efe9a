/// Builds ``ImportRecord``s from NDJSON objects and CSV rows, with an ``ImportIssue`` naming the
/// field for every problem.
struct RecordBuilder {
    let schema: Schema
    let file: String
    let maxValueBytes: Int
    /// Whether numbers with a fraction are read as exact decimals: when the schema has a decimal
    /// attribute (a double attribute takes either, rounded once from the exact text).
    let exactDecimals: Bool
    /// The schema's names as bytes, for ``directParts(_:)``.
    let memberNames: MemberNames

    init(schema: Schema, file: String, maxValueBytes: Int) {
        self.schema = schema
        self.file = file
        self.maxValueBytes = maxValueBytes
        exactDecimals = schema.entities.contains { $0.attributes.contains { $0.type == .decimal } }
        memberNames = MemberNames(schema)
    }

    /// Offset of the first byte that is not part of valid UTF-8, or nil: the start of the first
    /// ill-formed sequence, as the standard library's decoder reports it.
    ///
    /// Eight ASCII bytes are checked at a time; a multi-byte sequence is checked against the
    /// well-formed byte ranges of the Unicode standard (lead byte, then the allowed range of the
    /// second byte, which rules out overlong forms, surrogates and scalars past U+10FFFF, then
    /// continuation bytes). Decoding every scalar of a line with non-ASCII text was a seventh of
    /// an NDJSON record's conversion.
    static func firstInvalidUTF8(_ bytes: [UInt8]) -> Int? {
        bytes.withUnsafeBytes { raw -> Int? in
            let n = raw.count
            var i = 0
            while i < n {
                if i + 8 <= n, raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                    i += 8
                    continue
                }
                let lead = raw[i]
                if lead < 0x80 {
                    i += 1
                    continue
                }
                // Continuation bytes after the lead, and the range of the first of them.
                let continuations: Int, low: UInt8, high: UInt8
                switch lead {
                case 0xC2...0xDF: (continuations, low, high) = (1, 0x80, 0xBF)
                case 0xE0: (continuations, low, high) = (2, 0xA0, 0xBF)
                case 0xE1...0xEC, 0xEE...0xEF: (continuations, low, high) = (2, 0x80, 0xBF)
                case 0xED: (continuations, low, high) = (2, 0x80, 0x9F)
                case 0xF0: (continuations, low, high) = (3, 0x90, 0xBF)
                case 0xF1...0xF3: (continuations, low, high) = (3, 0x80, 0xBF)
                case 0xF4: (continuations, low, high) = (3, 0x80, 0x8F)
                default: return i
                }
                guard i + continuations < n, raw[i + 1] >= low, raw[i + 1] <= high else { return i }
                var k = 2
                while k <= continuations {
                    guard raw[i + k] & 0xC0 == 0x80 else { return i }
                    k += 1
                }
                i += continuations + 1
            }
            return nil
        }
    }

    func issue(_ line: Int, _ field: String?, _ reason: String) -> ImportIssue {
        ImportIssue(file: file, line: line, field: field, reason: reason)
    }

    /// The record of an NDJSON line (or of one object of a JSON array, which may span lines from
    /// `line` on), or an ``ImportIssue`` naming the line, the field and the problem. A plain line
    /// is read in one pass (``directParts(_:)``); any other, and any line with a problem, the
    /// general way (``fromJSONValue(_:line:)``), which gives the same record.
    func fromJSON(_ bytes: [UInt8], line: Int) throws -> ImportRecord {
        if let at = Self.firstInvalidUTF8(bytes) { throw issue(line, nil, "not valid UTF-8 (at byte \(at + 1))") }
        if let parts = bytes.withUnsafeBufferPointer(directParts) {
            return try finish(parts.entity, parts.explicitID, parts.values, parts.links, givenNull: parts.givenNull,
                              line: line)
        }
        return try fromJSONValue(bytes, line: line)
    }

    /// ``fromJSON(_:line:)`` through a tree of ``JSONValue``s: every line it takes, and the
    /// message of every problem. `bytes` are valid UTF-8.
    func fromJSONValue(_ bytes: [UInt8], line: Int) throws -> ImportRecord {
        let json: JSONValue
        var inexact: [UInt64: [String]] = [:]
        do {
            if exactDecimals {
                (json, inexact) = try JSONValue.parseKeepingInexactTexts(bytes)
            } else {
                json = try JSONValue.parse(bytes)
            }
        } catch let e as JSONParseError {
            // An object of a JSON array may span lines: the line of the problem in the file.
            throw issue(line + e.line - 1, nil, "malformed JSON at column \(e.column): \(e.reason)")
        }
        guard case .object(let members) = json else {
            throw issue(line, nil, "expected a JSON object, found \(json.typeName) (an NDJSON line is one " +
                                   "record: a JSON object with an \"entity\" member; a .json file may instead " +
                                   "hold one array of such objects)")
        }
        guard let entityValue = json["entity"] else {
            throw issue(line, "entity", "missing (every line names its entity)")
        }
        guard case .string(let name) = entityValue else { throw issue(line, "entity", "must be a string") }
        guard let entity = schema.entity(named: name) else {
            throw issue(line, "entity", "unknown entity '\(EchoedText.shown(name))' (known: " +
                                        "\(schema.entities.map(\.name).joined(separator: ", ")))")
        }
        var values = [Value](repeating: .null, count: entity.attributes.count)
        var links: [ImportRecord.Link] = []
        var explicitID: ObjectID?
        var givenNull: [Int] = []
        for (key, value) in members where key != "entity" {
            if key == "id" {
                explicitID = try parseID(value, entity: entity, line: line, field: "id")
            } else if let a = entity.attribute(named: key) {
                values[a.index] = try convert(value, a, line: line, inexact: inexact)
                if values[a.index].isNull { givenNull.append(a.index) }
            } else if let r = entity.relationship(named: key) {
                links.append((r, try references(value, r, line: line, inexact: inexact)))
            } else {
                throw issue(line, EchoedText.shown(key),
                            "unknown field of \(entity.name) (attributes: " +
                            "\(entity.attributes.map(\.name).joined(separator: ", ")); relationships: " +
                            "\(entity.relationships.map(\.name).joined(separator: ", ")))")
            }
        }
        return try finish(entity, explicitID, values, links, givenNull: givenNull, line: line)
    }

    /// `json` as a value of `a`. `inexact` holds the texts of the line's numbers that did not
    /// fit a decimal, by the bits of the doubles they became: a decimal attribute given one is
    /// refused quoting what was written (`'…' has 39 significant digits`), not the double.
    func convert(_ json: JSONValue, _ a: AttributeDescription, line: Int,
                 inexact: [UInt64: [String]] = [:]) throws -> Value {
        let v: Value
        do { v = try ValueConversion.value(from: json, type: a.type) } catch let f as ValueConversion.Failure {
            if a.type == .decimal, case .double(let d) = json, let texts = inexact[d.bitPattern],
               Set(texts).count == 1, let text = texts.first {
                do { _ = try ValueConversion.value(from: .string(text), type: .decimal) } catch let g as ValueConversion.Failure {
                    throw issue(line, a.name, g.reason)
                }
            }
            throw issue(line, a.name, f.reason)
        }
        try checkSize(v, a, line: line)
        return v
    }

    /// Refuses, with the line and field, a value no save would take: larger than the value
    /// limit, or a number that is not finite (`nan` or `inf` in CSV) or a date beyond what a
    /// store holds (``ISO8601/maxSecondsFrom1970``). Found here, while the input is checked,
    /// nothing is written; at the save it failed without a line, after earlier batches committed.
    func checkSize(_ v: Value, _ a: AttributeDescription, line: Int) throws {
        if let reason = v.unstorableReason { throw issue(line, a.name, reason) }
        let size = v.sizeInBytes
        if size > maxValueBytes {
            throw issue(line, a.name, "\(size) bytes exceed the \(maxValueBytes)-byte value limit")
        }
    }

    func parseID(_ json: JSONValue, entity: EntityDescription, line: Int, field: String) throws -> ObjectID {
        guard case .string(let s) = json,
              let id = ObjectID(string: s) else { throw issue(line, field, "an object id is 32 hex digits") }
        guard id.entityTag == entity.tag else {
            // Named by its entity where the schema has one with that tag.
            let owner = schema.entity(tag: id.entityTag).map { "a \($0.name)'s" } ?? "of no entity of the schema"
            throw issue(line, field, "id \(s) is \(owner), not a \(entity.name)'s")
        }
        return id
    }

    func references(_ json: JSONValue, _ r: RelationshipDescription, line: Int,
                    inexact: [UInt64: [String]] = [:]) throws -> [ObjectReference]? {
        let destination = schema.entity(named: r.destination)!
        switch json {
        case .null:
            guard !r.isToMany else { throw issue(line, r.name, "a to-many relationship takes an array, not null") }
            return nil
        case .array(let items):
            guard r.isToMany else {
                throw issue(line, r.name, "a to-one relationship takes one reference, not an array")
            }
            return try items.map { try reference($0, destination, r, line: line, inexact: inexact) }
        default:
            guard !r.isToMany else { throw issue(line, r.name, "a to-many relationship takes an array of references") }
            return [try reference(json, destination, r, line: line, inexact: inexact)]
        }
    }

    /// A target id (`"0002…"`) or the values of one of the target's unique constraints (`{"mbid": "…"}`).
    func reference(_ json: JSONValue, _ destination: EntityDescription, _ r: RelationshipDescription,
                   line: Int, inexact: [UInt64: [String]] = [:]) throws -> ObjectReference {
        switch json {
        case .string:
            return .id(try parseID(json, entity: destination, line: line, field: r.name))
        case .object(let members):
            // The unique whose attributes are exactly the members' names. A unique names each
            // attribute once, so as many members, each of its attributes among them, is that
            // (without building two sets of strings per reference: a playlist line has dozens).
            guard let (ci, u) = destination.uniques.enumerated().first(where: { _, u in
                u.attributes.count == members.count && u.attributes.allSatisfy { a in
                    let name = destination.attributes[a].name
                    return members.contains { $0.0 == name }
                }
            }) else {
                let options = destination.uniques.map {
                    "{" + $0.attributes.map { destination.attributes[$0].name }.joined(separator: ", ") + "}"
                }
                throw issue(line, r.name,
                            "a reference names a unique key of \(destination.name): " +
                            "\(options.isEmpty ? "none exists, use its id" : options.joined(separator: " or "))")
            }
            var values: [Value] = []
            for a in u.attributes {
                let attr = destination.attributes[a]
                let v: Value
                do {
                    v = try convert(json[attr.name]!, attr, line: line, inexact: inexact)
                } catch let bad as ImportIssue {
                    // Named by the relationship, as every other problem of a reference is (by the
                    // key's attribute alone, `mbid` read as the line's own attribute).
                    throw issue(line, r.name, "reference key \(attr.name): \(bad.reason)")
                }
                if v.isNull { throw issue(line, r.name, "reference key \(attr.name) is null") }
                values.append(v)
            }
            return .unique(entityTag: destination.tag, constraint: ci, values: values)
        default:
            throw issue(line, r.name,
                        "a reference is an id string or an object naming a unique key, found \(json.typeName)")
        }
    }

    /// The record of a line. An attribute the line leaves out takes its default; one it gives
    /// as null (`givenNull`: a JSON `null`, an empty unquoted CSV field) has no value, also when
    /// it has a default, unless it is required (then it takes the default, as left out).
    func finish(_ entity: EntityDescription, _ explicitID: ObjectID?, _ input: [Value],
                _ links: [ImportRecord.Link], givenNull: [Int] = [], line: Int) throws -> ImportRecord {
        var values = input
        for a in entity.attributes where values[a.index].isNull {
            if let d = a.defaultValue {
                if a.isOptional && givenNull.contains(a.index) { continue }
                values[a.index] = d
            } else if !a.isOptional {
                throw issue(line, a.name, "required attribute is missing")
            }
        }
        let reference: ObjectReference
        if let explicitID {
            reference = .id(explicitID)
        } else {
            guard let u = entity.uniques.first else {
                throw issue(line, nil,
                            "\(entity.name) has no unique constraint, so each line needs an \"id\" to be re-importable")
            }
            let key = u.attributes.map { values[$0] }
            if let missing = u.attributes.first(where: { values[$0].isNull }) {
                throw issue(
                    line, entity.attributes[missing].name,
                    "the unique key \(Layout.uniqueFieldName(u, entity)) needs a value (or give the line an \"id\")")
            }
            reference = .unique(entityTag: entity.tag, constraint: 0, values: key)
        }
        // A unique key longer than LMDB's key limit would fail the save (after earlier batches
        // were committed): found here, at its line, with nothing written.
        for u in entity.uniques where u.uniqueKeyMayBeLonger(than: LMDBLimits.maxKeyBytes, values) {
            do {
                _ = try Layout.uniqueKey(u, record: values, entity: entity,
                                         id: explicitID ?? ObjectID(high: UInt64(entity.tag) << 48, low: 0))
            } catch StrataError.validation(let failure) {
                throw issue(line, failure.field, failure.reason)
            }
        }
        return ImportRecord(entity: entity, explicitID: explicitID, values: values, links: links, reference: reference,
                            line: line)
    }

    /// The keys a line that failed its checks names its object by, as far as they can be read:
    /// its explicit id, and each unique constraint of its entity whose values are all there and
    /// convert. Nothing when the line is not a JSON object naming an entity of the schema.
    func keysOfRejected(json bytes: [UInt8]) -> [ObjectReference] {
        guard let json = try? JSONValue.parse(bytes, exactDecimals: exactDecimals),
              case .string(let name)? = json["entity"], let entity = schema.entity(named: name) else { return [] }
        return keys(of: entity, id: json["id"].flatMap { if case .string(let s) = $0 { s } else { nil } }) { a in
            json[a.name].flatMap { try? ValueConversion.value(from: $0, type: a.type) }
        }
    }

    /// ``keysOfRejected(json:)`` for a CSV record split into `cells` under `columns`.
    func keysOfRejected(csv cells: [CSVSplitter.Field], columns: [Column],
                        entity: EntityDescription) -> [ObjectReference] {
        guard cells.count == columns.count else { return [] }
        var id: String?
        var texts: [Int: String] = [:]
        for (cell, column) in zip(cells, columns) {
            switch column {
            case .id: id = cell.text
            case .attribute(let a): texts[a.index] = cell.text
            case .relationshipIDs, .relationshipKey: break
            }
        }
        return keys(of: entity, id: id) { a in
            texts[a.index].flatMap { try? ValueConversion.value(fromText: $0, type: a.type) }
        }
    }

    /// An object's keys (``ImportRecord/aliases(_:_:_:)``) from its explicit id (text) and its
    /// attributes' values (`value`, nil where there is none).
    private func keys(of entity: EntityDescription, id: String?,
                      value: (AttributeDescription) -> Value?) -> [ObjectReference] {
        let explicitID = id.flatMap(ObjectID.init(string:)).flatMap { $0.entityTag == entity.tag ? $0 : nil }
        return ImportRecord.aliases(entity, explicitID, entity.attributes.map { value($0) ?? .null })
    }

    // MARK: CSV

    /// What a CSV column holds.
    enum Column {
        case id
        case attribute(AttributeDescription)
        /// Relationship by target id(s) (`|`-separated for to-many).
        case relationshipIDs(RelationshipDescription)
        /// Relationship by a single-attribute unique key of the target (`album.mbid`).
        case relationshipKey(RelationshipDescription, constraint: Int, AttributeDescription)
    }

    func csvColumns(_ cells: [CSVSplitter.Field], entity: EntityDescription, line: Int) throws -> [Column] {
        var seen: Set<String> = []
        let header = cells.enumerated().map { i, c in
            // A byte-order mark before the first name and spaces around names are not part of them.
            (i == 0 && c.text.hasPrefix("\u{FEFF}") ? String(c.text.dropFirst()) : c.text)
                .trimmingCharacters(in: .whitespaces)
        }
        // The column setting each to-one: a second one (`parent` and `parent.key`) would decide
        // the target by which of the two comes last.
        var toOne: [String: String] = [:]
        func settingToOne(_ r: RelationshipDescription, _ column: String) throws {
            guard !r.isToMany else { return }
            if let first = toOne.updateValue(column, forKey: r.name) {
                throw issue(line, EchoedText.shown(column),
                            "sets the to-one relationship \(r.name), which column \(EchoedText.shown(first)) sets too")
            }
        }
        return try header.enumerated().map { i, name in
            guard !name.isEmpty else {
                throw issue(line, nil, "column \(i + 1) of the header has no name (a comma too many?)")
            }
            guard seen.insert(name).inserted else { throw issue(line, EchoedText.shown(name), "column appears twice") }
            if name == "id" { return .id }
            if let a = entity.attribute(named: name) { return .attribute(a) }
            if let r = entity.relationship(named: name) {
                try settingToOne(r, name)
                return .relationshipIDs(r)
            }
            let parts = name.split(separator: ".", maxSplits: 1).map(String.init)
            if parts.count == 2, let r = entity.relationship(named: parts[0]) {
                let d = schema.entity(named: r.destination)!
                if let a = d.attribute(named: parts[1]),
                   let ci = d.uniques.firstIndex(where: { $0.attributes == [a.index] }) {
                    try settingToOne(r, name)
                    return .relationshipKey(r, constraint: ci, a)
                }
                throw issue(line, EchoedText.shown(name),
                            "\(EchoedText.shown(String(parts[1]))) is not a single-attribute unique key of \(d.name)")
            }
            throw issue(line, EchoedText.shown(name), "unknown column for \(entity.name)")
        }
    }

    /// The non-empty parts of a CSV cell listing several targets (`a|b|c`), split on the byte
    /// (`|` is ASCII, never part of a longer UTF-8 sequence): splitting the string by characters
    /// cost as much as the rest of a CSV line's conversion.
    static func pipeSeparated(_ text: String) -> [String] {
        text.utf8.split(separator: UInt8(ascii: "|")).map { String(Substring($0)) }
    }

    func fromCSV(_ cells: [CSVSplitter.Field], columns: [Column], entity: EntityDescription,
                 line: Int) throws -> ImportRecord {
        guard cells.count == columns.count else {
            throw issue(line, nil, "\(cells.count) fields, the header has \(columns.count)")
        }
        let fields = cells.map(\.text)
        var values = [Value](repeating: .null, count: entity.attributes.count)
        var links: [ImportRecord.Link] = []
        var explicitID: ObjectID?
        var givenNull: [Int] = []
        for ((text, cell), column) in zip(zip(fields, cells), columns) {
            switch column {
            case .id:
                if !text.isEmpty { explicitID = try parseID(.string(text), entity: entity, line: line, field: "id") }
            case .attribute(let a):
                // An empty unquoted field is null; `""` is the empty string (or empty bytes).
                if a.type == .string && cell.quoted {
                    values[a.index] = .string(text)
                    try checkSize(values[a.index], a, line: line)
                    continue
                }
                if a.type == .bytes && cell.quoted && text.isEmpty {
                    values[a.index] = .bytes([])
                    continue
                }
                do {
                    values[a.index] = try ValueConversion.value(fromText: text, type: a.type)
                } catch let f as ValueConversion.Failure {
                    throw issue(line, a.name, f.reason)
                }
                if values[a.index].isNull { givenNull.append(a.index) }
                try checkSize(values[a.index], a, line: line)
            case .relationshipIDs(let r):
                let d = schema.entity(named: r.destination)!
                let parts = Self.pipeSeparated(text)
                // A to-one takes one id or an empty cell. Its parts are counted with the empty
                // ones: `|` alone, or an id with a `|` beside it, is a list (the empty parts
                // dropped, it cleared the relationship or was taken as the one id).
                if !r.isToMany && text.utf8.contains(UInt8(ascii: "|")) {
                    let listed = text.utf8.split(separator: UInt8(ascii: "|"), omittingEmptySubsequences: false).count
                    throw issue(line, r.name, "a to-one relationship takes one id, found \(listed)")
                }
                links.append((r, r.isToMany || !parts.isEmpty ? try parts.map {
                    .id(try parseID(.string($0), entity: d, line: line, field: r.name))
                } : nil))
            case .relationshipKey(let r, let ci, let a):
                let parts = text.isEmpty ? [] : (r.isToMany ? Self.pipeSeparated(text) : [text])
                let d = schema.entity(named: r.destination)!
                let refs: [ObjectReference] = try parts.map { p in
                    do {
                        return .unique(entityTag: d.tag, constraint: ci,
                                       values: [try ValueConversion.value(fromText: p, type: a.type)])
                    } catch let f as ValueConversion.Failure {
                        throw issue(line, r.name, f.reason)
                    }
                }
                links.append((r, r.isToMany || !refs.isEmpty ? refs : nil))
            }
        }
        return try finish(entity, explicitID, values, links, givenNull: givenNull, line: line)
    }
}
