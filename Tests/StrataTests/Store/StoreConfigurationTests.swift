import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `StoreConfiguration`: values out of range are refused at open; the limits `maxChangesPerSave`
/// and `maxPendingSaves`, the edges of `maxValueBytes` (UTF-8 bytes, `bytes` values, updates,
/// child contexts, imports) and of the 511-byte unique key, and exactly which error
/// `maxOpenSnapshots` gives and what counts against it.
@Suite struct StoreConfigurationTests {
    @Test func maxChangesPerSaveRefusesLargerSaves() async throws {
        var config = StoreConfiguration()
        config.maxChangesPerSave = 3
        try await withLibraryStore(config) { store in
            do {
                _ = try await store.save(genres(4))
                Issue.record("a save of 4 changes was accepted")
            } catch StrataError.saveTooLarge(let changes, let limit) {
                #expect(changes == 4 && limit == 3)
            }
            do {
                _ = try store.saveAndWait(genres(4, prefix: "w"))
                Issue.record("a saveAndWait of 4 changes was accepted")
            } catch StrataError.saveTooLarge(let changes, let limit) {
                #expect(changes == 4 && limit == 3)
            }
            #expect(try store.lastTransactionID == .zero)
            #expect(try store.mainContext.count(Genre.self) == 0)
            // At the limit: accepted.
            #expect(try await store.save(genres(3)) == TransactionID(1))
            // A child's root commit is one save: refused whole, the child keeps its changes.
            let child = store.mainContext.newChild(label: "bulk")
            try child.apply(genres(4, prefix: "c"))
            await #expect(throws: StrataError.self) { try await child.commit() }
            #expect(child.pendingOperationCount == 4)
            #expect(try store.mainContext.count(Genre.self) == 3)
        }
    }

    /// While the writer is busy, at most `maxPendingSaves` saves wait; the others are refused at
    /// once with `writerOverloaded`, and the waiting ones commit when the writer is free.
    @Test(.timeLimit(.minutes(15))) func maxPendingSavesRefusesImmediately() async throws {
        var config = StoreConfiguration()
        config.maxPendingSaves = 2
        try await withLibraryStore(config) { store in
            let held = try await holdWriter(store)

            let refused = Locked(0)
            let savers = (0..<6).map { i in
                Task { () -> Result<TransactionID, Error> in
                    do { return .success(try await store.save { $0.insert(Genre(name: "g\(i)")) }) } catch {
                        refused.withLock { $0 += 1 }
                        return .failure(error)
                    }
                }
            }
            // Four are refused while the writer is still blocked (they do not wait for it).
            let deadline = ContinuousClock.now + .seconds(60)
            while refused.withLock({ $0 }) < 4 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
            #expect(refused.withLock { $0 } == 4)

            // saveAndWait is refused the same way instead of blocking.
            let fromThread = Locked<Result<TransactionID, Error>?>(nil)
            let threadDone = DispatchSemaphore(value: 0)
            Thread {
                let r = Result { try store.saveAndWait { $0.insert(Genre(name: "from a thread")) } }
                fromThread.withLock { $0 = r }
                threadDone.signal()
            }.start()
            let answered = await withCheckedContinuation { c in
                DispatchQueue.global().async { c.resume(returning: threadDone.wait(timeout: .now() + 60) == .success) }
            }
            #expect(answered, "saveAndWait blocked instead of being refused")

            try await held.release()
            if !answered { threadDone.wait() }
            var committed: [TransactionID] = []
            for s in savers {
                switch await s.value {
                case .success(let tx): committed.append(tx)
                case .failure(let e):
                    guard case StrataError.writerOverloaded(let limit) = e else {
                        Issue.record("unexpected error \(e)")
                        continue
                    }
                    #expect(limit == 2)
                }
            }
            #expect(committed.sorted() == [TransactionID(1), TransactionID(2)])
            switch fromThread.withLock({ $0 }) {
            case .failure(StrataError.writerOverloaded(let limit))?: #expect(limit == 2)
            case let other: Issue.record("saveAndWait: \(String(describing: other))")
            }
            #expect(try store.mainContext.count(Genre.self) == 2)
        }
    }

    @Test func maxValueBytesCountsUTF8BytesEverywhere() async throws {
        var config = StoreConfiguration()
        config.maxValueBytes = 100
        try await withLibraryStore(config) { store in
            let fits = String(repeating: "é", count: 50)        // 50 characters, 100 bytes
            let over = fits + "x"                                 // 51 characters, 101 bytes
            let t = Track(mbid: UUID(), title: fits, durationSeconds: 1, addedAt: Date(), artworkHash: Data(count: 100))
            _ = try await store.save { $0.insert(t) }
            func expectTooLarge(_ field: String, _ body: (inout ChangeSet) -> Void, sourceLocation: SourceLocation = #_sourceLocation) async throws {
                var c = ChangeSet()
                body(&c)
                do {
                    _ = try await store.save(c)
                    Issue.record("accepted", sourceLocation: sourceLocation)
                } catch StrataError.validation(let f) {
                    #expect(f.kind == .valueTooLarge && f.field == field, "\(f)", sourceLocation: sourceLocation)
                }
            }
            try await expectTooLarge("title") { $0.insert(Track(mbid: UUID(), title: over, durationSeconds: 1, addedAt: Date())) }
            try await expectTooLarge("artworkHash") { $0.insert(Track(mbid: UUID(), title: "b", durationSeconds: 1, addedAt: Date(), artworkHash: Data(count: 101))) }
            try await expectTooLarge("title") { $0.set(Track.title, of: t.id, to: over) }
            try await expectTooLarge("isrc") { $0.set(Track.isrc, of: t.id, to: over) }
            #expect(try store.lastTransactionID == TransactionID(1))
            #expect(try store.mainContext.object(Track.self, id: t.id) == t)

            // A child refuses it when the change is made.
            let child = store.mainContext.newChild(label: "c")
            do {
                try child.set(Track.title, of: t.id, to: over)
                Issue.record("the child accepted an oversized value")
            } catch StrataError.validation(let f) {
                #expect(f.kind == .valueTooLarge && f.field == "title")
            }
            #expect(!child.hasChanges)

            // An import reports it as an issue of the line, before writing anything.
            let dir = temporaryDirectory("limits-import")
            defer { try? FileManager.default.removeItem(at: dir) }
            let file = dir.appendingPathComponent("in.ndjson")
            try Data(("{\"entity\":\"Genre\",\"name\":\"ok\"}\n{\"entity\":\"Genre\",\"name\":\"\(over)\"}\n").utf8).write(to: file)
            do {
                _ = try await Importer(store: store, options: ImportOptions()).run(files: [file.path])
                Issue.record("the import accepted an oversized value")
            } catch let failed as ImportFailed {
                #expect(failed.issues.count == 1)
                #expect(failed.issues.first?.line == 2 && failed.issues.first?.field == "name", "\(failed)")
            }
            #expect(try store.mainContext.count(Genre.self) == 0)
        }
    }

    /// Unique keys are never cut: one longer than LMDB's 511 bytes is refused as `valueTooLarge`.
    @Test func uniqueKeysOver511BytesAreRefused() async throws {
        try await withLibraryStore { store in
            let long = Genre(name: String(repeating: "n", count: 520))
            var c = ChangeSet()
            c.insert(long)
            do {
                _ = try await store.save(c)
                Issue.record("a 520-byte unique key was accepted")
            } catch StrataError.validation(let f) {
                #expect(f.kind == .valueTooLarge && f.field == "name" && f.objectID == long.id, "\(f)")
                #expect(f.reason.contains("511"), "\(f)")
            }
            // About 506 bytes of text fit; an update to a longer one is refused too.
            let fits = Genre(name: String(repeating: "n", count: 500))
            _ = try await store.save { $0.insert(fits) }
            var update = ChangeSet()
            update.set(Genre.name, of: fits.id, to: String(repeating: "m", count: 520))
            await #expect(throws: StrataError.self) { try await store.save(update) }
            #expect(try store.mainContext.fetch(Genre.self).map(\.name) == [fits.name])
            #expect(try store.mainContext.fetch(Genre.self, where: Genre.name == fits.name).map(\.id) == [fits.id])
        }
    }

    /// Pinned view contexts and as-of contexts count against `maxOpenSnapshots`; the main context
    /// and auto-refreshing view contexts do not. One more is `tooManySnapshots(limit:)`.
    @Test func maxOpenSnapshotsCountsEveryPinnedReader() async throws {
        var config = StoreConfiguration()
        config.maxOpenSnapshots = 2
        try await withLibraryStore(config) { store in
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            let pinned = try store.newViewContext(label: "pinned")
            let asOf = try store.snapshot(asOf: TransactionID(1))
            func expectLimit(_ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void) {
                do {
                    try body()
                    Issue.record("\(what) opened past the limit", sourceLocation: sourceLocation)
                } catch StrataError.tooManySnapshots(let limit) {
                    #expect(limit == 2, sourceLocation: sourceLocation)
                } catch {
                    Issue.record("\(what): \(error)", sourceLocation: sourceLocation)
                }
            }
            expectLimit("a snapshot") { _ = try store.snapshot(label: "third") }
            expectLimit("a pinned view context") { _ = try store.newViewContext(label: "third") }
            expectLimit("an as-of context") { _ = try store.snapshot(asOf: TransactionID(1)) }
            #expect(try store.openSnapshots().map(\.label).count == 2)
            // Not pinned: these read without a slot.
            let following = try store.newViewContext(label: "following", autoRefresh: true)
            #expect(try following.count(Genre.self) == 1)
            #expect(try store.mainContext.count(Genre.self) == 1)
            // A pinned view context's close() frees its slot; its next read pins again.
            pinned.close()
            let s = try store.snapshot(label: "now fits")
            expectLimit("a read re-pinning the closed context") { _ = try pinned.count(Genre.self) }
            s.close()
            #expect(try pinned.count(Genre.self) == 1)
            asOf.close()
            #expect(try store.openSnapshots().map(\.label) == ["pinned"])
        }
    }

    /// A configuration value out of range is refused at open, before anything is created (with
    /// `maxSavesPerGroup = 0`, say, a writer would take empty groups from a non-empty queue and
    /// leave `draining` set: saves would hang and `close()` spin); the edges are accepted.
    @Test func outOfRangeConfigurationValuesAreRefusedAtOpen() throws {
        let cases: [(String, (inout StoreConfiguration) -> Void)] = [
            ("maxSavesPerGroup", { $0.maxSavesPerGroup = 0 }),
            ("maxPendingSaves", { $0.maxPendingSaves = 0 }),
            ("maxChangesPerSave", { $0.maxChangesPerSave = -1 }),
            ("groupCommitGatherMicroseconds", { $0.groupCommitGatherMicroseconds = -5 }),
            ("relaxedSyncIntervalMs", { $0.relaxedSyncIntervalMs = -1 }),
            ("changeStreamBufferSize", { $0.changeStreamBufferSize = 0 }),
            ("initialMapSizeBytes", { $0.initialMapSizeBytes = 0 }),
            ("maxOpenSnapshots", { $0.maxOpenSnapshots = 0 }),
            ("maxReaders", { $0.maxReaders = 0 }),
            ("maxOpenSnapshots", { $0.maxReaders = 8; $0.maxOpenSnapshots = 8 }),
            // Upper bounds: past them a timer's interval overflows (a trap), or a value could not
            // go into a replica's log entry.
            ("groupCommitGatherMicroseconds", { $0.groupCommitGatherMicroseconds = 1_000_001 }),
            ("relaxedSyncIntervalMs", { $0.relaxedSyncIntervalMs = Int.max }),
            ("otherProcessPollMilliseconds", { $0.otherProcessPollMilliseconds = 86_400_001 }),
            ("maxValueBytes", { $0.maxValueBytes = (1 << 30) + 1 }),
            ("snapshotAgeWarningSeconds", { $0.snapshotAgeWarningSeconds = .nan }),
            ("indexSortBudgetBytes", { $0.indexSortBudgetBytes = 4_095 }),
            // LMDB's lock file is allocated for every slot when made (it asked for 256 GiB).
            ("maxReaders", { $0.maxReaders = 65_537 }),
        ]
        for (field, breakIt) in cases {
            let dir = temporaryDirectory("strata-config")
            defer { try? FileManager.default.removeItem(at: dir) }
            let url = dir.appendingPathComponent("s")
            var config = StoreConfiguration()
            breakIt(&config)
            #expect {
                _ = try Store.open(at: url, schema: try librarySchema(), configuration: config)
            } throws: { error in
                guard case StrataError.invalidConfiguration(let f, _, _) = error else { return false }
                return f == field && "\(error)".contains("StoreConfiguration.\(field)")
            }
            #expect(!FileManager.default.fileExists(atPath: url.path), "\(field): a store directory was created")
        }
        // The edges are accepted.
        var edge = StoreConfiguration()
        edge.maxSavesPerGroup = 1
        edge.maxPendingSaves = 1
        edge.groupCommitGatherMicroseconds = 0
        edge.relaxedSyncIntervalMs = 0
        edge.indexSortBudgetBytes = 4_096
        edge.maxReaders = StoreConfiguration.maxReadersLimit
        let store = try Store.temporary(schema: try librarySchema(), configuration: edge)
        store.close()
    }
}
