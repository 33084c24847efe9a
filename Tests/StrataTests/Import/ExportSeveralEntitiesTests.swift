import Foundation
import Testing
@testable import Strata

/// An export of several entities reads them all from one snapshot: files of a store exported
/// while saves go on agree with each other (every reference between them finds its target), so
/// they import again, in any order, to the state of that one transaction. Exported one entity at
/// a time, the files can disagree: a save between two of them leaves a reference without its
/// target, and a required one makes the import refuse the files.
@Suite struct ExportSeveralEntitiesTests {
    /// Owners and their pets; a pet's owner is required.
    static let schemaText = #"""
    {"model":"pets","version":1,"entities":[
      {"name":"Owner","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"pets","destination":"Pet","toMany":true,"inverse":"owner","deleteRule":"cascade"}],
       "uniques":[["name"]]},
      {"name":"Pet","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"owner","destination":"Owner","inverse":"pets","optional":false}],
       "uniques":[["name"]]}
    ]}
    """#

    private static func schema() throws -> Schema {
        try Schema.parse(Array(schemaText.utf8), source: "v1.json", expectedVersion: 1)
    }

    /// Saves owner `i` with a pet of its own, in one transaction.
    private static func saveOwnerWithPet(_ i: Int, into store: Store) throws {
        let schema = store.schema
        let ownerEntity = try #require(schema.entity(named: "Owner")), petEntity = try #require(schema.entity(named: "Pet"))
        let petsOwner = try #require(petEntity.relationship(named: "owner"))
        let owner = ObjectID.make(entityTag: ownerEntity.tag), pet = ObjectID.make(entityTag: petEntity.tag)
        var changes = ChangeSet(operations: [], valuesComplete: true)
        changes.append(.insert(id: owner, values: [.string("owner \(i)")]))
        changes.append(.insert(id: pet, values: [.string("pet \(i)")]))
        changes.append(.link(relationship: petsOwner.tag, from: .id(pet), to: .id(owner)))
        _ = try store.saveAndWait(changes)
    }

    private func write(_ lines: [String], to url: URL) throws {
        try Data(lines.map { $0 + "\n" }.joined().utf8).write(to: url)
    }

    /// Saves made while an export of two entities runs (one between them, from `emit`, with the
    /// last owner's line, before any pet is read) are in neither file: both hold the
    /// snapshot's transaction, and the files, imported in the other order into an empty store,
    /// give back exactly its owners and pets. The same two entities exported one at a time with
    /// the same save between them give a pet whose required owner is in no file, which the
    /// import refuses: what one snapshot prevents.
    @Test func severalEntitiesAreReadFromOneSnapshotWhileSavesGoOn() async throws {
        let schema = try Self.schema()
        let source = try Store.temporary(schema: schema)
        defer { source.close() }
        for i in 0..<20 { try Self.saveOwnerWithPet(i, into: source) }
        let dir = temporaryDirectory("export-several")
        defer { try? FileManager.default.removeItem(at: dir) }

        var files: [String: [String]] = [:]
        var saved = 20
        let result = try Exporter(store: source).export(entities: ["Owner", "Pet"], format: .ndjson) { entity, line in
            files[entity, default: []].append(line)
            if entity == "Owner" && files["Owner"]?.count == 20 {
                // After the last owner, before any pet is read: a save the snapshot must not see.
                try Self.saveOwnerWithPet(saved, into: source)
                saved += 1
            }
        }
        #expect(result.records.map(\.entity) == ["Owner", "Pet"])
        #expect(result.records.map(\.records) == [20, 20])
        #expect(result.transaction == TransactionID(20))
        #expect(saved == 21)
        #expect(try source.mainContext.count(Query(entity: "Pet")) == 21)

        let owners = dir.appendingPathComponent("Owner.ndjson"), pets = dir.appendingPathComponent("Pet.ndjson")
        try write(files["Owner"] ?? [], to: owners)
        try write(files["Pet"] ?? [], to: pets)
        let copy = try Store.temporary(schema: schema)
        defer { copy.close() }
        // The pets first: each names an owner that comes later in the input.
        let summary = try await Importer(store: copy).run(files: [pets.path, owners.path])
        #expect(summary.records == 40)
        var copied: [String] = [], original: [String] = []
        _ = try Exporter(store: copy).export(format: .ndjson) { _, line in copied.append(line) }
        #expect(copied.sorted() == (files["Owner", default: []] + files["Pet", default: []]).sorted())
        _ = try Exporter(store: source).export(format: .ndjson) { _, line in original.append(line) }
        #expect(original.count == 42, "the source holds the save made during the export")

        // One entity at a time, with a save between them: the pet file names an owner that is in
        // neither file nor the empty store.
        var owners2: [String] = [], pets2: [String] = []
        _ = try Exporter(store: source).export(Query(entity: "Owner"), format: .ndjson) { owners2.append($0) }
        try Self.saveOwnerWithPet(saved, into: source)
        _ = try Exporter(store: source).export(Query(entity: "Pet"), format: .ndjson) { pets2.append($0) }
        #expect(pets2.count == owners2.count + 1)
        try write(owners2, to: owners)
        try write(pets2, to: pets)
        let other = try Store.temporary(schema: schema)
        defer { other.close() }
        await #expect(throws: ImportFailed.self) {
            try await Importer(store: other).run(files: [pets.path, owners.path])
        }
        #expect(try other.mainContext.count(Query(entity: "Pet")) == 0)
    }

    /// Every entity of the schema when none is named, in the schema's order; a name given twice
    /// is exported once; an unknown one is refused before anything is emitted.
    @Test func entitiesDefaultToTheSchemasAndAnUnknownOneEmitsNothing() throws {
        let source = try Store.temporary(schema: try Self.schema())
        defer { source.close() }
        for i in 0..<3 { try Self.saveOwnerWithPet(i, into: source) }
        let all = try Exporter(store: source).export(format: .csv) { _, _ in }
        #expect(all.records.map(\.entity) == ["Owner", "Pet"])
        #expect(all.records.map(\.records) == [3, 3])
        var entities: [String] = []
        let twice = try Exporter(store: source).export(entities: ["Pet", "Pet"], format: .csv) { e, _ in entities.append(e) }
        #expect(twice.records.map(\.entity) == ["Pet"])
        #expect(entities == Array(repeating: "Pet", count: 4), "a CSV header and three rows, once")
        var emitted = 0
        #expect(throws: StrataError.self) {
            try Exporter(store: source).export(entities: ["Owner", "Horse"], format: .ndjson) { _, _ in emitted += 1 }
        }
        #expect(emitted == 0)
    }
}
