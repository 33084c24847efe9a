import Foundation
import Testing
@testable import Strata

/// A link of a many-to-many relationship to a record later in the input is saved with that
/// record, in its batch, after the batch's records; other links to later records (a to-one, or a
/// to-many whose inverse is to-one) are saved at the end, where they may displace a partner.
/// Either way the store is the one the input describes, on every path.
@Suite struct ImportForwardLinkTests {
    private var catalogSchema: URL { repositoryRoot.appendingPathComponent("Schemas/catalog") }

    private func withCatalogStore<R>(_ body: (Store) async throws -> R) async throws -> R {
        let store = try Store.temporary(schema: try Schema.load(directory: catalogSchema))
        defer { store.close() }
        return try await body(store)
    }

    private func options(_ mode: ImportMode, oneTransaction: Bool) -> ImportOptions {
        var o = ImportOptions()
        o.mode = mode
        o.batchSize = 1
        if !oneTransaction { o.oneTransactionMaxInputBytes = 0 }
        return o
    }

    /// The package named `name`'s targets through `relationship`, by name, as `reader` shows them.
    private func targets(_ reader: some ObjectReading, _ name: String, _ relationship: String) throws -> [String] {
        let schema = reader.schema
        let package = try #require(schema.entity(named: "Package"))
        let r = try #require(package.relationship(named: relationship))
        let nameIndex = try #require(package.attribute(named: "name")).index
        let all = try reader.fetch(Query(entity: "Package"))
        guard let record = all.first(where: { $0.values[nameIndex] == .string(name) }) else { return [] }
        let byID = Dictionary(uniqueKeysWithValues: all.map { ($0.id, $0.values[nameIndex]) })
        return try reader.relatedIDs(r, of: record.id).compactMap { id -> String? in
            guard case .string(let s)? = byID[id] else { return nil }
            return s
        }.sorted()
    }

    /// `a` depends on `b` and `c`, both later in the input; batches of one record. The links are
    /// saved in the batches of `b` and `c` (no transaction of links at the end), so the store
    /// after `b`'s batch already shows `a` depending on `b`; every mode, in one transaction or
    /// committed batch by batch.
    @Test(arguments: [(ImportMode.incremental, false), (.incremental, true), (.bulk, false)])
    func aManyToManyLinkToALaterRecordIsSavedWithThatRecord(mode: ImportMode, oneTransaction: Bool) async throws {
        let dir = temporaryDirectory("import-forward-link")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try writeInput([
            #"{"entity":"Package","name":"a","version":"1","installedSize":1,"depends":[{"name":"b"},{"name":"c"}]}"#,
            #"{"entity":"Package","name":"b","version":"1","installedSize":1}"#,
            #"{"entity":"Package","name":"c","version":"1","installedSize":1}"#,
        ], in: dir)
        try await withCatalogStore { store in
            let summary = try await Importer(store: store, options: options(mode, oneTransaction: oneTransaction))
                .run(files: [input])
            #expect(summary.records == 3)
            #expect(summary.mode == mode)
            // One transaction a batch, none for links at the end.
            #expect(summary.transactions == 3, "\(summary)")
            #expect(try targets(store.mainContext, "a", "depends") == ["b", "c"])
            #expect(try targets(store.mainContext, "b", "dependents") == ["a"])
            #expect(try targets(store.mainContext, "c", "dependents") == ["a"])
            let first = try #require(summary.firstTransaction)
            let afterB = try store.snapshot(asOf: TransactionID(first.rawValue + 1))
            defer { afterB.close() }
            #expect(try targets(afterB, "a", "depends") == ["b"], "the link to b is in b's batch")
            #expect(try store.verify().ok)
        }
    }

    /// The target's own record clears the relationship the link comes in by (`"dependents": []`
    /// on `b`): its batch clears it first, then saves the links that waited for it, as the end
    /// did: `a` still depends on `b`. A to-one to a later record (`section`) waits for the end.
    @Test func aLaterRecordClearingItsSideKeepsTheLinkThatWaitedForIt() async throws {
        let dir = temporaryDirectory("import-forward-link-clear")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try writeInput([
            #"{"entity":"Package","name":"a","version":"1","installedSize":1,"depends":[{"name":"b"}],"section":{"name":"s"}}"#,
            #"{"entity":"Package","name":"b","version":"1","installedSize":1,"dependents":[]}"#,
            #"{"entity":"Section","name":"s"}"#,
        ], in: dir)
        for mode in [ImportMode.incremental, .bulk] {
            try await withCatalogStore { store in
                let summary = try await Importer(store: store, options: options(mode, oneTransaction: false))
                    .run(files: [input])
                #expect(summary.records == 3)
                // Three batches and one transaction of links at the end: the section's.
                #expect(summary.transactions == 4, "\(mode): \(summary)")
                #expect(try targets(store.mainContext, "a", "depends") == ["b"], "\(mode)")
                #expect(try targets(store.mainContext, "b", "dependents") == ["a"], "\(mode)")
                let package = try #require(store.schema.entity(named: "Package"))
                let section = try #require(package.relationship(named: "section"))
                let a = try #require(try store.mainContext.fetch(Query(entity: "Package")).first {
                    $0.values[0] == .string("a")
                })
                #expect(try store.mainContext.relatedIDs(section, of: a.id).count == 1, "\(mode)")
                #expect(try store.verify().ok)
            }
        }
    }
}
