import Foundation
import Testing
@testable import Strata

/// Rows of a relational database keep their primary key as an attribute (`pk`) with a unique
/// constraint, and foreign keys become references by it (README, "Keys from another database").
@Suite struct ImportSourceKeyTests {
    static let schemaText = #"""
    {"model":"shop","version":1,"entities":[
      {"name":"Customer","attributes":[{"name":"pk","type":"int"},{"name":"name","type":"string"}],
       "relationships":[{"name":"invoices","destination":"Invoice","toMany":true,"inverse":"customer"}],
       "uniques":[["pk"]]},
      {"name":"Invoice","attributes":[{"name":"pk","type":"int"},{"name":"total","type":"double"}],
       "relationships":[{"name":"customer","destination":"Customer","inverse":"invoices"}],
       "uniques":[["pk"]]}
    ]}
    """#

    /// Within the input a record is known by every key it has: a reference by its second unique
    /// key, or by a unique key of a record given an `id`, finds it before or after it in the file,
    /// in both modes, as the documentation says.
    @Test(arguments: [ImportMode.incremental, .bulk])
    func aReferenceFindsARecordOfTheInputByAnyOfItsKeys(mode: ImportMode) async throws {
        let text = #"""
        {"model":"m","version":1,"entities":[
          {"name":"P","attributes":[{"name":"a","type":"string"},{"name":"b","type":"string"}],"uniques":[["a"],["b"]],
           "relationships":[{"name":"cs","destination":"C","toMany":true,"inverse":"p"}]},
          {"name":"C","attributes":[{"name":"k","type":"string"}],"uniques":[["k"]],
           "relationships":[{"name":"p","destination":"P","inverse":"cs"}]}]}
        """#
        let store = try Store.temporary(schema: try Schema.parse(Array(text.utf8), source: "v1.json", expectedVersion: 1))
        defer { store.close() }
        let dir = temporaryDirectory("import-any-key")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("in.ndjson")
        try Data("""
            {"entity":"C","k":"forward","p":{"b":"x"}}
            {"entity":"P","a":"1","b":"x"}
            {"entity":"C","k":"back","p":{"b":"x"}}
            {"entity":"C","k":"to-id","p":{"a":"2"}}
            {"entity":"P","id":"00010000000000000000000000000007","a":"2","b":"y"}

            """.utf8).write(to: url)
        var options = ImportOptions()
        options.mode = mode
        _ = try await Importer(store: store, options: options).run(files: [url.path])
        let context = store.mainContext
        let relationship = try #require(store.schema.entity(named: "C")?.relationship(named: "p"))
        let children = try context.fetch(Query(entity: "C"))
        #expect(children.count == 3)
        for c in children {
            let target = try #require(try context.relatedIDs(relationship, of: c.id).first, "\(c)")
            let p = try #require(try context.record(target))
            #expect(p["a"] == .string(c["k"] == .string("to-id") ? "2" : "1"), "\(c)")
        }
    }

    @Test func rowsReferToEachOtherByTheirSourceKeyAndAReimportConverges() async throws {
        let schema = try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("import-source-keys")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("dump.ndjson")
        try Data("""
            {"entity":"Invoice","pk":98,"total":3.96,"customer":{"pk":2}}
            {"entity":"Invoice","pk":99,"total":1.98,"customer":{"pk":2}}
            {"entity":"Customer","pk":2,"name":"Leonie"}

            """.utf8).write(to: url)
        _ = try await Importer(store: store).run(files: [url.path])
        let last = try store.lastTransactionID
        _ = try await Importer(store: store).run(files: [url.path])
        #expect(try store.lastTransactionID == last, "a re-import of the same rows changed something")
        try store.read { view in
            let customers = try view.fetch(Query(entity: "Customer"))
            #expect(customers.count == 1 && customers.first?["name"] == .string("Leonie"))
            let invoices = try view.fetch(Query(entity: "Invoice"))
            #expect(invoices.count == 2)
            let customer = try #require(schema.entity(named: "Invoice")?.relationship(named: "customer"))
            for invoice in invoices {
                #expect(try view.targets(customer.tag, from: invoice.id) == customers.map(\.id))
            }
        }
    }
}
