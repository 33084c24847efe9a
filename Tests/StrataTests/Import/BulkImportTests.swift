import Foundation
import LibraryModel
import StrataLMDB
import Testing
@testable import Strata

/// A bulk import (``ImportMode/bulk``) writes into a new generation switched in at the end. It
/// must leave the state an incremental import leaves, show readers nothing until the switch, keep
/// the saves made meanwhile, and write nothing when it fails.
@Suite struct BulkImportTests {
    private func generate(_ records: Int, shape: String, seed: Int = 3, in dir: URL) async throws -> String {
        try await generateInput(records, shape: shape, seed: seed, in: dir)
    }

    private func write(_ lines: [String], in dir: URL, _ name: String = "in.ndjson") throws -> String {
        try writeInput(lines, in: dir, name)
    }

    /// A UUID made from `n`, for an input line's `mbid`.
    private func uuid(_ n: Int) -> String { "00000000-0000-4000-8000-\(String(format: "%012d", n))" }
    /// A track line's required fields other than its `mbid` and `title`.
    private let track = #""durationSeconds":60,"addedAt":"2024-01-01T00:00:00Z""#

    private func options(_ mode: ImportMode, batch: Int = 500) -> ImportOptions {
        var o = ImportOptions()
        o.mode = mode
        o.batchSize = batch
        return o
    }

    private func withStore<R>(_ schemaDirectory: URL, _ body: (Store) async throws -> R) async throws -> R {
        let store = try Store.temporary(schema: try Schema.load(directory: schemaDirectory))
        defer { store.close() }
        return try await body(store)
    }

    private var catalogSchema: URL { repositoryRoot.appendingPathComponent("Schemas/catalog") }

    /// A bulk import whose switch renamed `current` but could not sync the store directory (a
    /// failing disk, simulated) is not reported as saved: a power loss may bring the old link
    /// back, and the import with it. It fails with the sync's error (the instance takes no more
    /// saves); a reopen finds the import switched in, and the import run again converges. (It
    /// returned its summary, the records counted as saved.)
    @Test func aBulkImportWhoseSwitchIsNotKnownDurableIsNotReportedSaved() async throws {
        let dir = temporaryDirectory("bulk-import-sync")
        defer { try? FileManager.default.removeItem(at: dir) }
        let storeDir = dir.appendingPathComponent("store")
        let input = try write((0..<5).map { #"{"entity":"Genre","name":"G\#($0)"}"# }, in: dir)
        do {
            let store = try Store.open(at: storeDir, schema: try librarySchema())
            defer { store.close() }
            StoreDirectory.failSwitchSyncForTesting.withLock { _ = $0.insert(store.path) }
            defer { StoreDirectory.failSwitchSyncForTesting.withLock { _ = $0.remove(store.path) } }
            await #expect {
                _ = try await Importer(store: store, options: options(.bulk)).run(files: [input])
            } throws: { error in
                guard case StrataError.lmdb(let e) = error else { return false }
                return e.code == EIO && e.operation.contains("a power loss may undo it")
            }
        }
        let store = try Store.open(at: storeDir, schema: try librarySchema())
        defer { store.close() }
        #expect(try store.mainContext.count(Genre.self) == 5)
        let again = try await Importer(store: store, options: options(.bulk)).run(files: [input])
        #expect(again.records == 5)
        #expect(try store.mainContext.count(Genre.self) == 5)
    }

    /// The generated library and the link-heavy catalog (half its dependency edges point
    /// forward), imported both ways: the same objects, values and links, the same number of
    /// transactions, and a store that verifies.
    @Test(arguments: ["library", "catalog"])
    func bulkAndIncrementalImportsGiveTheSameState(shape: String) async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(3000, shape: shape, in: dir)
        let schema = shape == "library" ? librarySchemaDirectory : catalogSchema
        var states: [ImportMode: [String]] = [:], summaries: [ImportMode: ImportSummary] = [:]
        for mode in [ImportMode.incremental, .bulk] {
            try await withStore(schema) { store in
                let summary = try await Importer(store: store, options: options(mode)).run(files: [input])
                #expect(summary.mode == mode)
                #expect(summary.records == 3000)
                #expect(try store.verify().ok)
                states[mode] = try canonicalState(store)
                summaries[mode] = summary
            }
        }
        #expect(states[.bulk]?.count == 3000)
        #expect(states[.bulk] == states[.incremental])
        #expect(summaries[.bulk]?.transactions == summaries[.incremental]?.transactions)
        #expect(summaries[.bulk]?.firstTransaction == TransactionID(1))
    }

    /// A bulk load's saves drop the new generation's mapped pages while they apply (nobody else
    /// maps that generation), every ``StateApplier/bulkLoadReleaseInterval`` writes at random
    /// places counted across the saves of a transaction: one save of 3,000 tracks (each with its
    /// unique key) releases them before its transaction commits, and so do 30 saves of 100; the
    /// finished store holds every track, by id and by key.
    @Test func aBulkLoadsSavesReleaseMappedPagesWhileTheyApply() async throws {
        try await withStore(librarySchemaDirectory) { store in
            let tracks = (0..<6_000).map { i in
                Track(mbid: UUID(), title: "t\(i)", durationSeconds: i % 600, addedAt: Date(timeIntervalSince1970: 1_700_000_000))
            }
            let load = try await store.beginBulkLoad()
            // Inside each transaction: the releases its saves made (the one after the write comes
            // later).
            for batches in [[tracks[..<3_000]], stride(from: 3_000, to: 6_000, by: 100).map { tracks[$0..<$0 + 100] }] {
                let released = try await load.write { writer -> Int in
                    let before = writer.env.mappedPageReleases.load(ordering: .relaxed)
                    for batch in batches {
                        var c = ChangeSet()
                        for t in batch { c.insert(t) }
                        _ = try writer.save(c, author: "test", metadata: [:], isolated: false)
                    }
                    return writer.env.mappedPageReleases.load(ordering: .relaxed) - before
                }.result
                #expect(released >= 1, "\(batches.count) saves")
            }
            _ = try await load.finish()
            let view = store.mainContext
            #expect(try view.count(Track.self) == 6_000)
            for t in tracks.shuffled().prefix(300) {
                #expect(try view.object(Track.self, id: t.id)?.title == t.title)
                #expect(try view.fetch(Track.self, where: Track.mbid == t.mbid).map(\.id) == [t.id])
            }
            #expect(try store.verify().ok)
        }
    }

    /// With `releaseMappedPagesAfterChanges = 0` a bulk load's saves keep the generation's pages
    /// mapped (what `storectl import --keep-pages-mapped` asks for).
    @Test func aBulkLoadKeepsItsPagesMappedWhenReleasesAreOff() async throws {
        var configuration = StoreConfiguration()
        configuration.releaseMappedPagesAfterChanges = 0
        let store = try Store.temporary(schema: try Schema.load(directory: librarySchemaDirectory),
                                        configuration: configuration)
        defer { store.close() }
        let load = try await store.beginBulkLoad()
        let released = try await load.write { writer -> Int in
            let before = writer.env.mappedPageReleases.load(ordering: .relaxed)
            var c = ChangeSet()
            for i in 0..<3_000 {
                c.insert(Track(mbid: UUID(), title: "t\(i)", durationSeconds: 1, addedAt: Date(timeIntervalSince1970: 0)))
            }
            _ = try writer.save(c, author: "test", metadata: [:], isolated: false)
            return writer.env.mappedPageReleases.load(ordering: .relaxed) - before
        }.result
        #expect(released == 0)
        _ = try await load.finish()
        #expect(try store.mainContext.count(Track.self) == 3_000)
    }

    /// With an index-sort budget of a few kilobytes the new generation's index keys go through
    /// dozens of run files: the same state as an incremental import, a store that verifies, its
    /// indexes as compact as a compaction makes them, and no run file left in the store.
    @Test func aBulkImportSortsItsIndexKeysThroughFilesPastItsBudget() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(3000, shape: "library", in: dir)
        var config = StoreConfiguration()
        config.indexSortBudgetBytes = 4_096
        let bulk = try Store.temporary(schema: try librarySchema(), configuration: config)
        defer { bulk.close() }
        let summary = try await Importer(store: bulk, options: options(.bulk)).run(files: [input])
        #expect(summary.mode == .bulk)
        #expect(try bulk.verify().ok)
        let leftovers = FileManager.default.enumerator(atPath: bulk.path)?.compactMap { $0 as? String }
            .filter { $0.contains("sort-run-") } ?? []
        #expect(leftovers.isEmpty, "\(leftovers)")
        let indexPages = { (store: Store) throws -> Int in
            try store.read { view in try view.txn.pageBytes(view.env[.indexes]) }
        }
        let bulkPages = try indexPages(bulk)
        _ = try await bulk.compact()
        #expect(try indexPages(bulk) == bulkPages, "the bulk import's index pages are not compact")
        try await withLibraryStore { incremental in
            _ = try await Importer(store: incremental, options: options(.incremental)).run(files: [input])
            #expect(try canonicalState(incremental) == canonicalState(bulk))
        }
    }

    /// Into a store that already has objects: records that update them by key, records that link
    /// to them or point forward, in either mode (in bulk, resolved in memory and through the
    /// B-trees), then imported again (nothing changes, no transaction, and the store is not
    /// rewritten: its generation stays the live one).
    @Test func bulkImportMergesWithTheStoreAndReimportsIdempotently() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let seed = try write([
            #"{"entity":"Artist","mbid":"\#(uuid(1))","name":"First"}"#,
            #"{"entity":"Album","mbid":"\#(uuid(11))","title":"Existing","artist":{"mbid":"\#(uuid(1))"}}"#,
            #"{"entity":"Track","mbid":"\#(uuid(20))","title":"Zero",\#(track),"album":{"mbid":"\#(uuid(11))"}}"#,
            #"{"entity":"Genre","name":"Folk"}"#,
        ], in: dir, "seed.ndjson")
        let input = try write([
            #"{"entity":"Album","mbid":"\#(uuid(12))","title":"Forward","artist":{"mbid":"\#(uuid(2))"}}"#,
            #"{"entity":"Genre","name":"Jazz"}"#,
            #"{"entity":"Artist","mbid":"\#(uuid(1))","name":"Renamed"}"#,
            #"{"entity":"Artist","mbid":"\#(uuid(2))","name":"Second"}"#,
            #"{"entity":"Track","mbid":"\#(uuid(21))","title":"One",\#(track),"album":{"mbid":"\#(uuid(11))"},"#
                + #""genre":{"name":"Jazz"}}"#,
            #"{"entity":"Track","mbid":"\#(uuid(22))","title":"Two",\#(track),"album":{"mbid":"\#(uuid(12))"},"#
                + #""genre":{"name":"Folk"}}"#,
            #"{"entity":"Playlist","name":"Mix","createdAt":"2024-01-01T00:00:00Z","tracks":"#
                + #"[{"mbid":"\#(uuid(22))"},{"mbid":"\#(uuid(21))"},{"mbid":"\#(uuid(20))"}]}"#,
        ], in: dir)
        var states: [String: [String]] = [:]
        for (mode, inMemory) in [(ImportMode.incremental, false), (.bulk, true), (.bulk, false)] {
            try await withLibraryStore { store in
                var o = options(mode, batch: 2)
                if !inMemory { o.bulkInMemoryMaxInputBytes = 0 }
                let name = "\(mode) \(inMemory)"
                _ = try await Importer(store: store, options: options(.incremental)).run(files: [seed])
                let head = try #require(store.currentTransactionID)
                let first = try await Importer(store: store, options: o).run(files: [input])
                #expect(first.mode == mode)
                #expect(first.inMemory == inMemory, "\(name)")
                #expect(first.records == 7)
                #expect(first.firstTransaction == head.next)
                #expect(try store.verify().ok)
                states[name] = try canonicalState(store)
                let generation = try FileManager.default.destinationOfSymbolicLink(atPath: store.path + "/current")
                let again = try await Importer(store: store, options: o).run(files: [input])
                #expect(again.records == 7)
                #expect(again.transactions == 0, "a re-import changed something")
                #expect(try canonicalState(store) == states[name])
                #expect(try FileManager.default.destinationOfSymbolicLink(atPath: store.path + "/current") == generation,
                        "a re-import that changed nothing rewrote the store (\(name))")
            }
        }
        #expect(states["bulk true"] == states["incremental false"])
        #expect(states["bulk false"] == states["incremental false"])
        #expect(states["bulk true"]?.count == 10)
        #expect(states["bulk true"]?.contains { $0.hasPrefix("Artist:\(uuid(1)) ") && $0.contains("Renamed") } == true,
                "\(states["bulk true"] ?? [])")
    }

    /// A bulk load's saves leave the secondary indexes alone and its generation gets them built
    /// from its objects: an indexed value the import changed is found under its new value only,
    /// every object has exactly its index entries (none left over from the value it had), and the
    /// store verifies.
    @Test func aBulkImportsIndexesHoldEveryObjectUnderItsCurrentValues() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let seed = try write([
            #"{"entity":"Artist","mbid":"\#(uuid(1))","name":"First"}"#,
            #"{"entity":"Album","mbid":"\#(uuid(11))","title":"Old title","artist":{"mbid":"\#(uuid(1))"}}"#,
            #"{"entity":"Track","mbid":"\#(uuid(20))","title":"Zero",\#(track),"album":{"mbid":"\#(uuid(11))"}}"#,
        ], in: dir, "seed.ndjson")
        let input = try write([
            #"{"entity":"Artist","mbid":"\#(uuid(1))","name":"Renamed"}"#,
            #"{"entity":"Album","mbid":"\#(uuid(11))","title":"New title","artist":{"mbid":"\#(uuid(1))"}}"#,
            #"{"entity":"Track","mbid":"\#(uuid(21))","title":"One",\#(track),"album":{"mbid":"\#(uuid(11))"}}"#,
        ], in: dir)
        try await withLibraryStore { store in
            _ = try await Importer(store: store, options: options(.incremental)).run(files: [seed])
            let summary = try await Importer(store: store, options: options(.bulk, batch: 2)).run(files: [input])
            #expect(summary.mode == .bulk)
            let context = store.mainContext
            #expect(try context.fetch(FetchRequest<Artist>(where: Artist.name == "Renamed")).map(\.mbid)
                    == [UUID(uuidString: uuid(1))])
            #expect(try context.fetch(FetchRequest<Artist>(where: Artist.name == "First")).isEmpty)
            #expect(try context.fetch(FetchRequest<Album>(where: Album.title == "New title")).count == 1)
            #expect(try context.fetch(FetchRequest<Album>(where: Album.title == "Old title")).isEmpty)
            #expect(try context.fetch(FetchRequest<Track>(sortedBy: [Track.title.ascending])).map(\.title)
                    == ["One", "Zero"])
            let (entries, expected) = try store.read { view in
                let expected = try store.schema.entities.reduce(0) { $0 + (try view.objectCount($1)) * $1.indexes.count }
                return (try view.txn.entryCount(view.env[.indexes]), expected)
            }
            #expect(entries == expected)
            #expect(try store.verify().ok)
        }
    }

    /// `auto` chooses bulk for an input large next to the store (a new store) and incremental
    /// for a small one into a large store.
    @Test func autoChoosesBulkForANewStoreAndIncrementalForASmallImport() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let big = try await generate(3000, shape: "library", in: dir)
        let small = try write([#"{"entity":"Genre","name":"Zydeco"}"#], in: dir)
        try await withLibraryStore { store in
            let first = try await Importer(store: store, options: options(.auto)).run(files: [big])
            #expect(first.mode == .bulk)
            let second = try await Importer(store: store, options: options(.auto)).run(files: [small])
            #expect(second.mode == .incremental)
            #expect(try store.verify().ok)
        }
    }

    /// An input an incremental import would write in one transaction goes in bulk only when it is
    /// at least the store's data file: between an eighth of it and all of it, `auto` imports it
    /// incrementally, in one transaction; the same input without one transaction (its limit 0)
    /// goes in bulk, as any input of an eighth or more does; an input larger than the file goes
    /// in bulk either way.
    @Test func autoWeighsAnInputInOneTransactionAgainstTheWholeStore() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let base = try await generate(3000, shape: "library", in: dir)
        let medium = try await generate(1000, shape: "library", seed: 4, in: dir)
        let large = try await generate(9000, shape: "library", seed: 5, in: dir)
        func bytes(_ path: String) throws -> Int { try #require(FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) }
        for (input, oneTransaction, expected) in [(medium, true, ImportMode.incremental), (medium, false, .bulk), (large, true, .bulk)] {
            try await withLibraryStore { store in
                _ = try await Importer(store: store, options: options(.bulk)).run(files: [base])
                let file = store.env.fileBytes
                let size = try bytes(input)
                try #require(size * ImportMode.autoBulkRatio >= file, "\(size) bytes against a file of \(file)")
                try #require((size >= file) == (input == large), "\(size) bytes against a file of \(file)")
                var o = options(.auto)
                if !oneTransaction { o.oneTransactionMaxInputBytes = 0 }
                let summary = try await Importer(store: store, options: o).run(files: [input])
                #expect(summary.mode == expected, "\(size) bytes into a file of \(file), in one transaction: \(oneTransaction)")
                #expect(summary.oneTransaction == (expected == .incremental))
                #expect(try store.verify().ok)
            }
        }
    }

    /// A reader sampling the store while a bulk import runs sees none of it or all of it.
    @Test func readersSeeNothingOfABulkImportUntilAllOfIt() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(6000, shape: "library", in: dir)
        try await withLibraryStore { store in
            let tracks = try #require(store.schema.entity(named: "Track"))
            let (summary, seen) = try await countsSeen(of: tracks, in: store) {
                try await Importer(store: store, options: options(.bulk, batch: 100)).run(files: [input])
            }
            let total = try store.read { try $0.objectCount(tracks) }
            #expect(summary.transactions > 10)
            #expect(total > 5000)
            #expect(seen.isSubset(of: [0, total]), "a reader saw part of the import: \(seen.sorted())")
        }
    }

    /// Saves made while a bulk import builds wait for its switch and are committed after its
    /// transactions; none is lost.
    @Test func savesDuringABulkImportAreKept() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(6000, shape: "library", in: dir)
        try await withLibraryStore { store in
            let importer = Importer(store: store, options: options(.bulk, batch: 100))
            let watcher = Task { () -> [TransactionID] in
                var saved: [TransactionID] = []
                for await p in importer.progress where p.phase == .writing && saved.count < 20 {
                    saved.append(try await store.save(genres(1, prefix: "during-\(saved.count)-")))
                }
                return saved
            }
            let summary = try await importer.run(files: [input])
            let saved = try await watcher.value
            let last = try #require(summary.lastTransaction)
            #expect(!saved.isEmpty)
            #expect(saved.allSatisfy { $0 > last }, "a save was committed before the switch: \(saved) vs \(last)")
            let names = Set(try store.mainContext.fetch(Genre.self).map(\.name))
            for i in saved.indices { #expect(names.contains { $0.hasPrefix("during-\(i)-") }) }
            #expect(try store.verify().ok)
        }
    }

    /// A save-time refusal (an update that takes another object's second unique key) ends a
    /// bulk import with the error and nothing written: the head, the objects and the generation
    /// directories are as before. With `continueOnError`, the refused record is rejected as the
    /// incremental import rejects it.
    @Test func aFailingBulkImportWritesNothing() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let jazz = Genre(name: "Jazz")
            _ = try await store.save { c in
                c.insert(jazz)
                c.insert(Genre(name: "Rock"))
            }
            let input = try write([
                #"{"entity":"Genre","name":"A"}"#,
                #"{"entity":"Genre","id":"\#(jazz.id)","name":"Rock"}"#,
                #"{"entity":"Genre","name":"B"}"#,
            ], in: dir)
            let head = store.currentTransactionID
            let entries = try FileManager.default.contentsOfDirectory(atPath: store.path).sorted()
            await #expect {
                try await Importer(store: store, options: options(.bulk, batch: 1)).run(files: [input])
            } throws: { error in
                // The record the store refused, by its line; nothing written.
                guard let failed = error as? ImportFailed, let issue = failed.issues.first else { return false }
                return issue.line == 2 && issue.reason.contains("is already used by") && failed.written == 0
            }
            #expect(store.currentTransactionID == head)
            #expect(Set(try store.mainContext.fetch(Genre.self).map(\.name)) == ["Jazz", "Rock"])
            #expect(try FileManager.default.contentsOfDirectory(atPath: store.path).sorted() == entries)
            // The writer goes on.
            _ = try await store.save(genres(1, prefix: "after-"))

            var tolerant = options(.bulk, batch: 2)
            tolerant.continueOnError = true
            tolerant.rejectsPath = dir.appendingPathComponent("rejects.txt").path
            let summary = try await Importer(store: store, options: tolerant).run(files: [input])
            #expect(summary.mode == .bulk)
            #expect(summary.records == 2)
            #expect(summary.rejected == 1)
            let rejects = try String(contentsOfFile: tolerant.rejectsPath!, encoding: .utf8)
            #expect(rejects.contains("in.ndjson:2"), "\(rejects)")
            #expect(Set(try store.mainContext.fetch(Genre.self).map(\.name)).isSuperset(of: ["Jazz", "Rock", "A", "B"]))
            #expect(try store.verify().ok)
        }
    }

    /// Change streams get a bulk import's transactions, in order, after the switch.
    @Test func aBulkImportsTransactionsArePublished() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(2000, shape: "library", in: dir)
        try await withLibraryStore { store in
            let stream = store.changes()
            let summary = try await Importer(store: store, options: options(.bulk, batch: 200)).run(files: [input])
            let expected = try #require(summary.lastTransaction)
            var got: [TransactionID] = []
            for await event in stream {
                if case .committed(let t) = event { got.append(t.id) }
                if got.last == expected { break }
            }
            #expect(got.count == summary.transactions)
            #expect(got == got.sorted())
        }
    }

    /// A close during a bulk import ends it with `closed` and nothing written; the store opens
    /// again as it was, with only its live generation.
    @Test func closingTheStoreDuringABulkImportEndsItWithNothingWritten() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(20000, shape: "library", in: dir)
        let url = dir.appendingPathComponent("store")
        let store = try Store.open(at: url, schema: try librarySchema())
        _ = try await store.save(genres(3, prefix: "before-"))
        let head = store.currentTransactionID
        let importer = Importer(store: store, options: options(.bulk, batch: 100))
        // As the import starts; on a thread of its own (a close waits for the writer, which the
        // import holds until it notices the close).
        let closer = Task {
            for await p in importer.progress where p.phase == .copying {
                Thread { store.close() }.start()
                return true
            }
            return false
        }
        do {
            _ = try await importer.run(files: [input])
            Issue.record("the import finished although the store was closed")
        } catch StrataError.closed {
        } catch {
            Issue.record("expected closed, got \(error)")
        }
        #expect(await closer.value)
        store.close()
        let again = try Store.open(at: url, schema: try librarySchema())
        defer { again.close() }
        #expect(again.currentTransactionID == head)
        #expect(try again.mainContext.count(Query(entity: "Track")) == 0)
        let generations = try FileManager.default.contentsOfDirectory(atPath: url.path).filter { $0.hasPrefix("gen-") }
        #expect(generations.count == 1, "\(generations)")
        #expect(try again.verify().ok)
    }

    /// A bulk import cancelled while it waits to pause the writer (busy with another save) ends
    /// with `CancellationError` once the writer gets to it, lets the writer go on and writes
    /// nothing. (Taken for a closed writer, the cancellation would leave a pause nobody ends,
    /// and every later save and the store's close waiting for it.)
    @Test(.timeLimit(.minutes(15))) func aBulkImportCancelledWhilePausingTheWriterLetsItGo() async throws {
        let dir = temporaryDirectory("bulk-import")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try await generate(2000, shape: "library", in: dir)
        try await withLibraryStore { store in
            let held = try await holdWriter(store)
            let importer = Importer(store: store, options: options(.bulk))
            let run = Task { try await importer.run(files: [input]) }
            for await p in importer.progress where p.phase == .copying { break }
            // It has asked for the writer (or is about to): cancel it, then let the writer go.
            try await Task.sleep(for: .milliseconds(50))
            run.cancel()
            try await held.release()
            do {
                _ = try await run.value
                Issue.record("the cancelled import finished")
            } catch is CancellationError {
            } catch {
                Issue.record("expected CancellationError, got \(error)")
            }
            #expect(try store.mainContext.count(Query(entity: "Track")) == 0)
            _ = try await store.save(genres(1, prefix: "after-"))
            #expect(try store.verify().ok)
        }
    }
}
