import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Two processes writing to one store at the same time (LMDB's write lock is shared across
/// processes; each Strata writer numbers its transactions inside the write transaction).
@Suite(.serialized) struct TwoProcessWriteTests {
    /// A library in NDJSON: the same 12 genres in every file, `records` artists, albums and tracks
    /// of their own (seeded ids), references pointing backwards.
    func generate(_ url: URL, records: Int, seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        func uuid() -> String {
            let hex = String(format: "%016llx%016llx", rng.next(), rng.next())
            let c = Array(hex)
            return "\(String(c[0..<8]))-\(String(c[8..<12]))-4\(String(c[13..<16]))-8\(String(c[17..<20]))-\(String(c[20..<32]))"
        }
        var lines = (0..<12).map { #"{"entity":"Genre","name":"genre \#($0)"}"# }
        var artists: [String] = [], albums: [String] = []
        for a in 0..<records / 100 {
            artists.append(uuid())
            lines.append(#"{"entity":"Artist","mbid":"\#(artists[a])","name":"artist \#(seed)-\#(a)"}"#)
        }
        for a in 0..<records / 10 {
            albums.append(uuid())
            lines.append(#"{"entity":"Album","mbid":"\#(albums[a])","title":"album \#(a)","artist":{"mbid":"\#(artists[a % artists.count])"}}"#)
        }
        for t in 0..<records - 12 - artists.count - albums.count {
            lines.append(#"{"entity":"Track","mbid":"\#(uuid())","title":"track \#(t)","durationSeconds":\#(60 + t % 600),"addedAt":"2025-01-01T00:00:00Z","album":{"mbid":"\#(albums[t % albums.count])"},"genre":{"name":"genre \#(t % 12)"}}"#)
        }
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: url)
    }

    /// The distinct unique keys per entity in NDJSON files (name for Genre and Playlist, mbid otherwise).
    func distinctKeys(_ files: [URL]) throws -> [String: Int] {
        var keys: [String: Set<String>] = [:]
        for f in files {
            for line in try String(contentsOf: f, encoding: .utf8).split(separator: "\n") {
                let v = try JSONValue.parse(String(line))
                guard case .string(let entity)? = v["entity"] else { continue }
                let key = entity == "Genre" || entity == "Playlist" ? v["name"] : v["mbid"]
                if case .string(let k)? = key { keys[entity, default: []].insert(k) }
            }
        }
        return keys.mapValues(\.count)
    }

    @Test func twoConcurrentImportsBothLandWithContiguousTransactionIDs() async throws {
        let dir = temporaryDirectory("two-imports")
        defer { try? FileManager.default.removeItem(at: dir) }
        let a = dir.appendingPathComponent("a.ndjson"), b = dir.appendingPathComponent("b.ndjson")
        try generate(a, records: 4000, seed: 11)
        try generate(b, records: 4000, seed: 12)
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)

        let outA = dir.appendingPathComponent("a.out"), outB = dir.appendingPathComponent("b.out")
        let pa = try spawn(storectlPath, ["import", store, a.path, "--batch", "100", "--json", "--quiet", "--import-id", "A"], stdout: outA)
        let pb = try spawn(storectlPath, ["import", store, b.path, "--batch", "100", "--json", "--quiet", "--import-id", "B"], stdout: outB)
        let (ra, rb) = (try await pa.finished(), try await pb.finished())
        #expect(ra.exited && ra.code == 0, "\((try? String(contentsOfFile: outA.path + ".err", encoding: .utf8)) ?? "")")
        #expect(rb.exited && rb.code == 0, "\((try? String(contentsOfFile: outB.path + ".err", encoding: .utf8)) ?? "")")
        let sa = try JSONValue.parse(String(contentsOf: outA, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines))
        let sb = try JSONValue.parse(String(contentsOf: outB, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines))
        guard case .int(let ta)? = sa["transactions"], case .int(let tb)? = sb["transactions"] else {
            Issue.record("summaries lack transactions: \(sa) \(sb)")
            return
        }

        // The log: ids 1…N with no gap, each import's transactions tagged with its id, and interleaved.
        let log = try await storectl("log", store, "--json")
        #expect(log.status == 0, "\(log.stderr)")
        let entries = try log.stdout.split(separator: "\n").map { try JSONValue.parse(String($0)) }
        let ids = entries.compactMap { e -> Int64? in if case .int(let t)? = e["transaction"] { t } else { nil } }
        #expect(ids == Array(1...Int64(ids.count)), "transaction ids are not contiguous")
        #expect(Int64(ids.count) == ta + tb, "log has \(ids.count) transactions, the imports reported \(ta) + \(tb)")
        let tags = entries.map { $0["metadata"]?["importID"] }
        #expect(tags.filter { $0 == .string("A") }.count == Int(ta) && tags.filter { $0 == .string("B") }.count == Int(tb))

        // Every record of both inputs is there.
        let want = try distinctKeys([a, b])
        let info = try JSONValue.parse(try await storectl("info", store, "--json").stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        for (entity, n) in want { #expect(info["entities"]?[entity] == .int(Int64(n)), "\(entity): \(String(describing: info["entities"]?[entity])), expected \(n)") }
        let verify = try await storectl("verify", store, "--quiet")
        #expect(verify.status == 0, "\(verify.stderr)")
        let switches = zip(tags, tags.dropFirst()).filter { $0 != $1 }.count
        print("two imports: \(ta) + \(tb) transactions, \(switches) switches between the processes in the log")
    }

    /// Two imports of the same file at once: each batch is written by whichever import gets
    /// there first and changes nothing for the other, whose save returns the store's last
    /// transaction id (the first import's). Each summary reports exactly the transactions the
    /// log holds under its import id: their number, the first and the last.
    @Test func twoImportsOfTheSameFileReportOnlyTheirOwnTransactions() async throws {
        let dir = temporaryDirectory("two-imports-same")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson")
        try generate(input, records: 4000, seed: 21)
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let outA = dir.appendingPathComponent("a.out"), outB = dir.appendingPathComponent("b.out")
        let pa = try spawn(storectlPath, ["import", store, input.path, "--batch", "50", "--json", "--quiet", "--import-id", "A"], stdout: outA)
        let pb = try spawn(storectlPath, ["import", store, input.path, "--batch", "50", "--json", "--quiet", "--import-id", "B"], stdout: outB)
        let (ra, rb) = (try await pa.finished(), try await pb.finished())
        #expect(ra.exited && ra.code == 0, "\((try? String(contentsOfFile: outA.path + ".err", encoding: .utf8)) ?? "")")
        #expect(rb.exited && rb.code == 0, "\((try? String(contentsOfFile: outB.path + ".err", encoding: .utf8)) ?? "")")
        let log = try await storectl("log", store, "--json")
        #expect(log.status == 0, "\(log.stderr)")
        let entries = try log.stdout.split(separator: "\n").map { try JSONValue.parse(String($0)) }
        var total: Int64 = 0
        for (id, out) in [("A", outA), ("B", outB)] {
            let summary = try JSONValue.parse(String(contentsOf: out, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines))
            let mine = entries.filter { $0["metadata"]?["importID"] == .string(id) }.compactMap { e -> Int64? in
                if case .int(let t)? = e["transaction"] { t } else { nil }
            }
            #expect(summary["transactions"] == .int(Int64(mine.count)), "\(id): \(summary), the log holds \(mine.count)")
            #expect(summary["firstTransaction"] == (mine.min().map { .int($0) } ?? .null), "\(id): \(summary), log \(mine)")
            #expect(summary["lastTransaction"] == (mine.max().map { .int($0) } ?? .null), "\(id): \(summary), log \(mine)")
            total += Int64(mine.count)
        }
        #expect(total == Int64(entries.count), "transactions of neither import in the log")
    }

    /// Two child processes, each with two concurrent savers, on one store: every acknowledged save
    /// is in the log under its own id, ids are contiguous, verify passes.
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first"))
    func twoSavingProcessesInterleaveWithoutLoss() async throws {
        let dir = temporaryDirectory("two-savers")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        do { try Store.open(at: store, schema: try librarySchema()).close() }
        let outA = dir.appendingPathComponent("a"), outB = dir.appendingPathComponent("b")
        let args = { (p: String) in ["--store", store.path, "--workers", "2", "--saves", "120", "--partition", p, "--run", p, "--seed", p == "pa" ? "1" : "2"] }
        let pa = try startCrashChild("save", args("pa"), stdout: outA)
        let pb = try startCrashChild("save", args("pb"), stdout: outB)
        let (ra, rb) = (try await pa.finished(), try await pb.finished())
        #expect(ra.exited && ra.code == 0 && rb.exited && rb.code == 0,
                "\((try? String(contentsOfFile: outA.path + ".err", encoding: .utf8)) ?? "") \((try? String(contentsOfFile: outB.path + ".err", encoding: .utf8)) ?? "")")
        let acks = (completeLines(outA) + completeLines(outB)).compactMap(AcknowledgedSave.init)
        #expect(acks.count == 480)
        #expect(Set(acks.map(\.tx)).count == acks.count, "two saves acknowledged with the same transaction id")
        let s = try Store.open(at: store, schema: try librarySchema())
        defer { s.close() }
        let entries = try s.transactions()
        #expect(entries.map(\.transactionID.rawValue) == Array(1...UInt64(entries.count)))
        #expect(entries.count == 480)
        for a in acks {
            #expect(try s.changes(in: a.tx).metadata["marker"] == a.marker)
        }
        for e in entries { #expect(partialTransactionProblem(e) == nil, "\(partialTransactionProblem(e) ?? "")") }
        let report = try s.verify()
        #expect(report.ok, "\(report.problems)")
        let first = entries.map { $0.metadata["marker"]?.hasPrefix("pa") == true }
        print("two saving processes: \(entries.count) transactions, \(zip(first, first.dropFirst()).filter { $0 != $1 }.count) switches between the processes")
    }
}
