import Foundation
import StrataLMDB

extension Schema {
    /// Loads the current (highest) version from a model directory of `v<N>.json` files.
    /// - Throws: ``SchemaError`` naming the file, entity and field at fault.
    public static func load(directory: URL) throws -> Schema {
        guard let last = try loadAll(directory: directory).last else {
            throw SchemaError(file: directory.path, entity: nil, field: nil,
                              reason: "no schema files (expected v1.json, v2.json, …)")
        }
        return last
    }

    /// Loads every version in a model directory, oldest first. Versions must run 1, 2, … N with no gap,
    /// and all must name the same model.
    public static func loadAll(directory: URL) throws -> [Schema] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw SchemaError(
                file: directory.path, entity: nil, field: nil,
                reason: "cannot read schema directory (\(FileSystemReason.unreadableDirectory(directory.path)))")
        }
        var versions: [(Int, String)] = []
        for name in names where name.hasPrefix("v") && name.hasSuffix(".json") {
            // One spelling per version: no two files name the same one.
            guard let n = version(fileName: name) else {
                let digits = name.dropFirst().dropLast(5)
                let outOfRange = !digits.isEmpty && !digits.hasPrefix("0")
                    && digits.unicodeScalars.allSatisfy { ("0"..."9").contains($0) }
                throw SchemaError(file: directory.appendingPathComponent(name).path, entity: nil, field: nil,
                                  reason: outOfRange
                                      ? "version \(EchoedText.shown(String(digits))) is out of range (1…\(SchemaLimits.maxVersion))"
                                      : "schema files must be named v<N>.json with N ≥ 1 in decimal digits, "
                                          + "without a sign or a leading zero")
            }
            versions.append((n, name))
        }
        versions.sort { $0.0 < $1.0 }
        var schemas: [Schema] = []
        for (position, (n, name)) in versions.enumerated() {
            let path = directory.appendingPathComponent(name).path
            guard n == position + 1 else {
                throw SchemaError(file: path, entity: nil, field: nil,
                                  reason: "versions must be contiguous from 1; v\(position + 1).json is missing")
            }
            let schema = try load(file: URL(fileURLWithPath: path))
            if let first = schemas.first, first.model != schema.model {
                throw SchemaError(file: path, entity: nil, field: "model",
                                  reason: "model '\(schema.model)' differs from '\(first.model)' in v1.json")
            }
            schemas.append(schema)
        }
        return schemas
    }

    /// N of a file named `v<N>.json` (N ≥ 1, written as `Int` prints it: decimal digits, no
    /// sign, no leading zero), nil for any other name. One spelling per version, so that
    /// `v01.json` or `v+1.json` is not taken for version 1 beside or instead of `v1.json`.
    static func version(fileName name: String) -> Int? {
        guard name.hasPrefix("v"), name.hasSuffix(".json") else { return nil }
        let digits = name.dropFirst().dropLast(5)
        guard let n = Int(digits), n >= 1, String(n) == digits else { return nil }
        return n
    }

    /// Loads one schema file.
    public static func load(file: URL) throws -> Schema {
        let data = try read(file)
        let expected = version(fileName: file.lastPathComponent)
        var bytes = Array(data)
        // A UTF-8 byte order mark some editors write: the JSON starts after it.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        return try parse(bytes, source: file.path, expectedVersion: expected)
    }

    /// The bytes of a schema file: a regular file only. A FIFO would hold the read until some
    /// other process wrote to it (opened without blocking, it is refused at once), and a device
    /// or socket is no schema either.
    static func read(_ file: URL) throws -> Data {
        func unreadable(_ reason: String) -> SchemaError {
            SchemaError(file: file.path, entity: nil, field: nil, reason: "cannot read file (\(reason))")
        }
        let fd = open(file.path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw unreadable(FileSystemReason.unreadableFile(file.path)) }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw unreadable(String(cString: strerror(errno))) }
        switch st.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR: throw unreadable("is a directory")
        case S_IFIFO: throw unreadable("a named pipe, not a regular file")
        case S_IFCHR, S_IFBLK: throw unreadable("a device, not a regular file")
        case S_IFSOCK: throw unreadable("a socket, not a regular file")
        default: throw unreadable("not a regular file")
        }
        guard st.st_size <= SchemaLimits.maxFileBytes else {
            throw unreadable("\(st.st_size) bytes, over the \(SchemaLimits.maxFileBytes) a schema file may have")
        }
        do {
            return try handle.readToEnd() ?? Data()
        } catch {
            throw unreadable(FileSystemReason.describe(error))
        }
    }

    /// Parses schema JSON (`source` names it in errors).
    public static func parse(_ bytes: [UInt8], source: String, expectedVersion: Int? = nil) throws -> Schema {
        try parse(bytes, source: source, expectedVersion: expectedVersion, readingStoredSchema: false)
    }

    /// ``parse(_:source:expectedVersion:)``; `readingStoredSchema` for a schema stored in a store
    /// (see ``SchemaLoader/isStoredSchema``).
    static func parse(_ bytes: [UInt8], source: String, expectedVersion: Int? = nil,
                      readingStoredSchema: Bool) throws -> Schema {
        let json: JSONValue
        var inexact: [UInt64: [String]] = [:]
        do {
            // A decimal default stays exact; a number too long or too large for a decimal keeps
            // its text, which a refusal quotes (not the double it became).
            (json, inexact) = try JSONValue.parseKeepingInexactTexts(bytes)
        } catch let e as JSONParseError {
            throw SchemaError(file: source, entity: nil, field: nil, reason: "not valid JSON: \(e)")
        }
        var loader = SchemaLoader(file: source)
        loader.inexactTexts = inexact
        loader.isStoredSchema = readingStoredSchema
        return try loader.load(json, expectedVersion: expectedVersion)
    }
}

/// Validates schema JSON member by member so every error names its place.
struct SchemaLoader {
    /// Names no attribute or relationship may take: `id` and `entity` are the NDJSON keys of
    /// every record, and a Swift property named `self` could never be read back (`self.self`
    /// is the instance), so a generated entity type could not hold it.
    static let reservedNames: Set<String> = ["id", "entity", "self"]

    /// Why `name` is reserved, and what to use instead.
    static func reservedReason(_ name: String) -> String {
        switch name {
        case "id":
            return "'id' is reserved: every object has an id of Strata's own (`ObjectID`); to keep a key from " +
                "another system, name it otherwise (e.g. 'pk' or 'sourceID') and declare a unique constraint on it, " +
                "so imports can refer to records by it ({\"pk\": 42})"
        case "entity":
            return "'entity' is reserved: import records name their entity with it; choose another name (e.g. 'kind')"
        default:
            return "'\(name)' is reserved: a Swift property of that name cannot be read; choose another name"
        }
    }
    let file: String
    var entity: String?
    /// A schema read back from a store: what was refused only after the store may have been made
    /// (a relationship that is its own inverse, a date default beyond what a store holds) is
    /// accepted, so that the store still opens (and can be exported).
    var isStoredSchema = false
    /// The texts of the file's numbers that did not fit a decimal, by the bits of the doubles
    /// they became (``JSONValue/parseKeepingInexactTexts(_:)``).
    var inexactTexts: [UInt64: [String]] = [:]

    func error(_ field: String?, _ reason: String) -> SchemaError {
        SchemaError(file: file, entity: entity, field: field, reason: reason)
    }

    func members(_ value: JSONValue, _ field: String?, allowed: Set<String>) throws -> [(String, JSONValue)] {
        guard case .object(let m) = value else { throw error(field, "expected an object, found \(value.typeName)") }
        for (key, _) in m where !allowed.contains(key) {
            throw error(field,
                        "unknown key '\(EchoedText.shown(key))' (allowed: \(allowed.sorted().joined(separator: ", ")))")
        }
        // A description is text for people (a schema a store already holds keeps what it has).
        if !isStoredSchema, let d = m.first(where: { $0.0 == "description" })?.1 {
            guard case .string = d else { throw error(field, "'description' must be a string, found \(d.typeName)") }
        }
        return m
    }

    func name(_ value: JSONValue?, _ field: String) throws -> String {
        guard let value else { throw error(field, "missing 'name'") }
        guard case .string(let s) = value else {
            throw error(field, "'name' must be a string, found \(value.typeName)")
        }
        let ok = !s.isEmpty && s.utf8.count <= SchemaLimits.maxNameBytes
            && s.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_") })
            && !(s.unicodeScalars.first.map { CharacterSet.decimalDigits.contains($0) } ?? true)
        guard ok else {
            throw error(field, "name '\(EchoedText.shown(s))' must be an ASCII identifier of at most " +
                               "\(SchemaLimits.maxNameBytes) bytes")
        }
        return s
    }

    func bool(_ value: JSONValue?, _ field: String, _ key: String, default d: Bool) throws -> Bool {
        guard let value else { return d }
        guard case .bool(let b) = value else {
            throw error(field, "'\(key)' must be true or false, found \(value.typeName)")
        }
        return b
    }

    mutating func load(_ root: JSONValue, expectedVersion: Int?) throws -> Schema {
        _ = try members(root, nil, allowed: ["model", "version", "entities", "description", "migration"])
        guard case .string(let model)? = root["model"],
              !model.isEmpty else { throw error("model", "missing or not a non-empty string") }
        _ = try name(.string(model), "model")
        guard case .int(let v)? = root["version"], v >= 1 else {
            // A whole number past what 64 bits hold is read as a decimal or a double: too large,
            // not missing.
            switch root["version"] {
            case .decimal(let d)? where d > Decimal(SchemaLimits.maxVersion):
                throw error("version", "\(d) is past the highest version, \(SchemaLimits.maxVersion)")
            case .double(let x)? where x > Double(SchemaLimits.maxVersion):
                // As the file writes it (the parser keeps the text of a number a decimal cannot hold).
                let text = inexactTexts[x.bitPattern].flatMap { Set($0).count == 1 ? $0.first : nil }
                    ?? JSONValue.double(x).serialized
                throw error("version", "\(text) is past the highest version, \(SchemaLimits.maxVersion)")
            default:
                throw error("version", "missing or not a positive integer")
            }
        }
        guard v <= Int64(SchemaLimits.maxVersion) else {
            throw error("version", "\(v) is past the highest version, \(SchemaLimits.maxVersion)")
        }
        if let expectedVersion, expectedVersion != Int(v) {
            throw error("version", "file is named v\(expectedVersion).json but declares version \(v)")
        }
        guard case .array(let list)? = root["entities"] else { throw error("entities", "missing or not an array") }
        guard !list.isEmpty else { throw error("entities", "at least one entity is required") }
        guard list.count <= SchemaLimits.maxEntities else {
            throw error("entities", "more than \(SchemaLimits.maxEntities) entities")
        }

        // First pass: names and tags, so relationships can be checked against every entity.
        var drafts: [(name: String, tag: UInt16, json: JSONValue)] = []
        for (i, e) in list.enumerated() {
            entity = nil
            _ = try members(e, "entities[\(i)]", allowed: ["name", "tag", "attributes", "relationships", "uniques",
                                                           "indexes", "description"])
            let n = try name(e["name"], "entities[\(i)]")
            entity = n
            if drafts.contains(where: { $0.name == n }) { throw error(nil, "duplicate entity name") }
            var tag = UInt16(i + 1)
            if let t = e["tag"] {
                guard case .int(let tv) = t, tv >= 1, tv <= Int64(SchemaLimits.maxEntities) else {
                    throw error("tag", "must be an integer in 1...\(SchemaLimits.maxEntities)")
                }
                tag = UInt16(tv)
            }
            if let other = drafts.first(where: { $0.tag == tag }) {
                throw error("tag", "tag \(tag) is already used by entity '\(other.name)'")
            }
            drafts.append((n, tag, e))
        }
        var entities: [EntityDescription] = []
        for d in drafts {
            entity = d.name
            entities.append(try loadEntity(d.json, name: d.name, tag: d.tag, all: drafts))
        }
        entity = nil
        try checkInverses(entities)
        var steps: [MigrationStep] = []
        if let migration = root["migration"] {
            guard v >= 2 else { throw error("migration", "version 1 has no previous version to migrate from") }
            _ = try members(migration, "migration", allowed: ["steps", "description"])
            guard case .array(let list)? = migration["steps"] else {
                throw error("migration", "'steps' must be an array")
            }
            steps = try list.enumerated().map { try loadStep($1, index: $0) }
        }
        return Schema(model: model, version: Int(v), entities: entities, canonicalJSON: Self.canonical(root),
                      migrationSteps: steps)
    }

    /// `root` serialized in a form that serializes to itself once parsed again: a store keeps
    /// the text and loads it back, and the application's file must compare equal to it. A
    /// number parsing keeps only as a double (more digits than a decimal holds) is written
    /// with fewer digits, which read back differently (`1.2345678901234568e+41` is read as an
    /// exact decimal and written `123456789012345680000…`): the text settles after a round.
    static func canonical(_ root: JSONValue) -> String {
        var text = root.serialized
        for _ in 0..<3 {
            guard let again = try? JSONValue.parseKeepingInexactTexts(Array(text.utf8)).0.serialized, again != text
            else { break }
            text = again
        }
        assert((try? JSONValue.parseKeepingInexactTexts(Array(text.utf8)).0.serialized) == text,
               "a schema's canonical text reads back as itself")
        return text
    }

    mutating func loadEntity(_ json: JSONValue, name: String, tag: UInt16,
                             all: [(name: String, tag: UInt16, json: JSONValue)]) throws -> EntityDescription {
        guard case .array(let attrList)? = json["attributes"] else {
            throw error("attributes", "missing or not an array")
        }
        guard attrList.count <= SchemaLimits.maxAttributesPerEntity else {
            throw error("attributes", "more than \(SchemaLimits.maxAttributesPerEntity) attributes")
        }
        var attributes: [AttributeDescription] = []
        var memberNames: Set<String> = []
        for (i, a) in attrList.enumerated() {
            let attr = try loadAttribute(a, index: i)
            guard memberNames.insert(attr.name).inserted else {
                throw error("attribute '\(attr.name)'", "duplicate member name")
            }
            attributes.append(attr)
        }
        var relationships: [RelationshipDescription] = []
        if let rels = json["relationships"] {
            guard case .array(let relList) = rels else { throw error("relationships", "must be an array") }
            guard relList.count <= SchemaLimits.maxRelationshipsPerEntity else {
                throw error("relationships", "more than \(SchemaLimits.maxRelationshipsPerEntity) relationships")
            }
            for (i, r) in relList.enumerated() {
                let rel = try loadRelationship(r, index: i, entityName: name, entityTag: tag, all: all)
                guard memberNames.insert(rel.name).inserted else {
                    throw error("relationship '\(rel.name)'", "duplicate member name")
                }
                relationships.append(rel)
            }
        }
        let uniques = try loadIndexes(json["uniques"], key: "uniques", unique: true, attributes: attributes,
                                      entityTag: tag)
        let indexes = try loadIndexes(json["indexes"], key: "indexes", unique: false, attributes: attributes,
                                      entityTag: tag)
        let entity = EntityDescription(name: name, tag: tag, attributes: attributes, relationships: relationships,
                                       uniques: uniques, indexes: indexes)
        // A unique constraint whose attributes all have defaults: the key of an object given them
        // all must fit LMDB's key limit, or every such object would be refused.
        let defaults = attributes.map { $0.defaultValue ?? .null }
        for (i, u) in uniques.enumerated() where !isStoredSchema {
            if let key = u.uniqueKeyBytes(defaults), key.count > LMDBLimits.maxKeyBytes {
                throw error("uniques[\(i)]", "the defaults of its attributes make a key no store takes: unique key of " +
                                              "\(key.count) bytes exceeds LMDB's \(LMDBLimits.maxKeyBytes)-byte key limit")
            }
        }
        return entity
    }

    func loadAttribute(_ json: JSONValue, index: Int) throws -> AttributeDescription {
        let place = "attributes[\(index)]"
        _ = try members(json, place, allowed: ["name", "type", "optional", "default", "description"])
        let n = try name(json["name"], place)
        let field = "attribute '\(n)'"
        if Self.reservedNames.contains(n) { throw error(field, Self.reservedReason(n)) }
        guard let typeValue = json["type"] else { throw error(field, "missing 'type'") }
        guard case .string(let typeName) = typeValue else {
            throw error(field, "'type' must be a string, found \(typeValue.typeName)")
        }
        guard let type = AttributeType(rawValue: typeName) else {
            throw error(field, "unknown type '\(EchoedText.shown(typeName))' (expected one of: " +
                               "\(AttributeType.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        let optional = try bool(json["optional"], field, "optional", default: false)
        var defaultValue: Value?
        if let d = json["default"] {
            do {
                defaultValue = try ValueConversion.value(from: d, type: type)
            } catch let reason as ValueConversion.Failure {
                // A decimal default too long or too large for a decimal: refused quoting what
                // the file says, as an import refuses it.
                if type == .decimal, case .double(let x) = d, let texts = inexactTexts[x.bitPattern],
                   Set(texts).count == 1, let text = texts.first {
                    do { _ = try ValueConversion.value(from: .string(text), type: .decimal) } catch let exact as ValueConversion.Failure {
                        throw error(field, "default value: \(exact.reason)")
                    }
                }
                throw error(field, "default value: \(reason.reason)")
            }
            if defaultValue?.isNull == true { defaultValue = nil }
            // A default no save would take (a date beyond what a store holds): every object given
            // it would be refused, and a migration would write it into every object.
            if !isStoredSchema, let reason = defaultValue?.unstorableReason {
                throw error(field, "default value: \(reason)")
            }
        }
        return AttributeDescription(name: n, type: type, isOptional: optional, defaultValue: defaultValue, index: index)
    }

    func loadRelationship(_ json: JSONValue, index: Int, entityName: String, entityTag: UInt16,
                          all: [(name: String, tag: UInt16, json: JSONValue)]) throws -> RelationshipDescription {
        let place = "relationships[\(index)]"
        _ = try members(json, place,
                        allowed: ["name", "destination", "toMany", "inverse", "deleteRule", "optional", "description"])
        let n = try name(json["name"], place)
        let field = "relationship '\(n)'"
        if Self.reservedNames.contains(n) { throw error(field, Self.reservedReason(n)) }
        guard case .string(let dest)? = json["destination"] else { throw error(field, "missing 'destination'") }
        // Names are ASCII: compared as such (Swift's `==` takes a Kelvin sign for a K, and code
        // generated from the raw text would name a type that does not exist).
        guard dest.unicodeScalars.allSatisfy(\.isASCII), all.contains(where: { $0.name == dest }) else {
            throw error(field, "destination '\(EchoedText.shown(dest))' is not an entity of this schema")
        }
        guard case .string(let inverse)? = json["inverse"] else {
            throw error(field, "missing 'inverse' (every relationship needs an inverse)")
        }
        guard inverse.unicodeScalars.allSatisfy(\.isASCII) else {
            throw error(field, "inverse '\(EchoedText.shown(inverse))' is not a relationship name (an ASCII identifier)")
        }
        let toMany = try bool(json["toMany"], field, "toMany", default: false)
        let optional = try bool(json["optional"], field, "optional", default: true)
        if toMany && json["optional"] != nil { throw error(field, "'optional' applies to to-one relationships only") }
        var rule = DeleteRule.nullify
        if let r = json["deleteRule"] {
            guard case .string(let rs) = r, let parsed = DeleteRule(rawValue: rs) else {
                throw error(field,
                            "deleteRule must be one of: \(DeleteRule.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            rule = parsed
        }
        return RelationshipDescription(name: n, entityName: entityName, destination: dest, isToMany: toMany,
                                       inverseName: inverse, deleteRule: rule, isOptional: optional,
                                       tag: entityTag << 8 | UInt16(index + 1), index: index)
    }

    func loadIndexes(_ json: JSONValue?, key: String, unique: Bool, attributes: [AttributeDescription],
                     entityTag: UInt16) throws -> [IndexDescription] {
        guard let json else { return [] }
        guard case .array(let list) = json else { throw error(key, "must be an array of attribute-name arrays") }
        guard list.count <= SchemaLimits.maxIndexesPerEntity else {
            throw error(key, "more than \(SchemaLimits.maxIndexesPerEntity) entries")
        }
        var result: [IndexDescription] = []
        for (i, item) in list.enumerated() {
            let place = "\(key)[\(i)]"
            guard case .array(let names) = item,
                  !names.isEmpty else { throw error(place, "must be a non-empty array of attribute names") }
            guard names.count <= SchemaLimits.maxAttributesPerIndex else {
                throw error(place, "more than \(SchemaLimits.maxAttributesPerIndex) attributes")
            }
            var positions: [Int] = []
            for n in names {
                guard case .string(let s) = n else { throw error(place, "attribute names must be strings") }
                guard s.unicodeScalars.allSatisfy(\.isASCII), let a = attributes.first(where: { $0.name == s }) else {
                    throw error(place, "unknown attribute '\(EchoedText.shown(s))'")
                }
                guard !positions.contains(a.index) else { throw error(place, "attribute '\(s)' listed twice") }
                positions.append(a.index)
            }
            if result.contains(where: { $0.attributes == positions }) {
                throw error(place, "duplicate of an earlier entry")
            }
            result.append(
                IndexDescription(attributes: positions, isUnique: unique, tag: entityTag << 8 | UInt16(i + 1)))
        }
        return result
    }

    func loadStep(_ json: JSONValue, index: Int) throws -> MigrationStep {
        let place = "migration.steps[\(index)]"
        guard case .string(let rawOp)? = json["op"] else { throw error(place, "missing 'op'") }
        let op = EchoedText.shown(rawOp)
        // Every name a step holds is an identifier, as the names of the schema are (so messages
        // about steps never echo more than a name's 64 bytes).
        func string(_ key: String) throws -> String {
            guard case .string(let s)? = json[key], !s.isEmpty else { throw error(place, "'\(op)' needs '\(key)'") }
            return try name(.string(s), "\(place).\(key)")
        }
        func names(_ key: String) throws -> [String] {
            guard case .array(let items)? = json[key],
                  !items.isEmpty else { throw error(place, "'\(op)' needs '\(key)' (a non-empty array)") }
            return try items.map {
                guard case .string(let s) = $0 else { throw error(place, "'\(key)' holds attribute names") }
                return try name(.string(s), "\(place).\(key)")
            }
        }
        let allowed: Set<String>
        let step: MigrationStep
        switch rawOp {
        case "addAttribute":
            allowed = ["entity", "attribute"]
            step = .addAttribute(entity: try string("entity"), attribute: try string("attribute"))
        case "removeAttribute":
            allowed = ["entity", "attribute"]
            step = .removeAttribute(entity: try string("entity"), attribute: try string("attribute"))
        case "renameEntity":
            allowed = ["from", "to"]
            step = .renameEntity(from: try string("from"), to: try string("to"))
        case "renameAttribute":
            allowed = ["entity", "from", "to"]
            step = .renameAttribute(entity: try string("entity"), from: try string("from"), to: try string("to"))
        case "renameRelationship":
            allowed = ["entity", "from", "to"]
            step = .renameRelationship(entity: try string("entity"), from: try string("from"), to: try string("to"))
        case "changeType":
            allowed = ["entity", "attribute", "conversion"]
            let name = try string("conversion")
            guard let c = TypeConversion(rawValue: name) else {
                throw error(place, "unknown conversion '\(EchoedText.shown(name))' (known: " +
                                   "\(TypeConversion.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            step = .changeType(entity: try string("entity"), attribute: try string("attribute"), conversion: c)
        case "addIndex":
            allowed = ["entity", "attributes"]
            step = .addIndex(entity: try string("entity"), attributes: try names("attributes"))
        case "removeIndex":
            allowed = ["entity", "attributes"]
            step = .removeIndex(entity: try string("entity"), attributes: try names("attributes"))
        case "addUnique":
            allowed = ["entity", "attributes"]
            step = .addUnique(entity: try string("entity"), attributes: try names("attributes"))
        case "removeUnique":
            allowed = ["entity", "attributes"]
            step = .removeUnique(entity: try string("entity"), attributes: try names("attributes"))
        case "custom":
            allowed = ["entity", "name"]
            step = .custom(entity: try string("entity"), name: try string("name"))
        default:
            throw error(place,
                        "unknown op '\(op)' (known: addAttribute, removeAttribute, renameEntity, renameAttribute, " +
                        "renameRelationship, changeType, addIndex, removeIndex, addUnique, removeUnique, custom)")
        }
        _ = try members(json, place, allowed: allowed.union(["op", "description"]))
        return step
    }

    mutating func checkInverses(_ entities: [EntityDescription]) throws {
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        for e in entities {
            entity = e.name
            for r in e.relationships {
                let field = "relationship '\(r.name)'"
                guard let inverse = byName[r.destination]?.relationship(named: r.inverseName) else {
                    throw error(field,
                                "inverse '\(EchoedText.shown(r.inverseName))' does not exist on '\(r.destination)'")
                }
                guard inverse.destination == e.name, inverse.inverseName == r.name else {
                    throw error(
                        field,
                        "inverse '\(r.destination).\(r.inverseName)' does not point back to '\(e.name).\(r.name)'")
                }
                // One relationship cannot be both ends of a link: setting a.r = b would have to
                // set b.r = a through the same slots, and an input such as a.r = b, b.r = c then
                // changes the store on every import. A symmetric relation needs two relationships.
                if inverse.name == r.name && r.destination == e.name && !isStoredSchema {
                    throw error(field, "is declared as its own inverse ('\(e.name).\(r.name)' names '\(r.name)' on "
                        + "'\(e.name)' as its inverse); "
                        + "declare two relationships, each the other's inverse (for example 'spouse' and 'spouseOf')")
                }
            }
        }
        entity = nil
    }
}
