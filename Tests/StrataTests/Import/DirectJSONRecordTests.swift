import Foundation
import Testing
@testable import Strata
import StrataTestSupport

/// An NDJSON line read in one pass (``RecordBuilder/directParts(_:)``) gives the record the
/// general reading (through a tree of JSON values) gives, or leaves the line to it.
@Suite struct DirectJSONRecordTests {
    /// Seeds 1–12, or `STRATA_DIRECT_JSON_SEED`: one seed (`17`) or a range (`1-2000`, a long run).
    static let seeds: [UInt64] = {
        guard let given = ProcessInfo.processInfo.environment["STRATA_DIRECT_JSON_SEED"] else { return Array(1...12) }
        let bounds = given.split(separator: "-").compactMap { UInt64($0) }
        if bounds.count == 2, bounds[0] <= bounds[1] { return Array(bounds[0]...bounds[1]) }
        return bounds.count == 1 ? bounds : Array(1...12)
    }()

    private static let catalogDirectory = repositoryRoot.appendingPathComponent("Schemas/catalog")

    /// Every attribute type (a decimal, so numbers are read exactly), optional attributes with
    /// defaults (a null given keeps them empty), a unique key of two attributes, an entity with two
    /// unique keys, and an attribute `K` (a Kelvin sign names it too, as a string).
    private static let everyKind = """
        {"model":"every","version":1,"entities":[
         {"name":"Item","attributes":[
           {"name":"code","type":"string"},{"name":"region","type":"int"},
           {"name":"price","type":"decimal","optional":true},{"name":"weight","type":"double","optional":true},
           {"name":"count","type":"int","optional":true,"default":3},
           {"name":"flag","type":"bool","optional":true,"default":true},
           {"name":"seen","type":"date","optional":true},{"name":"blob","type":"bytes","optional":true},
           {"name":"ref","type":"uuid","optional":true},{"name":"K","type":"string","optional":true}],
          "relationships":[
           {"name":"owner","destination":"Owner","inverse":"items","deleteRule":"nullify"},
           {"name":"tags","destination":"Tag","toMany":true,"inverse":"items","deleteRule":"nullify"}],
          "uniques":[["code","region"],["ref"]],"indexes":[]},
         {"name":"Owner","attributes":[{"name":"email","type":"string"},{"name":"n","type":"int","optional":true}],
          "relationships":[{"name":"items","destination":"Item","toMany":true,"inverse":"owner","deleteRule":"nullify"}],
          "uniques":[["email"],["n"]],"indexes":[]},
         {"name":"Tag","attributes":[{"name":"label","type":"string"}],
          "relationships":[{"name":"items","destination":"Item","toMany":true,"inverse":"tags","deleteRule":"nullify"}],
          "uniques":[["label"]],"indexes":[]}]}
        """

    /// An entity of more members than a word has bits (the one-pass reading then notes the
    /// members given in an array; the general parser looks for a duplicate name in a set).
    private static let wide: String = {
        let attributes = (0..<70).map { i in
            #"{"name":"w\#(i)","type":"\#(i % 3 == 0 ? "int" : "string")","optional":true}"#
        }
        return #"{"model":"wide","version":1,"entities":[{"name":"Wide","attributes":["#
            + attributes.joined(separator: ",") + #"],"uniques":[["w1"]],"indexes":[]}]}"#
    }()

    /// Every way the two readings could differ, made exact: values by their stored encoding (so
    /// `-0.0` is not `0.0`, nor `1` `1.0`), references likewise, errors by their text.
    private static func shown(_ outcome: Result<ImportRecord, Error>) -> String {
        switch outcome {
        case .failure(let error): return "error: \(error)"
        case .success(let r):
            var out = "\(r.entity.name) id=\(r.explicitID?.description ?? "-") line=\(r.line) values="
            out += r.values.map(encoded).joined(separator: ",")
            for (relationship, targets) in r.links {
                out += " \(relationship.name)=" + (targets.map { $0.map(shown).joined(separator: ";") } ?? "nil")
            }
            return out + " ref=" + shown(r.reference)
        }
    }

    private static func encoded(_ v: Value) -> String {
        var w = ByteWriter()
        ValueCodec.encode(v, into: &w)
        return w.bytes.map { String($0, radix: 16) }.joined(separator: ".")
    }

    private static func shown(_ r: ObjectReference) -> String {
        switch r {
        case .id(let id): "id:\(id)"
        case .unique(let tag, let constraint, let values): "u\(tag)/\(constraint):" + values.map(encoded).joined(separator: ",")
        }
    }

    /// Random lines of four schemas' entities (the library, the catalog, every attribute type,
    /// an entity of 70 attributes): half clean, as an export or the generator writes them, half
    /// with faults (members in any order, escapes in names and strings, values of the wrong type,
    /// nulls, duplicates, unknown members, references of every form, odd numbers, dates no store
    /// holds, bytes changed at random), spaces between any tokens, and now and then a value limit
    /// of 12 bytes. For each: when the one-pass reading takes the line, the record (or the error
    /// `finish` throws) is the general reading's, compared exactly.
    @Test(arguments: seeds)
    func aLineReadInOnePassIsTheLineReadAsATree(seed: UInt64) throws {
        let replay = "replay: STRATA_DIRECT_JSON_SEED=\(seed) swift test --skip-build --filter DirectJSONRecordTests"
        var rng = SeededGenerator(seed: seed)
        let schemas = [try librarySchema(), try Schema.load(directory: Self.catalogDirectory),
                       try Schema.parse(Array(Self.everyKind.utf8), source: "every.json"),
                       try Schema.parse(Array(Self.wide.utf8), source: "wide.json")]
        for schema in schemas {
            // Now and then a value limit most strings and every UUID pass.
            let limit = Int.random(in: 0..<4, using: &rng) == 0 ? 12 : 1 << 16
            let builder = RecordBuilder(schema: schema, file: "in.ndjson", maxValueBytes: limit)
            var takenHere = 0, linesHere = 0
            defer {
                // Not a test of nothing: under the larger limit, a good part of every schema's
                // lines are plain enough to be taken (under 12 bytes, most strings are refused).
                if limit > 12 {
                    #expect(takenHere * 4 > linesHere, "\(schema.model): \(takenHere) of \(linesHere) taken; \(replay)")
                }
            }
            for _ in 0..<600 {
                var line = Array(LineMaker(schema: schema).line(&rng).utf8)
                if Int.random(in: 0..<6, using: &rng) == 0, !line.isEmpty {
                    // A byte changed, dropped or doubled somewhere.
                    let at = Int.random(in: 0..<line.count, using: &rng)
                    switch Int.random(in: 0..<3, using: &rng) {
                    case 0: line[at] = [UInt8]("{}[]\",:\\ 0-en".utf8).randomElement(using: &rng)!
                    case 1: line.remove(at: at)
                    default: line.insert(line[at], at: at)
                    }
                }
                guard RecordBuilder.firstInvalidUTF8(line) == nil else { continue }
                linesHere += 1
                let general = Result { try builder.fromJSONValue(line, line: 7) }
                guard let parts = line.withUnsafeBufferPointer(builder.directParts) else { continue }
                takenHere += 1
                let direct = Result {
                    try builder.finish(parts.entity, parts.explicitID, parts.values, parts.links,
                                       givenNull: parts.givenNull, line: 7)
                }
                #expect(Self.shown(direct) == Self.shown(general), "\(String(decoding: line, as: UTF8.self))\n\(replay)")
                // And through the entry point, which takes the one-pass reading first.
                #expect(Self.shown(Result { try builder.fromJSON(line, line: 7) }) == Self.shown(general), "\(replay)")
            }
        }
    }

    /// What the generator and an export write is read in one pass (else the reading thread of an
    /// import does the work twice for nothing).
    @Test func theGeneratorsLinesAreReadInOnePass() throws {
        let builder = RecordBuilder(schema: try librarySchema(), file: "in.ndjson", maxValueBytes: 1 << 20)
        let lines = [
            #"{"entity":"Genre","name":"Genre 7 Ноéos"}"#,
            #"{"entity":"Artist","mbid":"d8203ea7-c5c2-43fd-a634-5cbed166bb9e","name":"Ankaчь","country":"GR"}"#,
            #"{"entity":"Track","mbid":"cc17f90d-f774-4ff2-a2c1-8d34f026849e","title":"Чьbermimi \"Ka\"","#
                + #""durationSeconds":673,"trackNumber":1,"addedAt":"2020-02-17T21:25:16Z","rating":1.5,"#
                + #""album":{"mbid":"ab85c8bc-c37c-4479-b9c0-b122888f2d73"},"genre":{"name":"Genre 7 Ноéos"}}"#,
            #"{"entity":"Playlist","name":"P","createdAt":"2020-09-13T12:26:40Z","tracks":["#
                + #"{"mbid":"03743b18-50f1-462f-b92b-b21c428350ea"},{"mbid":"05923eb9-1743-4d51-a4b3-ae190a29cb29"}]}"#,
            #"{ "entity" : "Album", "id" : "0002000000000000000000000000002a", "mbid" : "ab85c8bc-c37c-4479-b9c0-b122888f2d73","#
                + #" "title" : "A", "artist" : null, "tracks" : [ ] }"#,
        ]
        for text in lines {
            let bytes = Array(text.utf8)
            let parts = try #require(bytes.withUnsafeBufferPointer(builder.directParts), "\(text)")
            let direct = Result {
                try builder.finish(parts.entity, parts.explicitID, parts.values, parts.links, givenNull: parts.givenNull,
                                   line: 1)
            }
            #expect(Self.shown(direct) == Self.shown(Result { try builder.fromJSONValue(bytes, line: 1) }), "\(text)")
        }
    }

    /// Lines the one-pass reading leaves to the general one, which names their problem: a member
    /// given twice (also `entity`, and a relationship), a value of the wrong kind, a reference
    /// naming no unique key, a to-many given null, text after the object, a trailing comma.
    @Test func linesWithAProblemAreLeftToTheGeneralReading() throws {
        let builder = RecordBuilder(schema: try librarySchema(), file: "in.ndjson", maxValueBytes: 1 << 20)
        let genre = #""entity":"Genre""#
        for text in [
            "{\(genre),\"name\":\"a\",\"name\":\"b\"}",
            "{\(genre),\"name\":\"a\",\(genre)}",
            "{\(genre),\"name\":[\"a\"]}",
            "{\(genre),\"name\":\"a\",\"tracks\":[],\"tracks\":[]}",
            "{\(genre),\"name\":\"a\",\"tracks\":[{\"title\":\"x\"}]}",
            "{\(genre),\"name\":\"a\",\"tracks\":null}",
            "{\(genre),\"name\":\"a\"} x",
            "{\(genre),\"name\":\"a\",}",
            "{\(genre),\"name\":1}",
        ] {
            let bytes = Array(text.utf8)
            #expect(bytes.withUnsafeBufferPointer(builder.directParts) == nil, "\(text)")
            #expect(throws: ImportIssue.self, "\(text)") { try builder.fromJSON(bytes, line: 1) }
        }
    }

    /// Good lines written in a way the one-pass reading does not take (`entity` not first, an
    /// escape in a member's name) are read the general way: the same record as written plainly.
    @Test func oddlyWrittenLinesAreReadTheGeneralWay() throws {
        let builder = RecordBuilder(schema: try librarySchema(), file: "in.ndjson", maxValueBytes: 1 << 20)
        let plain = try builder.fromJSON(Array(#"{"entity":"Genre","name":"a"}"#.utf8), line: 1)
        for text in [#"{"name":"a","entity":"Genre"}"#, #"{"entity":"Genre","n\u0061me":"a"}"#] {
            let bytes = Array(text.utf8)
            #expect(bytes.withUnsafeBufferPointer(builder.directParts) == nil, "\(text)")
            #expect(Self.shown(Result { try builder.fromJSON(bytes, line: 1) }) == Self.shown(.success(plain)), "\(text)")
        }
    }
}

/// Random NDJSON lines for the entities of `schema` (see
/// ``DirectJSONRecordTests/aLineReadInOnePassIsTheLineReadAsATree(seed:)``).
private struct LineMaker {
    let schema: Schema

    init(schema: Schema) { self.schema = schema }

    /// Half the lines are clean: members of the right kinds, written plainly (they may still
    /// hold a problem a value's own text has, such as a date that does not exist).
    func line(_ rng: inout SeededGenerator) -> String {
        var maker = self
        maker.faults = chance(1, in: 2, &rng)
        maker.space = chance(1, in: 5, &rng) ? [" ", "\t", "\n", "  "].randomElement(using: &rng)! : ""
        return maker.make(&rng)
    }

    private var faults = true
    /// Written between every two tokens of the line, arrays and references included.
    private var space = ""

    private func make(_ rng: inout SeededGenerator) -> String {
        let entity = schema.entities.randomElement(using: &rng)!
        var members: [(String, String)] = []
        if chance(1, in: 4, &rng) { members.append(("id", id(of: entity, &rng))) }
        for a in entity.attributes where !chance(1, in: 5, &rng) {
            members.append((a.name, value(a.type, &rng)))
        }
        for r in entity.relationships where chance(2, in: 3, &rng) {
            let destination = schema.entity(named: r.destination)!
            members.append((r.name, targets(r, destination, &rng)))
        }
        if fault(1, in: 15, &rng), let m = members.randomElement(using: &rng) { members.append(m) }
        if fault(1, in: 20, &rng) { members.append(("unknown", "1")) }
        if chance(1, in: 12, &rng) { members.shuffle(using: &rng) }
        var entityAt = 0
        if fault(1, in: 12, &rng) { entityAt = Int.random(in: 0...members.count, using: &rng) }
        members.insert(("entity", fault(1, in: 30, &rng) ? "\"Nope\"" : quoted(entity.name)), at: entityAt)
        if fault(1, in: 30, &rng) { members.append(("entity", quoted(entity.name))) }
        var text = "\(space){"
        for (i, (name, value)) in members.enumerated() {
            if i > 0 { text += "\(space),\(space)" }
            var written = fault(1, in: 40, &rng) ? name.replacingOccurrences(of: "e", with: "\\u0065") : name
            if written == "K", fault(1, in: 3, &rng) { written = "\u{212A}" }
            text += "\(space)\"\(written)\"\(space):\(space)\(value)"
        }
        text += "\(space)}\(space)"
        if fault(1, in: 50, &rng) { text += "x" }
        return text
    }

    private func chance(_ n: Int, in d: Int, _ rng: inout SeededGenerator) -> Bool { Int.random(in: 0..<d, using: &rng) < n }

    /// Whether to put a fault in: never on a clean line.
    private func fault(_ n: Int, in d: Int, _ rng: inout SeededGenerator) -> Bool { faults && chance(n, in: d, &rng) }

    private func quoted(_ s: String) -> String { "\"" + s + "\"" }

    private func id(of entity: EntityDescription, _ rng: inout SeededGenerator) -> String {
        let tag = fault(1, in: 10, &rng) ? UInt16.random(in: 0...9, using: &rng) : entity.tag
        let id = ObjectID(high: UInt64(tag) << 48 | UInt64.random(in: 0...(1 << 40), using: &rng), low: rng.next())
        switch faults ? Int.random(in: 0..<12, using: &rng) : 11 {
        case 0: return quoted(String(id.description.dropLast()))
        case 1: return quoted(id.description.uppercased())
        case 2: return "12"
        default: return quoted(id.description)
        }
    }

    private func uuidText(_ rng: inout SeededGenerator) -> String {
        let u = UUID(uuid: (UInt8.random(in: 0...255, using: &rng), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                            UInt8.random(in: 0...255, using: &rng)))
        switch faults ? Int.random(in: 0..<10, using: &rng) : 9 {
        case 0: return quoted(u.uuidString)
        case 1: return quoted("{" + u.uuidString + "}")
        case 2: return quoted(u.uuidString.replacingOccurrences(of: "-", with: ""))
        case 3: return quoted(String(u.uuidString.lowercased().dropLast()) + "g")
        case 4: return quoted(u.uuidString.lowercased().replacingOccurrences(of: "a", with: "\\u0061"))
        default: return quoted(u.uuidString.lowercased())
        }
    }

    private func stringText(_ rng: inout SeededGenerator) -> String {
        let pieces = ["a", "Ζωή", "夜", "é", "\\\"", "\\\\", "\\n", "\\u00e9", "\\ud83c\\udfb5", " ", "x y", "\\/"]
        return quoted((0..<Int.random(in: 0...6, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined())
    }

    private func numberText(_ rng: inout SeededGenerator) -> String {
        guard faults else { return ["0", "-0", "7", "4.0", "1.5", "-0.0", "1e2", "0.1", "3.25e-2"].randomElement(using: &rng)! }
        return ["0", "-0", "7", "-12", "4.0", "1.5", "-0.0", "1e2", "196.00000000000001", "9007199254740993",
         "1.0000000000000000000000000000000000000001", "123456789012345678901", "1e400", "01", "2.", "-",
         "0.1", "3.25e-2"].randomElement(using: &rng)!
    }

    private func value(_ type: AttributeType, _ rng: inout SeededGenerator) -> String {
        if chance(1, in: 12, &rng) { return "null" }
        if fault(1, in: 15, &rng) {
            return ["true", "false", "[]", "{}", "[1]", "\"\"", numberText(&rng), stringText(&rng)].randomElement(using: &rng)!
        }
        switch type {
        case .string: return stringText(&rng)
        case .int: return fault(1, in: 4, &rng) ? numberText(&rng) : String(Int.random(in: -5...5000, using: &rng))
        case .double, .decimal: return numberText(&rng)
        case .bool: return chance(1, in: 2, &rng) ? "true" : "false"
        case .date:
            return quoted(["2020-02-17T21:25:16Z", "2024-01-01T00:00:00.5+02:00", "2024-02-30T00:00:00Z", "yesterday",
                           "+999999-12-31T00:00:00Z"].prefix(faults ? 5 : 2).randomElement(using: &rng)!)
        case .uuid: return uuidText(&rng)
        case .bytes: return quoted(["AAEC", "AAE=", "", "not base64"].prefix(faults ? 4 : 3).randomElement(using: &rng)!)
        }
    }

    private func reference(_ destination: EntityDescription, _ rng: inout SeededGenerator) -> String {
        switch faults ? Int.random(in: 0..<10, using: &rng) : 0 + 4 * Int.random(in: 0...1, using: &rng) {
        case 0: return id(of: destination, &rng)
        case 1: return "{}"
        case 2: return "7"
        case 3: return "{\"unknown\":1}"
        default:
            guard let unique = destination.uniques.randomElement(using: &rng) else { return id(of: destination, &rng) }
            var members = unique.attributes.map { a in
                (destination.attributes[a].name, value(destination.attributes[a].type, &rng))
            }
            if fault(1, in: 12, &rng), let m = members.first { members.append(m) }
            if fault(1, in: 15, &rng), let extra = destination.attributes.randomElement(using: &rng) {
                members.append((extra.name, value(extra.type, &rng)))
            }
            return "{\(space)" + members.map { "\"\($0.0)\"\(space):\(space)\($0.1)" }.joined(separator: "\(space),\(space)")
                + "\(space)}"
        }
    }

    private func targets(_ r: RelationshipDescription, _ destination: EntityDescription,
                         _ rng: inout SeededGenerator) -> String {
        if r.isToMany ? fault(1, in: 10, &rng) : chance(1, in: 10, &rng) { return "null" }
        let wrongShape = fault(1, in: 15, &rng)
        if r.isToMany != wrongShape {
            return "[\(space)" + (0..<Int.random(in: 0...4, using: &rng)).map { _ in reference(destination, &rng) }
                .joined(separator: "\(space),\(space)") + "\(space)]"
        }
        return reference(destination, &rng)
    }
}
