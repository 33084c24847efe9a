import Foundation
import Testing
@testable import Strata

/// References the input has not given where they are read: those a later record gives, and those
/// the store holds, are fine; the others are dangling, each reported at its line with nothing
/// written. Checked before the end of the input as well (once many are kept, those found by then
/// are dropped), which must not change the answer.
@Suite struct ImportDanglingReferenceTests {
    static let schemaText = #"""
    {"model":"tree","version":1,"entities":[
      {"name":"Item","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"parent","destination":"Item","inverse":"children","optional":true},
                        {"name":"children","destination":"Item","toMany":true,"inverse":"parent"}],
       "uniques":[["name"]]}
    ]}
    """#

    /// More references to stored objects than are kept before a check, with true forward
    /// references and dangling ones before, between and after the checks.
    @Test func danglingReferencesAreFoundAmongManyToTheStoreAndLaterRecords() async throws {
        let schema = try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("import-dangling")
        defer { try? FileManager.default.removeItem(at: dir) }
        let stored = (0..<100).map { #"{"entity":"Item","name":"p\#($0)"}"# }
        _ = try await Importer(store: store).run(files: [try writeInput(stored, in: dir, "base.ndjson")])

        let count = Importer.forwardCheckEvery + Importer.forwardCheckEvery / 2
        let ghosts = [3, Importer.forwardCheckEvery - 1, Importer.forwardCheckEvery + 7, count - 2]
        let laters = stride(from: 10, to: count, by: count / 5).map { $0 }
        var lines: [String] = []
        for i in 0..<count {
            let parent = ghosts.contains(i) ? "ghost\(i)" : laters.contains(i) ? "later\(i)" : "p\(i % 100)"
            lines.append(#"{"entity":"Item","name":"n\#(i)","parent":{"name":"\#(parent)"}}"#)
        }
        for i in laters { lines.append(#"{"entity":"Item","name":"later\#(i)"}"#) }
        let input = try writeInput(lines, in: dir)
        var options = ImportOptions()
        options.mode = .incremental
        options.oneTransactionMaxInputBytes = 0
        await #expect {
            _ = try await Importer(store: store, options: options).run(files: [input])
        } throws: { error in
            guard let failed = error as? ImportFailed else { return false }
            return failed.totalIssues == ghosts.count && failed.written == 0
                && failed.issues.map(\.line) == ghosts.map { $0 + 1 }
                && failed.issues.allSatisfy { $0.field == "parent" && $0.reason.contains("dangling reference") }
        }
        #expect(try store.mainContext.count(Query(entity: "Item")) == stored.count)

        // Without the dangling ones, everything is linked.
        for i in ghosts { lines[i] = #"{"entity":"Item","name":"n\#(i)"}"# }
        let good = try writeInput(lines, in: dir, "good.ndjson")
        let result = try await Importer(store: store, options: options).run(files: [good])
        #expect(result.records == lines.count)
        #expect(try store.verify().ok)
        let item = try #require(schema.entity(named: "Item")), parent = try #require(item.relationship(named: "parent"))
        let linked = try store.read { view in
            try view.fetch(Query(entity: "Item")).filter { try !view.targets(parent.tag, from: $0.id).isEmpty }.count
        }
        #expect(linked == count - ghosts.count)
    }

    /// A reference to a record validation rejected (here a key given twice, by another unique)
    /// says so, with that record's line: "no Member "c2" in the input" read as if the input had
    /// none. With `continueOnError` both records are rejected and the others written.
    /// A long chain of records each naming the next as its parent, the last naming a record that
    /// is nowhere: with errors tolerated every record of the chain is rejected, each naming the
    /// rejected record it depends on, in one more reading of the input. Each record took a
    /// reading of the whole input of its own (500 readings of 500 lines here; a chain of 5,000
    /// ran for more than 200 s).
    @Test func aLongChainEndingInADanglingReferenceIsRejectedInOneReading() async throws {
        let schema = try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("import-dangling-chain")
        defer { try? FileManager.default.removeItem(at: dir) }
        let n = 500
        var lines = (0..<n).map { #"{"entity":"Item","name":"c\#($0)","parent":{"name":"c\#($0 + 1)"}}"# }
        lines.append(#"{"entity":"Item","name":"c\#(n)","parent":{"name":"nowhere"}}"#)
        lines.append(#"{"entity":"Item","name":"apart"}"#)
        var options = ImportOptions()
        options.continueOnError = true
        options.keptRecordsMaxInputBytes = 0
        let input = try writeInput(lines, in: dir)
        let summary = try await Importer(store: store, options: options).run(files: [input])
        #expect(summary.records == 1)
        #expect(summary.rejected == n + 1)
        #expect(Importer.rereadsForTesting.withLock { $0.removeValue(forKey: input) } == 1)
        #expect(try store.mainContext.count(Query(entity: "Item")) == 1)
    }

    @Test func aReferenceToARejectedRecordNamesItsLine() async throws {
        let text = #"""
        {"model":"club","version":1,"entities":[
          {"name":"Team","attributes":[{"name":"name","type":"string"}],
           "relationships":[{"name":"members","destination":"Member","toMany":true,"inverse":"team"}],
           "uniques":[["name"]]},
          {"name":"Member","attributes":[{"name":"code","type":"string"},{"name":"email","type":"string"}],
           "relationships":[{"name":"team","destination":"Team","inverse":"members"}],
           "uniques":[["code"],["email"]]}
        ]}
        """#
        let schema = try Schema.parse(Array(text.utf8), source: "v1.json", expectedVersion: 1)
        let dir = temporaryDirectory("import-rejected-target")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try writeInput([
            #"{"entity":"Team","name":"early","members":[{"code":"c2"}]}"#,
            #"{"entity":"Member","code":"c1","email":"a@x"}"#,
            #"{"entity":"Member","code":"c2","email":"a@x"}"#,
            #"{"entity":"Team","name":"late","members":[{"code":"c1"},{"code":"c2"}]}"#,
            #"{"entity":"Team","name":"fine","members":[{"code":"c1"}]}"#,
        ], in: dir)
        for mode in [ImportMode.incremental, .bulk] {
            let store = try Store.temporary(schema: schema)
            defer { store.close() }
            var options = ImportOptions()
            options.mode = mode
            options.continueOnError = true
            let rejects = dir.appendingPathComponent("rejects-\(mode).ndjson").path
            options.rejectsPath = rejects
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.rejected == 3)
            let reasons = try String(contentsOfFile: rejects, encoding: .utf8).split(separator: "\n")
                .filter { $0.hasPrefix("# ") }.map { String($0.dropFirst(2)) }
            #expect(reasons.contains("\(input):3: email: duplicate key \"a@x\" of Member (first at \(input):2)"), "\(reasons)")
            for line in [1, 4] {
                #expect(reasons.contains("\(input):\(line): members: dangling reference: no Member \"c2\": its record at " +
                                         "\(input):3 was rejected"), "\(mode): \(reasons)")
            }
            #expect(try store.mainContext.count(Query(entity: "Team")) == 1)
            #expect(try store.mainContext.count(Query(entity: "Member")) == 1)
        }
    }

    /// With `continueOnError`: a record rejected only at the end of the input (its own reference
    /// dangling) had its key taken as the input's when the records naming it were read. Those
    /// are rejected too, whichever way they point, and so are the records naming them, each
    /// naming the line of the record it names; a record naming a key the store holds is not.
    /// With the records kept from validation and with the input read again.
    @Test(arguments: [ImportMode.incremental, .bulk], [true, false])
    func recordsNamingARecordRejectedAtTheEndAreRejectedToo(mode: ImportMode, kept: Bool) async throws {
        let schema = try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let dir = temporaryDirectory("import-dangling-chain")
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await Importer(store: store).run(files: [try writeInput([#"{"entity":"Item","name":"s"}"#], in: dir,
                                                                         "base.ndjson")])
        let input = try writeInput([
            #"{"entity":"Item","name":"c","parent":{"name":"b"}}"#,
            #"{"entity":"Item","name":"a","parent":{"name":"ghost"}}"#,
            #"{"entity":"Item","name":"b","parent":{"name":"a"}}"#,
            #"{"entity":"Item","name":"d"}"#,
            #"{"entity":"Item","name":"e","parent":{"name":"d"}}"#,
            #"{"entity":"Item","name":"s","parent":{"name":"ghost"}}"#,
            #"{"entity":"Item","name":"f","parent":{"name":"s"}}"#,
        ], in: dir)
        var options = ImportOptions()
        options.mode = mode
        options.continueOnError = true
        options.rejectsPath = dir.appendingPathComponent("rejects.ndjson").path
        if !kept { options.keptRecordsMaxInputBytes = 0 }
        let summary = try await Importer(store: store, options: options).run(files: [input])
        #expect(summary.rejected == 4 && summary.records == 3, "\(summary)")
        let reasons = try String(contentsOfFile: options.rejectsPath!, encoding: .utf8).split(separator: "\n")
            .filter { $0.hasPrefix("# ") }.map { String($0.dropFirst(2)) }
        #expect(Set(reasons) == [
            "\(input):2: parent: dangling reference: no Item \"ghost\" in the input or the store",
            "\(input):6: parent: dangling reference: no Item \"ghost\" in the input or the store",
            "\(input):3: parent: dangling reference: no Item \"a\": its record at \(input):2 was rejected",
            "\(input):1: parent: dangling reference: no Item \"b\": its record at \(input):3 was rejected",
        ], "\(reasons)")
        let names = try store.read { view in
            try Set(view.fetch(Query(entity: "Item")).compactMap { record -> String? in
                if case .string(let name) = record["name"] { name } else { nil }
            })
        }
        #expect(names == ["s", "d", "e", "f"])
        #expect(try store.verify().ok)
    }

    /// A reference to a record whose line failed its checks (an unknown field; a CSV cell that is
    /// not an id) names that line, as one to a record rejected for a key given twice does: the
    /// line's keys are read as far as they can be. It said "no Item "x" in the input or the
    /// store", which the input has.
    @Test func aReferenceToALineThatFailedItsChecksNamesIt() async throws {
        let schema = try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1)
        let dir = temporaryDirectory("import-rejected-line")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ndjson = try writeInput([
            #"{"entity":"Item","name":"y","parent":{"name":"x"}}"#,
            #"{"entity":"Item","name":"x","colour":"red"}"#,
        ], in: dir)
        let item = try #require(schema.entity(named: "Item"))
        let id = ObjectID(high: UInt64(item.tag) << 48 | 1, low: 2)
        let csv = dir.appendingPathComponent("Item.csv").path
        try Data("id,name,parent\n\(id),x,not-an-id\n,y,\(id)\n".utf8).write(to: URL(fileURLWithPath: csv))
        for (input, reference, line, target) in [(ndjson, "parent", 2, "\"x\""), (csv, "parent", 2, id.description)] {
            let store = try Store.temporary(schema: schema)
            defer { store.close() }
            var options = ImportOptions()
            options.continueOnError = true
            options.rejectsPath = dir.appendingPathComponent("rejects.ndjson").path
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.rejected == 2 && summary.records == 0, "\(summary)")
            let reasons = try String(contentsOfFile: options.rejectsPath!, encoding: .utf8).split(separator: "\n")
                .filter { $0.hasPrefix("# ") }.map { String($0.dropFirst(2)) }
            #expect(reasons.contains { $0.hasSuffix("\(reference): dangling reference: no Item \(target): its record at " +
                                                    "\(input):\(line) was rejected") }, "\(reasons)")
        }
    }
}
