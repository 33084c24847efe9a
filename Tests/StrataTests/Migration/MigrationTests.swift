import Foundation
import LibraryModel
import Testing
@testable import Strata

@Suite struct MigrationTests {
    func schemas(_ texts: [String]) throws -> [Schema] {
        try texts.enumerated().map { try Schema.parse(Array($1.utf8), source: "v\($0 + 1).json", expectedVersion: $0 + 1) }
    }

    /// The error a migration of the store at `dir` to `all` is refused with (an issue recorded,
    /// and "", when it is not refused).
    func refusal(_ dir: URL, _ all: [Schema], dryRun: Bool = false,
                 sourceLocation: SourceLocation = #_sourceLocation) async -> String {
        do {
            _ = try await Store.migrate(at: dir, schemas: all, dryRun: dryRun)
            Issue.record("the migration was not refused", sourceLocation: sourceLocation)
            return ""
        } catch {
            return "\(error)"
        }
    }

    /// Plans a migration refuses before anything is built, each with its reason: an attribute
    /// removed while an index still uses it, an index added twice, a custom step not registered,
    /// an entity added, and a relationship moved to another entity (its destination and its
    /// inverse's owner changed).
    @Test(arguments: [
        (#"{"name":"Item","attributes":[{"name":"k","type":"int"}],"relationships":[{"name":"owner","destination":"Owner","inverse":"items","optional":true}],"indexes":[]}"#
            + #",{"name":"Owner","attributes":[{"name":"n","type":"string"}],"relationships":[{"name":"items","destination":"Item","inverse":"owner","toMany":true}]}"#,
         #"{"op":"removeAttribute","entity":"Item","attribute":"n"}"#, "remove the indexes and uniques on Item.n first"),
        (#"{"name":"Item","attributes":[{"name":"k","type":"int"},{"name":"n","type":"string"}],"relationships":[{"name":"owner","destination":"Owner","inverse":"items","optional":true}],"indexes":[["n"]]}"#
            + #",{"name":"Owner","attributes":[{"name":"n","type":"string"}],"relationships":[{"name":"items","destination":"Item","inverse":"owner","toMany":true}]}"#,
         #"{"op":"addIndex","entity":"Item","attributes":["n"]}"#, "Item already has that index"),
        (#"{"name":"Item","attributes":[{"name":"k","type":"int"},{"name":"n","type":"string"}],"relationships":[{"name":"owner","destination":"Owner","inverse":"items","optional":true}],"indexes":[["n"]]}"#
            + #",{"name":"Owner","attributes":[{"name":"n","type":"string"}],"relationships":[{"name":"items","destination":"Item","inverse":"owner","toMany":true}]}"#,
         #"{"op":"custom","entity":"Item","name":"nowhere"}"#, "custom step 'nowhere' is not registered"),
        (#"{"name":"Item","attributes":[{"name":"k","type":"int"},{"name":"n","type":"string"}],"relationships":[{"name":"owner","destination":"Owner","inverse":"items","optional":true}],"indexes":[["n"]]}"#
            + #",{"name":"Owner","attributes":[{"name":"n","type":"string"}],"relationships":[{"name":"items","destination":"Item","inverse":"owner","toMany":true}]}"#
            + #",{"name":"Extra","attributes":[{"name":"x","type":"int"}]}"#,
         "", "after the steps the entities are Item, Owner"),
        (#"{"name":"Item","attributes":[{"name":"k","type":"int"},{"name":"n","type":"string"}],"relationships":[{"name":"owner","destination":"Item","inverse":"items","optional":true},{"name":"items","destination":"Item","inverse":"owner","toMany":true}],"indexes":[["n"]]}"#
            + #",{"name":"Owner","attributes":[{"name":"n","type":"string"}],"relationships":[]}"#,
         "", "after the steps the relationships are owner; v2 declares items, owner"),
    ])
    func aPlanTheStepsCannotMakeIsRefusedWithItsReason(entities: String, step: String, reason: String) async throws {
        let dir = temporaryDirectory("refused-plan")
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = #"{"model":"m","version":1,"entities":[{"name":"Item","attributes":[{"name":"k","type":"int"},"#
            + #"{"name":"n","type":"string"}],"relationships":[{"name":"owner","destination":"Owner","inverse":"items","optional":true}],"#
            + #""indexes":[["n"]]},{"name":"Owner","attributes":[{"name":"n","type":"string"}],"#
            + #""relationships":[{"name":"items","destination":"Item","inverse":"owner","toMany":true}]}]}"#
        let v2 = #"{"model":"m","version":2,"entities":["# + entities + #"],"migration":{"steps":["# + step + "]}}"
        let all = try schemas([v1, v2])
        try Store.open(at: dir, schema: all[0]).close()
        let refused = await refusal(dir, all, dryRun: true)
        #expect(refused.contains(reason), "\(refused)")
    }

    /// A plan whose steps leave other indexes or uniques than the new version declares names
    /// them (it said only that they differ); a migration given no schema of the store's own
    /// version says so (it said that version's schema differs from the store's).
    @Test func aPlanNamesTheIndexesItsStepsMissAndAMissingFirstVersionIsNamed() async throws {
        let dir = temporaryDirectory("index-mismatch")
        defer { try? FileManager.default.removeItem(at: dir) }
        let attributes = #""attributes":[{"name":"k","type":"int"},{"name":"n","type":"string"}]"#
        let v1 = #"{"model":"m","version":1,"entities":[{"name":"Item","# + attributes
            + #","indexes":[["n"]],"uniques":[["k"]]}]}"#
        let v2 = #"{"model":"m","version":2,"entities":[{"name":"Item","# + attributes
            + #","indexes":[["k","n"]],"uniques":[]}],"migration":{"steps":[]}}"#
        let all = try schemas([v1, v2])
        try Store.open(at: dir, schema: all[0]).close()
        let indexes = await refusal(dir, all)
        #expect(indexes.contains("declares [k, n] the steps do not add, and the steps leave [n] it does not declare"),
                "\(indexes)")
        let v2Unique = v2.replacingOccurrences(of: #""indexes":[["k","n"]]"#, with: #""indexes":[["n"]]"#)
        let uniques = await refusal(dir, try schemas([v1, v2Unique]))
        #expect(uniques.contains("unique constraints after the steps differ from v2's: v2 declares none the steps do not add, and the steps leave [k] it does not declare"),
                "\(uniques)")
        let missing = await refusal(dir, [all[1]])
        #expect(missing.contains("no m schema v1 among the given versions"), "\(missing)")
    }

    /// An optional attribute that becomes required with a default takes the default wherever it
    /// had no value, in the state and in every version the log keeps, and its index is rebuilt
    /// with it; a unique over it that the default fills twice is refused, nothing migrated.
    @Test(arguments: [false, true])
    func anAttributeMadeRequiredWithADefaultTakesItWhereItHadNoValue(unique: Bool) async throws {
        let dir = temporaryDirectory("required-with-default")
        defer { try? FileManager.default.removeItem(at: dir) }
        let keys = unique ? #""uniques":[["note"]]"# : #""indexes":[["note"]]"#
        let k = #"{"name":"k","type":"int"}"#
        let v1 = #"{"model":"m","version":1,"entities":[{"name":"Item","attributes":["# + k
            + #",{"name":"note","type":"string","optional":true}],"# + keys + "}]}"
        let v2 = #"{"model":"m","version":2,"entities":[{"name":"Item","attributes":["# + k
            + #",{"name":"note","type":"string","default":"n/a"}],"# + keys + #"}],"migration":{"steps":[]}}"#
        let all = try schemas([v1, v2])
        let item = try #require(all[0].entity(named: "Item"))
        func make(_ k: Int64, _ note: String?) -> Record {
            var r = Record(entity: item)
            r["k"] = .int(k)
            r["note"] = note.map { .string($0) } ?? .null
            return r
        }
        let (bare, noted, later) = (make(1, nil), make(2, "x"), make(3, nil))
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            _ = try await store.save { $0.insert(bare); $0.insert(noted) }
            // Given a value later: its first version in the log has none.
            _ = try await store.save { $0.insert(later) }
            _ = try await store.save { $0.update(later.id, [ChangeSet.AttributeValue(attribute: 1, value: .string("y"))]) }
        }
        if unique {
            // `bare` and `later`'s first version would both hold "n/a".
            let refused = await refusal(dir, all)
            #expect(refused.contains("unique") && refused.contains("n/a"), "\(refused)")
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            #expect(store.schema.version == 1)
            return
        }
        _ = try await Store.migrate(at: dir, schemas: all)
        let store = try Store.open(at: dir, schema: all[1])
        defer { store.close() }
        let notes = try [bare, noted, later].map { try store.mainContext.record($0.id)?["note"] }
        #expect(notes == [.string("n/a"), .string("x"), .string("y")])
        #expect(try store.snapshot(asOf: TransactionID(2)).record(later.id)?["note"] == .string("n/a"))
        #expect(try store.mainContext.fetch(Query(entity: "Item", predicate: .compare(attribute: 1, .equal, .string("n/a")))).map(\.id) == [bare.id])
        #expect(try store.verify().ok)
    }

    /// A v1 store with two makers and three products, edited over several transactions.
    func populated(_ dir: URL, titles: [String] = ["Lamp", "Desk", "Chair"]) async throws -> [ObjectID] {
        let s = try schemas([ShopSchemas.v1])[0]
        let store = try Store.open(at: dir, schema: s)
        defer { store.close() }
        let product = s.entity(named: "Product")!, maker = s.entity(named: "Maker")!
        var m = Record(entity: maker)
        m["name"] = .string("Acme")
        var ids: [ObjectID] = []
        _ = try await store.save { c in
            c.insert(m)
            for (i, t) in titles.enumerated() {
                var p = Record(entity: product)
                p["code"] = .string("P\(i)")
                p["title"] = .string(t)
                p["price"] = .double(9.6 + Double(i))
                p["stock"] = i == 0 ? .null : .int(Int64(i * 10))
                p["legacy"] = .bool(true)
                p["fullName"] = .string("Ada Lovelace \(i)")
                c.insert(p)
                c.link(product.relationship(named: "maker")!, from: p.id, to: m.id)
                ids.append(p.id)
            }
        }
        _ = try await store.save { $0.update(ids[1], [ChangeSet.AttributeValue(attribute: 2, value: .double(20.4))]) }
        _ = try await store.save { $0.update(ids[2], [ChangeSet.AttributeValue(attribute: 5, value: .string("Grace Hopper"))]) }
        return ids
    }

    @Test func everyStepKindAndReplayAcrossTheBoundary() async throws {
        let dir = temporaryDirectory("migrate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ids = try await populated(dir)
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2])
        #expect(try Store.migrationStatus(at: dir, schemas: all) == .needsMigration(from: 1, to: 2, steps: all[1].migrationSteps.map { "v2: \($0.summary)" }))
        let report = try await Store.migrate(at: dir, schemas: all, registry: ShopSchemas.registry)
        #expect(report.from == 1 && report.to == 2 && report.objects == 4 && report.transactionsUpcast == 3)
        #expect(report.migrationTransaction == TransactionID(4))
        #expect(try Store.migrationStatus(at: dir, schemas: all) == .upToDate(version: 2))

        let store = try Store.open(at: dir, schema: all[1])
        defer { store.close() }
        let view = store.mainContext
        let item = all[1].entity(named: "Item")!
        let r1 = try #require(try view.record(ids[1]))
        #expect(r1.entity.name == "Item" && r1["name"] == .string("Desk") && r1["price"] == .int(20) && r1["views"] == .int(7))
        #expect(r1["first"] == .string("Ada") && r1["last"] == .string("Lovelace 1"))
        let r2 = try #require(try view.record(ids[2]))
        #expect(r2["first"] == .string("Grace") && r2["last"] == .string("Hopper"))
        // The renamed relationship, both ways; the added index serves a query.
        let brand = try #require(item.relationship(named: "brand"))
        #expect(try view.relatedIDs(brand, of: ids[0]).count == 1)
        #expect(try view.count(Query(entity: "Item", predicate: .compare(attribute: 3, .greaterOrEqual, .int(10)))) == 2)
        #expect(try store.verify().ok)
        // Replay across the boundary reads old transactions in the new schema.
        let past = try store.snapshot(asOf: TransactionID(1))
        let old = try #require(try past.record(ids[1]))
        #expect(old["price"] == .int(11) && old["first"] == .string("Ada") && old.entity.name == "Item")
        let marker = try store.changes(in: TransactionID(4))
        #expect(marker.author == "migration" && marker.metadata["migrationFrom"] == "1" && marker.metadata["migrationTo"] == "2")
        let history = try store.history(of: ids[1])
        #expect(history.map(\.transactionID.rawValue) == [1, 2])
        // New saves continue after the marker.
        #expect(try await store.save { $0.update(ids[0], [ChangeSet.AttributeValue(attribute: 3, value: .int(1))]) } == TransactionID(5))
    }

    /// A log that does not hold every transaction after the horizon (a horizon past its last
    /// entry, or an entry missing) is refused as a damaged store before anything is built: the
    /// store stays as it was, with no generation left behind. (A horizon past the head trapped
    /// in the middle of the migration, its new generation made.)
    @Test(arguments: ["horizon past the head", "entry missing"])
    func aLogWithoutEveryTransactionAfterTheHorizonIsNotMigrated(damage: String) async throws {
        let dir = temporaryDirectory("migrate-damaged-log")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await populated(dir)
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2])
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            let env = store.env
            try env.write { txn in
                if damage == "entry missing" {
                    #expect(try txn.delete(env[.log], key: TransactionID(2).keyBytes))
                } else {
                    try txn.put(env[.meta], key: MetaKey.horizon, value: TransactionID(25).keyBytes)
                }
            }
        }
        let generationsBefore = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("gen-") }
        await #expect {
            _ = try await Store.migrate(at: dir, schemas: all, registry: ShopSchemas.registry)
        } throws: { error in
            guard case StrataError.damagedStore(_, let reason) = error else { return false }
            return damage == "entry missing"
                ? reason.contains("the log holds 2 entries for the 3 transactions after the horizon 0 up to 3")
                : reason.contains("the compaction horizon 25 is past the log's last transaction, 3")
        }
        let generationsAfter = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("gen-") }
        #expect(generationsAfter == generationsBefore)
        #expect(try Store.migrationStatus(at: dir, schemas: all) == .needsMigration(
            from: 1, to: 2, steps: all[1].migrationSteps.map { "v2: \($0.summary)" }))
    }

    /// The status check compares the given schema of the store's version with the one the store
    /// holds: an edited file of that version is refused as `migrate` refuses it (it answered
    /// "needs migration" for an edited v1, and "up to date" for an edited v2, which the app could
    /// not open the store with).
    @Test func aStatusCheckRefusesAnEditedSchemaOfTheStoresVersion() async throws {
        let dir = temporaryDirectory("migrate-status-edited")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await populated(dir)
        let edit = { (text: String) in
            text.replacingOccurrences(of: #"{"name":"Maker","attributes":[{"name":"name","type":"string"}"#,
                                      with: #"{"name":"Maker","attributes":[{"name":"name","type":"string"},{"name":"extra","type":"string","optional":true}"#)
        }
        #expect(edit(ShopSchemas.v1) != ShopSchemas.v1)
        func refused(_ all: [Schema], _ version: Int) {
            #expect {
                _ = try Store.migrationStatus(at: dir, schemas: all)
            } throws: { error in
                "\(error)".contains("the given v\(version) schema differs from the one the store holds")
            }
        }
        refused(try schemas([edit(ShopSchemas.v1), ShopSchemas.v2]), 1)
        _ = try await Store.migrate(at: dir, schemas: try schemas([ShopSchemas.v1, ShopSchemas.v2]), registry: ShopSchemas.registry)
        let v2 = ShopSchemas.v2.replacingOccurrences(of: #"{"name":"views","type":"int","default":7}"#,
                                                     with: #"{"name":"views","type":"int","default":8}"#)
        #expect(v2 != ShopSchemas.v2)
        refused(try schemas([ShopSchemas.v1, v2]), 2)
        #expect(try Store.migrationStatus(at: dir, schemas: try schemas([ShopSchemas.v1, ShopSchemas.v2])) == .upToDate(version: 2))
    }

    @Test func chainV1ToV3() async throws {
        let dir = temporaryDirectory("migrate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ids = try await populated(dir)
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2, ShopSchemas.v3])
        let report = try await Store.migrate(at: dir, schemas: all, registry: ShopSchemas.registry)
        #expect(report.from == 1 && report.to == 3)
        let store = try Store.open(at: dir, schema: all[2])
        defer { store.close() }
        #expect(try store.mainContext.record(ids[1])?["price"] == .string("20"))
        #expect(try store.verify().ok)
    }

    /// Another process that opens the store during a migration's catch-up, commits and closes
    /// before the switch would have its acknowledged import left behind in the old generation.
    /// The migration holds the store's lock exclusive from the catch-up's read to the switch, so
    /// that process waits and imports into the migrated store. (The lock was taken at the
    /// switch only.)
    @Test(.timeLimit(.minutes(15))) func anotherProcesssImportDuringTheCatchUpIsNotLeftBehind() async throws {
        let dir = temporaryDirectory("migrate-catch-up-other-process")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await populated(dir)
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2])
        let input = dir.deletingLastPathComponent().appendingPathComponent(dir.lastPathComponent + "-maker.ndjson")
        defer { try? FileManager.default.removeItem(at: input) }
        // Maker has no unique key: the line names its id, as an export's lines do.
        let other = ObjectID.make(entityTag: try #require(all[0].entity(named: "Maker")).tag)
        try Data(#"{"entity": "Maker", "id": "\#(other)", "name": "Other"}"#.utf8).write(to: input)
        let store = try Store.open(at: dir, schema: all[0])
        defer { store.close() }
        let child = Locked<ChildProcess?>(nil)
        let storePath = store.path
        Store.beforeSwitchForTesting.withLock { hook in
            hook[storePath] = {
                guard let p = try? ChildProcess.start(storectlPath, ["import", storePath, input.path, "--quiet"]) else { return }
                child.withLock { $0 = p }
                // Until the import ran to its end (the defect) or waits for the store's lock (the fix).
                _ = waitUntilExitedOrBlockedOnALock(p)
            }
        }
        do {
            defer { Store.beforeSwitchForTesting.withLock { $0[storePath] = nil } }
            _ = try await store.migrate(schemas: all, registry: ShopSchemas.registry)
        }
        let importer = try #require(child.withLock { $0 }, "the import was started")
        let ended = try await importer.finished()
        #expect(ended == Termination(exited: true, code: 0), "the import failed: \(ended)")
        store.close()
        let migrated = try Store.open(at: dir, schema: all[1])
        defer { migrated.close() }
        let makers = try migrated.mainContext.fetch(Query(entity: "Maker"))
        #expect(Set(makers.compactMap { $0["name"] }) == [.string("Acme"), .string("Other")])
        #expect(try migrated.verify().ok)
    }

    /// An instance that migrated the store is retired: its live queries and change streams end,
    /// and `migrationStatus` answers for the store, not for the instance's old schema. (They
    /// never ended: nothing triggered them again; the status said the store needed migrating.)
    @Test(.timeLimit(.minutes(15))) func anInstanceThatMigratedEndsItsLiveQueriesAndStreamsAndReportsTheNewVersion() async throws {
        let dir = temporaryDirectory("migrate-retires-instance")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await populated(dir)
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2])
        let store = try Store.open(at: dir, schema: all[0])
        defer { store.close() }
        let live = Collector(store.mainContext.observe(Query(entity: "Product")))
        defer { live.cancel() }
        #expect(try await live.wait(for: 1).first?.records.count == 3)
        let stream = Collector(store.changes())
        defer { stream.cancel() }
        // A pinned context's snapshot would still read the old generation: its live query ends too.
        let pinned = Collector(try store.newViewContext(label: "pinned").observe(Query(entity: "Product")))
        defer { pinned.cancel() }
        #expect(try await pinned.wait(for: 1).first?.records.count == 3)
        _ = try await store.migrate(schemas: all, registry: ShopSchemas.registry)
        #expect(try await live.waitUntilFinished(seconds: 60), "the live query ended")
        #expect(try await pinned.waitUntilFinished(), "the pinned context's live query ended")
        #expect(try await stream.waitUntilFinished(seconds: 60), "the change stream ended")
        let later = Collector(store.changes())
        #expect(try await later.waitUntilFinished(seconds: 60), "a change stream asked for after the migration ends")
        let status = try Store.migrationStatus(at: dir, schemas: all)
        guard case .upToDate(let version) = status else {
            Issue.record("status after the migration: \(status)")
            return
        }
        #expect(version == 2)
    }

    @Test func uniqueConstraintViolatedByExistingDataLeavesTheStoreUnchanged() async throws {
        let dir = temporaryDirectory("migrate")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await populated(dir, titles: ["Lamp", "Lamp", "Desk"])
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2])
        do {
            _ = try await Store.migrate(at: dir, schemas: all, registry: ShopSchemas.registry)
            Issue.record("duplicate names passed a new unique constraint")
        } catch StrataError.validation(let f) {
            #expect(f.kind == .uniqueConstraint && f.entity == "Item" && f.description.contains("Lamp"))
        }
        #expect(try Store.migrationStatus(at: dir, schemas: all) == .needsMigration(from: 1, to: 2, steps: all[1].migrationSteps.map { "v2: \($0.summary)" }))
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("gen-") }
        #expect(names.count == 1)
        let store = try Store.openReadOnly(at: dir)
        defer { store.close() }
        #expect(store.schema.version == 1)
        #expect(try store.verify().ok)
    }

    /// A value that does not convert, or a unique clash, met only in the log (the current state
    /// no longer shows it) names the transaction of the log it is in: the user could not find it.
    @Test func aFailureMetInTheLogNamesItsTransaction() async throws {
        let v1 = #"""
            {"model": "hist", "version": 1, "entities": [
              {"name": "P", "attributes": [{"name": "k", "type": "int"}, {"name": "note", "type": "string", "optional": true},
                                           {"name": "title", "type": "string", "optional": true}],
               "uniques": [["k"]]}]}
            """#
        func v2(_ steps: String, _ note: String, _ uniques: String) -> String {
            #"""
            {"model": "hist", "version": 2, "entities": [
              {"name": "P", "attributes": [{"name": "k", "type": "int"}, {"name": "note", "type": "\#(note)", "optional": true},
                                           {"name": "title", "type": "string", "optional": true}],
               "uniques": [\#(uniques)]}],
             "migration": {"steps": [\#(steps)]}}
            """#
        }
        let cases: [(v2: String, expected: String)] = [
            (v2(#"{"op":"changeType","entity":"P","attribute":"note","conversion":"stringToDouble"}"#, "double", #"["k"]"#),
             "transaction 1 of the log: "),
            (v2(#"{"op":"addUnique","entity":"P","attributes":["title"]}"#, "string", #"["k"], ["title"]"#),
             "(at transaction 2 of the log)"),
        ]
        for (text, expected) in cases {
            let dir = temporaryDirectory("migrate-history")
            defer { try? FileManager.default.removeItem(at: dir) }
            let all = try schemas([v1, text])
            let e = try #require(all[0].entity(named: "P"))
            do {
                let store = try Store.open(at: dir, schema: all[0])
                defer { store.close() }
                func record(_ k: Int64, _ note: String, _ title: String) -> Record {
                    var r = Record(entity: e)
                    r["k"] = .int(k)
                    r["note"] = .string(note)
                    r["title"] = .string(title)
                    return r
                }
                let first = record(1, "abc", "T1"), second = record(2, "8", "T2")
                _ = try await store.save { $0.insert(first) }                                   // 1
                // 2: both titled T2 (a clash for a unique on title); 3: no longer.
                _ = try await store.save { c in
                    c.insert(second)
                    c.update(first.id, [.init(attribute: 2, value: .string("T2"))])
                }
                _ = try await store.save { c in
                    c.update(first.id, [.init(attribute: 1, value: .string("7")), .init(attribute: 2, value: .string("T3"))])
                }
            }
            do {
                _ = try await Store.migrate(at: dir, schemas: all)
                Issue.record("the migration succeeded")
            } catch {
                #expect("\(error)".contains(expected), "\(error)")
            }
        }
    }

    /// Another model's schemas are refused as such (it said no schema of the version it wanted
    /// was among them), and nothing is changed.
    /// A target the store is at, or one older than it, is refused saying which.
    @Test func aTargetThatIsNotNewerIsRefusedSayingWhy() async throws {
        let dir = temporaryDirectory("migrate-not-newer")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await populated(dir)
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2, ShopSchemas.v3])
        _ = try await Store.migrate(at: dir, schemas: all, registry: ShopSchemas.registry)
        for (goal, expected) in [(3, "the store is at v3 already; nothing to do"),
                                 (2, "the store is at v3, newer than v2: a migration only goes to a later version")] {
            do {
                _ = try await Store.migrate(at: dir, schemas: all, to: goal, registry: ShopSchemas.registry)
                Issue.record("a migration to v\(goal) of a v3 store was taken")
            } catch let e as MigrationError {
                #expect(e.reason == expected, "\(e)")
            }
        }
    }

    @Test func anotherModelsSchemasAreRefusedAsSuch() async throws {
        let dir = temporaryDirectory("migrate-other-model")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await populated(dir)
        let catalog = try Schema.loadAll(directory: repositoryRoot.appendingPathComponent("Schemas/catalog"))
        do {
            _ = try await Store.migrate(at: dir, schemas: catalog)
            Issue.record("another model's schemas were taken")
        } catch let e as MigrationError {
            #expect(e.reason.contains("the schemas are of model 'catalog'; the store holds model"), "\(e)")
        }
        let store = try Store.openReadOnly(at: dir)
        defer { store.close() }
        #expect(store.schema.version == 1)
    }

    /// One entity whose tag the new version changes is refused for that, naming it: the steps
    /// find an entity's new form by its tag, so a later step failed first with a message about
    /// something else (v2 "declares no attribute Track.playCount", which it does).
    @Test(arguments: ["Track", "Genre"])
    func anEntityWhoseTagChangesIsNamed(entity: String) throws {
        let v1 = try String(contentsOf: librarySchemaDirectory.appendingPathComponent("v1.json"), encoding: .utf8)
        let v2 = try String(contentsOf: librarySchemaDirectory.appendingPathComponent("v2.json"), encoding: .utf8)
        var json = try #require(try JSONSerialization.jsonObject(with: Data(v2.utf8)) as? [String: Any])
        var entities = try #require(json["entities"] as? [[String: Any]])
        let i = try #require(entities.firstIndex { $0["name"] as? String == entity })
        entities[i]["tag"] = 9
        json["entities"] = entities
        let changed = String(decoding: try JSONSerialization.data(withJSONObject: json), as: UTF8.self)
        let all = try schemas([v1, changed])
        let old = try #require(all[0].entity(named: entity)).tag
        do {
            _ = try MigrationHop(from: all[0], to: all[1], registry: MigrationRegistry())
            Issue.record("a changed tag was accepted")
        } catch let e as SchemaError {
            #expect(e.description == "v2.json: entity '\(entity)', migration: must keep tag \(old) (object ids carry it); " +
                                     "declare \"tag\": \(old)", "\(e)")
        }
    }

    /// A rename onto the name of an entity that exists at that step is refused as that step's
    /// error; it was refused for the other entity's tag (`must keep tag 2`), naming no step.
    @Test func aRenameOntoAnExistingEntityIsThatStepsError() throws {
        let onto = ShopSchemas.v2.replacingOccurrences(of: #"{"op":"renameEntity","from":"Product","to":"Item"}"#,
                                                       with: #"{"op":"renameEntity","from":"Product","to":"Maker"}"#)
        #expect(onto != ShopSchemas.v2)
        let all = try schemas([ShopSchemas.v1, onto])
        do {
            _ = try MigrationHop(from: all[0], to: all[1], registry: ShopSchemas.registry)
            Issue.record("a rename onto an existing entity was accepted")
        } catch let e as SchemaError {
            #expect(e.description == "v2.json: migration.steps[0]: entity 'Maker' already exists", "\(e)")
        }
    }

    @Test func stepsThatDoNotLeadToTheNewVersionAreRefused() throws {
        let broken = ShopSchemas.v2.replacingOccurrences(of: #"{"op":"addAttribute","entity":"Item","attribute":"views"},"#, with: "")
        let all = try schemas([ShopSchemas.v1, broken])
        do {
            _ = try MigrationHop(from: all[0], to: all[1], registry: ShopSchemas.registry)
            Issue.record("a step list missing an attribute was accepted")
        } catch let e as SchemaError {
            #expect(e.description.contains("views"))
        }
        #expect(throws: SchemaError.self) { try MigrationHop(from: all[0], to: try schemas([ShopSchemas.v1, ShopSchemas.v2])[1], registry: MigrationRegistry()) }
    }

    /// A to-many relationship that becomes to-one is refused when the migration is planned: its
    /// links are carried over as they are, and an object holding two targets became a to-one
    /// with two (exported as one, and `verify` saw nothing wrong). A to-one may become to-many.
    @Test func aToManyRelationshipThatBecomesToOneIsRefused() throws {
        func version(_ n: Int, aToMany: Bool, bToMany: Bool) -> String {
            #"""
            {"model": "rk", "version": \#(n), "entities": [
              {"name": "A", "attributes": [{"name": "k", "type": "int"}],
               "relationships": [{"name": "bs", "destination": "B", "toMany": \#(aToMany), "inverse": "a"\#(aToMany ? "" : #", "optional": true"#)}],
               "uniques": [["k"]]},
              {"name": "B", "attributes": [{"name": "k", "type": "int"}],
               "relationships": [{"name": "a", "destination": "A", "toMany": \#(bToMany), "inverse": "bs"\#(bToMany ? "" : #", "optional": true"#)}],
               "uniques": [["k"]]}]}
            """#
        }
        let v1 = version(1, aToMany: true, bToMany: false)
        let narrowed = try schemas([v1, version(2, aToMany: false, bToMany: false)])
        do {
            _ = try MigrationHop(from: narrowed[0], to: narrowed[1], registry: MigrationRegistry())
            Issue.record("a to-many that becomes to-one was accepted")
        } catch let e as SchemaError {
            #expect(e.description.contains("relationship 'bs' is to-many in v1 and to-one in v2"), "\(e)")
        }
        let widened = try schemas([v1, version(2, aToMany: true, bToMany: true)])
        _ = try MigrationHop(from: widened[0], to: widened[1], registry: MigrationRegistry())
    }

    /// A to-one made required by a new version is checked against the data: the migration
    /// (and its dry run) is refused naming an object without a target, and goes through once
    /// every object has one. It went through, leaving objects the schema says cannot exist.
    @Test func aToOneMadeRequiredIsCheckedAgainstTheData() async throws {
        func version(_ n: Int, optional: Bool) -> String {
            #"""
            {"model": "rq", "version": \#(n), "entities": [
              {"name": "Owner", "attributes": [{"name": "k", "type": "int"}],
               "relationships": [{"name": "items", "destination": "Item", "toMany": true, "inverse": "owner"}]},
              {"name": "Item", "attributes": [{"name": "k", "type": "int"}],
               "relationships": [{"name": "owner", "destination": "Owner", "toMany": false, "inverse": "items",
                                  "optional": \#(optional)}]}]}
            """#
        }
        let all = try schemas([version(1, optional: true), version(2, optional: false)])
        let dir = temporaryDirectory("migrate-required")
        defer { try? FileManager.default.removeItem(at: dir) }
        let owner = try #require(all[0].entity(named: "Owner")), item = try #require(all[0].entity(named: "Item"))
        let ownerLink = try #require(item.relationships.first { $0.name == "owner" })
        var o = Record(entity: owner), linked = Record(entity: item), lone = Record(entity: item)
        o["k"] = .int(1); linked["k"] = .int(2); lone["k"] = .int(3)
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            var c = ChangeSet()
            c.insert(o); c.insert(linked); c.insert(lone)
            c.append(.link(relationship: ownerLink.tag, from: .id(linked.id), to: .id(o.id)))
            _ = try await store.save(c)
        }
        for dryRun in [true, false] {
            do {
                _ = try await Store.migrate(at: dir, schemas: all, dryRun: dryRun)
                Issue.record("a to-one made required with an object lacking it was migrated (dry run: \(dryRun))")
            } catch let e as MigrationError {
                #expect(e.reason.contains("Item \(lone.id): relationship 'owner' is required in v2"), "\(e.reason)")
            }
        }
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            var c = ChangeSet()
            c.append(.link(relationship: ownerLink.tag, from: .id(lone.id), to: .id(o.id)))
            _ = try await store.save(c)
        }
        let report = try await Store.migrate(at: dir, schemas: all)
        #expect(report.to == 2 && report.objects == 3)
    }

    /// A log entry (its checksum intact) linking through a relationship tag the store's schema
    /// does not declare stops a migration as damage, naming the transaction, as the state's
    /// build refuses such an edge: the edge was left out of the rewritten history without a word.
    @Test func aLogEdgeOfAnUndeclaredRelationshipStopsTheMigration() async throws {
        func version(_ n: Int) -> String {
            #"""
            {"model": "ue", "version": \#(n), "entities": [
              {"name": "Owner", "attributes": [{"name": "k", "type": "int"}],
               "relationships": [{"name": "items", "destination": "Item", "toMany": true, "inverse": "owner"}]},
              {"name": "Item", "attributes": [{"name": "k", "type": "int"}],
               "relationships": [{"name": "owner", "destination": "Owner", "toMany": false, "inverse": "items",
                                  "optional": true}]}]}
            """#
        }
        let all = try schemas([version(1), version(2)])
        let dir = temporaryDirectory("migrate-undeclared-edge")
        defer { try? FileManager.default.removeItem(at: dir) }
        let owner = try #require(all[0].entity(named: "Owner")), item = try #require(all[0].entity(named: "Item"))
        let link = try #require(item.relationships.first { $0.name == "owner" })
        var o = Record(entity: owner), i = Record(entity: item)
        o["k"] = .int(1); i["k"] = .int(2)
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            _ = try await store.save { $0.insert(o); $0.insert(i) }
            var c = ChangeSet()
            c.append(.link(relationship: link.tag, from: .id(i.id), to: .id(o.id)))
            let tx = try await store.save(c)
            // The entry rewritten with another tag (0x7F7F) and sealed again.
            let env = store.env
            let stored = try #require(try env.read { txn in try txn.withValue(env[.log], key: tx.keyBytes) { Array($0) } })
            let entry = try stored.withUnsafeBytes { try LogEntryCodec.decode($0, transactionID: tx) }
            let damaged = LogEntry(transactionID: tx, schemaVersion: entry.schemaVersion, timestampMs: entry.timestampMs,
                                   author: entry.author, metadata: entry.metadata,
                                   changes: [.link(relationship: 0x7F7F, from: i.id, to: o.id)])
            try env.write { _ = try $0.put(env[.log], key: tx.keyBytes, value: LogEntryCodec.encode(damaged)) }
        }
        do {
            _ = try await Store.migrate(at: dir, schemas: all)
            Issue.record("a log edge of an undeclared relationship was dropped by the migration")
        } catch let e as MigrationError {
            #expect(e.reason.contains("transaction 2 of the log") && e.reason.contains("relationship tag 32639"),
                    "\(e.reason)")
        }
    }

    /// A custom step may not write a string longer than the store's `maxValueBytes`, which a
    /// save refuses (and an export's re-import would): it went into the store.
    @Test func aCustomStepThatWritesAValueOverMaxValueBytesIsRefused() async throws {
        let v1 = #"{"model":"mv","version":1,"entities":[{"name":"Note","attributes":[{"name":"text","type":"string"}]}]}"#
        let v2 = #"{"model":"mv","version":2,"entities":[{"name":"Note","attributes":[{"name":"text","type":"string"}]}],"migration":{"steps":[{"op":"custom","entity":"Note","name":"pad"}]}}"#
        let all = try schemas([v1, v2])
        var config = StoreConfiguration()
        config.maxValueBytes = 100
        let dir = temporaryDirectory("migrate-max-value")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: all[0], configuration: config)
            defer { store.close() }
            var r = Record(entity: try #require(all[0].entity(named: "Note")))
            r["text"] = .string("short")
            _ = try await store.save { $0.insert(r) }
        }
        var registry = MigrationRegistry()
        registry.register("pad") { $0["text"] = .string(String(repeating: "x", count: 200)) }
        do {
            _ = try await Store.migrate(at: dir, schemas: all, registry: registry, configuration: config)
            Issue.record("a 200-byte value was migrated into a store of maxValueBytes 100")
        } catch let e as MigrationError {
            #expect(e.reason.contains("'text' to 200 bytes, over maxValueBytes (100)"), "\(e.reason)")
        }
        config.maxValueBytes = 1_000
        let report = try await Store.migrate(at: dir, schemas: all, registry: registry, configuration: config)
        #expect(report.to == 2)
    }

    @Test func anInstanceWithTheOldSchemaStopsAfterMigratingAndReadsWentOnDuring() async throws {
        let dir = temporaryDirectory("migrate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ids = try await populated(dir)
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2])
        let old = try Store.openExisting(at: dir)
        let reader = try old.snapshot(label: "during")
        let report = try await old.migrate(schemas: all, registry: ShopSchemas.registry)
        // The snapshot taken before still reads the old generation.
        #expect(try reader.record(ids[0])?["title"] == .string("Lamp"))
        reader.close()
        #expect(report.to == 2)
        do {
            _ = try await old.save(ChangeSet())
            Issue.record("the old-schema instance still saves")
        } catch StrataError.migrated(_, let v) {
            #expect(v == 2)
        }
        old.close()
        let store = try Store.open(at: dir, schema: all[1])
        #expect(try store.mainContext.record(ids[0])?["name"] == .string("Lamp"))
        store.close()
    }

    /// A stored object count of the wrong size stops a migration as a damaged record named as
    /// such (exit 65), before anything is written: shorter or longer, never read as a number.
    @Test(arguments: [3, 9])
    func aCountOfTheWrongSizeStopsTheMigrationAsDamage(size: Int) async throws {
        let dir = temporaryDirectory("migrate")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await populated(dir)
        let all = try schemas([ShopSchemas.v1, ShopSchemas.v2])
        let old = try Store.openExisting(at: dir)
        defer { old.close() }
        let product = try #require(all[0].entity(named: "Product"))
        let env = old.env
        try env.write { _ = try $0.put(env[.counts], key: MetaKey.count(product.tag), value: [UInt8](repeating: 0, count: size)) }
        await #expect {
            _ = try await old.migrate(schemas: all, registry: ShopSchemas.registry)
        } throws: { error in
            guard case StrataError.corruptRecord(_, let reason) = error else { return false }
            return reason == "the object count of entity tag \(product.tag) is \(size) bytes, not 8"
        }
    }

    @Test func theShippedLibraryMigrationRunsOnTheV1Sample() async throws {
        let dir = temporaryDirectory("migrate-library")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let store = dir.appendingPathComponent("s").path
        let v1dir = dir.appendingPathComponent("schema-v1")
        try FileManager.default.createDirectory(at: v1dir, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: librarySchemaDirectory.appendingPathComponent("v1.json"), to: v1dir.appendingPathComponent("v1.json"))
        #expect(try await storectl("init", store, "--schema", v1dir.path).status == 0)
        #expect(try await storectl("import", store, repositoryRoot.appendingPathComponent("Tools/sample-library/v1/library.ndjson").path, "--quiet").status == 0)
        let check = try await storectl("migrate", store, "--schema", librarySchemaDirectory.path, "--check")
        #expect(check.status == 10 && check.stdout.contains("custom deriveSortName"))
        let run = try await storectl("migrate", store, "--schema", librarySchemaDirectory.path, "--json")
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try await storectl("migrate", store, "--schema", librarySchemaDirectory.path, "--check").status == 0)
        #expect(try await storectl("verify", store).status == 0)
        let opened = try Store.open(at: URL(fileURLWithPath: store), schema: all[1], entities: libraryEntities)
        defer { opened.close() }
        let artists = try opened.mainContext.fetch(Artist.self)
        #expect(artists.allSatisfy { $0.sortName != nil })
        #expect(try opened.mainContext.count(Track.self) == 306)
    }
}

@Suite struct MigrationStatusTests {
    @Test func statusWorksWhileThisProcessHasTheStoreOpen() throws {
        let dir = temporaryDirectory("status")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let store = try Store.open(at: dir, schema: all[0])
        defer { store.close() }
        #expect(try Store.migrationStatus(at: dir, schemas: all) == .needsMigration(from: 1, to: 2, steps: all[1].migrationSteps.map { "v2: \($0.summary)" }))
        #expect(try Store.migrationStatus(at: dir, schemas: [all[0]]) == .upToDate(version: 1))
    }
}

@Suite struct CompactThenMigrateTests {
    @Test func aCompactedStoreMigratesAndKeepsItsHistoryAfterTheHorizon() async throws {
        let dir = temporaryDirectory("compact-migrate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let artistEntity = all[0].entity(named: "Artist")!
        var ids: [ObjectID] = []
        do {
            let store = try Store.open(at: dir, schema: all[0])
            for i in 0..<6 {
                var a = Record(entity: artistEntity)
                a["mbid"] = .uuid(UUID())
                a["name"] = .string("The Band \(i)")
                a["formedYear"] = .int(Int64(1990 + i))
                ids.append(a.id)
                _ = try await store.save { $0.insert(a) }
            }
            _ = try await store.save { $0.update(ids[0], [ChangeSet.AttributeValue(attribute: 4, value: .int(1980))]) }
            _ = try await store.compact(horizon: TransactionID(4))
            store.close()
        }
        let report = try await Store.migrate(at: dir, schemas: all, registry: libraryMigrations)
        #expect(report.from == 1 && report.to == 2 && report.objects == 6)
        let store = try Store.open(at: dir, schema: all[1], entities: libraryEntities)
        defer { store.close() }
        #expect(try store.verify().ok)
        let first = try #require(try store.mainContext.object(Artist.self, id: ids[0]))
        #expect(first.foundedYear == "1980" && first.sortName == "Band 0, The")
        #expect(try store.snapshot(asOf: TransactionID(5)).count(Query(entity: "Artist")) == 5)
        #expect(try store.history(of: ids[0]).map(\.transactionID.rawValue) == [4, 7])
    }

    /// A compacted store whose state at the horizon holds more objects with checked unique keys
    /// than are decoded at once (they were all held in memory, twice): every chunk is checked,
    /// a key given up after the horizon by an object of the last chunk is taken by another, and
    /// the migrated store verifies.
    @Test func aCompactedStoreLargerThanOneChunkOfItsBaseMigrates() async throws {
        let dir = temporaryDirectory("compact-migrate-chunks")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let artistEntity = try #require(all[0].entity(named: "Artist"))
        let count = Upcaster.baseChunkObjects * 2 + 5
        var artists: [Record] = []
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            _ = try await store.save { c in
                for i in 0..<count {
                    var a = Record(entity: artistEntity)
                    a["mbid"] = .uuid(UUID())
                    a["name"] = .string("Band \(i)")
                    artists.append(a)
                    c.insert(a)
                }
            }
            let horizon = try store.lastTransactionID
            // After the horizon: the last artist (by id) gives up its mbid, and a new one takes it.
            let last = try #require(artists.max { $0.id < $1.id })
            _ = try await store.save { $0.update(last.id, [ChangeSet.AttributeValue(attribute: 0, value: .uuid(UUID()))]) }
            var taker = Record(entity: artistEntity)
            taker["mbid"] = last["mbid"]
            taker["name"] = .string("Taker")
            _ = try await store.save { $0.insert(taker) }
            _ = try await store.compact(horizon: horizon)
        }
        let report = try await Store.migrate(at: dir, schemas: all, registry: libraryMigrations)
        #expect(report.objects == count + 1)
        let store = try Store.open(at: dir, schema: all[1], entities: libraryEntities)
        defer { store.close() }
        #expect(try store.verify().ok)
        #expect(try store.mainContext.count(Query(entity: "Artist")) == count + 1)
    }

    /// The state at a compacted store's horizon is checked for unique keys in every chunk: a
    /// transaction after the horizon whose rewritten values take the key of an object of the
    /// last chunk, deleted only later, is refused as the clash it would have been.
    @Test func aCompactedStoresBaseIsCheckedInEveryChunk() async throws {
        let dir = temporaryDirectory("compact-migrate-chunk-clash")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let artistEntity = try #require(all[0].entity(named: "Artist"))
        var artists: [Record] = []
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            _ = try await store.save { c in
                for i in 0..<(Upcaster.baseChunkObjects * 2 + 5) {
                    var a = Record(entity: artistEntity)
                    a["mbid"] = .uuid(UUID())
                    a["name"] = .string("Band \(i)")
                    artists.append(a)
                    c.insert(a)
                }
            }
            let horizon = try store.lastTransactionID
            let last = try #require(artists.max { $0.id < $1.id })
            var clasher = Record(entity: artistEntity)
            clasher["mbid"] = .uuid(UUID())
            clasher["name"] = .string("Clasher")
            _ = try await store.save { $0.insert(clasher) }
            _ = try await store.save { $0.delete(last.id) }
            _ = try await store.compact(horizon: horizon)
            artists = [last]
        }
        // The new version's step gives the clasher the mbid the last artist held until it was deleted.
        guard case .uuid(let held) = artists[0]["mbid"] else { Issue.record("no mbid"); return }
        let derive = try #require(libraryMigrations.steps["deriveSortName"])
        var registry = MigrationRegistry()
        registry.register("deriveSortName") { record in
            try derive(&record)
            if case .string("Clasher") = record["name"] { record["mbid"] = .uuid(held) }
        }
        do {
            _ = try await Store.migrate(at: dir, schemas: all, registry: registry)
            Issue.record("a key two objects held at one transaction was migrated")
        } catch {
            #expect("\(error)".contains("unique"), "\(error)")
        }
    }

    /// A logged transaction is judged on its result when the log is rewritten, as its save was:
    /// a child context's commit that replaces an object by another with the same unique key
    /// (logged as the new object's insert before the old one's delete) and one where two objects
    /// swap their keys migrate (the rewrite refused both as a unique clash, so a store that
    /// verifies could not migrate); a key still held by two objects at a transaction's end is
    /// the clash it was.
    @Test func aChildsReplacementAndSwapOfUniqueKeysMigrate() async throws {
        let dir = temporaryDirectory("migrate-child-uniques")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let artistEntity = try #require(all[0].entity(named: "Artist"))
        let mbid = try #require(artistEntity.attributes.firstIndex { $0.name == "mbid" })
        func artist(_ name: String, _ key: UUID) -> Record {
            var a = Record(entity: artistEntity)
            a["mbid"] = .uuid(key)
            a["name"] = .string(name)
            return a
        }
        let m = UUID(), x = UUID(), y = UUID(), temporary = UUID()
        let old = artist("Old", m), b1 = artist("B1", x), b2 = artist("B2", y), replacement = artist("New", m)
        do {
            let store = try Store.open(at: dir, schema: all[0])
            defer { store.close() }
            _ = try await store.save { $0.insert(old); $0.insert(b1); $0.insert(b2) }
            let replace = store.mainContext.newChild(label: "replace")
            try replace.delete(old.id)
            try replace.insert(replacement)
            #expect(try await replace.commit() != nil)
            let swap = store.mainContext.newChild(label: "swap")
            try swap.change { $0.update(b1.id, [ChangeSet.AttributeValue(attribute: mbid, value: .uuid(temporary))]) }
            try swap.change { $0.update(b2.id, [ChangeSet.AttributeValue(attribute: mbid, value: .uuid(x))]) }
            try swap.change { $0.update(b1.id, [ChangeSet.AttributeValue(attribute: mbid, value: .uuid(y))]) }
            #expect(try await swap.commit() != nil)
            #expect(try store.verify().ok)
        }
        let report = try await Store.migrate(at: dir, schemas: all, registry: libraryMigrations)
        #expect(report.from == 1 && report.to == 2 && report.objects == 3)
        let store = try Store.open(at: dir, schema: all[1], entities: libraryEntities)
        defer { store.close() }
        #expect(try store.verify().ok)
        let artists = try store.mainContext.fetch(Query(entity: "Artist"))
        let byName = Dictionary(uniqueKeysWithValues: artists.map { ($0["name"], $0["mbid"]) })
        #expect(byName == [.string("New"): .uuid(m), .string("B1"): .uuid(y), .string("B2"): .uuid(x)])
    }

    /// A default over the store's `maxValueBytes` in the schema migrated to is refused before
    /// anything is built, as opening a store with that schema refuses it: it was written into
    /// every object, and the store could then not be opened with its own schema.
    @Test func aDefaultOverMaxValueBytesIsRefusedBeforeMigrating() async throws {
        let dir = temporaryDirectory("migrate-big-default")
        defer { try? FileManager.default.removeItem(at: dir) }
        let big = String(repeating: "x", count: 2_000)
        let texts = [
            #"{"model":"m","version":1,"entities":[{"name":"Item","attributes":[{"name":"pk","type":"int"}]}]}"#,
            #"{"model":"m","version":2,"entities":[{"name":"Item","attributes":[{"name":"pk","type":"int"},"#
                + #"{"name":"blob","type":"string","default":""# + big + #""}]}],"#
                + #""migration":{"steps":[{"op":"addAttribute","entity":"Item","attribute":"blob"}]}}"#,
        ]
        let all = try texts.enumerated().map {
            try Schema.parse(Array($1.utf8), source: "v\($0 + 1).json", expectedVersion: $0 + 1)
        }
        var configuration = StoreConfiguration()
        configuration.maxValueBytes = 1_000
        do {
            let store = try Store.open(at: dir, schema: all[0], configuration: configuration)
            defer { store.close() }
            var item = Record(entity: try #require(all[0].entity(named: "Item")))
            item["pk"] = .int(1)
            _ = try await store.save { $0.insert(item) }
        }
        await #expect(throws: SchemaError.self) {
            try await Store.migrate(at: dir, schemas: all, configuration: configuration)
        }
        let store = try Store.open(at: dir, schema: all[0], configuration: configuration)
        defer { store.close() }
        #expect(store.schema.version == 1)
        #expect(try store.mainContext.count(Query(entity: "Item")) == 1)
    }

    /// `Store.migrate(at:)` on a store this process has open uses that instance, and after a
    /// dry run or a failed migration leaves it open for the application (it closed it, so the
    /// application's next save failed with `closed`); after a migration it closes it, as it
    /// documents.
    @Test func migrateAtLeavesTheApplicationsInstanceOpenAfterADryRunOrAFailure() async throws {
        let dir = temporaryDirectory("migrate-open-instance")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let artistEntity = try #require(all[0].entity(named: "Artist"))
        func artist(_ name: String) -> Record {
            var a = Record(entity: artistEntity)
            a["mbid"] = .uuid(UUID())
            a["name"] = .string(name)
            return a
        }
        let store = try Store.open(at: dir, schema: all[0])
        _ = try await store.save { $0.insert(artist("A")) }
        let dry = try await Store.migrate(at: dir, schemas: all, registry: libraryMigrations, dryRun: true)
        #expect(dry.dryRun)
        #expect(!store.isClosed)
        _ = try await store.save { $0.insert(artist("B")) }
        // No registered step for v1 → v2's custom steps: the migration fails.
        await #expect {
            try await Store.migrate(at: dir, schemas: all)
        } throws: { "\($0)".contains("is not registered") }
        #expect(!store.isClosed)
        _ = try await store.save { $0.insert(artist("C")) }
        _ = try await Store.migrate(at: dir, schemas: all, registry: libraryMigrations)
        #expect(store.isClosed)
        let migrated = try Store.open(at: dir, schema: all[1], entities: libraryEntities)
        defer { migrated.close() }
        #expect(try migrated.mainContext.count(Query(entity: "Artist")) == 3)
    }

}
