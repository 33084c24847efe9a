import Foundation
import Testing
@testable import Strata

/// One test per kind of schema mistake: each must be rejected naming file, entity and field.
@Suite struct SchemaTests {
    func load(_ json: String, file: String = "v1.json") throws -> Schema {
        try Schema.parse(Array(json.utf8), source: file, expectedVersion: 1)
    }

    func expectError(_ json: String, contains fragments: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try load(json)
            Issue.record("schema was accepted", sourceLocation: sourceLocation)
        } catch let e as SchemaError {
            for f in fragments { #expect(e.description.contains(f), "\(e) lacks \(f)", sourceLocation: sourceLocation) }
            #expect(e.file == "v1.json", sourceLocation: sourceLocation)
        } catch {
            Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
        }
    }

    func entity(_ body: String) -> String {
        #"{"model":"m","version":1,"entities":[\#(body)]}"#
    }

    @Test func shippedLibrarySchemaLoads() throws {
        let s = try Schema.load(directory: librarySchemaDirectory)
        #expect(s.model == "library" && s.version == 2)
        #expect(try Schema.loadAll(directory: librarySchemaDirectory).map(\.version) == [1, 2])
        #expect(s.entities.map(\.name) == ["Artist", "Album", "Track", "Genre", "Playlist"])
        let track = try #require(s.entity(named: "Track"))
        #expect(track.attribute(named: "discNumber")?.defaultValue == .int(1))
        #expect(track.relationship(named: "playlists")?.isToMany == true)
        #expect(s.inverse(of: track.relationship(named: "album")!).name == "tracks")
    }

    @Test func notJSON() { expectError("{model", contains: ["not valid JSON", "column"]) }
    /// A syntax error past the first line of a schema file names its line and the column in it
    /// (it gave the byte offset in the file, labelled a column).
    @Test func aSyntaxErrorNamesItsLineAndColumn() {
        expectError("{\n  \"model\": \"m\",\n  \"version\": 1,\n  \"entities\": [\n    {name: \"A\"}]}",
                    contains: ["not valid JSON: line 5, column 6: expected a quoted member name"])
    }
    @Test func missingModel() { expectError(#"{"version":1,"entities":[]}"#, contains: ["model"]) }
    @Test func versionDisagreesWithFileName() {
        expectError(#"{"model":"m","version":2,"entities":[{"name":"A","attributes":[]}]}"#, contains: ["named v1.json but declares version 2"])
    }
    /// A cluster keeps the schema version in a PostgreSQL `integer`: a version past 2^31 - 1 was
    /// accepted and trapped in the cluster's code.
    @Test func aVersionPastTheHighestIsRefused() throws {
        let json = #"{"model":"m","version":2147483648,"entities":[{"name":"A","attributes":[]}]}"#
        do {
            _ = try Schema.parse(Array(json.utf8), source: "v2147483648.json")
            Issue.record("schema was accepted")
        } catch let e as SchemaError {
            #expect(e.description.contains("2147483648 is past the highest version, 2147483647"), "\(e)")
        }
        let highest = #"{"model":"m","version":2147483647,"entities":[{"name":"A","attributes":[]}]}"#
        #expect(try Schema.parse(Array(highest.utf8), source: "v2147483647.json").version == SchemaLimits.maxVersion)
    }
    @Test func noEntities() { expectError(#"{"model":"m","version":1,"entities":[]}"#, contains: ["at least one entity"]) }
    @Test func unknownTopLevelKey() { expectError(#"{"model":"m","version":1,"entites":[]}"#, contains: ["unknown key 'entites'"]) }
    @Test func duplicateEntity() {
        expectError(entity(#"{"name":"A","attributes":[]},{"name":"A","attributes":[]}"#), contains: ["entity 'A'", "duplicate entity name"])
    }
    @Test func badEntityName() { expectError(entity(#"{"name":"My Entity","attributes":[]}"#), contains: ["ASCII identifier"]) }
    @Test func unknownAttributeType() {
        expectError(entity(#"{"name":"A","attributes":[{"name":"n","type":"integer"}]}"#),
                    contains: ["entity 'A'", "attribute 'n'", "unknown type 'integer'"])
    }
    @Test func defaultOfWrongType() {
        expectError(entity(#"{"name":"A","attributes":[{"name":"n","type":"int","default":"x"}]}"#),
                    contains: ["attribute 'n'", "default value", "expected int"])
    }
    /// A date default beyond what a store holds is refused with the schema (it was accepted:
    /// every object given it failed at its save, and a migration wrote it into every object).
    @Test func aDateDefaultBeyondWhatAStoreHoldsIsRefused() throws {
        for far in ["+960000-01-01T00:00:00Z", "-960000-01-01T00:00:00Z"] {
            expectError(entity(#"{"name":"A","attributes":[{"name":"far","type":"date","default":"\#(far)"}]}"#),
                        contains: ["far", "default value: dates must lie within"])
        }
        _ = try load(entity(#"{"name":"A","attributes":[{"name":"near","type":"date","default":"+900000-01-01T00:00:00Z"}]}"#))
        // The schema of a store made before they were refused still reads, so the store opens.
        let stored = entity(#"{"name":"A","attributes":[{"name":"far","type":"date","default":"+960000-01-01T00:00:00Z"}]}"#)
        _ = try Schema.parse(Array(stored.utf8), source: "stored", expectedVersion: 1, readingStoredSchema: true)
    }
    /// A unique constraint whose attributes' defaults make a key over LMDB's limit is refused with
    /// the schema: it was accepted, and every object given those defaults was refused at its save.
    @Test func aUniqueKeyOfDefaultsOverTheKeyLimitIsRefused() throws {
        let long = String(repeating: "q", count: 600)
        expectError(entity(#"{"name":"A","attributes":[{"name":"k","type":"string","default":"\#(long)"}],"uniques":[["k"]]}"#),
                    contains: ["entity 'A'", "uniques[0]", "the defaults of its attributes make a key no store takes",
                               "exceeds LMDB's 511-byte key limit"])
        // A shorter one, or one that is not in a unique constraint, is fine.
        _ = try load(entity(#"{"name":"A","attributes":[{"name":"k","type":"string","default":"\#(String(repeating: "q", count: 400))"}],"uniques":[["k"]]}"#))
        _ = try load(entity(#"{"name":"A","attributes":[{"name":"k","type":"string","default":"\#(long)"}]}"#))
    }

    /// A string or bytes default longer than the store's `maxValueBytes` is refused when a store
    /// is opened (or made) with the schema, nothing made: every object given it was refused.
    @Test func aDefaultOverMaxValueBytesIsRefusedAtOpen() throws {
        let schema = try load(entity(#"{"name":"A","attributes":[{"name":"k","type":"int"},{"name":"note","type":"string","default":"\#(String(repeating: "z", count: 2_000))"}]}"#))
        let dir = temporaryDirectory("schema-default-size")
        defer { try? FileManager.default.removeItem(at: dir) }
        var configuration = StoreConfiguration()
        configuration.maxValueBytes = 1_000
        let path = dir.appendingPathComponent("s")
        #expect { try Store.open(at: path, schema: schema, configuration: configuration) } throws: { error in
            (error as? SchemaError).map { $0.entity == "A" && $0.reason.contains("its default of 2000 bytes exceeds maxValueBytes (1000)") } ?? false
        }
        #expect(!FileManager.default.fileExists(atPath: path.path))
        configuration.maxValueBytes = 2_000
        let store = try Store.open(at: path, schema: schema, configuration: configuration)
        store.close()
    }

    @Test func reservedAttributeName() {
        expectError(entity(#"{"name":"A","attributes":[{"name":"id","type":"int"}]}"#),
                    contains: ["'id' is reserved", "name it otherwise (e.g. 'pk'", "unique constraint"])
    }
    @Test func duplicateMember() {
        expectError(entity(#"{"name":"A","attributes":[{"name":"n","type":"int"},{"name":"n","type":"string"}]}"#),
                    contains: ["attribute 'n'", "duplicate member name"])
    }
    @Test func unknownAttributeKey() {
        expectError(entity(#"{"name":"A","attributes":[{"name":"n","type":"int","optinal":true}]}"#), contains: ["unknown key 'optinal'"])
    }
    @Test func unknownDestination() {
        expectError(entity(#"{"name":"A","attributes":[],"relationships":[{"name":"b","destination":"B","inverse":"a"}]}"#),
                    contains: ["relationship 'b'", "destination 'B' is not an entity"])
    }
    @Test func missingInverse() {
        expectError(entity(#"{"name":"A","attributes":[],"relationships":[{"name":"b","destination":"B"}]},{"name":"B","attributes":[]}"#),
                    contains: ["relationship 'b'", "missing 'inverse'"])
    }
    @Test func inverseDoesNotExist() {
        expectError(entity(#"{"name":"A","attributes":[],"relationships":[{"name":"b","destination":"B","inverse":"a"}]},{"name":"B","attributes":[]}"#),
                    contains: ["entity 'A'", "inverse 'a' does not exist on 'B'"])
    }
    @Test func inverseDoesNotPointBack() {
        expectError(entity(#"""
            {"name":"A","attributes":[],"relationships":[{"name":"b","destination":"B","inverse":"a"},{"name":"c","destination":"B","inverse":"a"}]},
            {"name":"B","attributes":[],"relationships":[{"name":"a","destination":"A","inverse":"b"}]}
            """#), contains: ["relationship 'c'", "does not point back"])
    }
    /// A relationship that names itself as its inverse (to-one or to-many) is refused, naming
    /// the entity and the relationship: with one relationship for both ends, an input such as
    /// a.spouse = b, b.spouse = c would change the store on every re-import.
    @Test func relationshipThatIsItsOwnInverse() {
        for toMany in [false, true] {
            expectError(entity(#"{"name":"Person","attributes":[{"name":"name","type":"string"}],"relationships":[{"name":"spouse","destination":"Person","inverse":"spouse","toMany":\#(toMany)}]}"#),
                        contains: ["entity 'Person'", "relationship 'spouse'", "is declared as its own inverse", "declare two relationships"])
        }
        // Two relationships of one entity, each the other's inverse, are fine.
        #expect(throws: Never.self) {
            _ = try load(entity(#"{"name":"Person","attributes":[],"relationships":[{"name":"spouse","destination":"Person","inverse":"spouseOf"},{"name":"spouseOf","destination":"Person","inverse":"spouse"}]}"#))
        }
    }

    /// A store whose stored schema has such a relationship (made before they were refused)
    /// still opens with its stored schema, so its data can be read and exported.
    @Test func aStoredSchemaWithASelfInverseRelationshipStillOpens() throws {
        let json = entity(#"{"name":"Person","attributes":[{"name":"name","type":"string"}],"uniques":[["name"]],"relationships":[{"name":"spouse","destination":"Person","inverse":"spouse"}]}"#)
        let schema = try Schema.parse(Array(json.utf8), source: "v1.json", expectedVersion: 1, readingStoredSchema: true)
        let dir = temporaryDirectory("self-inverse")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Store.open(at: dir, schema: schema)
        _ = try store.saveAndWait { c in
            var r = Record(entity: schema.entity(named: "Person")!)
            r["name"] = .string("a")
            c.insert(r)
        }
        store.close()
        let reopened = try Store.openReadOnly(at: dir)
        defer { reopened.close() }
        #expect(try reopened.mainContext.count(Query(entity: "Person")) == 1)
    }

    @Test func badDeleteRule() {
        expectError(entity(#"""
            {"name":"A","attributes":[],"relationships":[{"name":"b","destination":"B","inverse":"a","deleteRule":"explode"}]},
            {"name":"B","attributes":[],"relationships":[{"name":"a","destination":"A","inverse":"b"}]}
            """#), contains: ["relationship 'b'", "deleteRule must be one of"])
    }
    @Test func uniqueOnUnknownAttribute() {
        expectError(entity(#"{"name":"A","attributes":[{"name":"n","type":"int"}],"uniques":[["m"]]}"#),
                    contains: ["uniques[0]", "unknown attribute 'm'"])
    }
    @Test func indexListsAttributeTwice() {
        expectError(entity(#"{"name":"A","attributes":[{"name":"n","type":"int"}],"indexes":[["n","n"]]}"#),
                    contains: ["indexes[0]", "listed twice"])
    }
    @Test func duplicateTag() {
        expectError(entity(#"{"name":"A","tag":2,"attributes":[]},{"name":"B","attributes":[]}"#), contains: ["tag 2 is already used"])
    }
    @Test func optionalOnToMany() {
        expectError(entity(#"""
            {"name":"A","attributes":[],"relationships":[{"name":"b","destination":"B","inverse":"a","toMany":true,"optional":false}]},
            {"name":"B","attributes":[],"relationships":[{"name":"a","destination":"A","inverse":"b"}]}
            """#), contains: ["'optional' applies to to-one"])
    }

    @Test func directoryWithGap() throws {
        let dir = temporaryDirectory("schemas")
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data(#"{"model":"m","version":1,"entities":[{"name":"A","attributes":[]}]}"#.utf8).write(to: dir.appendingPathComponent("v1.json"))
        try Data(#"{"model":"m","version":3,"entities":[{"name":"A","attributes":[]}]}"#.utf8).write(to: dir.appendingPathComponent("v3.json"))
        #expect(throws: SchemaError.self) { try Schema.load(directory: dir) }
        do { _ = try Schema.load(directory: dir) } catch { #expect("\(error)".contains("v2.json is missing")) }
    }

    @Test func aVersionFileNameHasOneSpelling() throws {
        for name in ["v01.json", "v+1.json", "v0.json", "v-1.json", "v 1.json", "v1e0.json"] {
            let dir = temporaryDirectory("schemas")
            defer { try? FileManager.default.removeItem(at: dir) }
            try Data(#"{"model":"m","version":1,"entities":[{"name":"A","attributes":[]}]}"#.utf8)
                .write(to: dir.appendingPathComponent(name))
            do {
                _ = try Schema.load(directory: dir)
                Issue.record("\(name) was loaded as a schema version")
            } catch let error as SchemaError {
                #expect(error.file.hasSuffix("/\(name)"), "\(error)")
                #expect("\(error)".contains("without a sign or a leading zero"), "\(error)")
            }
        }
        #expect(Schema.version(fileName: "v1.json") == 1)
        #expect(Schema.version(fileName: "v12.json") == 12)
        #expect(Schema.version(fileName: "v012.json") == nil)
        #expect(Schema.version(fileName: "notes.json") == nil)
    }

    @Test func emptyDirectory() {
        let dir = temporaryDirectory("schemas")
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(throws: SchemaError.self) { try Schema.load(directory: dir) }
    }

    /// Each of `SchemaLimits` is enforced at one past it, naming the field, and the limit itself
    /// is accepted.
    @Test func everySchemaLimitIsEnforcedOnePastIt() throws {
        func attributes(_ n: Int) -> String {
            (0..<n).map { #"{"name":"a\#($0)","type":"int"}"# }.joined(separator: ",")
        }
        func entities(_ n: Int) -> String {
            #"{"model":"m","version":1,"entities":["# + (0..<n).map { #"{"name":"E\#($0)","attributes":[]}"# }
                .joined(separator: ",") + "]}"
        }
        func oneEntity(attributes n: Int, extra: String = "") -> String {
            #"{"model":"m","version":1,"entities":[{"name":"A","attributes":["# + attributes(n) + "]" + extra + "}]}"
        }
        func relationships(_ n: Int) -> String {
            let forward = (0..<n).map { #"{"name":"r\#($0)","destination":"B","inverse":"s\#($0)"}"# }.joined(separator: ",")
            let back = (0..<n).map { #"{"name":"s\#($0)","destination":"A","toMany":true,"inverse":"r\#($0)"}"# }
                .joined(separator: ",")
            return #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[],"relationships":["# + forward
                + #"]},{"name":"B","attributes":[],"relationships":["# + back + "]}]}"
        }
        let indexes = { (n: Int) in ",\"indexes\":[" + (0..<n).map { #"["a\#($0 % 300)","a\#($0 / 300 + 300)"]"# }
            .joined(separator: ",") + "]" }
        let wide = { (n: Int) in ",\"indexes\":[[" + (0..<n).map { "\"a\($0)\"" }.joined(separator: ",") + "]]" }
        let cases: [(atLimit: String, past: String, message: String)] = [
            (entities(SchemaLimits.maxEntities), entities(SchemaLimits.maxEntities + 1), "more than 255 entities"),
            (oneEntity(attributes: SchemaLimits.maxAttributesPerEntity),
             oneEntity(attributes: SchemaLimits.maxAttributesPerEntity + 1), "more than 1000 attributes"),
            (relationships(SchemaLimits.maxRelationshipsPerEntity), relationships(SchemaLimits.maxRelationshipsPerEntity + 1),
             "more than 255 relationships"),
            (oneEntity(attributes: 600, extra: indexes(SchemaLimits.maxIndexesPerEntity)),
             oneEntity(attributes: 600, extra: indexes(SchemaLimits.maxIndexesPerEntity + 1)), "more than 255 entries"),
            (oneEntity(attributes: 5, extra: wide(SchemaLimits.maxAttributesPerIndex)),
             oneEntity(attributes: 5, extra: wide(SchemaLimits.maxAttributesPerIndex + 1)), "more than 4 attributes"),
            (#"{"model":"m","version":1,"entities":[{"name":""# + String(repeating: "N", count: SchemaLimits.maxNameBytes) + #"","attributes":[]}]}"#,
             #"{"model":"m","version":1,"entities":[{"name":""# + String(repeating: "N", count: SchemaLimits.maxNameBytes + 1) + #"","attributes":[]}]}"#,
             "at most 64 bytes"),
        ]
        for c in cases {
            #expect(throws: Never.self, "\(c.message)") { _ = try load(c.atLimit) }
            expectError(c.past, contains: [c.message])
        }
    }

    /// A destination, inverse or index attribute written with a character Swift's `==` takes for
    /// an ASCII one (a Kelvin sign for `K`) names nothing: it was matched, stored raw, and the
    /// code `storectl generate` wrote from it named a type that does not exist.
    @Test func namesThatOnlyLookAlikeDoNotMatch() {
        let kelvin = "\u{212A}ind"
        expectError(#"{"model":"m","version":1,"entities":[{"name":"Kind","attributes":[],"relationships":[{"name":"xs","destination":"X","toMany":true,"inverse":"kind"}]},"#
                    + #"{"name":"X","attributes":[],"relationships":[{"name":"kind","destination":""# + kelvin + #"","inverse":"xs"}]}]}"#,
                    contains: ["relationship 'kind'", "is not an entity of this schema"])
        expectError(#"{"model":"m","version":1,"entities":[{"name":"A","attributes":[],"relationships":[{"name":"Kx","destination":"A","inverse":""# + "\u{212A}x" + #""}]}]}"#,
                    contains: ["relationship 'Kx'", "is not a relationship name"])
        expectError(#"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"Kx","type":"int"}],"indexes":[[""# + "\u{212A}x" + #""]]}]}"#,
                    contains: ["unknown attribute"])
    }

    @Test func relationshipNamesAreReservedLikeAttributes() {
        let json = #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[],"relationships":[{"name":"id","destination":"A","inverse":"id"}]}]}"#
        #expect(throws: SchemaError.self) { try Schema.parse(Array(json.utf8), source: "v1.json") }
        let model = #"{"model":"kw-model","version":1,"entities":[{"name":"A","attributes":[]}]}"#
        #expect(throws: SchemaError.self) { try Schema.parse(Array(model.utf8), source: "v1.json") }
    }

    /// A decimal default too long or too large for a decimal is refused quoting the file's text
    /// (`'…' has 39 significant digits`, `'1e200' is too large`), as an import refuses the same
    /// value, not the double the parser made of it; a version past what 64 bits hold is "past the
    /// highest version", not "missing".
    @Test func refusalsQuoteTheNumbersAsTheFileWritesThem() throws {
        func refusal(_ json: String) -> String {
            do {
                _ = try Schema.parse(Array(json.utf8), source: "v1.json")
                return "accepted"
            } catch { return "\(error)" }
        }
        func decimalDefault(_ text: String) -> String {
            #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"decimal","default":"# + text + "}]}]}"
        }
        let long = refusal(decimalDefault("123456789012345678901234567890123456789"))
        #expect(long.contains("'123456789012345678901234567890123456789' has 39 significant digits"), "\(long)")
        let large = refusal(decimalDefault("1e200"))
        #expect(large.contains("'1e200'") && large.contains("too large"), "\(large)")
        for version in ["9223372036854775808", "1000000000000000000000000000000", "1e40"] {
            let r = refusal(#"{"model":"m","version":"# + version + #","entities":[]}"#)
            #expect(r.contains("is past the highest version, 2147483647"), "\(version): \(r)")
        }
    }

    /// A store opens again with the very file it was made from, also when a number in it has more
    /// digits than a decimal holds (kept as a double, whose text read back became another number:
    /// the store's copy of the schema differed from the file, and the store refused it); and the
    /// text a schema is compared by is a fixed point of reading and writing.
    @Test func aStoreOpensWithTheFileItWasMadeFromWhateverItsNumbers() throws {
        let texts = [
            #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"double","default":123456789012345678901234567890123456789012}]}]}"#,
            #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"int","default":1.0000000000000000000000000000000000000000}]}]}"#,
            #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"double","default":1e-7}]}]}"#,
        ]
        for text in texts {
            let schema = try Schema.parse(Array(text.utf8), source: "v1.json", expectedVersion: 1)
            let again = try Schema.parse(Array(schema.canonicalJSON.utf8), source: "v1.json", expectedVersion: 1)
            #expect(again.canonicalJSON == schema.canonicalJSON, "\(text)")
            let dir = temporaryDirectory("schema-numbers")
            defer { try? FileManager.default.removeItem(at: dir) }
            try Store.open(at: dir, schema: schema).close()
            let reopened = try Store.open(at: dir, schema: try Schema.parse(Array(text.utf8), source: "v1.json", expectedVersion: 1))
            reopened.close()
        }
    }

    /// Schemas are compared byte for byte: a default spelled with a decomposed character (`e`
    /// and a combining accent) is another schema than one with the composed character, which
    /// Swift's `String` comparison took for equal (the application then wrote one form and
    /// storectl the other, and keys and `==` compare bytes).
    @Test func schemasDifferingOnlyInUnicodeNormalizationAreDifferent() throws {
        func schema(_ value: String) throws -> Schema {
            let text = #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"string","default":""#
                + value + #""}]}]}"#
            return try Schema.parse(Array(text.utf8), source: "v1.json", expectedVersion: 1)
        }
        let dir = temporaryDirectory("schema-normalization")
        defer { try? FileManager.default.removeItem(at: dir) }
        try Store.open(at: dir, schema: try schema("caf\u{E9}")).close()
        #expect(throws: StrataError.self) { try Store.open(at: dir, schema: try schema("cafe\u{301}")).close() }
        try Store.open(at: dir, schema: try schema("caf\u{E9}")).close()
    }
}
