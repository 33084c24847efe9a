import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Commits of another process on the same store reach this process's change streams and live
/// queries: in log order, each once, interleaved with this process's own commits.
@Suite struct OtherProcessCommitTests {
    let sample = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path

    /// The committed transactions of `events`, failing on anything else.
    func committed(_ events: [ChangeEvent]) -> [CommittedTransaction] {
        events.compactMap { e -> CommittedTransaction? in
            guard case .committed(let tx) = e else {
                Issue.record("unexpected \(e)")
                return nil
            }
            return tx
        }
    }

    @Test(.timeLimit(.minutes(15))) func anotherProcesssImportIsPublishedInLogOrderWithOurOwnSaves() async throws {
        let dir = temporaryDirectory("other-process")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("store")
        let store = try Store.open(at: path, schema: librarySchema())
        defer { store.close() }
        let first = try await store.save(author: "here") { $0.insert(Genre(name: "before")) }
        let events = Collector(store.changes())
        defer { events.cancel() }

        // Another process imports the sample library, then one genre at a time from a loop of
        // storectl runs, while this one saves every few milliseconds until the loop is done.
        // The other process imports the sample library, then one genre at a time, each after
        // this process has saved once more (it waits for a file this process makes): the two
        // processes' commits alternate whatever the load on the machine.
        var script = "set -e\n\"$0\" import \"$1\" \"$2\" --batch 20 --quiet\ntouch \"$3/started\"\n"
        for i in 0..<8 {
            let file = dir.appendingPathComponent("g\(i).ndjson")
            try Data(#"{"entity": "Genre", "name": "theirs\#(i)"}"#.utf8).write(to: file)
            script += "while [ ! -e \"$3/go\(i)\" ]; do sleep 0.01; done\n\"$0\" import \"$1\" \"\(file.path)\" --quiet\n"
        }
        // Started as a process of its own, not run on a thread of the test's pool: its waiting
        // would hold a thread a save needs to resume on.
        let errors = dir.appendingPathComponent("other.err")
        let other = try ChildProcess.start("/bin/sh", ["-c", script, storectlPath, path.path, sample, dir.path],
                                           stderr: .file(errors.path))
        let started = dir.appendingPathComponent("started").path
        while other.isRunning, !FileManager.default.fileExists(atPath: started) { try await Task.sleep(for: .milliseconds(5)) }
        var mine: [TransactionID] = []
        for i in 0..<8 {
            mine.append(try await store.save(author: "here") { $0.insert(Genre(name: "g\(i)")) })
            try Data().write(to: dir.appendingPathComponent("go\(i)"))
        }
        #expect(try await other.finished() == Termination(exited: true, code: 0),
                "\((try? String(contentsOf: errors, encoding: .utf8)) ?? "")")
        mine.append(try await store.save(author: "here") { $0.insert(Genre(name: "last")) })

        let head = try store.lastTransactionID
        let expected = Int(head.rawValue - first.rawValue)
        let seen = committed(try await events.wait(for: expected))
        // Every transaction after the subscription, once, in log order.
        #expect(seen.map(\.id.rawValue) == Array((first.rawValue + 1)...head.rawValue))
        #expect(seen.filter { $0.author == "here" }.map(\.id) == mine)
        let theirs = seen.filter { $0.author != "here" }
        #expect(theirs.count > 10)
        // Ours between theirs: the import, then each of our first eight saves before one of theirs.
        let ours = seen.indices.filter { seen[$0].author == "here" }, others = seen.indices.filter { seen[$0].author != "here" }
        let between = ours.filter { i in others.contains { $0 < i } && others.contains { $0 > i } }
        #expect(between.count == 8, "\(seen.map { "\($0.id.rawValue):\($0.author)" })")
        #expect(theirs.allSatisfy { !$0.changedObjects.isEmpty })
        // What the events name is what the store holds.
        let tracks = try store.mainContext.count(Track.self)
        #expect(theirs.reduce(into: Set<ObjectID>()) { $0.formUnion($1.changedObjects["Track"] ?? []) }.count == tracks)
    }

    @Test(.timeLimit(.minutes(15))) func aLiveQueryOnTheMainContextFollowsAnotherProcesssCommits() async throws {
        let dir = temporaryDirectory("other-process-live")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("store")
        let store = try Store.open(at: path, schema: librarySchema())
        defer { store.close() }
        let results = Collector(store.mainContext.observe(Query(entity: "Genre")))
        defer { results.cancel() }
        #expect(try await results.wait(for: 1).first?.records.isEmpty == true)
        let input = dir.appendingPathComponent("genres.ndjson")
        try Data((0..<5).map { #"{"entity": "Genre", "name": "n\#($0)"}"# }.joined(separator: "\n").utf8).write(to: input)
        let r = try await storectl("import", path.path, input.path, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let deadline = ContinuousClock.now + .seconds(60)
        while results.all.last?.records.count != 5, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(results.all.last?.records.count == 5)
    }

    @Test func withTheWatchOffOnlyThisProcesssCommitsArePublished() async throws {
        let dir = temporaryDirectory("other-process-off")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("store")
        var config = StoreConfiguration()
        config.otherProcessPollMilliseconds = 0
        let store = try Store.open(at: path, schema: librarySchema(), configuration: config)
        defer { store.close() }
        let events = Collector(store.changes())
        defer { events.cancel() }
        let input = dir.appendingPathComponent("genres.ndjson")
        try Data(#"{"entity": "Genre", "name": "other"}"#.utf8).write(to: input)
        #expect(try await storectl("import", path.path, input.path, "--quiet").status == 0)
        let mine = try await store.save(author: "here") { $0.insert(Genre(name: "mine")) }
        let seen = committed(try await events.wait(for: 1))
        try await Task.sleep(for: .milliseconds(200))
        #expect(seen.map(\.id) == [mine])
        #expect(events.all.count == 1)
    }

    /// A store open here with a subscriber, and another process's transaction whose log entry
    /// (alone holding `marker`, its import id) was then damaged in the data file, before this
    /// process's first look at the log: the watch's timer is set to an hour, so it never looks by
    /// itself during a test (however slowly the import runs on a loaded machine); a test looks
    /// with `publisher.poll()`, the timer's step.
    func storeWithADamagedEntryOfAnotherProcess(_ dir: URL) async throws -> (Store, Collector<ChangeEvent>) {
        let path = dir.appendingPathComponent("store")
        var config = StoreConfiguration()
        config.otherProcessPollMilliseconds = 3_600_000
        let store = try Store.open(at: path, schema: librarySchema(), configuration: config)
        let events = Collector(store.changes())
        let marker = "damaged-entry-marker-7f3a9c"
        let input = dir.appendingPathComponent("genre.ndjson")
        try Data(#"{"entity": "Genre", "name": "theirs"}"#.utf8).write(to: input)
        let imported = try await run(storectlPath, ["import", path.path, input.path, "--quiet", "--import-id", marker])
        #expect(imported.status == 0, "\(imported.stderr)")
        let file = try FileHandle(forUpdating: path.appendingPathComponent("current/data.mdb"))
        let bytes = try file.readToEnd() ?? Data()
        var damaged = 0
        var at = bytes.startIndex
        while let found = bytes[at...].firstRange(of: Data(marker.utf8)) {
            try file.seek(toOffset: UInt64(found.lowerBound + 3))
            file.write(Data("X".utf8))
            damaged += 1
            at = found.upperBound
        }
        try file.close()
        #expect(damaged >= 1)
        return (store, events)
    }

    @Test(.timeLimit(.minutes(15))) func aDamagedEntryBeforeThisProcesssSaveIsReportedAsMissed() async throws {
        let dir = temporaryDirectory("other-process-damaged")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (store, events) = try await storeWithADamagedEntryOfAnotherProcess(dir)
        defer { events.cancel(); store.close() }
        let mine = try await store.save(author: "here") { $0.insert(Genre(name: "mine")) }
        let seen = try await events.wait(for: 2)
        #expect(seen.count == 2, "\(seen)")
        #expect(seen.first == .fellBehind(missed: 1), "\(seen)")
        if case .committed(let tx)? = seen.last { #expect(tx.id == mine) } else { Issue.record("\(seen)") }
    }

    @Test(.timeLimit(.minutes(15))) func aDamagedEntryTheWatchMeetsIsReportedAsMissedAndTheWatchGoesOn() async throws {
        let dir = temporaryDirectory("other-process-damaged-watch")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (store, events) = try await storeWithADamagedEntryOfAnotherProcess(dir)
        defer { events.cancel(); store.close() }
        store.publisher.poll()
        #expect(try await events.wait(for: 1) == [.fellBehind(missed: 1)])
        // The other process's next commit still arrives (the watch is not stuck on the damage).
        let input = dir.appendingPathComponent("more.ndjson")
        try Data(#"{"entity": "Genre", "name": "theirs again"}"#.utf8).write(to: input)
        #expect(try await run(storectlPath, ["import", store.path, input.path, "--quiet"]).status == 0)
        store.publisher.poll()
        let seen = try await events.wait(for: 2)
        if case .committed(let tx)? = seen.last, seen.count == 2 {
            #expect(tx.id == (try store.lastTransactionID))
        } else {
            Issue.record("\(seen)")
        }
    }

    /// A committing process writes LMDB's meta page, then records the transaction in the lock
    /// file, where read transactions take their snapshot from: a look in between sees the new id
    /// in the meta page and the log as it was. The look here is given that id by hand (the
    /// timer is set to an hour); the other process's transaction, committed after it, must still
    /// reach the subscriber at the next look, not wait for a later commit.
    @Test(.timeLimit(.minutes(15))) func aLookWhileAnotherProcessesMetaPageRunsAheadOfItsSnapshotMissesNothing() async throws {
        let dir = temporaryDirectory("other-process-meta-ahead")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("store")
        var config = StoreConfiguration()
        config.otherProcessPollMilliseconds = 3_600_000
        let store = try Store.open(at: path, schema: librarySchema(), configuration: config)
        defer { store.close() }
        _ = try await store.save { $0.insert(Genre(name: "mine")) }
        let events = Collector(store.changes())
        defer { events.cancel() }
        let env = store.env
        let snapshot = try env.read { LMDBEnvironment.lmdbTransactionID($0.handle) }
        #expect(try env.lastCommittedTransaction() == snapshot)
        // The meta page shows the next transaction; the snapshot a look reads does not hold it.
        try store.publisher.poll(env: env, lastCommitted: snapshot + 1)
        #expect(events.all.isEmpty)

        let input = dir.appendingPathComponent("genre.ndjson")
        try Data(#"{"entity": "Genre", "name": "theirs"}"#.utf8).write(to: input)
        let imported = try await run(storectlPath, ["import", path.path, input.path, "--quiet"])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try env.lastCommittedTransaction() == snapshot + 1)
        store.publisher.poll()
        let seen = committed(try await events.wait(for: 1))
        #expect(seen.map(\.id) == [try store.lastTransactionID])
    }

    /// A store open here with the watch's timer set to an hour (a test looks by hand), one save
    /// made, and a one-genre NDJSON file for another process to import.
    func storeWithAnInputForAnotherProcess(_ dir: URL) async throws -> (Store, URL) {
        var config = StoreConfiguration()
        config.otherProcessPollMilliseconds = 3_600_000
        let store = try Store.open(at: dir.appendingPathComponent("store"), schema: librarySchema(),
                                   configuration: config)
        _ = try await store.save { $0.insert(Genre(name: "mine")) }
        let input = dir.appendingPathComponent("genre.ndjson")
        try Data(#"{"entity": "Genre", "name": "theirs"}"#.utf8).write(to: input)
        return (store, input)
    }

    /// The first subscription reads where the watch starts, then subscribes; another process's
    /// commit between the two is after the start and must reach the subscriber. (The watch once
    /// read its starting head after the subscription, took such a commit as seen and never
    /// published it.) The other process's import runs at that point, inside the subscription.
    @Test(.timeLimit(.minutes(15))) func anotherProcesssCommitBetweenTheWatchsStartAndTheSubscriptionIsPublished() async throws {
        let dir = temporaryDirectory("other-process-watch-start")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (store, input) = try await storeWithAnInputForAnotherProcess(dir)
        defer { store.close() }
        let importStatus = Locked<Int32?>(nil)
        let storePath = store.path
        store.publisher.betweenStartAndSubscriptionForTesting.withLock { hook in
            hook = {
                let result = try? runBlocking(storectlPath, ["import", storePath, input.path, "--quiet"])
                importStatus.withLock { $0 = result?.status }
            }
        }
        let publisher = store.publisher
        let stream = try await onOwnThread { ChangeStream(subscriber: publisher.subscribe(capacity: 64)) }
        store.publisher.betweenStartAndSubscriptionForTesting.withLock { $0 = nil }
        #expect(importStatus.withLock { $0 } == 0)
        let events = Collector(stream)
        defer { events.cancel() }
        store.publisher.poll()
        let seen = committed(try await events.wait(for: 1))
        #expect(seen.map(\.id) == [try store.lastTransactionID])
    }

    /// A look of the watch while nobody subscribes moves its position to the head. A subscriber
    /// that comes during that look, followed by another process's commit, must get the commit:
    /// the look reads the head first, then asks again whether anyone subscribes. (It once asked
    /// first and read the head after, so a subscription and a commit in between left the commit
    /// behind the position, never published.) The subscription and the import run inside the
    /// look, at the point between its read and its question.
    @Test(.timeLimit(.minutes(15))) func aSubscriberThatComesDuringALookWithNoneGetsTheCommitAfterIt() async throws {
        let dir = temporaryDirectory("other-process-look-subscribe")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (store, input) = try await storeWithAnInputForAnotherProcess(dir)
        defer { store.close() }
        let events = Locked<Collector<ChangeEvent>?>(nil)
        let importStatus = Locked<Int32?>(nil)
        let storePath = store.path
        store.publisher.betweenHeadAndSubscriberCheckForTesting.withLock { hook in
            hook = { [hub = store.hub] in
                guard events.withLock({ $0 == nil }) else { return }
                events.withLock { $0 = Collector(ChangeStream(subscriber: hub.subscribe(capacity: 64))) }
                let result = try? runBlocking(storectlPath, ["import", storePath, input.path, "--quiet"])
                importStatus.withLock { $0 = result?.status }
            }
        }
        defer { events.withLock { $0?.cancel() } }
        // The look runs on a thread of its own: it waits for the other process inside the hook.
        let publisher = store.publisher
        try await onOwnThread { publisher.poll() }
        store.publisher.betweenHeadAndSubscriberCheckForTesting.withLock { $0 = nil }
        #expect(importStatus.withLock { $0 } == 0)
        guard let collector = events.withLock({ $0 }) else {
            Issue.record("the look never reached the point between its read and its question")
            return
        }
        let seen = committed(try await collector.wait(for: 1))
        #expect(seen.map(\.id) == [try store.lastTransactionID])
    }

    @Test(.timeLimit(.minutes(15))) func aStoreWhoseLogWasSquashedWholePublishesNoSpuriousMissedTransactions() async throws {
        let dir = temporaryDirectory("other-process-squashed")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("store")
        do {
            let store = try Store.open(at: path, schema: librarySchema())
            defer { store.close() }
            for i in 0..<3 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            _ = try await store.compact(horizon: TransactionID(3))   // the log is empty, the head 3
        }
        let store = try Store.open(at: path, schema: librarySchema())
        defer { store.close() }
        let events = Collector(store.changes())
        defer { events.cancel() }
        let input = dir.appendingPathComponent("genre.ndjson")
        try Data(#"{"entity": "Genre", "name": "theirs"}"#.utf8).write(to: input)
        #expect(try await run(storectlPath, ["import", path.path, input.path, "--quiet"]).status == 0)
        let seen = try await events.wait(for: 1)
        #expect(seen.count == 1, "\(seen)")
        if case .committed(let tx)? = seen.first { #expect(tx.id == TransactionID(4)) } else { Issue.record("\(seen)") }
    }

    /// Another process's commit that a compaction here squashed before the watch published it is
    /// reported missed before this process's next commit (it was skipped: the commit went out
    /// right after what had been published, and the subscriber never learnt of the gap).
    @Test(.timeLimit(.minutes(15))) func aCommitSquashedBeforeItWasPublishedIsReportedMissedBeforeTheNextLocalOne() async throws {
        let dir = temporaryDirectory("other-process-squashed-unpublished")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("store")
        var configuration = StoreConfiguration()
        configuration.otherProcessPollMilliseconds = 600_000   // the watch does not look during the test
        let store = try Store.open(at: path, schema: librarySchema(), configuration: configuration)
        defer { store.close() }
        _ = try await store.save { $0.insert(Genre(name: "ours")) }
        let events = Collector(store.changes())
        defer { events.cancel() }
        let input = dir.appendingPathComponent("genre.ndjson")
        try Data(#"{"entity": "Genre", "name": "theirs"}"#.utf8).write(to: input)
        #expect(try await run(storectlPath, ["import", path.path, input.path, "--quiet"]).status == 0)
        _ = try await store.compact()   // squashes the other process's transaction 2
        let local = try await store.save { $0.insert(Genre(name: "after")) }
        let seen = try await events.wait(for: 2)
        #expect(seen.count == 2, "\(seen)")
        if case .fellBehind(let missed)? = seen.first { #expect(missed == 1) } else { Issue.record("\(seen)") }
        if case .committed(let tx)? = seen.last { #expect(tx.id == local) } else { Issue.record("\(seen)") }
    }

    /// A look that keeps failing the same way (a grown map this process cannot map) is reported
    /// once, not at every look (every 50 ms, for as long as it lasts); again when the error
    /// changes or a minute has passed; the success after them says how many failed.
    @Test func aLookThatKeepsFailingIsReportedOnceAMinuteNotEveryTime() {
        var failures = RepeatedFailure()
        let start = ContinuousClock.now
        #expect(failures.failed("cannot map", at: start) == 1)
        for k in 1..<1_200 {   // a minute of looks every 50 ms, less one
            #expect(failures.failed("cannot map", at: start + .milliseconds(50 * k)) == nil)
        }
        #expect(failures.failed("cannot map", at: start + .seconds(60)) == 1_201)
        #expect(failures.failed("cannot map", at: start + .seconds(61)) == nil)
        #expect(failures.failed("another error", at: start + .seconds(62)) == 1_203)
        #expect(failures.succeeded() == 1_203)
        #expect(failures.succeeded() == 0)
        #expect(failures.failed("cannot map", at: start + .seconds(63)) == 1)
    }
}
