import Foundation
import Glibc
import LibraryModel
import Logging
import Testing
@testable import Strata

/// A relaxed store marks its directory while it may hold commits the disk does not have yet, so
/// an open after the machine went down can tell (``Store/crashedWithUnsyncedCommits``). An OS
/// crash cannot be caused here; a marker of another boot is what one leaves, so the tests write
/// one by hand.
@Suite struct UnsyncedCommitsTests {
    private func configuration(_ durability: Durability) -> StoreConfiguration {
        var config = StoreConfiguration()
        config.durability = durability
        return config
    }

    private func markerNames(_ dir: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? [])
            .filter { $0.hasPrefix(UnsyncedCommits.prefix) }.sorted()
    }

    /// A marker as a process of another boot (an OS crash) or of this one leaves it.
    private func plantMarker(_ dir: URL, bootID: String, pid: Int32, open: Int = 1) throws {
        let path = dir.path + "/" + UnsyncedCommits.name(bootID: bootID, pid: pid, open: open)
        try Data((bootID + "\n").utf8).write(to: URL(fileURLWithPath: path))
    }

    /// A store made and closed, with one genre.
    private func makeStore(_ dir: URL) async throws {
        let store = try Store.open(at: dir, schema: try librarySchema())
        _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
        store.close()
    }

    private var otherBoot: String { "00000000-0000-4000-8000-000000000000" }

    @Test func aRelaxedStoreMarksItsDirectoryUntilItClosesCleanly() async throws {
        let dir = temporaryDirectory("unsynced-mark")
        defer { try? FileManager.default.removeItem(at: dir) }
        let boot = try #require(UnsyncedCommits.bootID)
        let store = try Store.open(at: dir, schema: try librarySchema(), configuration: configuration(.relaxed))
        let marks = try UnsyncedCommits.markers(in: dir.path)
        #expect(marks.count == 1 && marks.first?.bootID == boot && marks.first?.pid == getpid(), "\(marks)")
        #expect(!store.crashedWithUnsyncedCommits)
        _ = try await store.save { $0.insert(Genre(name: "Jazz")) }
        store.close()
        #expect(markerNames(dir).isEmpty, "the final flush succeeded: nothing left unsynced")

        let durable = try Store.open(at: dir, schema: try librarySchema())
        #expect(markerNames(dir).isEmpty, "a durable store syncs every commit: no marker")
        durable.close()
    }

    @Test func aMarkerOfAnotherBootIsReportedOnceForAStoreOfOneMachine() async throws {
        let dir = temporaryDirectory("unsynced-crash")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        try plantMarker(dir, bootID: otherBoot, pid: 4242)

        // A read-only open reports it and leaves it.
        let readOnly = try Store.openReadOnly(at: dir)
        #expect(readOnly.crashedWithUnsyncedCommits)
        readOnly.close()
        #expect(markerNames(dir).count == 1)

        let store = try Store.open(at: dir, schema: try librarySchema())
        #expect(store.crashedWithUnsyncedCommits)
        #expect(try store.mainContext.count(Genre.self) == 1)
        store.close()
        #expect(markerNames(dir).isEmpty, "reported to the open that found it, then removed")
        let again = try Store.open(at: dir, schema: try librarySchema())
        #expect(!again.crashedWithUnsyncedCommits)
        again.close()
    }

    /// After an OS crash with commits not flushed, a file system that does not keep the order
    /// of writes may have left pages of earlier commits damaged: the open checks every page
    /// first, and refuses a damaged store (`damagedStore`), keeping the marker so that every
    /// open checks again (it went on using such a store, which a later commit could damage further).
    @Test func anOpenAfterACrashWithUnflushedCommitsChecksEveryPage() async throws {
        let dir = temporaryDirectory("unsynced-damaged")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Store.open(at: dir, schema: try librarySchema())
        _ = try await store.save { c in for i in 0..<2_000 { c.insert(Genre(name: "genre \(i)")) } }
        store.close()
        try plantMarker(dir, bootID: otherBoot, pid: 4242)
        let data = try FileManager.default.destinationOfSymbolicLink(atPath: dir.path + "/current")
        let file = dir.path + "/" + data + "/data.mdb"
        let size = try #require(try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int)
        // Pages of the middle of the file written over (as pages reused by later commits can
        // reach the disk before the meta page that no longer names them does).
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        try handle.seek(toOffset: UInt64(size / 2 / 4096 * 4096))
        try handle.write(contentsOf: Data(repeating: 0xAB, count: 8 * 4096))
        try handle.close()
        for _ in 0..<2 {
            #expect {
                _ = try Store.open(at: dir, schema: try librarySchema())
            } throws: { error in
                guard case StrataError.damagedStore = error else { return false }
                return true
            }
            #expect(markerNames(dir).count == 1, "the marker stays while the store fails its check")
        }
    }

    @Test func aMarkerOfThisBootWhoseProcessIsGoneIsSyncedAndRemoved() async throws {
        let dir = temporaryDirectory("unsynced-gone")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.bootID)
        // A process that has ended: its id is free (and not reused within this test).
        let child = try ChildProcess.start("/bin/true", [])
        child.wait()
        let gone = child.pid
        try plantMarker(dir, bootID: boot, pid: gone)

        let store = try Store.open(at: dir, schema: try librarySchema())
        #expect(!store.crashedWithUnsyncedCommits, "a killed process's commits were in the OS's cache")
        #expect(markerNames(dir).isEmpty)
        store.close()
    }

    /// The sync an open makes for the markers of processes that are gone fails: the open fails,
    /// and the markers now say so, for the next open to report (the kernel reports a write error
    /// once: the next open's own sync succeeded, and took them for clean exits).
    @Test func aFailedSyncForTheMarkersOfProcessesThatAreGoneIsNotedInThem() async throws {
        let dir = temporaryDirectory("unsynced-gone-sync-fails")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.bootID)
        let child = try ChildProcess.start("/bin/true", [])
        child.wait()
        try plantMarker(dir, bootID: boot, pid: child.pid)
        do {
            UnsyncedCommits.failSettlingSyncForTesting.withLock { _ = $0.insert(dir.path) }
            defer { UnsyncedCommits.failSettlingSyncForTesting.withLock { _ = $0.remove(dir.path) } }
            #expect(throws: StrataError.self) { try Store.open(at: dir, schema: try librarySchema()).close() }
        }
        let store = try Store.open(at: dir, schema: try librarySchema())
        defer { store.close() }
        #expect(store.crashedWithUnsyncedCommits)
    }

    /// While another process has the store open (it holds `strata.lock`), no marker of this
    /// boot is known to be stale: a process id alone may be reused, or be another namespace's.
    @Test(.enabled(if: anotherProcessCanLockFiles, "needs python3"))
    func markersOfThisBootStayWhileAnotherProcessSharesTheStore() async throws {
        let dir = temporaryDirectory("unsynced-shared")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.bootID)
        try plantMarker(dir, bootID: boot, pid: 4242)
        // Another process holding the store's lock, as an open store does.
        // It holds the lock until its standard input closes (a signal may be blocked in a child
        // of the test runner).
        let holder = try await lockedByAnotherProcess(dir.path + "/strata.lock")
        var released = false
        func release() {
            guard !released else { return }
            released = true
            try? holder.input?.close()
            holder.wait()
        }
        defer { release() }
        let store = try Store.open(at: dir, schema: try librarySchema())
        #expect(!store.crashedWithUnsyncedCommits)
        store.close()
        #expect(markerNames(dir) == [UnsyncedCommits.name(bootID: boot, pid: 4242, open: 1)],
                "another process has the store open: the marker may be its own")
        release()
        // Alone with the store, the next open syncs and removes it.
        let alone = try Store.open(at: dir, schema: try librarySchema())
        alone.close()
        #expect(markerNames(dir).isEmpty)
    }

    /// A process that holds no `strata.lock` but has the live generation open (its `lock.mdb`
    /// locked, as liblmdb locks it: a process whose `strata.lock` was deleted and made again)
    /// shares the store too: a marker of this boot stays. (It was taken as stale and removed.)
    @Test(.enabled(if: anotherProcessCanLockFiles, "needs python3"))
    func markersOfThisBootStayWhileAnotherProcessHasTheLiveGenerationOpen() async throws {
        let dir = temporaryDirectory("unsynced-shared-generation")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.bootID)
        try plantMarker(dir, bootID: boot, pid: 4242)
        // Another process holding the live generation's lock file, as liblmdb does (its first
        // byte, shared).
        // It holds the lock until its standard input closes (a signal may be blocked in a child
        // of the test runner).
        let holder = try await lockedByAnotherProcess(dir.path + "/current/lock.mdb", firstByteOnly: true)
        var released = false
        func release() {
            guard !released else { return }
            released = true
            try? holder.input?.close()
            holder.wait()
        }
        defer { release() }
        let store = try Store.open(at: dir, schema: try librarySchema())
        #expect(!store.crashedWithUnsyncedCommits)
        store.close()
        #expect(markerNames(dir) == [UnsyncedCommits.name(bootID: boot, pid: 4242, open: 1)],
                "another process has the store open: the marker may be its own")
        release()
        // Alone with the store, the next open syncs and removes it.
        let alone = try Store.open(at: dir, schema: try librarySchema())
        alone.close()
        #expect(markerNames(dir).isEmpty)
    }

    /// A process whose final flush failed wrote so into its marker: the next open reports it,
    /// though it is of this boot and its process is gone (that open's own sync would succeed:
    /// the kernel reports a write error once).
    @Test func aMarkerOfAFailedFlushIsReported() async throws {
        let dir = temporaryDirectory("unsynced-flush-failed")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.bootID)
        try plantMarker(dir, bootID: boot, pid: 4242)
        let path = dir.path + "/" + UnsyncedCommits.name(bootID: boot, pid: 4242, open: 1)
        UnsyncedCommits.noteFailedFlush(path, logger: Logger(label: "test"))
        // Appended to what the marker held: a crash in the middle leaves it as it was, never empty.
        #expect(try String(contentsOfFile: path, encoding: .utf8) == boot + "\nflush failed\n")
        let store = try Store.open(at: dir, schema: try librarySchema())
        #expect(store.crashedWithUnsyncedCommits)
        store.close()
        #expect(markerNames(dir).isEmpty, "reported once to a store of one machine")
    }

    /// A process that holds the store's lock when an open lists the markers, then notes a failed
    /// final flush in its marker and lets go before the open asks whether anyone holds the lock:
    /// the open must report that marker, not take it (as it read at the listing) for a stale one
    /// of this boot and remove it. The note and the release run at that point of the open, by a
    /// test hook.
    @Test(.enabled(if: anotherProcessCanLockFiles, "needs python3"))
    func aFailedFlushNotedAfterTheListingIsStillReported() async throws {
        let dir = temporaryDirectory("unsynced-late-failure")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.bootID)
        try plantMarker(dir, bootID: boot, pid: 4242)
        let marker = dir.path + "/" + UnsyncedCommits.name(bootID: boot, pid: 4242, open: 1)
        let holder = try await lockedByAnotherProcess(dir.path + "/strata.lock")
        let ran = Locked(false)
        let directory = dir.path
        UnsyncedCommits.afterListingForTesting.withLock { hook in
            hook = { listedIn in
                guard listedIn == directory, !ran.withLock({ $0 }) else { return }
                ran.withLock { $0 = true }
                UnsyncedCommits.noteFailedFlush(marker, logger: Logger(label: "test"))
                try? holder.input?.close()
                holder.wait()
            }
        }
        defer { UnsyncedCommits.afterListingForTesting.withLock { $0 = nil } }
        let store = try await onOwnThread { try Store.open(at: dir, schema: try librarySchema()) }
        defer { store.close() }
        #expect(ran.withLock { $0 })
        #expect(store.crashedWithUnsyncedCommits)
    }

    /// A marker is left alone while its instance is open in this process (it removes its own);
    /// one with this process's id that no open instance here wrote is a predecessor's that had
    /// the same id (a process id comes back, pid 1 in a container): stale like any other.
    @Test func onlyTheMarkersOfInstancesOpenHereAreThisProcesssOwn() async throws {
        let dir = temporaryDirectory("unsynced-this-process")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.bootID)
        let relaxed = try Store.open(at: dir, schema: try librarySchema(), configuration: configuration(.relaxed))
        let own = try #require(try UnsyncedCommits.markers(in: dir.path).first)
        #expect(UnsyncedCommits.isOpenHere(own.path))
        relaxed.close()
        #expect(!UnsyncedCommits.isOpenHere(own.path))
        try plantMarker(dir, bootID: boot, pid: getpid(), open: 999_999)
        let store = try Store.open(at: dir, schema: try librarySchema())
        #expect(!store.crashedWithUnsyncedCommits)
        store.close()
        #expect(markerNames(dir).isEmpty, "a predecessor's marker with this process's id is stale")
    }

    @Test func markerNamesParse() throws {
        let dir = "/nowhere"
        let name = UnsyncedCommits.name(bootID: otherBoot, pid: 77, open: 3)
        #expect(name == "unsynced-\(otherBoot)-77-3")
        let temp = temporaryDirectory("unsynced-names")
        defer { try? FileManager.default.removeItem(at: temp) }
        try? FileManager.default.createDirectory(at: temp, withIntermediateDirectories: true)
        for n in [name, "unsynced-", "unsynced-x", "unsynced--5-1", "unsynced-abc-0-1", "unsynced-abc-12x-1",
                  "unsynced-abc-12", "unsynced-12-3", "unsynced-abc-12-x", "other-1-1"] {
            #expect(FileManager.default.createFile(atPath: temp.path + "/" + n, contents: Data()))
        }
        #expect(try UnsyncedCommits.markers(in: temp.path)
                == [UnsyncedCommits.Marker(path: temp.path + "/" + name, bootID: otherBoot, pid: 77)])
        #expect(throws: StrataError.self) { try UnsyncedCommits.markers(in: dir) }
    }

    /// A durable save that changes nothing writes no page, so LMDB's commit syncs nothing; it
    /// returns the store's head as its transaction, which may be a relaxed commit of another
    /// process not yet on disk. It syncs before it returns (it returned without a sync, so an
    /// acknowledged durable save named a transaction a power loss could take). A relaxed one does
    /// not.
    @Test(arguments: [Durability.durable, .relaxed])
    func aSaveThatChangesNothingIsOnDiskWhenItReturns(durability: Durability) async throws {
        let dir = temporaryDirectory("no-op-save-\(durability)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Store.open(at: dir, schema: try Schema.load(directory: librarySchemaDirectory),
                                   configuration: configuration(durability))
        defer { store.close() }
        let genre = Genre(name: "Jazz")
        let first = try await store.save { $0.insert(genre) }
        let before = store.env.syncCalls.load(ordering: .relaxed)
        let same = try await store.save { $0.update(genre) }
        #expect(same == first)
        let synced = store.env.syncCalls.load(ordering: .relaxed) - before
        #expect(durability == .durable ? synced >= 1 : synced == 0, "\(synced) sync(s)")
    }
}
