import Foundation
import Glibc
import LibraryModel
import Strata

/// Child modes for the resource-fault and misuse tests (Tests/StrataReliabilityTests/).
enum FaultModes {
    /// `hold-snapshot`: opens a snapshot, prints `HOLDING <pid> <tx>`, then sleeps until killed.
    static func holdSnapshot(_ o: Options) throws {
        let store: Store
        do { store = try Store.open(at: URL(fileURLWithPath: o.require("store")), schema: librarySchema()) } catch { fail("open: \(error)", code: 2) }
        let snapshot = try store.snapshot(label: "held-by-child")
        emit("HOLDING \(getpid()) \(snapshot.transactionID.rawValue) readers=\(try store.info().readers)")
        withExtendedLifetime(snapshot) {
            while true { sleep(60) }
        }
    }

    /// A group transaction of the save workload (see ``SaveMode``), with `bytes` of padding in the
    /// playlist's notes so the data file grows quickly.
    static func group(_ marker: String, k: Int, padding: Int) -> ChangeSet {
        var changes = ChangeSet()
        let created = Date(timeIntervalSince1970: 1_700_000_000)
        // notes stay "k=K" (the checker's invariant); the padding goes into the track titles.
        let playlist = Playlist(name: marker, createdAt: created, notes: "k=\(k)")
        changes.insert(playlist)
        for i in 0..<k {
            let t = Track(mbid: UUID(), title: "\(marker)-\(i)-" + String(repeating: "x", count: padding), durationSeconds: 60, addedAt: created)
            changes.insert(t)
            changes.add(t.id, to: Playlist.tracks, of: playlist.id)
        }
        return changes
    }

    /// `fsize`: saves `--warmup` groups, then lowers RLIMIT_FSIZE to the data file's size plus
    /// `--headroom-bytes` (SIGXFSZ ignored, so writes past it fail with EFBIG) and saves until a
    /// save fails. Prints `ACK …` for every save that returned, `FAILED <marker> <code> <error>`
    /// for the first failure, `AGAIN <error>` for one more try under the limit, then raises the
    /// limit and retries the failed save in the same process: `RESUMED <tx>` or `RESUMEFAILED <error>`.
    static func fileSizeLimit(_ o: Options) throws {
        let dir = o.require("store")
        let headroom = o.int("headroom-bytes", default: 256 << 10)
        let store: Store
        do { store = try Store.open(at: URL(fileURLWithPath: dir), schema: librarySchema()) } catch { fail("open: \(error)", code: 2) }
        var seq = 0
        func save(_ marker: String) throws -> TransactionID {
            try blocking { try await store.save(group(marker, k: 4, padding: 3000), author: "fsize", metadata: ["marker": marker, "kind": "group", "k": "4"]) }
        }
        for _ in 0..<o.int("warmup", default: 3) {
            seq += 1
            emit("ACK \(try save("fs-\(seq)").rawValue) group fs-\(seq) 4")
        }
        signal(SIGXFSZ, SIG_IGN)
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit)
        let hard = limit.rlim_max
        var st = stat()
        stat(FlipCampaign.dataFile(dir), &st)
        limit.rlim_cur = rlim_t(Int(st.st_size) + headroom)
        guard setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0 else { fail("setrlimit: \(String(cString: strerror(errno)))") }
        emit("LIMIT \(limit.rlim_cur) file=\(st.st_size)")
        while seq < 10_000 {
            seq += 1
            let marker = "fs-\(seq)"
            do {
                emit("ACK \(try save(marker).rawValue) group \(marker) 4")
            } catch {
                var code: Int32 = 0
                if case StrataError.lmdb(let e) = error { code = e.code }
                emit("FAILED \(marker) \(code) \(error)")
                do { emit("AGAINOK \(try save(marker + "-again").rawValue)") } catch { emit("AGAIN \(error)") }
                limit.rlim_cur = hard
                setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit)
                do { emit("RESUMED \(try save(marker).rawValue) \(marker)") } catch { emit("RESUMEFAILED \(error)") }
                store.close()
                emit("DONE")
                return
            }
        }
        emit("NEVERFAILED")
    }

    /// `fork`: opens a store, saves, forks. The forked child tries to read, save, open a snapshot
    /// and open the store again, printing `child <step>: ok` or `child <step>: <error>` for each;
    /// the parent then reads and saves as usual (`parent <step>: …`). An alarm bounds any hang.
    static func forkMisuse(_ o: Options) throws {
        let url = URL(fileURLWithPath: o.require("store"))
        let schema = librarySchema()
        // Snapshots held a second are reported, so that the one held at the fork is due in the
        // child (which must not read it: released there, it is freed memory).
        var config = StoreConfiguration()
        config.snapshotAgeWarningSeconds = 1
        let store = try Store.open(at: url, schema: schema, configuration: config)
        _ = try blocking { try await store.save { $0.insert(Genre(name: "before fork")) } }
        _ = try store.mainContext.count(Genre.self)
        // A second store, held only here: the child lets go of it and opens it again.
        let otherURL = URL(fileURLWithPath: url.path + "-other")
        var other: Store? = try Store.open(at: otherURL, schema: schema)
        // A pinned view context in the middle of a read on another thread at the fork: a child
        // context's custom merge closure runs inside a read of the context's snapshot, and waits
        // there. The snapshot's lock is held by a thread the forked child does not have; the
        // child closes the context (and so the snapshot).
        let track = Track(mbid: UUID(), title: "base", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
        let first = try blocking { try await store.save { $0.insert(track) } }
        _ = try blocking { try await store.save { $0.set(Track.durationSeconds, of: track.id, to: 7) } }
        let readAtFork = try store.newViewContext(label: "read at the fork")
        guard let base = try store.snapshot(asOf: first).record(track.id) else { fail("no base record", code: 1) }
        var conflicting = ChangeSet()
        conflicting.set(Track.title, of: track.id, to: "mine")
        conflicting.baseVersions[track.id] = BaseVersion(version: first, values: base.values)
        let insideRead = DispatchSemaphore(value: 0), letGo = DispatchSemaphore(value: 0)
        let applied = DispatchSemaphore(value: 0)
        conflicting.mergePolicy = .custom { _ in
            insideRead.signal()
            letGo.wait()
            return .keepContext
        }
        let merging = readAtFork.newChild(label: "merging at the fork")
        let sending = conflicting
        Thread {
            do { try merging.apply(sending) } catch { emit("parent apply: \(error)") }
            applied.signal()
        }.start()
        if insideRead.wait(timeout: .now() + 30) == .timedOut { fail("the merge closure never ran", code: 1) }
        // The merge closure holds the snapshot's lock: a read of the context from another thread
        // waits for it (and is still waiting, asleep, at the fork).
        let probed = DispatchSemaphore(value: 0)
        Thread {
            do { _ = try readAtFork.count(Genre.self) } catch { emit("parent probe: \(error)") }
            probed.signal()
        }.start()
        let probeWaited = probed.wait(timeout: .now() + 0.5) == .timedOut
        emit("parent read at the fork waits for the merge closure: \(probeWaited)")
        // A snapshot the parent holds at the fork, which the child lets go of. Opened last, so
        // that it is not yet old enough to be reported before the fork (the child must not be the
        // one to report it: released there, it is freed memory).
        var pinned: Snapshot? = try store.snapshot(label: "held at the fork")
        Thread.sleep(forTimeInterval: 1.2)
        // The Swift runtime's caches (conformances, witness tables, metadata) are guarded by
        // mutexes it does not reset at fork(): a child forked while another thread held one
        // blocks at its first Swift cast or generic call, before it reaches the store. Backtraces
        // of hung children under load showed exactly that. So the fork waits until every other
        // thread sleeps, as a program forking a worker would fork while idle.
        let calm = waitUntilOtherThreadsSleep()
        let pid = fork()
        if pid == 0 {
            // The forking thread may have SIGALRM blocked (threads started by the runtime block
            // most signals): unblock it so the alarm really bounds a hang.
            var alarmSet = sigset_t()
            sigemptyset(&alarmSet)
            sigaddset(&alarmSet, SIGALRM)
            sigprocmask(SIG_UNBLOCK, &alarmSet, nil)
            signal(SIGALRM, SIG_DFL)
            // Ample for a few milliseconds of work: in a full parallel test run on two cores the
            // child waited more than 10 s for the processor (its test took 95 s against 3 alone).
            alarm(60)
            // Each answer is written as soon as it is known: when the alarm ends a hung child, its
            // output names the step that hung.
            func step(_ name: String, _ body: () throws -> String) {
                let line: String
                do { line = "child \(name): ok \(try body())\n" } catch { line = "child \(name): \(error)\n" }
                line.withCString { _ = write(1, $0, strlen($0)) }
            }
            step("read") { "head \(try store.lastTransactionID)" }
            step("fetch") { "genres \(try store.mainContext.count(Genre.self))" }
            step("snapshot") { "pinned at \(try store.snapshot(label: "after-fork").transactionID)" }
            step("verify") { "\(try store.verify().ok)" }
            // Released here: its registry slot stays the parent's, and listing the open
            // snapshots must not read the freed snapshot through it.
            pinned = nil
            step("open snapshots") { "\(try store.openSnapshots().map(\.label))" }
            // Its snapshot's lock is held by the parent's merging thread, which is not here.
            step("close read at the fork") {
                readAtFork.close()
                return "returned"
            }
            step("reopen") {
                let again = try Store.open(at: url, schema: schema)
                return "same instance: \(again === store), head \(try again.lastTransactionID)"
            }
            // The parent's instance of the other store released here (its deinit leaves it to the
            // parent): the registry's entry is the parent's, and the child opens its own.
            other = nil
            step("reopen released") {
                let again = try Store.open(at: otherURL, schema: schema)
                defer { again.close() }
                return "head \(try again.lastTransactionID)"
            }
            // `save` is async; Store.save checks the process before its first suspension. Whether a
            // task can run at all in a forked child is up to the runtime, so this goes last, after
            // everything else is printed, bounded by the alarm.
            var saved = "child save: no answer\n"
            let done = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var answer = ""
            Task {
                do { answer = "child save: ok tx \(try await store.save { $0.insert(Genre(name: "in forked child")) })\n" } catch { answer = "child save: \(error)\n" }
                done.signal()
            }
            if done.wait(timeout: .now() + 3) == .success { saved = answer }
            saved.withCString { _ = write(1, $0, strlen($0)) }
            // Closing the parent's instance here must neither hang (its queues and locks may be
            // held by parent threads that do not exist here) nor touch the parent's reader slots.
            store.close()
            "child close: returned\n".withCString { _ = write(1, $0, strlen($0)) }
            _exit(0)
        }
        // Bounded wait: a forked child of a multi-threaded process can deadlock on a lock some
        // other thread held at fork() time; that must fail the test, not hang it.
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(90)
        while waitpid(pid, &status, WNOHANG) == 0 {
            if Date() > deadline {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                emit("parent child-status killed after 90 s")
                break
            }
            usleep(10_000)
        }
        emit("parent child-status \(status)")
        letGo.signal()
        // Without an answer, the merging thread still holds the snapshot's lock, and closing the
        // context or the store would wait for it for ever: the test is failed, not hung.
        if applied.wait(timeout: .now() + 30) == .timedOut || probed.wait(timeout: .now() + 30) == .timedOut {
            emit("parent apply: no answer")
            _exit(1)
        }
        readAtFork.close()
        pinned?.close()
        pinned = nil
        emit("parent forked after other threads slept: \(calm)")
        do { emit("parent read: ok head \(try store.lastTransactionID)") } catch { emit("parent read: \(error)") }
        do { emit("parent save: ok tx \(try blocking { try await store.save { $0.insert(Genre(name: "after fork")) } })") } catch { emit("parent save: \(error)") }
        store.close()
        other?.close()
    }
}

extension FaultModes {
    /// Waits (at most `seconds`) until every thread of this process but the caller has been asleep
    /// (state `S` in `/proc/self/task/<tid>/stat`) in `samples` readings in a row, 2 ms apart.
    /// True when they were; false when the time ran out first.
    static func waitUntilOtherThreadsSleep(samples: Int = 5, seconds: Double = 10) -> Bool {
        // `/proc/thread-self` links to `<pid>/task/<tid>` of the calling thread.
        let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self"))?
            .split(separator: "/").last.map(String.init) ?? ""
        let deadline = Date().addingTimeInterval(seconds)
        var inARow = 0
        while inARow < samples {
            if Date() > deadline { return false }
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            let asleep = !tasks.isEmpty && tasks.allSatisfy { tid in
                if tid == me { return true }
                guard let stat = try? String(contentsOfFile: "/proc/self/task/\(tid)/stat", encoding: .utf8),
                      let close = stat.lastIndex(of: ")") else { return true }   // ended meanwhile
                // The state is the first field after the command name, which ends at the last ')'.
                return stat[stat.index(after: close)...].split(separator: " ").first == "S"
            }
            inARow = asleep ? inARow + 1 : 0
            usleep(2_000)
        }
        return true
    }

    /// `read-all`: opens the store, reads every object, relationship and log entry, then verifies.
    /// Prints one of `OPEN-ERROR <error>`, `READ-ERROR <error>`, `VERIFY-FAILED <problems>`,
    /// `OK <objects> <transactions>`. A crash shows up as the process dying on a signal.
    static func readAll(_ o: Options) throws {
        let store: Store
        do { store = try Store.open(at: URL(fileURLWithPath: o.require("store")), schema: librarySchema()) } catch {
            emit("OPEN-ERROR \(error)")
            return
        }
        defer { store.close() }
        var objects = 0, transactions = 0
        do {
            let context = try store.newViewContext(label: "read-all")
            defer { context.close() }
            for e in store.schema.entities {
                for r in try context.fetch(Query(entity: e.name)) {
                    objects += 1
                    for rel in e.relationships { _ = try context.relatedIDs(rel, of: r.id) }
                }
            }
            try store.forEachTransaction { _ in
                transactions += 1
                return true
            }
        } catch {
            emit("READ-ERROR \(error)")
            return
        }
        do {
            let report = try store.verify()
            if !report.ok {
                emit("VERIFY-FAILED \(report.problems.prefix(3).joined(separator: " | "))")
                return
            }
        } catch {
            emit("VERIFY-FAILED \(error)")
            return
        }
        emit("OK \(objects) \(transactions)")
    }
}
