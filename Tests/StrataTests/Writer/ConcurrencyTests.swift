import Foundation
import LibraryModel
import Synchronization
import Testing
@testable import Strata

@Suite struct ConcurrencyTests {
    /// The savers of the gather test run here (see there); kept alive by this constant, since a
    /// task does not retain its executor preference.
    static let saverExecutor = HookExecutor()

    @Test func sixteenConcurrentSaversAreAllPresentAndCoalesced() async throws {
        try await withLibraryStore { store in
            let saversCount = 16, perSaver = 40
            let ids = try await withThrowingTaskGroup(of: [(TransactionID, ObjectID)].self) { group in
                for s in 0..<saversCount {
                    group.addTask {
                        var mine: [(TransactionID, ObjectID)] = []
                        for i in 0..<perSaver {
                            let g = Genre(name: "saver \(s) item \(i)")
                            let tx = try await store.save(author: "saver-\(s)") { $0.insert(g) }
                            if let last = mine.last { #expect(tx > last.0, "a saver's own transactions must increase") }
                            mine.append((tx, g.id))
                        }
                        return mine
                    }
                }
                var all: [(TransactionID, ObjectID)] = []
                for try await part in group { all += part }
                return all
            }
            let total = saversCount * perSaver
            #expect(ids.count == total)
            // Every save has its own transaction id: 1...total, no gap, no duplicate.
            #expect(Set(ids.map(\.0.rawValue)) == Set(1...UInt64(total)))
            let view = store.mainContext
            #expect(try view.count(Genre.self) == total)
            for (_, id) in ids { #expect(try view.object(Genre.self, id: id) != nil) }
            let stats = store.statistics
            #expect(stats.transactions == total)
            #expect(stats.saves == total)
            // Group commit: saves that waited shared LMDB commits (one fsync each).
            #expect(stats.lmdbCommits < total, "no coalescing: \(stats.lmdbCommits) commits for \(total) saves")
        }
    }

    /// The writer waits (briefly) for savers its last group answered only when that group had
    /// several; a lone saver never waits, and with the wait turned off nobody does. Every save
    /// lands either way.
    @Test(arguments: [0, 1_000]) func groupCommitGatherWaitsOnlyForConcurrentSavers(gatherMicroseconds: Int) async throws {
        var config = StoreConfiguration()
        config.groupCommitGatherMicroseconds = gatherMicroseconds
        try await withLibraryStore(config) { store in
            for i in 0..<30 { _ = try await store.save { $0.insert(Genre(name: "alone \(i)")) } }
            #expect(store.statistics.gatherNanoseconds == 0, "a lone saver waited")
            try await withThrowingTaskGroup(of: Void.self) { group in
                // On an executor of the test's own: in the full suite, CPU-bound tests can hold the
                // cooperative pool's two threads for tens of seconds, and these savers then ran one
                // at a time and never formed a group. On one serial
                // executor they still interleave: each suspends in `save` while its commit waits.
                for s in 0..<8 {
                    group.addTask(executorPreference: Self.saverExecutor) {
                        for i in 0..<40 { _ = try await store.save { $0.insert(Genre(name: "s\(s) \(i)")) } }
                    }
                }
                try await group.waitForAll()
            }
            let stats = store.statistics
            #expect(stats.saves == 30 + 8 * 40)
            #expect(try store.mainContext.count(Genre.self) == 30 + 8 * 40)
            if gatherMicroseconds == 0 {
                #expect(stats.gatherNanoseconds == 0)
            } else {
                #expect(stats.gatherNanoseconds > 0, "eight savers never gathered")
                // Bounded: at most half of each commit's time (and 1 ms) per commit.
                #expect(stats.gatherNanoseconds <= stats.commitNanoseconds / 2 + UInt64(stats.lmdbCommits) * 1_000_000)
            }
        }
    }

    @Test func aFailingSaveInAGroupDoesNotHurtTheOthers() async throws {
        try await withLibraryStore { store in
            let taken = Genre(name: "taken")
            _ = try await store.save { $0.insert(taken) }
            // Many concurrent saves, every fourth clashing on the unique name: those fail alone.
            let results = await withTaskGroup(of: (Int, Bool).self) { group in
                for i in 0..<64 {
                    group.addTask {
                        let name = i % 4 == 0 ? "taken" : "free \(i)"
                        do {
                            _ = try await store.save { $0.insert(Genre(name: name)) }
                            return (i, true)
                        } catch { return (i, false) }
                    }
                }
                var out: [Int: Bool] = [:]
                for await (i, ok) in group { out[i] = ok }
                return out
            }
            for (i, ok) in results { #expect(ok == (i % 4 != 0), "save \(i)") }
            #expect(try store.mainContext.count(Genre.self) == 1 + 48)
            #expect(try store.lastTransactionID == TransactionID(49))
        }
    }

    @Test func readersKeepTheirSnapshotWhileTheWriterCommits() async throws {
        try await withLibraryStore { store in
            for i in 0..<10 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            let snapshot = try store.snapshot(label: "reader")
            defer { snapshot.close() }
            #expect(snapshot.transactionID == TransactionID(10))
            let writer = Task {
                for i in 10..<200 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            }
            var reads = 0
            while !writer.isCancelled {
                #expect(try snapshot.count(Query(entity: "Genre")) == 10)
                #expect(try snapshot.fetch(Query(entity: "Genre")).count == 10)
                reads += 1
                if reads >= 50 { break }
            }
            try await writer.value
            #expect(try snapshot.count(Query(entity: "Genre")) == 10)
            #expect(try store.mainContext.count(Genre.self) == 200)
        }
    }

    @Test func pinnedViewContextMovesOnlyOnRefresh() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            let view = try store.newViewContext(label: "inspector")
            _ = try await store.save { $0.insert(Genre(name: "b")) }
            #expect(try view.count(Genre.self) == 1)
            #expect(try store.mainContext.count(Genre.self) == 2)
            try view.refresh()
            #expect(try view.count(Genre.self) == 2)
            #expect(try view.transactionID == TransactionID(2))
            view.close()
        }
    }

    @Test func pinnedSnapshotAccountingAndLimit() async throws {
        var config = StoreConfiguration()
        config.maxOpenSnapshots = 3
        try await withLibraryStore(config) { store in
            _ = try await store.save { $0.insert(Genre(name: "a")) }
            let old = try store.snapshot(label: "old-report")
            for i in 0..<5 { _ = try await store.save { $0.insert(Genre(name: "n\(i)")) } }
            let newer = try store.snapshot(label: "newer")
            let infos = try store.openSnapshots()
            #expect(infos.map(\.label) == ["old-report", "newer"])
            #expect(infos[0].transactionID == TransactionID(1) && infos[0].lagTransactions == 5)
            #expect(infos[1].lagTransactions == 0)
            let third = try store.snapshot(label: "third")
            #expect(throws: StrataError.self) { try store.snapshot(label: "fourth") }
            third.close()
            let fourth = try store.snapshot(label: "fourth")
            #expect(try store.openSnapshots().count == 3)
            old.close(); newer.close(); fourth.close()
            #expect(try store.openSnapshots().isEmpty)
            #expect(throws: StrataError.self) { try old.count(Query(entity: "Genre")) }
        }
    }

    /// A snapshot's transaction id comes from the writer's published head when it can; it must
    /// always equal the last key of the log the snapshot reads, also while saves commit.
    @Test func snapshotTransactionIDIsTheLastLoggedTransactionItSees() async throws {
        try await withLibraryStore { store in
            let writer = Task {
                for i in 0..<300 {
                    _ = try await store.save { $0.insert(Genre(name: "g\(i)")) }
                    // A save without effect commits nothing: the published head must stay right.
                    _ = try await store.save(ChangeSet())
                }
            }
            var checked = 0, hinted = 0
            for _ in 0..<3000 {
                let s = try store.snapshot(label: "probe")
                let logged = try s.read { try $0.lastTransactionID() }
                #expect(s.transactionID == logged, "snapshot says \(s.transactionID), its log ends at \(logged)")
                if s.env.headHint(for: try #require(s.withTransaction { $0 })) != nil { hinted += 1 }
                s.close()
                checked += 1
                if checked % 20 == 0 { await Task.yield() }
            }
            try await writer.value
            let final = try store.snapshot(label: "final")
            #expect(final.transactionID == TransactionID(300))
            #expect(store.env.headHint(for: try #require(final.withTransaction { $0 })) == TransactionID(300))
            final.close()
            #expect(checked > 50 && hinted > 0)
        }
    }

    @Test func closingTheStoreClosesItsSnapshotsAndFreesTheirSlots() async throws {
        var config = StoreConfiguration()
        config.maxOpenSnapshots = 2
        let store = try Store.temporary(schema: try librarySchema(), configuration: config)
        _ = try await store.save { $0.insert(Genre(name: "a")) }
        let a = try store.snapshot(label: "a")
        let b = try store.snapshot(label: "b")
        #expect(store.snapshots.count == 2)
        store.close()
        #expect(a.isClosed && b.isClosed)
        #expect(store.snapshots.count == 0)
        #expect(throws: StrataError.self) { try a.count(Query(entity: "Genre")) }
        a.close()   // idempotent after the store closed it
    }

    /// A snapshot does not keep its store open: releasing the last reference to the store
    /// closes it and its snapshots, and the path can be opened again.
    @Test func releasingTheStoreClosesItsSnapshots() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-release-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        var store: Store? = try Store.open(at: dir, schema: schema)
        _ = try await store?.save { $0.insert(Genre(name: "a")) }
        let snapshot = try #require(try store?.snapshot(label: "outlives"))
        #expect(try snapshot.count(Query(entity: "Genre")) == 1)
        store = nil
        #expect(snapshot.isClosed)
        #expect(throws: StrataError.self) { try snapshot.count(Query(entity: "Genre")) }
        let again = try Store.open(at: dir, schema: schema)
        #expect(try again.snapshot(label: "new").count(Query(entity: "Genre")) == 1)
        again.close()
        snapshot.close()
    }

    /// Closing the store while a snapshot read runs on another thread waits for that read (which
    /// may itself look at the store's snapshots) and then closes the snapshot.
    @Test func closingTheStoreWaitsForAReadInProgress() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        _ = try await store.save { $0.insert(Genre(name: "a")) }
        let snapshot = try store.snapshot(label: "busy")
        let started = DispatchSemaphore(value: 0)
        let reader = Task.detached { () throws -> Int in
            try snapshot.read { view -> Int in
                started.signal()
                usleep(100_000)
                _ = store.snapshots.count   // takes the registry's lock while store.close() runs
                return try view.count(Query(entity: "Genre"))
            }
        }
        started.wait()
        store.close()
        #expect(try await reader.value == 1)
        #expect(snapshot.isClosed && store.snapshots.count == 0)
        #expect(throws: StrataError.self) { try snapshot.count(Query(entity: "Genre")) }
    }

    /// Bulk commits drop the process's mapped pages; readers (also an older pinned snapshot)
    /// keep reading the right values, and the mapping the release works on is really found.
    @Test func bulkCommitsReleaseMappedPagesAndReadsStayRight() async throws {
        var config = StoreConfiguration()
        config.releaseMappedPagesAfterChanges = 50
        try await withLibraryStore(config) { store in
            let first = (0..<100).map { Genre(name: "first \($0)") }
            _ = try await store.save { c in for g in first { c.insert(g) } }
            let pinned = try store.snapshot(label: "pinned")
            defer { pinned.close() }
            let second = (0..<100).map { Genre(name: "second \($0)") }
            _ = try await store.save { c in for g in second { c.insert(g) } }
            #expect(try pinned.count(Query(entity: "Genre")) == 100)
            let view = store.mainContext
            #expect(try view.count(Genre.self) == 200)
            for g in first + second { #expect(try view.object(Genre.self, id: g.id)?.name == g.name) }
            // The data file's mapping is found by device and inode (LMDB does not expose it).
            let env = store.env
            let maps = try env.dataFileMappings()
            #expect(maps.count == 1)
            #expect(maps.first.map { Int($0.end - $0.start) } == env.mapSizeBytes)
            try env.releaseMappedPages()
            #expect(try view.count(Genre.self) == 200)
        }
    }

    /// Large saves drop the mapped pages while they are applied (every 128 index and unique
    /// writes), also across map growths (the cached mapping must follow the map when it moves):
    /// every record, index entry and unique key is still right afterwards, and verify agrees.
    @Test func bulkSavesReleaseMappedPagesWhileApplyingAcrossMapGrowth() async throws {
        var config = StoreConfiguration()
        config.releaseMappedPagesAfterChanges = 100
        config.initialMapSizeBytes = 256 << 10
        config.maxMapSizeBytes = 256 << 20
        try await withLibraryStore(config) { store in
            var tracks: [Track] = []
            for batch in 0..<6 {
                let part = (0..<1_500).map { makeTrack(title: "b\(batch) t\($0) " + String(repeating: "y", count: 60), duration: ($0 * 7919) % 600) }
                _ = try await store.save { c in for t in part { c.insert(t) } }
                tracks += part
                // A reader between bulk saves sees everything so far.
                #expect(try store.mainContext.count(Track.self) == tracks.count)
            }
            #expect(store.statistics.mapGrowths > 0)
            let view = store.mainContext
            for t in tracks.shuffled().prefix(500) {
                #expect(try view.object(Track.self, id: t.id)?.title == t.title)
                #expect(try view.fetch(Track.self, where: Track.mbid == t.mbid).map(\.id) == [t.id])
            }
            #expect(try view.count(Track.self, where: Track.durationSeconds == 0) == tracks.filter { $0.durationSeconds == 0 }.count)
            #expect(try store.verify().ok)
        }
    }

    /// Pages are released inside a bulk save only while nobody reads: with a read in the last
    /// second, only the release after the commit happens.
    @Test func bulkSavesLeaveMappedPagesAloneWhileReadersAreActive() async throws {
        var config = StoreConfiguration()
        config.releaseMappedPagesAfterChanges = 100
        try await withLibraryStore(config) { store in
            // Nobody has read this store yet: the save releases while it applies, then once more.
            let quiet = (0..<1_000).map { makeTrack(title: "quiet \($0)", duration: ($0 * 7919) % 600) }
            _ = try await store.save { c in for t in quiet { c.insert(t) } }
            try await afterWritersPostCommitWork(store)
            let afterQuiet = store.env.mappedPageReleases.load(ordering: .relaxed)
            #expect(afterQuiet > 1, "no release inside a bulk save without readers")
            // A reader now: only the release after the commit.
            #expect(try store.mainContext.count(Track.self) == 1_000)
            let busy = (0..<1_000).map { makeTrack(title: "busy \($0)", duration: ($0 * 7919) % 600) }
            _ = try await store.save { c in for t in busy { c.insert(t) } }
            try await afterWritersPostCommitWork(store)
            #expect(store.env.mappedPageReleases.load(ordering: .relaxed) == afterQuiet + 1)
            #expect(try store.mainContext.count(Track.self) == 2_000)
        }
    }

    /// Returns once the writer has finished what it does after a commit (a bulk commit's release
    /// of mapped pages runs after its savers are resumed): the writer's queue is serial, so a
    /// small save (below ``StoreConfiguration/releaseMappedPagesAfterChanges``, no release of its
    /// own) is committed only after that work.
    private func afterWritersPostCommitWork(_ store: Store) async throws {
        _ = try await store.save { $0.insert(Genre(name: "barrier \(UUID())")) }
    }

    /// A bulk save of links only, or of updates only, also releases the mapped pages while it is
    /// applied (not just after its commit): links and updates write at random places too. Only
    /// index and unique writes were counted at first, so the last batch of a large import (a
    /// thousand playlists linking 50k tracks) mapped most of the file. The links and values are
    /// right afterwards and verify agrees.
    @Test func bulkLinkAndUpdateSavesReleaseMappedPagesWhileApplying() async throws {
        var config = StoreConfiguration()
        config.releaseMappedPagesAfterChanges = 100
        try await withLibraryStore(config) { store in
            let tracks = (0..<1_000).map { makeTrack(title: "t \($0)", duration: ($0 * 7919) % 600) }
            let playlist = Playlist(name: "everything", createdAt: Date(timeIntervalSince1970: 1_700_000_000))
            _ = try await store.save { c in
                for t in tracks { c.insert(t) }
                c.insert(playlist)
            }
            // Nobody reads in between: a save may release while it applies.
            try await afterWritersPostCommitWork(store)
            let beforeLinks = store.env.mappedPageReleases.load(ordering: .relaxed)
            _ = try await store.save { c in for t in tracks { c.add(t.id, to: Playlist.tracks, of: playlist.id) } }
            try await afterWritersPostCommitWork(store)
            let afterLinks = store.env.mappedPageReleases.load(ordering: .relaxed)
            #expect(afterLinks > beforeLinks + 1, "a save of 1,000 links released only after its commit")
            // playCount has no index: these updates write records only.
            _ = try await store.save { c in for (i, t) in tracks.enumerated() { c.set(Track.playCount, of: t.id, to: i + 1) } }
            try await afterWritersPostCommitWork(store)
            #expect(store.env.mappedPageReleases.load(ordering: .relaxed) > afterLinks + 1, "a save of 1,000 updates released only after its commit")
            let view = store.mainContext
            #expect(Set(try view.related(playlist.id, Playlist.tracks).map(\.id)) == Set(tracks.map(\.id)))
            for (i, t) in tracks.enumerated().shuffled().prefix(200) {
                #expect(try view.object(Track.self, id: t.id)?.playCount == i + 1)
                #expect(try view.related(t.id, Track.playlists).map(\.id) == [playlist.id])
            }
            // Unlinks, likewise. The reads above count as active readers for up to two seconds
            // (`hadReadersRecently`), during which a save leaves the mapped pages alone: wait that
            // out first.
            try await Task.sleep(for: .milliseconds(2_100))
            try await afterWritersPostCommitWork(store)
            let beforeUnlinks = store.env.mappedPageReleases.load(ordering: .relaxed)
            _ = try await store.save { c in for t in tracks { c.remove(t.id, from: Playlist.tracks, of: playlist.id) } }
            try await afterWritersPostCommitWork(store)
            #expect(store.env.mappedPageReleases.load(ordering: .relaxed) > beforeUnlinks + 1, "a save of 1,000 unlinks released only after its commit")
            #expect(try store.mainContext.related(playlist.id, Playlist.tracks).isEmpty)
            #expect(try store.verify().ok)
        }
    }

    /// `saveAndWait` from plain threads while tasks `save`: every save lands with its own id,
    /// ids run 1…n with no gap, a failing save writes nothing, and calling it from inside the
    /// writer is refused instead of deadlocking.
    @Test func saveAndWaitFromThreadsAlongsideAsyncSaves() async throws {
        try await withLibraryStore { store in
            let threads = 4, perThread = 50, tasks = 4, perTask = 50
            let fromThreads = Locked<[TransactionID]>([])
            let failures = Locked<[String]>([])
            let done = DispatchGroup()
            for t in 0..<threads {
                done.enter()
                Thread {
                    defer { done.leave() }
                    for i in 0..<perThread {
                        do {
                            let tx = try store.saveAndWait(author: "thread-\(t)") { $0.insert(Genre(name: "thread \(t) \(i)")) }
                            fromThreads.withLock { $0.append(tx) }
                        } catch {
                            failures.withLock { $0.append("\(error)") }
                        }
                    }
                }.start()
            }
            let fromTasks = try await withThrowingTaskGroup(of: [TransactionID].self) { group in
                for t in 0..<tasks {
                    group.addTask {
                        var ids: [TransactionID] = []
                        for i in 0..<perTask { ids.append(try await store.save { $0.insert(Genre(name: "task \(t) \(i)")) }) }
                        return ids
                    }
                }
                var all: [TransactionID] = []
                for try await part in group { all += part }
                return all
            }
            await withCheckedContinuation { c in done.notify(queue: .global()) { c.resume() } }
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
            let all = fromThreads.withLock { $0 } + fromTasks
            let total = threads * perThread + tasks * perTask
            #expect(Set(all.map(\.rawValue)) == Set(1...UInt64(total)))
            #expect(try store.mainContext.count(Genre.self) == total)

            // A validation failure throws and writes nothing.
            let before = try store.lastTransactionID
            #expect(throws: StrataError.self) {
                _ = try store.saveAndWait { $0.insert(Genre(name: "thread 0 0")) }   // the name is unique
            }
            #expect(try store.lastTransactionID == before)

            // From the writer's own queue it would wait for itself: refused.
            let writer = try #require(store.writer)
            let refused = try await writer.exclusive { () -> String in
                do {
                    _ = try store.saveAndWait { $0.insert(Genre(name: "from the writer")) }
                    return "saved"
                } catch {
                    return "\(error)"
                }
            }
            #expect(refused.contains("saveAndWait called on the writer's queue"), "\(refused)")
        }
    }

    @Test func changeStreamDeliversCommittedTransactions() async throws {
        try await withLibraryStore { store in
            let stream = store.changes()
            let genre = Genre(name: "Jazz")
            let tx = try await store.save(author: "tester", metadata: ["importID": "x1"]) { $0.insert(genre) }
            var iterator = stream.makeAsyncIterator()
            guard case .committed(let event)? = await iterator.next() else {
                Issue.record("no event")
                return
            }
            #expect(event.id == tx && event.author == "tester" && event.metadata["importID"] == "x1")
            #expect(event.changedObjects["Genre"] == [genre.id])
        }
    }

    /// A notice of missed transactions that is dropped, or folded into a later one, counts as
    /// the transactions it stands for (each counted as one: 5 and 3 missed were reported as 2).
    @Test func aFullSubscribersNoticeOfMissedTransactionsCountsThemAll() async {
        let subscriber = ChangeSubscriber(capacity: 1)
        subscriber.deliver(.fellBehind(missed: 5))   // buffered
        subscriber.deliver(.fellBehind(missed: 3))   // dropped: the buffer is full
        #expect(await subscriber.next() == .fellBehind(missed: 8))
        subscriber.finish()
        #expect(await subscriber.next() == nil)
    }

    /// A subscriber's buffer is bounded by the object ids its events name as well as by their
    /// number: past the limit later events are counted as missed, and one event is always
    /// buffered when none is (a transaction larger than the limit still arrives).
    @Test func aSubscribersBufferIsBoundedByTheObjectIDsItHolds() async {
        func event(_ n: Int, _ tx: UInt64) -> ChangeEvent {
            .committed(CommittedTransaction(id: TransactionID(tx), author: "a", timestamp: Date(timeIntervalSince1970: 0),
                                            metadata: [:], changedObjects: ["Genre": Set((0..<n).map { _ in
                                                ObjectID.make(entityTag: Genre.entityTag) })]))
        }
        let subscriber = ChangeSubscriber(capacity: 100, objectIDLimit: 10)
        subscriber.deliver(event(25, 1))   // over the limit alone: buffered, the buffer being empty
        guard case .committed(let big)? = await subscriber.next() else {
            Issue.record("the large transaction was not delivered")
            return
        }
        #expect(big.id == TransactionID(1))
        subscriber.deliver(event(25, 2))
        subscriber.deliver(event(1, 2))    // dropped: 26 ids would be held
        #expect(await subscriber.next() == .fellBehind(missed: 2))
        for tx in 3...7 { subscriber.deliver(event(2, UInt64(tx))) }   // 10 ids: all buffered
        subscriber.deliver(event(1, 8))                                 // 11: dropped
        // The five buffered and the one dropped, as one notice.
        #expect(await subscriber.next() == .fellBehind(missed: 6))
        subscriber.deliver(event(3, 9))
        guard case .committed(let after)? = await subscriber.next() else {
            Issue.record("nothing delivered after the notice")
            return
        }
        #expect(after.id == TransactionID(9))
        subscriber.finish()
    }

    @Test func slowSubscriberIsToldItFellBehindAndNeverBlocksTheWriter() async throws {
        var config = StoreConfiguration()
        config.changeStreamBufferSize = 4
        try await withLibraryStore(config) { store in
            let stream = store.changes()
            for i in 0..<20 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            var iterator = stream.makeAsyncIterator()
            let first = await iterator.next()
            #expect(first == .fellBehind(missed: 20))
            _ = try await store.save { $0.insert(Genre(name: "later")) }
            guard case .committed(let e)? = await iterator.next() else {
                Issue.record("expected a committed event")
                return
            }
            #expect(e.id == TransactionID(21))
        }
    }

    @Test func mapGrowsFromATinyMap() async throws {
        var config = StoreConfiguration()
        config.initialMapSizeBytes = 64 << 10
        config.maxMapSizeBytes = 256 << 20
        try await withLibraryStore(config) { store in
            // Several MiB of data from a 64 KiB map: the writer must grow it and redo batches.
            for batch in 0..<10 {
                _ = try await store.save { c in
                    for i in 0..<500 { c.insert(makeTrack(title: "batch \(batch) track \(i) " + String(repeating: "x", count: 200), duration: i)) }
                }
            }
            #expect(store.statistics.mapGrowths > 0)
            #expect(try store.mainContext.count(Track.self) == 5000)
            #expect(try store.info().mapSizeBytes > 64 << 10)
        }
    }

    /// A group of saves that does not fit at `maxMapSizeBytes`: each save is committed alone if it
    /// fits, except that saves queued in order to stop at their first failure (an import's
    /// batches) stop there.
    @Test(arguments: [false, true])
    func aGroupThatDoesNotFitAtTheLargestMapCommitsWhatFitsAloneUnlessItStopsAtAFailure(stopAtFailure: Bool) async throws {
        var config = StoreConfiguration()
        config.initialMapSizeBytes = 64 << 10
        config.maxMapSizeBytes = 256 << 10
        try await withLibraryStore(config) { store async throws in
            var large = ChangeSet(), small = ChangeSet()
            for i in 0..<5000 {
                large.insert(makeTrack(title: "t\(i) " + String(repeating: "y", count: 300), duration: i))
            }
            small.insert(Genre(name: "fits"))
            let results = await store.saveInOrder([(large, [:]), (small, [:])], author: "test",
                                                  stopAtFailure: stopAtFailure)
            #expect(results.count == 2)
            if case .failure(StrataError.storeFull) = results[0] {} else { Issue.record("large: \(results[0])") }
            #expect(try store.mainContext.count(Track.self) == 0)
            // The group's attempt grew the map to its largest before each save was tried alone.
            #expect(store.statistics.mapGrowths > 0)
            if stopAtFailure {
                if case .success = results[1] { Issue.record("a save after the failed one of its call was committed") }
                #expect(try store.mainContext.count(Genre.self) == 0)
            } else {
                if case .failure(let e) = results[1] { Issue.record("small: \(e)") }
                #expect(try store.mainContext.count(Genre.self) == 1)
            }
            #expect(try store.verify().ok)
        }
    }

    @Test func storeFullIsAClearErrorAndNothingIsWritten() async throws {
        var config = StoreConfiguration()
        config.initialMapSizeBytes = 64 << 10
        config.maxMapSizeBytes = 256 << 10
        try await withLibraryStore(config) { store in
            do {
                _ = try await store.save { c in
                    for i in 0..<5000 { c.insert(makeTrack(title: "t\(i) " + String(repeating: "y", count: 300), duration: i)) }
                }
                Issue.record("save beyond the maximum map size was accepted")
            } catch StrataError.storeFull(let max) {
                #expect(max == 256 << 10)
            }
            #expect(try store.mainContext.count(Track.self) == 0)
            // The map grew to its largest before the save failed: counted.
            #expect(store.statistics.mapGrowths > 0)
            // A small save still works afterwards.
            _ = try await store.save { $0.insert(Genre(name: "fits")) }
            #expect(try store.mainContext.count(Genre.self) == 1)
        }
    }
}
