import Foundation
import Testing
@testable import Strata

/// Required to-one relationships in an import: a reference may point forward (to a record later
/// in the same file, in a later file, in a later batch), in any file order, in a cycle of
/// required references; a required to-one missing altogether is an input error found while
/// validating, reported with its file and line, and nothing is written.
@Suite struct ImportRequiredReferenceTests {
    /// Owners and their pets (a pet's owner is required), and people and passports, each requiring
    /// the other (a cycle of required to-ones).
    static let schemaText = #"""
    {"model":"pets","version":1,"entities":[
      {"name":"Owner","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"pets","destination":"Pet","toMany":true,"inverse":"owner","deleteRule":"nullify"}],
       "uniques":[["name"]]},
      {"name":"Pet","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"owner","destination":"Owner","inverse":"pets","optional":false}],
       "uniques":[["name"]]},
      {"name":"Person","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"passport","destination":"Passport","inverse":"holder","optional":false}],
       "uniques":[["name"]]},
      {"name":"Passport","attributes":[{"name":"number","type":"string"}],
       "relationships":[{"name":"holder","destination":"Person","inverse":"passport","optional":false},
                        {"name":"stamps","destination":"Stamp","toMany":true,"inverse":"passport","deleteRule":"cascade"}],
       "uniques":[["number"]]},
      {"name":"Stamp","attributes":[{"name":"place","type":"string"}],
       "relationships":[{"name":"passport","destination":"Passport","inverse":"stamps","optional":false}],
       "uniques":[["place"]]},
      {"name":"Driver","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"license","destination":"License","inverse":"driver"}],
       "uniques":[["name"]]},
      {"name":"License","attributes":[{"name":"number","type":"string"}],
       "relationships":[{"name":"driver","destination":"Driver","inverse":"license","optional":false}],
       "uniques":[["number"]]}
    ]}
    """#

    private func withStore(_ body: (Store, URL) async throws -> Void) async throws {
        let schema = try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("import-required")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await body(store, dir)
    }

    private func write(_ lines: [String], _ dir: URL, _ name: String) throws -> String {
        let url = dir.appendingPathComponent(name)
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: url)
        return url.path
    }

    private func run(_ store: Store, _ files: [String], batch: Int = 1000) async throws -> ImportSummary {
        var options = ImportOptions()
        options.batchSize = batch
        return try await Importer(store: store, options: options).run(files: files)
    }

    /// The owner's name of every pet, by pet name.
    private func owners(_ store: Store) throws -> [String: String] {
        try store.read { view in
            let pet = try #require(store.schema.entity(named: "Pet"))
            let rel = try #require(pet.relationship(named: "owner"))
            var out: [String: String] = [:]
            for p in try view.fetch(Query(entity: "Pet")) {
                let owner = try view.targets(rel.tag, from: p.id).first.flatMap { try view.record($0) }
                if case .string(let n) = p["name"], case .string(let o)? = owner?["name"] { out[n] = o }
            }
            return out
        }
    }

    private let pets = [
        #"{"entity":"Pet","name":"Rex","owner":{"name":"Ann"}}"#,
        #"{"entity":"Pet","name":"Tom","owner":{"name":"Bob"}}"#,
        #"{"entity":"Owner","name":"Ann"}"#,
        #"{"entity":"Pet","name":"Kit","owner":{"name":"Ann"}}"#,
        #"{"entity":"Owner","name":"Bob"}"#,
    ]

    @Test(arguments: [1, 2, 1000])
    func aRequiredReferenceMayPointForwardInTheSameFile(batch: Int) async throws {
        try await withStore { store, dir in
            let summary = try await run(store, [try write(pets, dir, "pets.ndjson")], batch: batch)
            #expect(summary.records == 5)
            #expect(try owners(store) == ["Rex": "Ann", "Tom": "Bob", "Kit": "Ann"])
            #expect(try store.verify().ok)
        }
    }

    @Test func aRequiredReferenceMayPointIntoALaterFile() async throws {
        try await withStore { store, dir in
            let petsFile = try write(pets.filter { $0.contains(#""Pet""#) }, dir, "pets.ndjson")
            let ownersFile = try write(pets.filter { $0.contains(#""Owner""#) }, dir, "owners.ndjson")
            _ = try await run(store, [petsFile, ownersFile], batch: 1)
            #expect(try owners(store) == ["Rex": "Ann", "Tom": "Bob", "Kit": "Ann"])
            // Re-importing, in the other order too, changes nothing.
            let last = try store.lastTransactionID
            _ = try await run(store, [petsFile, ownersFile], batch: 1)
            _ = try await run(store, [ownersFile, petsFile], batch: 2)
            #expect(try store.lastTransactionID == last)
            #expect(try owners(store) == ["Rex": "Ann", "Tom": "Bob", "Kit": "Ann"])
        }
    }

    @Test func requiredReferencesInACycleAreWrittenTogether() async throws {
        try await withStore { store, dir in
            let input = try write([
                #"{"entity":"Person","name":"Ann","passport":{"number":"P1"}}"#,
                #"{"entity":"Owner","name":"Zed"}"#,
                #"{"entity":"Passport","number":"P1","holder":{"name":"Ann"}}"#,
                #"{"entity":"Passport","number":"P2","holder":{"name":"Bob"}}"#,
                #"{"entity":"Person","name":"Bob","passport":{"number":"P2"}}"#,
            ], dir, "people.ndjson")
            let summary = try await run(store, [input], batch: 1)
            #expect(summary.records == 5)
            try store.read { view in
                let person = try #require(store.schema.entity(named: "Person"))
                let rel = try #require(person.relationship(named: "passport"))
                var numbers: [String: String] = [:]
                for p in try view.fetch(Query(entity: "Person")) {
                    let passport = try #require(try view.targets(rel.tag, from: p.id).first.flatMap { try view.record($0) })
                    if case .string(let n) = p["name"], case .string(let number) = passport["number"] { numbers[n] = number }
                }
                #expect(numbers == ["Ann": "P1", "Bob": "P2"])
            }
            #expect(try store.verify().ok)
        }
    }

    /// A person and a passport requiring each other: the passport's holder is `holder`
    /// (`person` unless given).
    private func couple(_ person: String, _ number: String, holder: String? = nil) -> [String] {
        [#"{"entity":"Person","name":"\#(person)","passport":{"number":"\#(number)"}}"#,
         #"{"entity":"Passport","number":"\#(number)","holder":{"name":"\#(holder ?? person)"}}"#]
    }

    /// Records waiting for each other at the end of the input are saved in groups that respect
    /// the batch size: two people and their passports, with batches of two, in two transactions
    /// (they went into one, whatever the batch size).
    @Test func recordsInCyclesAreSavedInBatchesOfTheirSize() async throws {
        try await withStore { store, dir in
            let input = try write(couple("Ann", "P1") + couple("Bob", "P2"), dir, "people.ndjson")
            var options = ImportOptions()
            options.batchSize = 2
            options.oneTransactionMaxInputBytes = 0
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 4)
            #expect(summary.transactions == 2)
            #expect(try store.verify().ok)
        }
    }

    /// Records waiting for a cycle (stamps requiring a passport that requires its holder, who
    /// requires it) are saved after the cycle, in batches of the batch size: they were pulled
    /// into one save with the cycle (a group joined everything connected by what one waits for),
    /// which took no batch size into account, and with errors tolerated a refusal of any one of
    /// them rejected them all.
    @Test func recordsWaitingForACycleAreSavedAfterItInBatches() async throws {
        try await withStore { store, dir in
            let stamps = (1...4).map { #"{"entity":"Stamp","place":"S\#($0)","passport":{"number":"P1"}}"# }
            let input = try write([#"{"entity":"Person","name":"Ann","passport":{"number":"P1"}}"#] + stamps
                                  + [#"{"entity":"Passport","number":"P1","holder":{"name":"Ann"}}"#], dir, "people.ndjson")
            var options = ImportOptions()
            options.batchSize = 2
            options.oneTransactionMaxInputBytes = 0
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 6)
            // The cycle (Ann, P1), then the stamps two by two.
            #expect(summary.transactions == 3, "\(summary)")
            #expect(try store.mainContext.count(Query(entity: "Stamp")) == 4)
            #expect(try store.verify().ok)
        }
    }

    /// With errors tolerated, a refused batch is saved again a group at a time: a record whose
    /// required target was rejected is rejected, and the pairs of records that require each other
    /// are written (a record at a time, none of them could be, and all were rejected with reasons
    /// naming targets that were in the input).
    @Test(arguments: [ImportMode.incremental, .bulk])
    func aRefusedBatchOfCyclesIsSavedAgainAGroupAtATime(mode: ImportMode) async throws {
        try await withStore { store, dir in
            let input = try write(couple("Xan", "PX", holder: "Nobody") + couple("Ann", "P1") + couple("Bob", "P2"),
                                  dir, "people.ndjson")
            var options = ImportOptions()
            options.mode = mode
            options.continueOnError = true
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 4)
            #expect(summary.rejected == 2)
            let names = try store.read { view in
                try view.fetch(Query(entity: "Person")).compactMap { p -> String? in
                    if case .string(let n) = p["name"] { n } else { nil }
                }
            }
            #expect(Set(names) == ["Ann", "Bob"])
            #expect(try store.verify().ok)
        }
    }

    /// A pet without an owner, or with `"owner": null`, is an input error with its file and line
    /// and the relationship's name; nothing is written.
    @Test func aMissingRequiredReferenceIsFoundWhileValidating() async throws {
        try await withStore { store, dir in
            let input = try write([
                #"{"entity":"Owner","name":"Ann"}"#,
                #"{"entity":"Pet","name":"Rex"}"#,
                #"{"entity":"Pet","name":"Tom","owner":null}"#,
                #"{"entity":"Pet","name":"Kit","owner":{"name":"Ann"}}"#,
            ], dir, "pets.ndjson")
            do {
                _ = try await run(store, [input], batch: 1)
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.map(\.line) == [2, 3], "\(failed.issues)")
                #expect(failed.issues.allSatisfy { $0.field == "owner" && $0.file == input }, "\(failed.issues)")
                #expect(failed.issues.first?.description.contains("pets.ndjson:2: owner: ") == true, "\(failed.issues)")
            }
            #expect(try store.lastTransactionID == TransactionID(0), "something was written")
        }
    }

    /// A pet already in the store keeps its owner when a record of it gives none.
    @Test func aRecordOfAStoredObjectMayLeaveItsRequiredReferenceOut() async throws {
        try await withStore { store, dir in
            _ = try await run(store, [try write(pets, dir, "pets.ndjson")], batch: 2)
            let update = try write([#"{"entity":"Pet","name":"Rex"}"#], dir, "update.ndjson")
            let summary = try await run(store, [update])
            #expect(summary.records == 1)
            #expect(try owners(store)["Rex"] == "Ann")
        }
    }

    /// Records waiting for a forward target are held in memory, up to `maxHeldRecords`: past it
    /// the import stops with an issue that says what to do.
    @Test func heldRecordsAreBounded() async throws {
        try await withStore { store, dir in
            let input = try write(pets, dir, "pets.ndjson")   // Rex and Tom wait for their owners
            var options = ImportOptions()
            options.maxHeldRecords = 1
            do {
                _ = try await Importer(store: store, options: options).run(files: [input])
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.first?.line == 2, "\(failed.issues)")
                #expect(failed.issues.first?.reason.contains("give the referenced records first") == true)
            }
            options.maxHeldRecords = 2
            #expect(try await Importer(store: store, options: options).run(files: [input]).records == 5)
            options.maxHeldRecords = -1
            await #expect(throws: ImportFailed.self) { _ = try await Importer(store: store, options: options).run(files: [input]) }
        }
    }

    /// An import batch by batch that stops at the held-records bound after a batch committed
    /// says what it wrote (`ImportFailed.written`, its transactions, its import id): it was
    /// reported as if nothing had been written.
    @Test func aStopAfterBatchesCommittedSaysWhatWasWritten() async throws {
        try await withStore { store, dir in
            let input = try write([#"{"entity":"Owner","name":"Ann"}"#,
                                   #"{"entity":"Pet","name":"Rex","owner":{"name":"Bob"}}"#,
                                   #"{"entity":"Pet","name":"Tom","owner":{"name":"Cy"}}"#,
                                   #"{"entity":"Owner","name":"Bob"}"#, #"{"entity":"Owner","name":"Cy"}"#], dir, "in.ndjson")
            var options = ImportOptions()
            options.maxHeldRecords = 1
            options.batchSize = 1
            options.mode = .incremental
            options.oneTransactionMaxInputBytes = 0
            options.importID = "held"
            do {
                _ = try await Importer(store: store, options: options).run(files: [input])
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.first?.line == 3, "\(failed.issues)")
                #expect(failed.written == 1 && failed.transactions.count == 1 && failed.importID == "held", "\(failed)")
                #expect(failed.description.contains("1 record(s) of this import were written before it stopped"), "\(failed)")
            }
            #expect(try store.read { try $0.fetch(Query(entity: "Owner")).count } == 1)
        }
    }

    /// A record that takes the one target of a one-to-one pair away from an object of the store
    /// whose side is required (a new passport for a holder who has one; a driver taking another's
    /// license) is reported at its own line and field, saying which object would be left without
    /// what, in every way of importing; the store refused it naming that other object alone.
    @Test(arguments: [ImportMode.incremental, .bulk], [false, true])
    func takingARequiredTargetAwayIsReportedAtTheRecordThatTakesIt(mode: ImportMode, oneTransaction: Bool) async throws {
        try await withStore { store, dir in
            let base = try write([
                #"{"entity":"Person","name":"h","passport":{"number":"p1"}}"#,
                #"{"entity":"Passport","number":"p1","holder":{"name":"h"}}"#,
                #"{"entity":"Person","name":"k","passport":{"number":"p2"}}"#,
                #"{"entity":"Passport","number":"p2","holder":{"name":"k"}}"#,
                #"{"entity":"Driver","name":"d","license":{"number":"l1"}}"#,
                #"{"entity":"License","number":"l1","driver":{"name":"d"}}"#,
                #"{"entity":"Driver","name":"e","license":{"number":"l2"}}"#,
                #"{"entity":"License","number":"l2","driver":{"name":"e"}}"#,
            ], dir, "base.ndjson")
            _ = try await run(store, [base])
            var options = ImportOptions()
            options.mode = mode
            if !oneTransaction { options.oneTransactionMaxInputBytes = 0 }
            let cases: [(line: String, field: String, reason: String)] = [
                (#"{"entity":"Passport","number":"p3","holder":{"name":"h"}}"#, "holder",
                 "is already the holder of Passport"),
                (#"{"entity":"Person","name":"h","passport":{"number":"p2"}}"#, "passport",
                 "is already the passport of Person"),
                (#"{"entity":"Driver","name":"d","license":{"number":"l2"}}"#, "license",
                 "replacing its license"),
                (#"{"entity":"Driver","name":"d","license":null}"#, "license",
                 "clearing its license"),
            ]
            let before = try store.lastTransactionID
            for c in cases {
                let input = try write([#"{"entity":"Driver","name":"x"}"#, c.line], dir, "in.ndjson")
                await #expect("\(c.line) \(mode) \(oneTransaction)") {
                    _ = try await Importer(store: store, options: options).run(files: [input])
                } throws: { error in
                    guard let issue = (error as? ImportFailed)?.issues.first else { return false }
                    return issue.line == 2 && issue.field == c.field && issue.reason.contains(c.reason)
                        && !issue.reason.contains("requiredRelationship")
                }
            }
            // The object left without its holder restated by an earlier record of the batch (which
            // does not touch its holder): the record that took the holder is still the one named.
            let restated = try write([#"{"entity":"Passport","number":"p1"}"#,
                                      #"{"entity":"Passport","number":"p3","holder":{"name":"h"}}"#], dir, "in.ndjson")
            await #expect("restated, \(mode) \(oneTransaction)") {
                _ = try await Importer(store: store, options: options).run(files: [restated])
            } throws: { error in
                guard let issue = (error as? ImportFailed)?.issues.first else { return false }
                return issue.line == 2 && issue.field == "holder" && issue.reason.contains("is already the holder of")
            }
            if mode == .bulk {
                // In bulk, the import loads the store in memory, is refused, and runs again through
                // the B-trees, which name the record: two copies of the store begin (one with the
                // load in memory turned off).
                let input = try write([cases[0].line], dir, "in.ndjson")
                for (limit, copies) in [(ImportOptions().bulkInMemoryMaxInputBytes, 2), (0, 1)] {
                    var o = options
                    o.bulkInMemoryMaxInputBytes = limit
                    let importer = Importer(store: store, options: o)
                    let phases = Task { () -> [ImportProgress.Phase] in
                        var seen: [ImportProgress.Phase] = []
                        for await p in importer.progress where seen.last != p.phase { seen.append(p.phase) }
                        return seen
                    }
                    await #expect(throws: ImportFailed.self) { _ = try await importer.run(files: [input]) }
                    let seen = await phases.value
                    #expect(seen.filter { $0 == .copying }.count == copies, "\(seen), limit \(limit)")
                }
            }
            #expect(try store.lastTransactionID == before, "a refused import wrote something")
        }
    }

    /// The base of the one-to-one cases: drivers `d` and `e` holding licenses `l1` and `l2`.
    private func driversAndLicenses(_ store: Store, _ dir: URL) async throws {
        let base = try write([
            #"{"entity":"Driver","name":"d","license":{"number":"l1"}}"#,
            #"{"entity":"License","number":"l1","driver":{"name":"d"}}"#,
            #"{"entity":"Driver","name":"e","license":{"number":"l2"}}"#,
            #"{"entity":"License","number":"l2","driver":{"name":"e"}}"#,
        ], dir, "base.ndjson")
        _ = try await run(store, [base])
    }

    /// The ways of importing a refusal may surface in: incremental in two passes or in one
    /// transaction, bulk.
    static let refusalWays: [(mode: ImportMode, oneTransaction: Bool)] =
        [(.incremental, false), (.incremental, true), (.bulk, false)]

    /// Each way of ``refusalWays`` (by index) with batches that hold the whole input, and with
    /// batches of one.
    static let waysAndBatches: [(Int, Int)] = [(0, 1000), (1, 1000), (2, 1000), (0, 1), (1, 1), (2, 1)]

    /// The `ImportFailed` that importing `input` into `store` ends with, in way `way` of
    /// ``refusalWays`` with batches of `batch` (the default when nil); nil, and an issue recorded,
    /// when it ends otherwise.
    private func refused(_ store: Store, _ input: String, way: Int, batch: Int? = nil) async -> ImportFailed? {
        let (mode, oneTransaction) = Self.refusalWays[way]
        var options = ImportOptions()
        options.mode = mode
        if let batch { options.batchSize = batch }
        if !oneTransaction { options.oneTransactionMaxInputBytes = 0 }
        let asked = "\(mode), one transaction: \(oneTransaction), batch: \(batch.map(String.init) ?? "default")"
        do {
            _ = try await Importer(store: store, options: options).run(files: [input])
            Issue.record("\(asked): imported, not refused")
        } catch let failed as ImportFailed {
            return failed
        } catch {
            Issue.record("\(asked): \(error)")
        }
        return nil
    }

    /// A link saved after the records (its target came later in the input) that takes the stored
    /// driver `d` to a new license, leaving `l1` without its required driver: the store refuses it
    /// naming `l1` alone; the import names the record of the link, its line and field, what it
    /// would take from which object, and (written batch by batch) that the record itself was
    /// written without the link. Nothing else of the link batch is written.
    @Test(arguments: refusalWays.indices)
    func aDeferredLinkTakingARequiredPartnerIsReportedAtItsRecord(way: Int) async throws {
        let (mode, oneTransaction) = Self.refusalWays[way]
        try await withStore { store, dir in
            try await driversAndLicenses(store, dir)
            let input = try write([
                #"{"entity":"Driver","name":"d","license":{"number":"l9"}}"#,
                #"{"entity":"License","number":"l9","driver":{"name":"w"}}"#,
                #"{"entity":"Driver","name":"w"}"#,
            ], dir, "in.ndjson")
            let failed = try #require(await refused(store, input, way: way))
            let issue = try #require(failed.issues.first)
            let writtenBatchByBatch = mode == .incremental && !oneTransaction
            #expect(issue.file == input && issue.line == 1 && issue.field == "license"
                    && issue.reason.hasPrefix("replacing its license ")
                    && issue.reason.contains("would leave that License without its required driver")
                    && issue.reason.hasSuffix("(its record was written, this link was not)") == writtenBatchByBatch
                    && (failed.written == 3) == writtenBatchByBatch, "\(failed)")
            // `d` keeps `l1` whatever was written.
            let driver = try #require(store.schema.entity(named: "Driver"))
            let license = try #require(driver.relationship(named: "license"))
            let d = try #require(try store.read { try $0.resolve(.unique(entityTag: driver.tag, constraint: 0,
                                                                          values: [.string("d")])) })
            let held = try store.read { view in try view.targets(license.tag, from: d).compactMap { try view.record($0) } }
            #expect(held.map { $0["number"] } == [.string("l1")])
        }
    }

    /// With ``ImportOptions/continueOnError``: a record taking a required partner away is
    /// rejected at its line with its own field and what it would take (the store names the other
    /// object's field); a deferred link doing so is skipped, counted, and listed in the rejects
    /// file as a comment at its record's line.
    @Test(arguments: [ImportMode.incremental, .bulk])
    func refusalsGoingOnAfterThemNameTheRecordAndTheField(mode: ImportMode) async throws {
        try await withStore { store, dir in
            try await driversAndLicenses(store, dir)
            let input = try write([
                #"{"entity":"Driver","name":"x"}"#,
                #"{"entity":"Driver","name":"e","license":{"number":"l1"}}"#,
                #"{"entity":"Driver","name":"d","license":{"number":"l9"}}"#,
                #"{"entity":"License","number":"l9","driver":{"name":"w"}}"#,
                #"{"entity":"Driver","name":"w"}"#,
            ], dir, "in.ndjson")
            let rejects = dir.appendingPathComponent("rejects.ndjson").path
            var options = ImportOptions()
            options.mode = mode
            options.continueOnError = true
            options.rejectsPath = rejects
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.rejected == 1)
            #expect(summary.skippedLinks == 1)
            let lines = try String(contentsOfFile: rejects, encoding: .utf8).split(separator: "\n").map(String.init)
            #expect(lines.count == 3, "\(lines)")
            #expect(lines.first?.hasPrefix("# \(input):2: license: replacing its license ") == true,
                    "\(lines)")
            #expect(lines.dropFirst().first == #"{"entity":"Driver","name":"e","license":{"number":"l1"}}"#)
            #expect(lines.last?.hasPrefix("# \(input):3: license: not linked (its record was written without this " +
                                          "link): replacing its license ") == true, "\(lines)")
        }
    }

    /// Two new licenses naming the same new driver: the second takes the driver the first was
    /// given in the same batch, and the store refuses the batch naming the first license alone.
    /// The import blames the second record, at its line and field, in every way of importing
    /// with batches that hold both; it blamed the first (`driver: a Driver is required`), which
    /// does give a driver. With batches of one, the first license's batch comes before the
    /// second's (written batch by batch, or gathered by a bulk import).
    @Test(arguments: waysAndBatches)
    func theRecordTakingAPartnerAnEarlierRecordOfItsBatchGaveIsBlamed(way: Int, batch: Int) async throws {
        let (mode, oneTransaction) = Self.refusalWays[way]
        try await withStore { store, dir in
            let input = try write([
                #"{"entity":"License","number":"l5","driver":{"name":"x"}}"#,
                #"{"entity":"Driver","name":"x"}"#,
                #"{"entity":"License","number":"l6","driver":{"name":"x"}}"#,
            ], dir, "in.ndjson")
            let issue = try #require(await refused(store, input, way: way, batch: batch)?.issues.first)
            #expect(issue.line == 3 && issue.field == "driver" && issue.reason.hasPrefix("Driver ")
                    && issue.reason.contains("is already the driver of License"), "\(issue)")
            // Written batch by batch, the driver and the first license went in before.
            let written = mode == .incremental && !oneTransaction && batch == 1
            #expect(try store.lastTransactionID == (written ? TransactionID(2) : .zero))
        }
    }

    /// A refusal names each object as the store will hold it: one the store holds by its id (also
    /// when a record of the input restates it: an upsert's operations carry the id it would have
    /// given a new object, which is never written), one the refused import would have made by the
    /// key its record gives it (its id would never be written either), in every way and batch
    /// size.
    @Test(arguments: waysAndBatches)
    func aRefusalNamesStoredObjectsByIdAndNewOnesByKey(way: Int, batch: Int) async throws {
        let (mode, oneTransaction) = Self.refusalWays[way]
        try await withStore { store, dir in
            let base = try write([#"{"entity":"Driver","name":"x"}"#], dir, "base.ndjson")
            _ = try await run(store, [base])
            let driver = try #require(store.schema.entity(named: "Driver"))
            let license = try #require(store.schema.entity(named: "License"))
            let x = try #require(try store.read {
                try $0.resolve(.unique(entityTag: driver.tag, constraint: 0, values: [.string("x")]))
            })
            let input = try write([
                #"{"entity":"Driver","name":"x"}"#,
                #"{"entity":"License","number":"l5","driver":{"name":"x"}}"#,
                #"{"entity":"License","number":"l6","driver":{"name":"x"}}"#,
            ], dir, "in.ndjson")
            let issue = try #require(await refused(store, input, way: way, batch: batch)?.issues.first)
            // Written batch by batch, `l5` went in before `l6`'s batch was refused.
            let l5 = try store.read {
                try $0.resolve(.unique(entityTag: license.tag, constraint: 0, values: [.string("l5")]))
            }
            #expect((l5 != nil) == (mode == .incremental && !oneTransaction && batch == 1))
            #expect(issue.line == 3 && issue.field == "driver", "\(issue)")
            #expect(issue.reason == "Driver \(x) is already the driver of License \(l5?.description ?? "\"l5\""), " +
                    "which would be left without its required driver (a Driver has one license)", "\(issue)")
        }
    }

    /// The license `l4` given to `x` moves on to `y` before `l5` takes `x` and `l6` takes it from
    /// `l5`: the record blamed is `l6`'s, which takes the partner `l5` has at that point; `l4`'s,
    /// which linked `x` before `l5` had it, is not, in every way and batch size.
    @Test(arguments: waysAndBatches)
    func onlyATakeOfThePartnerTheObjectHasThenIsBlamed(way: Int, batch: Int) async throws {
        try await withStore { store, dir in
            let input = try write([
                #"{"entity":"Driver","name":"x"}"#,
                #"{"entity":"License","number":"l4","driver":{"name":"x"}}"#,
                #"{"entity":"Driver","name":"y","license":{"number":"l4"}}"#,
                #"{"entity":"License","number":"l5","driver":{"name":"x"}}"#,
                #"{"entity":"License","number":"l6","driver":{"name":"x"}}"#,
            ], dir, "in.ndjson")
            let issue = try #require(await refused(store, input, way: way, batch: batch)?.issues.first)
            #expect(issue.line == 5 && issue.field == "driver" && issue.reason.contains("is already the driver of"),
                    "\(issue)")
        }
    }

    /// Stored `d`–`l1`; the input moves `l1` to a new driver `f` (a record), and its links saved
    /// after the records give `d` and `f` new licenses: `f`'s takes `l1`'s driver, `d`'s takes
    /// nothing (`l1` is no longer `d`'s). The record blamed is `f`'s, in every way and batch size,
    /// the partner read from the state the links were refused in, not from the store before the
    /// import.
    @Test(arguments: waysAndBatches)
    func aDeferredLinkIsJudgedByThePartnerTheImportLeft(way: Int, batch: Int) async throws {
        try await withStore { store, dir in
            try await driversAndLicenses(store, dir)
            let input = try write([
                #"{"entity":"Driver","name":"d","license":{"number":"l7"}}"#,
                #"{"entity":"Driver","name":"f","license":{"number":"l8"}}"#,
                #"{"entity":"License","number":"l1","driver":{"name":"f"}}"#,
                #"{"entity":"License","number":"l7","driver":{"name":"g"}}"#,
                #"{"entity":"Driver","name":"g"}"#,
                #"{"entity":"License","number":"l8","driver":{"name":"h"}}"#,
                #"{"entity":"Driver","name":"h"}"#,
            ], dir, "in.ndjson")
            let issue = try #require(await refused(store, input, way: way, batch: batch)?.issues.first)
            #expect(issue.line == 2 && issue.field == "license" && issue.reason.contains("replacing its license"),
                    "\(issue)")
        }
    }
}
