import Foundation
import LibraryModel
import Testing
@testable import Strata

/// An incremental import of a small input that stops at its first bad record is checked and
/// written in one pass, in one write transaction committed at the end
/// (``ImportOptions/oneTransactionMaxInputBytes``). It must leave the state two passes leave,
/// with a log entry per batch and one commit, write nothing when a record is bad or the writer
/// refuses a batch, show readers none of it or all of it, keep the saves made meanwhile, and
/// read the input again in two passes where one pass could answer differently.
@Suite struct OneTransactionImportTests {
    private func generate(_ records: Int, shape: String, seed: Int, in dir: URL) async throws -> String {
        try await generateInput(records, shape: shape, seed: seed, in: dir)
    }

    private func write(_ lines: [String], in dir: URL, _ name: String = "in.ndjson") throws -> String {
        try writeInput(lines, in: dir, name)
    }

    private func options(batch: Int = 100, oneTransaction: Bool = true) -> ImportOptions {
        var o = ImportOptions()
        o.mode = .incremental
        o.batchSize = batch
        if !oneTransaction { o.oneTransactionMaxInputBytes = 0 }
        return o
    }

    private func genres(_ range: Range<Int>) -> [String] { range.map { #"{"entity":"Genre","name":"G\#($0)"}"# } }

    /// An NDJSON line of track `i` (1–9) whose genre is the one named `genre`.
    private func track(_ i: Int = 1, genre: String) -> String {
        #"{"entity":"Track","mbid":"00000000-0000-4000-8000-00000000000\#(i)","title":"t\#(i)","# +
            #""durationSeconds":1,"addedAt":"2024-01-01T00:00:00Z","genre":{"name":"\#(genre)"}}"#
    }

    @Test func aSmallImportIsCommittedOnceWithATransactionPerBatch() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let seeded = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let input = try write(genres(0..<20), in: dir)
            var o = options(batch: 2)
            o.importID = "once"
            let commits = store.statistics.lmdbCommits
            let summary = try await Importer(store: store, options: o).run(files: [input])
            #expect(summary.oneTransaction && summary.mode == .incremental, "\(summary)")
            #expect(summary.records == 20 && summary.transactions == 10, "\(summary)")
            #expect(store.statistics.lmdbCommits - commits == 1)
            let mine = try store.transactions(from: seeded.next)
            #expect(mine.map(\.transactionID) == (1...10).map { TransactionID(seeded.rawValue + UInt64($0)) })
            #expect(mine.allSatisfy { $0.metadata["importID"] == "once" })
            #expect(mine.compactMap { $0.metadata["batch"] } == (1...10).map(String.init))
            #expect(summary.firstTransaction == seeded.next && summary.lastTransaction == mine.last?.transactionID)
            #expect(try store.mainContext.count(Genre.self) == 21)
            #expect(try store.verify().ok)
        }
    }

    /// By default an input of tens of thousands of records (here about 10 MB, over the 8 MiB
    /// the default once was) is one pass and one commit, which copies each page it changes once:
    /// the same state as two passes, which commit a group of batches at a time.
    @Test func anInputOfTenMegabytesIsOneTransactionByDefault() async throws {
        let dir = temporaryDirectory("one-transaction-default")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(40_000, shape: "library", seed: 5, in: dir)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: input)[.size] as? Int)
        #expect(size > 8 << 20 && size <= ImportOptions().oneTransactionMaxInputBytes, "\(size) bytes")
        var states: [Bool: [String]] = [:]
        for oneTransaction in [true, false] {
            try await withLibraryStore { store in
                var o = ImportOptions()
                o.mode = .incremental
                if !oneTransaction { o.oneTransactionMaxInputBytes = 0 }
                let commits = store.statistics.lmdbCommits
                let summary = try await Importer(store: store, options: o).run(files: [input])
                #expect(summary.oneTransaction == oneTransaction && summary.records == 40_000, "\(summary)")
                if oneTransaction { #expect(store.statistics.lmdbCommits - commits == 1) }
                #expect(try store.verify().ok)
                states[oneTransaction] = try canonicalState(store)
            }
        }
        #expect(states[true] == states[false])
        #expect(states[true]?.isEmpty == false)
    }

    /// Batches of one record, read while the writer applies the ones before, reach it together:
    /// each is still its own save and log entry, in the input's order, numbered in order; and a
    /// batch the writer refuses among them leaves nothing written.
    @Test func smallBatchesAppliedTogetherKeepOneEntryEachInOrder() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        var config = StoreConfiguration()
        config.maxChangesPerSave = 1
        try await withLibraryStore(config) { store in
            let seeded = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let input = try write(genres(0..<3_000), in: dir)
            let summary = try await Importer(store: store, options: options(batch: 1)).run(files: [input])
            #expect(summary.oneTransaction && summary.records == 3_000 && summary.transactions == 3_000, "\(summary)")
            let mine = try store.transactions(from: seeded.next)
            #expect(mine.map(\.transactionID) == (1...3_000).map { TransactionID(seeded.rawValue + UInt64($0)) })
            #expect(mine.compactMap { $0.metadata["batch"] } == (1...3_000).map(String.init))
            let named = try mine.map { tx in
                try store.changes(in: tx.transactionID).changes.compactMap { change -> String? in
                    guard case .insert(_, let values) = change else { return nil }
                    return values.lazy.compactMap { if case .string(let name) = $0 { name } else { nil } }.first
                }
            }
            #expect(named == (0..<3_000).map { ["G\($0)"] })
            #expect(try store.verify().ok)

            // A track of two changes (its record, its link to a genre of the input) among a
            // thousand genres in batches of one: refused.
            let refusedTrack = track(genre: "G5000")
            let refused = try write(genres(5_000..<5_500) + [refusedTrack] + genres(5_500..<6_000), in: dir, "refused.ndjson")
            let before = try store.lastTransactionID
            do {
                _ = try await Importer(store: store, options: options(batch: 1)).run(files: [refused])
                Issue.record("the import succeeded")
            } catch StrataError.saveTooLarge(let changes, let limit) {
                #expect(changes == 2 && limit == 1)
            }
            #expect(try store.lastTransactionID == before)
            #expect(try store.mainContext.count(Genre.self) == 3_001)
        }
    }

    /// A batch the writer refuses, with a bad record later in the input: the bad record is
    /// reported, as two passes (which check the whole input before writing) report it; the
    /// import stopped at the refusal and never read it. Without the bad record the refusal
    /// stands. Nothing is written either way.
    @Test func aRefusedBatchDoesNotHideABadRecordAfterIt() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        var config = StoreConfiguration()
        config.maxChangesPerSave = 1
        try await withLibraryStore(config) { store in
            let seeded = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let refusedTrack = track(genre: "G0")
            let bad = #"{"entity":"Genre","name":5}"#
            for oneTransaction in [true, false] {
                let input = try write(genres(0..<3) + [refusedTrack] + genres(3..<300) + [bad], in: dir)
                await #expect("one transaction: \(oneTransaction)") {
                    _ = try await Importer(store: store, options: options(batch: 1, oneTransaction: oneTransaction))
                        .run(files: [input])
                } throws: { error in
                    guard let failed = error as? ImportFailed, failed.totalIssues == 1, failed.written == 0,
                          let issue = failed.issues.first else { return false }
                    return issue.line == 302 && issue.field == "name"
                }
            }
            let refusedOnly = try write(genres(0..<3) + [refusedTrack] + genres(3..<300), in: dir, "refused.ndjson")
            await #expect(throws: StrataError.self) {
                _ = try await Importer(store: store, options: options(batch: 1)).run(files: [refusedOnly])
            }
            #expect(try store.lastTransactionID == seeded)
        }
    }

    /// The library's records into a store holding others (upserts, references to the store's
    /// objects and to later records of the input), and the link-heavy catalog (references in
    /// any order within the file): the same state either way.
    @Test(arguments: ["library", "catalog"])
    func oneTransactionAndTwoPassesGiveTheSameState(shape: String) async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schemaDirectory = repositoryRoot.appendingPathComponent("Schemas/\(shape)")
        let base = await shape == "library" ? try generate(1_500, shape: shape, seed: 5, in: dir) : nil
        let input = try await generate(shape == "library" ? 400 : 800, shape: shape, seed: 6, in: dir)
        var states: [Bool: [String]] = [:]
        for oneTransaction in [true, false] {
            let store = try Store.temporary(schema: try Schema.load(directory: schemaDirectory))
            defer { store.close() }
            if let base { _ = try await Importer(store: store, options: options(oneTransaction: false)).run(files: [base]) }
            let summary = try await Importer(store: store, options: options(oneTransaction: oneTransaction))
                .run(files: [input])
            #expect(summary.oneTransaction == oneTransaction, "\(summary)")
            #expect(try store.verify().ok)
            states[oneTransaction] = try canonicalState(store)
        }
        #expect(states[true] == states[false])
        #expect(states[true]?.isEmpty == false)
    }

    /// The batches' log entries are encoded beside the writer and put into the log before the
    /// commit: each is stored exactly as the writer stores a save's entry (compressed, the large
    /// ones), under its own id, and decodes to the changes the batch made.
    @Test func eachBatchsEntryIsStoredAsASavesEntryIs() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(600, shape: "library", seed: 8, in: dir)
        try await withLibraryStore { store in
            let summary = try await Importer(store: store, options: options(batch: 150)).run(files: [input])
            #expect(summary.oneTransaction && summary.transactions == 4, "\(summary)")
            let entries = try store.transactions(from: TransactionID(1))
            #expect(entries.map(\.transactionID.rawValue) == [1, 2, 3, 4])
            var compressed = 0
            for entry in entries {
                let stored = try #require(try store.read { view in
                    try view.txn.withValue(store.env[.log], key: entry.transactionID.keyBytes) { Array($0) }
                })
                #expect(stored == LogEntryCodec.encode(entry), "transaction \(entry.transactionID)")
                if stored.first == LogEntryCodec.compressedFormat { compressed += 1 }
            }
            #expect(compressed == 4, "150 records make an entry worth compressing")
            #expect(try store.verify().ok)
        }
    }

    @Test func aBadRecordLeavesNothingWritten() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let seeded = try await store.save { $0.insert(Genre(name: "Jazz")) }
            // Thirty good records (six batches applied by the writer first), then a reference
            // found dangling once the whole input is read.
            let input = try write(genres(0..<30) + [
                track(genre: "Nope"),
            ], in: dir)
            let commits = store.statistics.lmdbCommits
            do {
                _ = try await Importer(store: store, options: options(batch: 5)).run(files: [input])
                Issue.record("the import succeeded")
            } catch let failure as ImportFailed {
                #expect(failure.issues.map(\.description) == ["\(input):31: genre: dangling reference: no Genre " +
                                                               "\"Nope\" in the input or the store"],
                        "\(failure.issues)")
            }
            #expect(try store.lastTransactionID == seeded)
            #expect(store.statistics.lmdbCommits == commits)
            #expect(try store.mainContext.count(Genre.self) == 1)
            // The writer is free again.
            _ = try await store.save { $0.insert(Genre(name: "After")) }
            #expect(try store.verify().ok)
        }
    }

    /// A batch the writer refuses (larger than `maxChangesPerSave`, which validation does not
    /// know) ends the import with its error, and the batches the writer had applied before it
    /// are not written either: two passes would have committed them.
    @Test func aBatchTheWriterRefusesLeavesNothingWritten() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        var config = StoreConfiguration()
        config.maxChangesPerSave = 5
        try await withLibraryStore(config) { store in
            let seeded = try await store.save { $0.insert(Genre(name: "Jazz")) }
            // Two batches of three genres (three changes each), then three tracks with a genre
            // of the input each (six changes; a genre of the store, linked before two passes would
            // link it, would send the import back to them when refused, as in
            // aBatchRefusedAfterAnEarlyLinkIsImportedInTwoPasses).
            let tracks = (1...3).map { track($0, genre: "G0") }
            let input = try write(genres(0..<6) + tracks, in: dir)
            do {
                _ = try await Importer(store: store, options: options(batch: 3)).run(files: [input])
                Issue.record("the import succeeded")
            } catch StrataError.saveTooLarge(let changes, let limit) {
                #expect(changes == 6 && limit == 5)
            }
            #expect(try store.lastTransactionID == seeded)
            #expect(try store.mainContext.count(Genre.self) == 1)
            #expect(try store.verify().ok)
        }
    }

    /// A reader sampling the store while the import runs sees none of it or all of it.
    @Test func readersSeeNothingOfTheImportUntilAllOfIt() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(3_000, shape: "library", seed: 7, in: dir)
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let tracks = try #require(store.schema.entity(named: "Track"))
            let (summary, seen) = try await countsSeen(of: tracks, in: store) {
                try await Importer(store: store, options: options(batch: 100)).run(files: [input])
            }
            let total = try store.read { try $0.objectCount(tracks) }
            #expect(summary.oneTransaction && summary.transactions > 10, "\(summary)")
            #expect(total > 1000)
            #expect(seen.isSubset(of: [0, total]), "a reader saw part of the import: \(seen.sorted())")
        }
    }

    /// Saves made while the writer is held wait for the import's commit; none is lost.
    @Test func savesDuringTheImportAreKept() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(2_000, shape: "library", seed: 8, in: dir)
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let importing = Task { try await Importer(store: store, options: options()).run(files: [input]) }
            let savers = (0..<20).map { i in Task { try await store.save { $0.insert(Genre(name: "saved \(i)")) } } }
            var saved: [TransactionID] = []
            for s in savers { saved.append(try await s.value) }
            let summary = try await importing.value
            #expect(summary.oneTransaction, "\(summary)")
            #expect(Set(saved).count == 20)
            let names = Set(try store.mainContext.fetch(Genre.self).map(\.name))
            #expect((0..<20).allSatisfy { names.contains("saved \($0)") })
            // No save's transaction falls inside the import's.
            let first = try #require(summary.firstTransaction), last = try #require(summary.lastTransaction)
            #expect(saved.allSatisfy { $0 < first || $0 > last })
            #expect(try store.verify().ok)
        }
    }

    /// A record with an explicit id may take a unique key from another object, which the store's
    /// answers to later references would not see before the commit: the import reads its input
    /// again in two passes, with their outcome.
    @Test func aRecordWithAnExplicitIdIsImportedInTwoPasses() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let jazz = Genre(name: "Jazz")
            _ = try await store.save { $0.insert(jazz) }
            let input = try write([
                #"{"entity":"Genre","name":"A"}"#,
                #"{"entity":"Genre","name":"B"}"#,
                #"{"entity":"Genre","id":"\#(jazz.id)","name":"Blues"}"#,
                #"{"entity":"Genre","name":"C"}"#,
            ], in: dir)
            let summary = try await Importer(store: store, options: options(batch: 1)).run(files: [input])
            #expect(!summary.oneTransaction && summary.transactions == 4, "\(summary)")
            #expect(Set(try store.mainContext.fetch(Genre.self).map(\.name)) == ["Blues", "A", "B", "C"])
            #expect(try store.mainContext.object(Genre.self, id: jazz.id)?.name == "Blues")
            #expect(try store.verify().ok)
        }
    }

    /// A record linked to an object of the store by a key that a later record of the input gives
    /// (an artist naming an album the file describes again further on, with another artist):
    /// two passes link it after that record, so the import goes back to them, and the album
    /// ends with the artist that named it, as two passes leave it.
    @Test func aKeyLinkedInTheStoreAndGivenLaterSendsTheImportToTwoPasses() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        let album = "00000000-0000-4000-8000-0000000000a1", before = "00000000-0000-4000-8000-0000000000b1"
        let named = "00000000-0000-4000-8000-0000000000b2"
        let seed = try write([
            #"{"entity":"Artist","mbid":"\#(before)","name":"Before"}"#,
            #"{"entity":"Album","mbid":"\#(album)","title":"X","artist":{"mbid":"\#(before)"}}"#,
        ], in: dir, "seed.ndjson")
        var states: [Bool: [String]] = [:]
        for oneTransaction in [true, false] {
            try await withLibraryStore { store in
                _ = try await Importer(store: store, options: options(oneTransaction: false)).run(files: [seed])
                let input = try write([
                    #"{"entity":"Artist","mbid":"\#(named)","name":"Named","albums":[{"mbid":"\#(album)"}]}"#,
                    #"{"entity":"Album","mbid":"\#(album)","title":"X again","artist":{"mbid":"\#(before)"}}"#,
                ], in: dir)
                let summary = try await Importer(store: store, options: options(batch: 1, oneTransaction: oneTransaction))
                    .run(files: [input])
                #expect(!summary.oneTransaction, "\(summary)")
                states[oneTransaction] = try canonicalState(store)
                let x = try #require(try store.mainContext.fetch(Album.self, where: Album.title == "X again").first)
                #expect(try store.mainContext.related(x.id, Album.artist)?.name == "Named")
            }
        }
        #expect(states[true] == states[false])
    }

    /// A reference linked at once to an object of the store whose record comes later makes the
    /// writer refuse its batch (the passport it takes is another person's required one, which
    /// two passes would have freed first by waiting for the passport's record): the import goes
    /// back to two passes, which succeed.
    @Test func aBatchRefusedAfterAnEarlyLinkIsImportedInTwoPasses() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try Schema.parse(Array(#"""
            {"model":"papers","version":1,"entities":[
              {"name":"Person","attributes":[{"name":"name","type":"string"}],
               "relationships":[{"name":"passport","destination":"Passport","inverse":"holder","optional":false}],
               "uniques":[["name"]]},
              {"name":"Passport","attributes":[{"name":"number","type":"string"}],
               "relationships":[{"name":"holder","destination":"Person","inverse":"passport"}],
               "uniques":[["number"]]}
            ]}
            """#.utf8), source: "v1.json", expectedVersion: 1)
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let seed = try write([
            #"{"entity":"Passport","number":"k"}"#,
            #"{"entity":"Passport","number":"k2"}"#,
            #"{"entity":"Person","name":"p1","passport":{"number":"k"}}"#,
        ], in: dir, "seed.ndjson")
        _ = try await Importer(store: store, options: options(oneTransaction: false)).run(files: [seed])
        let input = try write([
            #"{"entity":"Person","name":"p2","passport":{"number":"k"}}"#,
            #"{"entity":"Person","name":"p1","passport":{"number":"k2"}}"#,
            #"{"entity":"Passport","number":"k"}"#,
        ], in: dir)
        let summary = try await Importer(store: store, options: options(batch: 1)).run(files: [input])
        #expect(!summary.oneTransaction && summary.records == 3, "\(summary)")
        let passports = try store.read { view -> [String: String] in
            let person = try #require(schema.entity(named: "Person"))
            let rel = try #require(person.relationship(named: "passport"))
            var out: [String: String] = [:]
            for p in try view.fetch(Query(entity: "Person")) {
                let passport = try view.targets(rel.tag, from: p.id).first.flatMap { try view.record($0) }
                if case .string(let n) = p["name"], case .string(let k)? = passport?["number"] { out[n] = k }
            }
            return out
        }
        #expect(passports == ["p1": "k2", "p2": "k"])
        #expect(try store.verify().ok)
    }

    /// A map too small for the import is grown, and the batches applied so far are applied
    /// again in a new transaction: the same state as in a store with room.
    @Test func aFullMapIsGrownAndTheBatchesAppliedAgain() async throws {
        let dir = temporaryDirectory("one-transaction")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(2_000, shape: "library", seed: 9, in: dir)
        var small = StoreConfiguration()
        small.initialMapSizeBytes = 1 << 20
        var states: [[String]] = []
        for config in [small, StoreConfiguration()] {
            try await withLibraryStore(config) { store in
                _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
                let growths = store.statistics.mapGrowths
                let summary = try await Importer(store: store, options: options()).run(files: [input])
                #expect(summary.oneTransaction, "\(summary)")
                if config.initialMapSizeBytes == small.initialMapSizeBytes {
                    #expect(store.statistics.mapGrowths > growths)
                }
                #expect(try store.verify().ok)
                states.append(try canonicalState(store))
            }
        }
        #expect(states.count == 2 && states[0] == states[1])
    }
}
