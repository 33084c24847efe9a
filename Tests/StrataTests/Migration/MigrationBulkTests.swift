import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The migration's fast paths against the step-by-step ones they replace: the positional
/// transform plan against the name-keyed steps, and the bulk state build against records
/// applied one by one.
@Suite struct MigrationBulkTests {
    func outcome(_ body: () throws -> [Value]) -> String {
        do { return "\(try body())" } catch { return "error: \(error)" }
    }

    @Test func positionalPlanGivesWhatTheStepsGive() throws {
        let s = try labSchemas()
        let hop = try MigrationHop(from: s[0], to: s[1], registry: MigrationRegistry())
        let sample = s[0].entity(named: "Sample")!
        #expect(hop.plans[sample.tag] != nil)
        var compared = 0
        for weight: Value in [.null, .double(2.4), .double(-7.5), .double(.infinity)] {
            for batch: Value in [.null, .int(0), .int(-42)] {
                for gone: Value in [.null, .string("x")] {
                    for kept: Value in [.null, .bool(true)] {
                        let id = ObjectID.make(entityTag: sample.tag)
                        let values: [Value] = [.string("s\(compared)"), weight, batch, gone, kept]
                        let planned = outcome { try hop.transform(id, values) }
                        let stepped = outcome { try hop.transform(id, values, stepByStep: true) }
                        #expect(planned == stepped, "\(values)")
                        compared += 1
                    }
                }
            }
        }
        // The infinite weight fails both ways, with the same message.
        let id = ObjectID.make(entityTag: sample.tag)
        #expect(outcome { try hop.transform(id, [.string("a"), .double(.infinity), .null, .null, .null]) }.contains("does not fit an int"))
        #expect(compared == 48)

        // The library's hop: Track and Album are planned, Artist (a custom step) is not.
        let library = try Schema.loadAll(directory: librarySchemaDirectory)
        let libraryHop = try MigrationHop(from: library[0], to: library[1], registry: libraryMigrations)
        #expect(libraryHop.plans[library[0].entity(named: "Track")!.tag] != nil)
        #expect(libraryHop.plans[library[0].entity(named: "Artist")!.tag] == nil)
        let track = library[0].entity(named: "Track")!
        for attributes in [[], ["title"], ["title", "durationSeconds", "mbid"]] {
            var r = Record(entity: track)
            r["title"] = .string("T")
            r["durationSeconds"] = .int(200)
            r["mbid"] = .uuid(UUID())
            r["addedAt"] = .date(Date(timeIntervalSince1970: 1_700_000_000))
            for a in attributes where a != "title" { r[a] = .null }
            #expect(outcome { try libraryHop.transform(r.id, r.values) } == outcome { try libraryHop.transform(r.id, r.values, stepByStep: true) })
        }
    }

    /// Every key and value of the state databases of `env`.
    func contents(_ env: LMDBEnvironment) throws -> [String: [[UInt8]]] {
        try env.read { txn in
            var out: [String: [[UInt8]]] = [:]
            for name in [DatabaseName.objects, .indexes, .uniques, .links] {
                var all: [[UInt8]] = []
                try txn.scan(env[name], prefix: nil) { k, v in all.append(Array(k) + [0xFF] + Array(v)); return true }
                out[name.rawValue] = all
            }
            return out
        }
    }

    func records(_ schema: Schema, count: Int) -> [Record] {
        let sample = schema.entity(named: "Sample")!
        return (0..<count).map { i in
            var r = Record(entity: sample)
            r["label"] = .string("label \(i * 7919 % count)")
            r["weight"] = i % 5 == 0 ? .null : .double(Double(i % 13) * 1.5)
            r["batch"] = .int(Int64(i % 4))
            r.version = TransactionID(UInt64(i + 1))
            return r
        }.sorted { Layout.precedes($0.id.keyBytes, $1.id.keyBytes) }
    }

    @Test func bulkBuildWritesWhatApplyingOneByOneWrites() throws {
        let dir = temporaryDirectory("bulk")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let schema = try labSchemas()[0]
        let input = records(schema, count: 3_000)
        let applied = try StateRebuilder.scratch(sizeHint: 64 << 20, storeDirectory: dir.path)
        defer { applied.close() }
        try StateApplier.insertAll(input, into: applied, schema: schema)
        let expected = try contents(applied)
        #expect(expected["indexes"]?.count == 6_000 && expected["uniques"]?.count == 3_000)
        // One run, and many small runs (each later run put into what the earlier ones wrote).
        for budget in [BulkStateBuilder.defaultRunBudgetBytes, 4_096] {
            let built = try StateRebuilder.scratch(sizeHint: 64 << 20, storeDirectory: dir.path)
            defer { built.close() }
            var builder = BulkStateBuilder(env: built, schema: schema, runBudgetBytes: budget)
            for r in input { try builder.add(id: r.id, values: r.values, version: r.version) }
            try builder.finish()
            #expect(builder.objectsPerEntity[schema.entity(named: "Sample")!.tag] == 3_000)
            #expect(try contents(built) == expected, "budget \(budget)")
        }
    }

    @Test func bulkBuildRefusesAUniqueClashInOneRunAndAcrossRuns() throws {
        let dir = temporaryDirectory("bulk-clash")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let schema = try labSchemas()[0]
        var input = records(schema, count: 1_000)
        input[900]["label"] = input[3]["label"]
        for budget in [BulkStateBuilder.defaultRunBudgetBytes, 4_096] {
            let built = try StateRebuilder.scratch(sizeHint: 64 << 20, storeDirectory: dir.path)
            defer { built.close() }
            var builder = BulkStateBuilder(env: built, schema: schema, runBudgetBytes: budget)
            do {
                for r in input { try builder.add(id: r.id, values: r.values, version: r.version) }
                try builder.finish()
                Issue.record("a duplicate label passed the unique constraint (budget \(budget))")
            } catch StrataError.validation(let f) {
                #expect(f.kind == .uniqueConstraint && f.entity == "Sample" && f.description.contains(input[3]["label"].description), "\(f)")
            }
        }
        // Out of key order is refused, not written.
        let built = try StateRebuilder.scratch(sizeHint: 64 << 20, storeDirectory: dir.path)
        defer { built.close() }
        var builder = BulkStateBuilder(env: built, schema: schema)
        try builder.add(id: input[1].id, values: input[1].values, version: input[1].version)
        #expect(throws: StrataError.self) { try builder.add(id: input[0].id, values: input[0].values, version: input[0].version) }
    }

    /// History with updates, deletes, links made and removed, and an entity left with no
    /// objects: the bulk-built state agrees with the rewritten log (`verify`).
    @Test func migratedStateAgreesWithTheRewrittenLog() async throws {
        let dir = temporaryDirectory("migrate-bulk")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try [ShopSchemas.v1, ShopSchemas.v2].enumerated().map {
            try Schema.parse(Array($1.utf8), source: "v\($0 + 1).json", expectedVersion: $0 + 1)
        }
        let product = all[0].entity(named: "Product")!, maker = all[0].entity(named: "Maker")!
        let makerOf = product.relationship(named: "maker")!
        var productIDs: [ObjectID] = []
        var makerIDs: [ObjectID] = []
        do {
            let store = try Store.open(at: dir, schema: all[0])
            for round in 0..<4 {
                _ = try await store.save { c in
                    var m = Record(entity: maker)
                    m["name"] = .string("Maker \(round)")
                    c.insert(m)
                    makerIDs.append(m.id)
                    for i in 0..<50 {
                        var p = Record(entity: product)
                        p["code"] = .string("C\(round)-\(i)")
                        p["title"] = .string("Title \(round)-\(i)")
                        p["price"] = .double(Double(i) + 0.4)
                        p["fullName"] = .string("First\(i) Last\(round)")
                        c.insert(p)
                        c.link(makerOf, from: p.id, to: m.id)
                        productIDs.append(p.id)
                    }
                }
            }
            for (n, id) in productIDs.enumerated() where n % 3 == 0 {
                _ = try await store.save { $0.update(id, [ChangeSet.AttributeValue(attribute: 2, value: .double(Double(n) * 2.6))]) }
            }
            _ = try await store.save { c in
                for id in productIDs[0..<50] { c.unlink(makerOf, from: id, to: makerIDs[0]); c.link(makerOf, from: id, to: makerIDs[1]) }
            }
            _ = try await store.save { c in for id in productIDs[150..<200] { c.unlink(makerOf, from: id, to: makerIDs[3]); c.delete(id) } }
            _ = try await store.save { $0.delete(makerIDs[3]) }
            store.close()
        }
        let report = try await Store.migrate(at: dir, schemas: all, registry: ShopSchemas.registry)
        #expect(report.objects == 150 + 3)
        let store = try Store.open(at: dir, schema: all[1])
        defer { store.close() }
        #expect(try store.verify().ok)
        #expect(try store.verify(rebuild: true).ok)
        let view = store.mainContext
        let item = all[1].entity(named: "Item")!
        #expect(try view.count(Query(entity: "Item")) == 150)
        #expect(try view.relatedIDs(item.relationship(named: "brand")!, of: productIDs[0]) == [makerIDs[1]])
        #expect(try view.record(productIDs[3])?["price"] == .int(8))
        #expect(try view.record(productIDs[160]) == nil)
    }

    /// A link whose inverse entry is gone (a flipped bit in an id) is refused by a migration, the
    /// store left at its version: it was carried into the new generation as it was.
    @Test func aLinkWithoutItsInverseIsNotCarriedOver() async throws {
        let dir = temporaryDirectory("migrate-damaged-link")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try [ShopSchemas.v1, ShopSchemas.v2].enumerated().map {
            try Schema.parse(Array($1.utf8), source: "v\($0 + 1).json", expectedVersion: $0 + 1)
        }
        let product = all[0].entity(named: "Product")!, maker = all[0].entity(named: "Maker")!
        let makerOf = product.relationship(named: "maker")!
        do {
            let store = try Store.open(at: dir, schema: all[0])
            var m = Record(entity: maker)
            m["name"] = .string("Maker")
            var p = Record(entity: product)
            p["code"] = .string("C")
            p["title"] = .string("Title")
            p["price"] = .double(1.5)
            p["fullName"] = .string("First Last")
            _ = try await store.save { c in
                c.insert(m)
                c.insert(p)
                c.link(makerOf, from: p.id, to: m.id)
            }
            try store.env.write { txn in
                let key = Layout.linkKey(makerOf.tag, p.id, m.id)
                #expect(try txn.delete(store.env[.links], key: key))
                var flipped = key
                flipped[20] ^= 0x01
                try txn.put(store.env[.links], key: flipped, value: [])
            }
            store.close()
        }
        await #expect {
            _ = try await Store.migrate(at: dir, schemas: all, registry: ShopSchemas.registry)
        } throws: { error in
            guard case StrataError.corruptRecord(_, let reason) = error else { return false }
            return reason.contains("has no inverse entry")
        }
        let store = try Store.openReadOnly(at: dir)
        defer { store.close() }
        #expect(store.schema.version == 1)
    }

    /// Two objects shared a value of a newly unique attribute only in the past (the second was
    /// renamed later): the rewritten log could not be replayed, so the migration is refused, as
    /// it was when the state was built by replaying it.
    @Test func aUniqueClashInHistoryOnlyIsRefused() async throws {
        let dir = temporaryDirectory("migrate-history-clash")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try [ShopSchemas.v1, ShopSchemas.v2].enumerated().map {
            try Schema.parse(Array($1.utf8), source: "v\($0 + 1).json", expectedVersion: $0 + 1)
        }
        let product = all[0].entity(named: "Product")!
        do {
            let store = try Store.open(at: dir, schema: all[0])
            var ids: [ObjectID] = []
            _ = try await store.save { c in
                for (i, title) in ["Lamp", "Lamp"].enumerated() {
                    var p = Record(entity: product)
                    p["code"] = .string("P\(i)")
                    p["title"] = .string(title)
                    p["price"] = .double(1)
                    c.insert(p)
                    ids.append(p.id)
                }
            }
            _ = try await store.save { $0.update(ids[1], [ChangeSet.AttributeValue(attribute: 1, value: .string("Desk"))]) }
            store.close()
        }
        do {
            _ = try await Store.migrate(at: dir, schemas: all, registry: ShopSchemas.registry)
            Issue.record("a unique clash in the history passed")
        } catch StrataError.validation(let f) {
            #expect(f.kind == .uniqueConstraint && f.entity == "Item" && f.description.contains("Lamp"), "\(f)")
        }
        #expect(try Store.migrationStatus(at: dir, schemas: all) == .needsMigration(from: 1, to: 2, steps: all[1].migrationSteps.map { "v2: \($0.summary)" }))
        let store = try Store.openReadOnly(at: dir)
        defer { store.close() }
        #expect(try store.verify().ok)
    }

    /// Only uniques a migration can change are tracked through the history.
    @Test func uniquesCarriedOverUnchangedAreNotTrackedAgain() throws {
        let dir = temporaryDirectory("checked-uniques")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let library = try Schema.loadAll(directory: librarySchemaDirectory)
        let env = try StateRebuilder.scratch(sizeHint: 16 << 20, storeDirectory: dir.path)
        defer { env.close() }
        let libraryUpcaster = try Upcaster(old: library[0], new: library[1],
                                           hops: [try MigrationHop(from: library[0], to: library[1], registry: libraryMigrations)], newEnv: env)
        defer { libraryUpcaster.close() }
        // Track's unique mbid is the same attribute, unconverted; Artist has a custom step.
        #expect(libraryUpcaster.checkedUniques[library[0].entity(named: "Track")!.tag] == nil)
        #expect(libraryUpcaster.checkedUniques[library[0].entity(named: "Artist")!.tag] != nil)
        let lab = try labSchemas()
        let labUpcaster = try Upcaster(old: lab[0], new: lab[1], hops: [try MigrationHop(from: lab[0], to: lab[1], registry: MigrationRegistry())], newEnv: env)
        defer { labUpcaster.close() }
        // label → name: renamed, not converted, so the old constraint covered it.
        #expect(labUpcaster.checkedUniques.isEmpty)

        // Keys copied rather than rebuilt: Track's title and duration indexes and its mbid
        // unique (same tags, same attributes); not the new addedAt index, nothing of Artist.
        let track1 = library[0].entity(named: "Track")!, track2 = library[1].entity(named: "Track")!
        let carried = libraryUpcaster.carriedKeyTags()
        #expect(carried.indexes.isSuperset(of: track1.indexes.map(\.tag)))
        #expect(!carried.indexes.contains(track2.indexes[2].tag))
        #expect(carried.uniques.contains(track2.uniques[0].tag))
        #expect(library[1].entity(named: "Artist")!.indexes.allSatisfy { !carried.indexes.contains($0.tag) })
        // The lab's unique label → name is carried; its index (batch, label) → (batch, name) is
        // not (batch is converted).
        let labCarried = labUpcaster.carriedKeyTags()
        #expect(labCarried.uniques == Set(lab[1].entity(named: "Specimen")!.uniques.map(\.tag)))
        #expect(labCarried.indexes.isEmpty)
    }

    /// A migration that copies some keys and rebuilds others agrees with its rewritten log.
    @Test func carriedAndRebuiltKeysAgreeWithTheRewrittenLog() async throws {
        let dir = temporaryDirectory("migrate-carried")
        defer { try? FileManager.default.removeItem(at: dir) }
        let lab = try labSchemas()
        let sample = lab[0].entity(named: "Sample")!
        var ids: [ObjectID] = []
        do {
            let store = try Store.open(at: dir, schema: lab[0])
            for round in 0..<3 {
                _ = try await store.save { c in
                    for i in 0..<400 {
                        var r = Record(entity: sample)
                        r["label"] = .string("s\(round)-\(i)")
                        r["weight"] = i % 7 == 0 ? .null : .double(Double(i) / 3)
                        r["batch"] = .int(Int64(i % 5))
                        c.insert(r)
                        ids.append(r.id)
                    }
                }
            }
            _ = try await store.save { c in for id in ids[0..<100] { c.delete(id) } }
            _ = try await store.save { $0.update(ids[500], [ChangeSet.AttributeValue(attribute: 0, value: .string("renamed"))]) }
            store.close()
        }
        _ = try await Store.migrate(at: dir, schemas: lab)
        let store = try Store.open(at: dir, schema: lab[1])
        defer { store.close() }
        let rebuilt = try store.verify(rebuild: true)
        #expect(rebuilt.ok, "\(rebuilt.problems)")
        #expect(try store.verify().ok)
        let view = store.mainContext
        #expect(try view.count(Query(entity: "Specimen")) == 1_100)
        // The carried unique finds the renamed object; the rebuilt index serves a query on batch.
        #expect(try view.fetch(Query(entity: "Specimen", predicate: .compare(attribute: 0, .equal, .string("renamed")))).map(\.id) == [ids[500]])
        #expect(try view.count(Query(entity: "Specimen", predicate: .compare(attribute: 2, .equal, .string("3")))) == 220)
    }

    @Test func aRelationshipThatChangesItsInverseIsRefused() throws {
        func model(_ version: Int, xInverse: String, zInverse: String) -> String {
            """
            {"model":"pairs","version":\(version),"entities":[
              {"name":"A","attributes":[{"name":"n","type":"int"}],
               "relationships":[{"name":"x","destination":"B","inverse":"\(xInverse)"},{"name":"z","destination":"B","inverse":"\(zInverse)"}]},
              {"name":"B","attributes":[{"name":"n","type":"int"}],
               "relationships":[{"name":"y","destination":"A","toMany":true,"inverse":"\(xInverse == "y" ? "x" : "z")"},
                                {"name":"w","destination":"A","toMany":true,"inverse":"\(xInverse == "y" ? "z" : "x")"}]}
            ]\(version > 1 ? ",\"migration\":{\"steps\":[]}" : "")}
            """
        }
        let v1 = try Schema.parse(Array(model(1, xInverse: "y", zInverse: "w").utf8), source: "v1.json", expectedVersion: 1)
        let same = try Schema.parse(Array(model(2, xInverse: "y", zInverse: "w").utf8), source: "v2.json", expectedVersion: 2)
        let swapped = try Schema.parse(Array(model(2, xInverse: "w", zInverse: "y").utf8), source: "v2.json", expectedVersion: 2)
        _ = try MigrationHop(from: v1, to: same, registry: MigrationRegistry())
        do {
            _ = try MigrationHop(from: v1, to: swapped, registry: MigrationRegistry())
            Issue.record("swapped inverses were accepted")
        } catch let e as SchemaError {
            #expect(e.description.contains("inverse"), "\(e)")
        }
    }
}
