import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Swift code generated from a schema (`ModelGenerator`, `storectl generate`): attribute names
/// that are Swift keywords are escaped, and names that collide with Swift or Strata (entities
/// called `Value` and `Date`, attributes called `init`, `Type` and `default`) give code that
/// type-checks against the built Strata module (`struct Value: Entity` must not make `[Value]`
/// mean itself, nor `self.init = init` appear); `self` is a reserved name.
@Suite struct GeneratedCodeTests {
    static let modulemap: String? = {
        let build = repositoryRoot.appendingPathComponent(".build")
        let triples = (try? FileManager.default.contentsOfDirectory(atPath: build.path)) ?? []
        return triples.map { build.appendingPathComponent("\($0)/debug/CStrataCRC.build/module.modulemap").path }
            .first { FileManager.default.fileExists(atPath: $0) }
    }()
    static let canTypeCheck = modulemap != nil && FileManager.default.fileExists(atPath: repositoryRoot.appendingPathComponent(".build/debug/Modules/Strata.swiftmodule").path)

    @Test(.enabled(if: canTypeCheck, "needs the debug build's Strata module"))
    func collidingNamesGenerateCodeThatCompiles() async throws {
        let json = #"""
        {"model":"tricky","version":1,"entities":[
         {"name":"Value","attributes":[{"name":"init","type":"int","optional":true},{"name":"Type","type":"date"},{"name":"String","type":"string"},
                                       {"name":"Protocol","type":"string","optional":true},{"name":"_","type":"int","optional":true}],
          "relationships":[{"name":"dates","destination":"Date","toMany":true,"inverse":"value"}]},
         {"name":"Date","attributes":[{"name":"default","type":"bytes","optional":true},{"name":"when","type":"uuid"}],
          "relationships":[{"name":"value","destination":"Value","inverse":"dates"}]},
         {"name":"Protocol","attributes":[{"name":"fileprivate","type":"string"},{"name":"precedencegroup","type":"int","optional":true},
                                          {"name":"odd","type":"string","default":"nul\u0000bs\bff\fus\u001fdel\u007fc1\u0085q\"b\\n\nt\t"}]}]}
        """#
        let source = ModelGenerator.swiftSource(for: try Schema.parse(Array(json.utf8), source: "v1.json"))
        let dir = temporaryDirectory("generated-names")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("Tricky.swift")
        try Data(source.utf8).write(to: file)
        let r = try await run("/usr/bin/env", ["swiftc", "-typecheck", "-I", repositoryRoot.appendingPathComponent(".build/debug/Modules").path,
                                         "-I", repositoryRoot.appendingPathComponent("Sources/CLMDB").path,
                                         "-I", repositoryRoot.appendingPathComponent("Sources/CZstd").path,
                                         "-Xcc", "-fmodule-map-file=\(Self.modulemap ?? "")", file.path])
        #expect(r.status == 0, "\(r.stderr.prefix(2_000))")
        // A string default with control characters is written with Swift's escapes (it was
        // written with JSON's, `\u0000` and `\b`, which Swift refuses).
        #expect(source.contains(#""nul\u{0}bs\u{8}ff\u{C}us\u{1F}del\u{7F}c1\u{85}q\"b\\n\nt\t""#), "\(source)")
        let reserved = #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"self","type":"int"}]}]}"#
        #expect(throws: SchemaError.self) { try Schema.parse(Array(reserved.utf8), source: "v1.json") }
    }

    /// Names the generated type declares itself, or modules it names types through, cannot be
    /// given to attributes, relationships or entities: `problems(in:file:)` names each (and
    /// `storectl generate` refuses, exit 65); the schema itself is fine for a store.
    @Test func namesTheGeneratedTypeDeclaresItselfAreReportedNotGenerated() throws {
        let json = #"""
        {"model":"m","version":1,"entities":[
         {"name":"Item","attributes":[{"name":"entityName","type":"string","optional":true},
                                      {"name":"storedValues","type":"string","optional":true}],
          "relationships":[{"name":"entityTag","destination":"Swift","toMany":true,"inverse":"item"}]},
         {"name":"Swift","attributes":[],"relationships":[{"name":"item","destination":"Item","inverse":"entityTag"}]}]}
        """#
        let schema = try Schema.parse(Array(json.utf8), source: "v1.json")
        let problems = ModelGenerator.problems(in: schema, file: "v1.json").map(\.description)
        #expect(problems.count == 4, "\(problems)")
        // Members named like a module hide it inside the type; an entity named like the list of
        // the model's types, or a string attribute named `hashValue` (ambiguous with
        // `Hashable`'s), collide too. Each compiled to nothing usable.
        let members = #"""
        {"model":"m","version":1,"entities":[
         {"name":"mEntities","attributes":[{"name":"Strata","type":"int"},{"name":"hashValue","type":"string"}],
          "relationships":[{"name":"Swift","destination":"B","toMany":true,"inverse":"Foundation"}]},
         {"name":"B","attributes":[],"relationships":[{"name":"Foundation","destination":"mEntities","inverse":"Swift"}]}]}
        """#
        let more = ModelGenerator.problems(in: try Schema.parse(Array(members.utf8), source: "v1.json"), file: "v1.json")
            .map(\.description)
        #expect(more.count == 5, "\(more)")
        #expect(more.contains { $0.contains("entity 'mEntities'") && $0.contains("declares 'mEntities' itself") }, "\(more)")
        #expect(more.contains { $0.contains("attribute 'Strata'") && $0.contains("would hide the module") }, "\(more)")
        #expect(more.contains { $0.contains("attribute 'hashValue'") }, "\(more)")
        #expect(more.contains { $0.contains("relationship 'Swift'") && $0.contains("would hide the module") }, "\(more)")
        #expect(more.contains { $0.contains("relationship 'Foundation'") && $0.contains("would hide the module") }, "\(more)")
        #expect(problems.contains { $0.contains("attribute 'entityName'") && $0.contains("declares 'entityName' itself") })
        #expect(problems.contains { $0.contains("attribute 'storedValues'") })
        #expect(problems.contains { $0.contains("relationship 'entityTag'") })
        #expect(problems.contains { $0.contains("entity 'Swift'") && $0.contains("would hide the module") })
        let library = try Schema.load(directory: repositoryRoot.appendingPathComponent("Schemas/library"))
        #expect(ModelGenerator.problems(in: library, file: "v2.json").isEmpty)
    }

    @Test func generatedCodeEscapesKeywordAttributes() throws {
        let json = #"{"model":"m","version":1,"entities":[{"name":"A","attributes":[{"name":"default","type":"int"}]}]}"#
        let source = ModelGenerator.swiftSource(for: try Schema.parse(Array(json.utf8), source: "v1.json"))
        #expect(source.contains("public var `default`: Swift.Int"))
        #expect(source.contains("self.`default` = try Swift.Int(storedValue: v[0])"))
    }
}
