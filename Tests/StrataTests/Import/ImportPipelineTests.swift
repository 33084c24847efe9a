import Foundation
import LibraryModel
import Testing
@testable import Strata

/// The importer reads and builds the next batch while the writer commits the one before. These
/// tests pin down that the outcome is still the one of a strictly sequential import.
@Suite struct ImportPipelineTests {
    private func write(_ lines: [String], in dir: URL) throws -> String {
        let url = dir.appendingPathComponent("in.ndjson")
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: url)
        return url.path
    }

    /// The reader thread holds a bounded amount of input ahead of the consumer, in bytes as well
    /// as in records: records of large values are held a few at a time. It was bounded by count
    /// only (16 chunks of 256 records), so records of megabytes each were all read ahead.
    @Test func theReadAheadIsBoundedInBytes() async throws {
        let dir = temporaryDirectory("import-read-ahead")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let big = String(repeating: "x", count: 1 << 20)
        let lines = (0..<48).map { #"{"entity":"Genre","name":"g\#($0) \#(big)"}"# }
        let input = try write(lines, in: dir)
        var options = ImportOptions()
        options.maxLineBytes = 4 << 20
        let it = PipelinedRecords(RecordIterator(files: [input], schema: schema, options: options,
                                                 maxValueBytes: 16 << 20, expected: nil))
        defer { it.close() }
        _ = try it.next()
        // Time for the reader to go as far ahead as it may.
        var held = 0
        for _ in 0..<100 {
            try await Task.sleep(for: .milliseconds(20))
            held = max(held, it.queuedInputBytes)
        }
        #expect(held > 0, "the reader read nothing ahead")
        #expect(held <= PipelinedRecords.bytesAhead + PipelinedRecords.chunkBytes + (2 << 20),
                "\(held) bytes of input held ahead")
        var read = 1
        while try it.next() != nil { read += 1 }
        #expect(read == 48)
    }

    /// The reader fills the chunk arrays the consumer hands back: across many more chunks than it
    /// keeps spare, every record comes out once, in input order, with its own line, whether the
    /// consumer keeps up with the reader or falls behind it.
    @Test(arguments: [false, true])
    func chunkArraysHandedBackKeepEveryRecordInOrder(slowConsumer: Bool) async throws {
        let dir = temporaryDirectory("import-chunk-reuse")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let count = PipelinedRecords.chunkSize * (PipelinedRecords.maxSpares + PipelinedRecords.chunksAhead) * 2 + 17
        let lines = (0..<count).map { #"{"entity":"Genre","name":"genre \#($0)"}"# }
        let input = try write(lines, in: dir)
        let it = PipelinedRecords(RecordIterator(files: [input], schema: schema, options: ImportOptions(),
                                                 maxValueBytes: 16 << 20, expected: nil))
        defer { it.close() }
        var read = 0
        while let item = try it.next() {
            #expect(item.line == read + 1)
            #expect(String(decoding: item.raw, as: UTF8.self) == lines[read])
            let record = try item.result.get()
            #expect(record.values.first == .string("genre \(read)"))
            read += 1
            if slowConsumer, read % PipelinedRecords.chunkSize == 0 { try await Task.sleep(for: .milliseconds(2)) }
        }
        #expect(read == count)
        #expect(it.spareArraysReused > 0, "the reader allocated an array for every chunk")
    }

    /// An incremental import of `input` in batches of `batchSize`, and the LMDB commits it took.
    private func importCountingCommits(_ store: Store, _ input: String, batchSize: Int,
                                       importID: String? = nil) async throws -> (ImportSummary, commits: Int) {
        var options = ImportOptions()
        options.mode = .incremental
        options.batchSize = batchSize
        options.importID = importID
        // The two-pass path, whose batches share group commits (one pass in one transaction:
        // OneTransactionImportTests).
        options.oneTransactionMaxInputBytes = 0
        let before = store.statistics.lmdbCommits
        let summary = try await Importer(store: store, options: options).run(files: [input])
        return (summary, store.statistics.lmdbCommits - before)
    }

    /// A batch refused at save time (a put that moves an existing object onto another one's
    /// unique key) is retried record by record while later batches wait; the rejects file keeps
    /// the input's order (the save-time reject of batch 1 before the parse reject read with
    /// batch 2); every transaction is tagged with its batch number in order. The same whether
    /// the write pass takes the records the validation pass kept or reads the input again.
    @Test(arguments: [ImportOptions().keptRecordsMaxInputBytes, 0])
    func continueOnErrorAcrossBatchesKeepsTheSequentialOutcome(keptRecordsMaxInputBytes: Int) async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let jazz = Genre(name: "Jazz"), rock = Genre(name: "Rock")
            _ = try await store.save { c in
                c.insert(jazz)
                c.insert(rock)
            }
            let input = try write([
                #"{"entity":"Genre","name":"A"}"#,
                #"{"entity":"Genre","id":"\#(jazz.id)","name":"Rock"}"#,  // clashes with Rock when saved
                #"{"entity":"Genre","name":"B"}"#,
                "not json",
                #"{"entity":"Genre","name":"C"}"#,
                #"{"entity":"Genre","name":"D"}"#,
                #"{"entity":"Genre","name":"E"}"#,
            ], in: dir)
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 2
            options.continueOnError = true
            options.rejectsPath = dir.appendingPathComponent("rejects.txt").path
            options.importID = "pipeline"
            options.keptRecordsMaxInputBytes = keptRecordsMaxInputBytes
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 5)
            #expect(summary.rejected == 2)
            let rejects = try String(contentsOfFile: dir.appendingPathComponent("rejects.txt").path, encoding: .utf8)
            let reasons = rejects.split(separator: "\n").filter { $0.hasPrefix("# ") }
            #expect(reasons.count == 2)
            #expect(reasons.first?.contains("in.ndjson:2") == true, "\(rejects)")
            #expect(reasons.last?.contains("in.ndjson:4") == true, "\(rejects)")
            let view = store.mainContext
            #expect(try view.object(Genre.self, id: jazz.id)?.name == "Jazz")
            #expect(Set(try view.fetch(Genre.self).map(\.name)) == ["Jazz", "Rock", "A", "B", "C", "D", "E"])
            // The import's transactions, in order, with increasing batch numbers.
            let mine = try store.transactions(from: TransactionID(1)).filter { $0.metadata["importID"] == "pipeline" }
            let batches = mine.compactMap { $0.metadata["batch"].flatMap(Int.init) }
            #expect(batches == batches.sorted() && !batches.isEmpty, "\(batches)")
            #expect(mine.map(\.transactionID) == mine.map(\.transactionID).sorted())
            #expect(try store.verify().ok)
        }
    }

    /// An incremental import's batches are queued together for the writer's group commit: ten
    /// batches of two records share one LMDB commit (and one sync), each batch its own
    /// transaction, numbered in order.
    @Test func anIncrementalImportsBatchesShareOneCommit() async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let input = try write((0..<20).map { #"{"entity":"Genre","name":"G\#($0)"}"# }, in: dir)
            let (summary, commits) = try await importCountingCommits(store, input, batchSize: 2, importID: "grouped")
            #expect(summary.records == 20 && summary.transactions == 10, "\(summary)")
            #expect(commits == 1)
            let mine = try store.transactions(from: TransactionID(1)).filter { $0.metadata["importID"] == "grouped" }
            #expect(mine.map(\.transactionID) == (1...10).map { TransactionID(UInt64($0)) })
            #expect(mine.compactMap { $0.metadata["batch"] } == (1...10).map(String.init))
            #expect(try store.mainContext.count(Genre.self) == 20)
        }
    }

    /// A batch ends at `maxBatchBytes` of its records' values as it does at `batchSize` records,
    /// in both modes: records of 1,000 bytes, 10,000 bytes a batch, give batches of ten (the
    /// count alone made one batch of all of them, whatever they held). A budget below one
    /// record makes a batch of each; a budget below 1 is refused as an option.
    @Test(arguments: [ImportMode.incremental, .bulk])
    func aBatchEndsAtItsByteBudget(mode: ImportMode) async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let notes = String(repeating: "n", count: 1_000)
            func playlists(_ range: Range<Int>, _ prefix: String) -> [String] {
                range.map { #"{"entity":"Playlist","name":"\#(prefix)\#($0)","createdAt":"2024-01-01T00:00:00Z","notes":"\#(notes)"}"# }
            }
            let input = try write(playlists(0..<100, "p"), in: dir)
            var options = ImportOptions()
            options.mode = mode
            options.maxBatchBytes = 10_000
            options.oneTransactionMaxInputBytes = 0
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 100 && summary.transactions == 10, "\(mode): \(summary)")
            #expect(try store.mainContext.count(Playlist.self) == 100)

            let more = try write(playlists(0..<5, "q"), in: dir)
            options.maxBatchBytes = 10
            let one = try await Importer(store: store, options: options).run(files: [more])
            #expect(one.records == 5 && one.transactions == 5, "\(mode): \(one)")

            options.maxBatchBytes = 0
            await #expect { _ = try await Importer(store: store, options: options).run(files: [more]) } throws: { error in
                (error as? ImportFailed)?.issues.first?.reason.contains("must be at least 1") == true
            }
        }
    }

    /// Batches of one record are queued in groups the writer can take: at most
    /// `maxSavesPerGroup` and half of `maxPendingSaves` batches at a time (a group of 25,000
    /// one-record batches would be refused as `writerOverloaded`).
    @Test func groupsOfSmallBatchesStayWithinTheWritersQueue() async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        var config = StoreConfiguration()
        config.maxPendingSaves = 4
        try await withLibraryStore(config) { store in
            let input = try write((0..<20).map { #"{"entity":"Genre","name":"G\#($0)"}"# }, in: dir)
            let (summary, commits) = try await importCountingCommits(store, input, batchSize: 1)
            #expect(summary.records == 20 && summary.transactions == 20, "\(summary)")
            #expect(commits == 10)
            #expect(try store.mainContext.count(Genre.self) == 20)
        }
    }

    /// Records referring to an object of the store by a unique key no queued batch can take
    /// away (a genre, found by its only unique, and no record with an explicit id) do not wait
    /// for the batches before them: ten one-record batches that each look their genre up still
    /// share one commit.
    @Test func lookupsThatNoQueuedBatchCanChangeDoNotSplitTheGroup() async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
            let input = try write((0..<10).map { i in
                #"{"entity":"Track","mbid":"\#(UUID().uuidString.lowercased())","title":"t\#(i)","# +
                    #""durationSeconds":1,"addedAt":"2024-01-01T00:00:00Z","genre":{"name":"Jazz"}}"#
            }, in: dir)
            let (summary, commits) = try await importCountingCommits(store, input, batchSize: 1)
            #expect(summary.records == 10 && summary.transactions == 10, "\(summary)")
            #expect(commits == 1)
            let view = store.mainContext
            let jazz = try #require(try view.fetch(Genre.self, where: Genre.name == "Jazz").first)
            #expect(try view.related(jazz.id, Genre.tracks).count == 10)
        }
    }

    /// Without `continueOnError`, a batch refused at save time (a put that moves an existing
    /// object onto another one's unique key: validation cannot see it) ends the import with the
    /// record's line and reason, and what was written; the batches before it are committed, it
    /// and every batch queued after it are not, although they shared its group commit.
    @Test func aBatchRefusedAtSaveTimeLeavesOnlyTheBatchesBeforeIt() async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let jazz = Genre(name: "Jazz"), rock = Genre(name: "Rock")
            let seeded = try await store.save { c in
                c.insert(jazz)
                c.insert(rock)
            }
            let input = try write([
                #"{"entity":"Genre","name":"A"}"#,
                #"{"entity":"Genre","name":"B"}"#,
                #"{"entity":"Genre","id":"\#(jazz.id)","name":"Rock"}"#,  // clashes with Rock when saved
                #"{"entity":"Genre","name":"C"}"#,
                #"{"entity":"Genre","name":"D"}"#,
                #"{"entity":"Genre","name":"E"}"#,
            ], in: dir)
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 2
            do {
                _ = try await Importer(store: store, options: options).run(files: [input])
                Issue.record("the import succeeded")
            } catch let failed as ImportFailed {
                // The record the store refused, by its line, and the batch committed before it.
                #expect(failed.issues.first?.line == 3 && failed.issues.first?.field == "name", "\(failed)")
                #expect(failed.issues.first?.reason.contains("is already used by") == true, "\(failed)")
                #expect(failed.written == 2 && failed.transactions.count == 1 && failed.importID != nil, "\(failed)")
            }
            #expect(Set(try store.mainContext.fetch(Genre.self).map(\.name)) == ["Jazz", "Rock", "A", "B"])
            #expect(try store.lastTransactionID == seeded.next)
            #expect(try store.verify().ok)
        }
    }

    /// A batch that changes nothing returns the store's last transaction id, here another
    /// saver's (committed first in the same group): the summary counts only what this import
    /// committed, so with nothing committed it reports no transactions and no ids; the next
    /// batch, which writes, is counted with its own id.
    @Test func theSummaryCountsOnlyThisImportsOwnCommits() async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let writer = try #require(store.writer)
            let input = try write([#"{"entity":"Genre","name":"A"}"#, #"{"entity":"Genre","name":"B"}"#], in: dir)
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 2
            options.importID = "mine"
            // Two passes: the batch joins the other saver's group commit.
            options.oneTransactionMaxInputBytes = 0
            let held = try await holdWriter(store)
            // Another saver writes the same records first, in the group the import's batch joins.
            let other = Task { try await store.save(metadata: ["importID": "other"]) { c in
                c.insert(Genre(name: "A"))
                c.insert(Genre(name: "B"))
            } }
            try await waitUntil { writer.pendingForTesting == 1 }
            let importer = Importer(store: store, options: options)
            let running = Task { try await importer.run(files: [input]) }
            try await waitUntil { writer.pendingForTesting == 2 }
            try await held.release()
            let otherTx = try await other.value
            let summary = try await running.value
            #expect(try store.lastTransactionID == otherTx)
            #expect(summary.records == 2)
            #expect(summary.transactions == 0, "\(summary)")
            #expect(summary.firstTransaction == nil && summary.lastTransaction == nil, "\(summary)")

            // A batch that writes is counted, with its own id, after the other saver's.
            let more = try write([#"{"entity":"Genre","name":"A"}"#, #"{"entity":"Genre","name":"C"}"#], in: dir)
            let second = try await Importer(store: store, options: options).run(files: [more])
            #expect(second.transactions == 1 && second.firstTransaction == otherTx.next && second.lastTransaction == otherTx.next, "\(second)")
            #expect(try store.changes(in: otherTx.next).metadata["importID"] == "mine")
        }
    }

    /// Unusable options (a batch size of 0 used to loop forever in the links phase) are refused
    /// before anything is read or written, each named.
    @Test func unusableOptionsAreRefusedBeforeAnythingIsWritten() async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let input = try write([#"{"entity":"Genre","name":"A"}"#], in: dir)
            let cases: [(String, (inout ImportOptions) -> Void)] = [
                ("batchSize", { $0.batchSize = 0 }),
                ("batchSize", { $0.batchSize = -5 }),
                ("batchSize", { $0.batchSize = ImportOptions.maxBatchSize + 1 }),
                ("maxLineBytes", { $0.maxLineBytes = 0 }),
                ("maxReportedIssues", { $0.maxReportedIssues = 0 }),
                ("keptRecordsMaxInputBytes", { $0.keptRecordsMaxInputBytes = -1 }),
                ("oneTransactionMaxInputBytes", { $0.oneTransactionMaxInputBytes = -1 }),
                ("rejectsPath", { $0.rejectsPath = dir.appendingPathComponent("r").path }),
                ("importID", { $0.importID = "" }),
            ]
            for (field, change) in cases {
                var options = ImportOptions()
                options.mode = .incremental
                change(&options)
                do {
                    _ = try await Importer(store: store, options: options).run(files: [input])
                    Issue.record("\(field): the import ran")
                } catch let failed as ImportFailed {
                    #expect(failed.issues.map(\.field) == [field], "\(failed)")
                    #expect(failed.description.contains("options: \(field): must") || failed.description.contains("options: \(field): is only"), "\(failed)")
                }
            }
            #expect(try store.mainContext.count(Genre.self) == 0)
            #expect(try store.lastTransactionID == TransactionID.zero)
        }
    }

    /// A reference to an object already in the store is looked up only after the batch in flight
    /// has committed: here batch 1 renames that object's unique key, so the track of batch 2 must
    /// not find the old name (its link is deferred, then skipped), exactly as in a sequential
    /// import; looked up while batch 1 was still running, it would have found it and the whole
    /// track would have been refused.
    @Test func storeLookupsWaitForTheBatchInFlight() async throws {
        let dir = temporaryDirectory("import-pipeline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            for round in 0..<5 {
                let old = Genre(name: "Old \(round)")
                _ = try await store.save { $0.insert(old) }
                let mbid = UUID()
                let input = try write([
                    #"{"entity":"Genre","id":"\#(old.id)","name":"New \#(round)"}"#,
                    #"{"entity":"Track","mbid":"\#(mbid.uuidString.lowercased())","title":"t","durationSeconds":1,"addedAt":"2024-01-01T00:00:00Z","genre":{"name":"Old \#(round)"}}"#,
                ], in: dir)
                var options = ImportOptions()
                options.mode = .incremental
                options.batchSize = 1
                options.continueOnError = true
                let summary = try await Importer(store: store, options: options).run(files: [input])
                #expect(summary.records == 2, "round \(round)")
                #expect(summary.rejected == 0, "round \(round)")
                #expect(summary.skippedLinks == 1, "round \(round)")
                let view = store.mainContext
                let track = try view.fetch(Track.self, where: Track.mbid == mbid)
                #expect(track.count == 1, "round \(round)")
                #expect(try track.first.flatMap { try view.related($0.id, Track.genre) } == nil, "round \(round)")
            }
        }
    }
    /// A store that cannot grow any more stops an import written batch by batch after some of
    /// its batches committed: the error is ``ImportInterrupted``, carrying the store's own error
    /// and what was written (it was the bare error, and a user could not tell that records
    /// were in the store); the store holds exactly those records.
    @Test func aFullStoreStopsAnImportSayingWhatWasWritten() async throws {
        var config = StoreConfiguration()
        config.initialMapSizeBytes = 64 << 10
        config.maxMapSizeBytes = 1 << 20
        try await withLibraryStore(config) { store in
            let dir = temporaryDirectory("import-full")
            defer { try? FileManager.default.removeItem(at: dir) }
            let padding = String(repeating: "p", count: 400)
            let input = try write((0..<5_000).map { #"{"entity":"Genre","name":"g\#($0) \#(padding)"}"# }, in: dir)
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 50
            options.oneTransactionMaxInputBytes = 0
            options.importID = "full"
            do {
                _ = try await Importer(store: store, options: options).run(files: [input])
                Issue.record("5,000 records of 400 bytes went into a store of at most 1 MiB")
            } catch let interrupted as ImportInterrupted {
                guard case StrataError.storeFull = interrupted.underlying else {
                    Issue.record("stopped by \(interrupted.underlying)")
                    return
                }
                #expect(interrupted.written > 0 && interrupted.written < 5_000, "\(interrupted)")
                #expect(interrupted.importID == "full")
                #expect(!interrupted.transactions.isEmpty)
                #expect(interrupted.description.contains("record(s) of this import were written before it"))
                #expect(try store.mainContext.count(Genre.self) == interrupted.written)
            }
        }
    }
    /// A rejects file that cannot be written (`/dev/full`) after a batch committed: the error
    /// says the batch was written (the batch's committed records were counted only after the
    /// rejects found before it were written, so the error said nothing of them).
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/dev/full"), "needs /dev/full"))
    func aRejectsFileThatCannotBeWrittenAfterACommitSaysWhatWasWritten() async throws {
        try await withLibraryStore { store in
            let dir = temporaryDirectory("import-rejects-full")
            defer { try? FileManager.default.removeItem(at: dir) }
            let lines = (0..<200).map { #"{"entity":"Genre","name":"g\#($0)"}"# } + [#"{"entity":"Genre"}"#]
                + (200..<400).map { #"{"entity":"Genre","name":"g\#($0)"}"# }
            let input = try write(lines, in: dir)
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 100
            options.oneTransactionMaxInputBytes = 0
            options.continueOnError = true
            options.rejectsPath = "/dev/full"
            do {
                _ = try await Importer(store: store, options: options).run(files: [input])
                Issue.record("the rejects were written to /dev/full")
            } catch let interrupted as ImportInterrupted {
                #expect(interrupted.written > 0, "\(interrupted)")
                #expect(try store.mainContext.count(Genre.self) == interrupted.written, "\(interrupted)")
            }
        }
    }
}
