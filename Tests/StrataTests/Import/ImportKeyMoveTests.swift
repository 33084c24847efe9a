import Foundation
import Testing
@testable import Strata

/// Records of an import that take a unique key away from an object of the store (a record with
/// the object's id and another value), and references to that key: every way of importing —
/// incremental in two passes or one transaction, bulk in memory or through the B-trees, any batch
/// size — links a reference to the object holding the key where the reference is read, as an
/// import reading the store after every record before it would, and a re-import changes nothing.
@Suite struct ImportKeyMoveTests {
    /// People with two unique keys and an optional boss.
    static let schemaText = #"""
    {"model":"staff","version":1,"entities":[
      {"name":"Person","attributes":[{"name":"name","type":"string"},{"name":"email","type":"string","optional":true}],
       "relationships":[{"name":"boss","destination":"Person","inverse":"staff"},
                        {"name":"staff","destination":"Person","toMany":true,"inverse":"boss"}],
       "uniques":[["name"],["email"]]}
    ]}
    """#

    /// The ways an import may go, by their options.
    static let ways: [(name: String, mode: ImportMode, batch: Int, inMemory: Bool, oneTransaction: Bool)] = [
        ("incremental, one transaction", .incremental, 1_000, false, true),
        ("incremental, two passes", .incremental, 1_000, false, false),
        ("incremental, batches of one", .incremental, 1, false, false),
        ("bulk in memory", .bulk, 1_000, true, false),
        ("bulk in memory, batches of one", .bulk, 1, true, false),
        ("bulk through the B-trees, batches of one", .bulk, 1, false, false),
    ]

    private func options(_ way: (name: String, mode: ImportMode, batch: Int, inMemory: Bool, oneTransaction: Bool))
        -> ImportOptions {
        var o = ImportOptions()
        o.mode = way.mode
        o.batchSize = way.batch
        if !way.inMemory { o.bulkInMemoryMaxInputBytes = 0 }
        if !way.oneTransaction { o.oneTransactionMaxInputBytes = 0 }
        return o
    }

    /// A store holding `a` and `z`; `body` gets it, a scratch directory and `a`'s id.
    private func withStore(_ body: (Store, URL, ObjectID) async throws -> Void) async throws {
        let schema = try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("import-key-move")
        defer { try? FileManager.default.removeItem(at: dir) }
        let base = try writeInput([#"{"entity":"Person","name":"a","email":"a@x"}"#,
                                   #"{"entity":"Person","name":"z","email":"z@x"}"#], in: dir, "base.ndjson")
        _ = try await Importer(store: store).run(files: [base])
        let tag = try #require(schema.entity(named: "Person")).tag
        let a = try #require(try store.read { try $0.resolve(.unique(entityTag: tag, constraint: 0, values: [.string("a")])) })
        try await body(store, dir, a)
    }

    /// Each person's boss's name (nil: none), by name.
    private func bosses(_ store: Store) throws -> [String: String?] {
        try store.read { view in
            let person = try #require(store.schema.entity(named: "Person"))
            let boss = try #require(person.relationship(named: "boss"))
            var out: [String: String?] = [:]
            for p in try view.fetch(Query(entity: "Person")) {
                guard case .string(let name) = p["name"] else { continue }
                let target = try view.targets(boss.tag, from: p.id).first.flatMap { try view.record($0) }
                if case .string(let b)? = target?["name"] { out[name] = b } else { out[name] = .some(nil) }
            }
            return out
        }
    }

    /// `c` names its boss by the key `a` before a record renames the stored `a` (by its id) and a
    /// later record gives the key `a` to a new person: the boss is the new `a`, whatever the way
    /// and the batches. A bulk import checking as it writes had linked `c` to the stored object
    /// (renamed `q`) when `c`'s batch was saved before the rename, and a re-import then moved the
    /// link.
    @Test(arguments: ways.indices)
    func aReferenceToAKeyALaterRecordGivesFindsThatRecord(way: Int) async throws {
        try await withStore { store, dir, a in
            let input = try writeInput([
                #"{"entity":"Person","name":"c","boss":{"name":"a"}}"#,
                #"{"entity":"Person","id":"\#(a)","name":"q","email":"a@x"}"#,
                #"{"entity":"Person","name":"a"}"#,
            ], in: dir)
            let first = try await Importer(store: store, options: options(Self.ways[way])).run(files: [input])
            #expect(first.records == 3)
            let none: String? = nil
            let expected: [String: String?] = ["c": "a", "q": none, "a": none, "z": none]
            #expect(try bosses(store) == expected, "\(Self.ways[way].name)")
            #expect(try store.verify().ok)
            let again = try await Importer(store: store, options: options(Self.ways[way])).run(files: [input])
            #expect(again.transactions == 0, "a re-import changed something (\(Self.ways[way].name))")
            #expect(try bosses(store)["c"] == "a")
        }
    }

    /// A record renames the stored `a` (by its id) and a later record names its boss by the key
    /// `a`, which nobody holds then: every way refuses the import, as one reading the store after
    /// the rename does. A bulk import read the store as its load found it, linked the reference,
    /// and failed or not by where its batches ended.
    @Test(arguments: ways.indices)
    func aReferenceToAKeyAnEarlierRecordTookAwayIsNotFoundInAnyWay(way: Int) async throws {
        try await withStore { store, dir, a in
            let input = try writeInput([
                #"{"entity":"Person","id":"\#(a)","name":"q","email":"a@x"}"#,
                #"{"entity":"Person","name":"c","boss":{"name":"a"}}"#,
            ], in: dir)
            // Found where the store refuses it, the reference is reported at its record's line
            // and field, as every input error is.
            await #expect("\(Self.ways[way].name)") {
                _ = try await Importer(store: store, options: options(Self.ways[way])).run(files: [input])
            } throws: { error in
                guard let issue = (error as? ImportFailed)?.issues.first else { return false }
                return issue.line == 2 && issue.field == "boss" && issue.reason.contains("no Person with name")
            }
            // Whatever an incremental import committed before the failure, `c` has no boss
            // named `a`, and the stored object is never linked.
            let b = try bosses(store)
            let none: String? = nil
            #expect(b["c"] == nil || b["c"] == .some(none), "\(Self.ways[way].name): \(b)")
            #expect(try store.verify().ok)
        }
    }

    /// A record of the store restated with a reference to a later record, then renamed by a
    /// record after it: the link, saved once its target is written, names its source by the key
    /// that is gone. Refused in every way, at the restating record's line and field (the store's
    /// refusal was printed alone).
    @Test(arguments: ways.indices)
    func aLinkWhoseSourceKeyALaterRecordTookAwayIsReportedAtItsRecord(way: Int) async throws {
        try await withStore { store, dir, a in
            let input = try writeInput([
                #"{"entity":"Person","name":"a","boss":{"name":"d"}}"#,
                #"{"entity":"Person","id":"\#(a)","name":"q","email":"a@x"}"#,
                #"{"entity":"Person","name":"d"}"#,
            ], in: dir)
            await #expect("\(Self.ways[way].name)") {
                _ = try await Importer(store: store, options: options(Self.ways[way])).run(files: [input])
            } throws: { error in
                guard let issue = (error as? ImportFailed)?.issues.first else { return false }
                return issue.line == 1 && issue.field == "boss" && issue.reason.contains("(source)")
            }
            #expect(try store.verify().ok)
        }
    }

    /// A reference to a stored key, then a record that renames that object (by its id) in the
    /// same batch: the reference names the object as it was when it was read, whatever the batch
    /// size. A batch saved its records before their links, so the rename came first and the
    /// import failed, blaming the reference, except with batches of one.
    @Test(arguments: ways.indices)
    func aReferenceReadBeforeALaterRecordRenamesItsTargetLinksThatObject(way: Int) async throws {
        try await withStore { store, dir, a in
            let input = try writeInput([
                #"{"entity":"Person","name":"c","boss":{"name":"a"}}"#,
                #"{"entity":"Person","id":"\#(a)","name":"q","email":"a@x"}"#,
            ], in: dir)
            let summary = try await Importer(store: store, options: options(Self.ways[way])).run(files: [input])
            #expect(summary.records == 2, "\(Self.ways[way].name)")
            let found = try bosses(store)
            #expect(found["c"] == "q", "\(Self.ways[way].name): \(found)")
            #expect(try store.verify().ok)
        }
    }

    /// Records of an entity with two unique keys, each naming a stored person by key: none takes
    /// that key, so they stay in one batch (one transaction), and every link is made.
    @Test func recordsThatTakeNoReferencedKeyStayInOneBatch() async throws {
        try await withStore { store, dir, _ in
            let lines = (0..<10).map { #"{"entity":"Person","name":"p\#($0)","email":"p\#($0)@x","boss":{"name":"z"}}"# }
            let summary = try await Importer(store: store, options: options(Self.ways[1])).run(files: [
                try writeInput(lines, in: dir)])
            #expect(summary.records == 10 && summary.transactions == 1, "\(summary.transactions) transactions")
            #expect(try bosses(store).filter { $0.value == "z" }.count == 10)
        }
    }

    /// A long key in a refusal found only at write time — a clash with the key a stored person
    /// holds under the other constraint, a reference to a key an earlier record took away — is
    /// shown cut after 64 characters with its length, in every way of importing, as input
    /// errors found while validating are: never echoed whole.
    @Test(arguments: ways.indices)
    func longKeysAreShownCutInWriteTimeRefusals(way: Int) async throws {
        try await withStore { store, dir, a in
            let long = String(repeating: "e", count: 500)
            let setUp = try writeInput([#"{"entity":"Person","id":"\#(a)","name":"a","email":"\#(long)"}"#], in: dir)
            _ = try await Importer(store: store).run(files: [setUp])
            let clash = try writeInput([#"{"entity":"Person","name":"b","email":"\#(long)"}"#], in: dir, "clash.ndjson")
            let takeAway = try writeInput([
                #"{"entity":"Person","id":"\#(a)","name":"a","email":"new@x"}"#,
                #"{"entity":"Person","name":"c","email":"c@x","boss":{"email":"\#(long)"}}"#,
            ], in: dir, "take-away.ndjson")
            for (input, kind) in [(clash, "is already used by"), (takeAway, "no Person with email")] {
                await #expect("\(Self.ways[way].name), \(kind)") {
                    _ = try await Importer(store: store, options: options(Self.ways[way])).run(files: [input])
                } throws: { error in
                    let text = "\(error)"
                    return text.contains(kind) && text.contains("\"" + String(repeating: "e", count: 64) + "…(500 bytes)\"")
                        && !text.contains(String(repeating: "e", count: 65))
                }
            }
        }
    }

    /// With ``ImportOptions/continueOnError``, a record refused at write time (its upsert of the
    /// stored `a` gives it the email `z` holds) is not written, nor is its link to a boss later in
    /// the input: the link named `a` by key, and was made to the stored `a`. It is counted as
    /// skipped, and nothing but the record's own line goes to the rejects file.
    @Test(arguments: [ImportMode.incremental, .bulk])
    func aRejectedRecordsLinksToLaterRecordsAreNotMade(mode: ImportMode) async throws {
        try await withStore { store, dir, _ in
            let input = try writeInput([
                #"{"entity":"Person","name":"a","email":"z@x","boss":{"name":"n"}}"#,
                #"{"entity":"Person","name":"n"}"#,
            ], in: dir)
            let rejects = dir.appendingPathComponent("rejects.ndjson").path
            var o = ImportOptions()
            o.mode = mode
            o.continueOnError = true
            o.rejectsPath = rejects
            let summary = try await Importer(store: store, options: o).run(files: [input])
            #expect(summary.rejected == 1 && summary.skippedLinks == 1, "\(summary)")
            let found = try bosses(store)
            #expect(found["a"] == .some(nil), "\(found)")
            #expect(found["n"] == .some(nil), "\(found)")
            let lines = try String(contentsOfFile: rejects, encoding: .utf8).split(separator: "\n")
            #expect(lines.count == 2 && lines[0].hasPrefix("# \(input):1: email: "), "\(lines)")
        }
    }

    /// The write progress of an import that goes on after a record the store refused counts the
    /// records written, not the refused one (the batch was counted whole).
    @Test func writeProgressCountsNoRefusedRecord() async throws {
        try await withStore { store, dir, _ in
            let input = try writeInput([
                #"{"entity":"Person","name":"a","email":"z@x"}"#,
                #"{"entity":"Person","name":"n"}"#,
                #"{"entity":"Person","name":"m"}"#,
            ], in: dir)
            var o = ImportOptions()
            o.mode = .incremental
            o.continueOnError = true
            let importer = Importer(store: store, options: o)
            let collected = Task {
                var all: [ImportProgress] = []
                for await p in importer.progress { all.append(p) }
                return all
            }
            let summary = try await importer.run(files: [input])
            #expect(summary.records == 2 && summary.rejected == 1, "\(summary)")
            let writing = await collected.value.filter { $0.phase == .writing }
            #expect(writing.last?.records == 2, "\(writing.map(\.records))")
        }
    }
}
