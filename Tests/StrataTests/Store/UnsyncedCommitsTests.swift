import Foundation
import Glibc
import LibraryModel
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
    private func plantMarker(_ dir: URL, bootID: String, pid: Int32) throws {
        let path = dir.path + "/" + UnsyncedCommits.name(bootID: bootID, pid: pid)
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
        let boot = try #require(UnsyncedCommits.currentBootID())
        let store = try Store.open(at: dir, schema: try librarySchema(), configuration: configuration(.relaxed))
        #expect(markerNames(dir) == [UnsyncedCommits.name(bootID: boot, pid: getpid())])
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

    @Test func aMarkerOfThisBootWhoseProcessIsGoneIsSyncedAndRemoved() async throws {
        let dir = temporaryDirectory("unsynced-gone")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.currentBootID())
        // A process that has ended: its id is free (and not reused within this test).
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/true")
        try child.run()
        child.waitUntilExit()
        let gone = child.processIdentifier
        #expect(!UnsyncedCommits.isRunning(gone))
        try plantMarker(dir, bootID: boot, pid: gone)

        let store = try Store.open(at: dir, schema: try librarySchema())
        #expect(!store.crashedWithUnsyncedCommits, "a killed process's commits were in the OS's cache")
        #expect(markerNames(dir).isEmpty)
        store.close()
    }

    @Test func aMarkerOfARunningProcessStays() async throws {
        let dir = temporaryDirectory("unsynced-running")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await makeStore(dir)
        let boot = try #require(UnsyncedCommits.currentBootID())
        // The test runner's parent runs for as long as the test does.
        try plantMarker(dir, bootID: boot, pid: getppid())
        let store = try Store.open(at: dir, schema: try librarySchema())
        #expect(!store.crashedWithUnsyncedCommits)
        store.close()
        #expect(markerNames(dir) == [UnsyncedCommits.name(bootID: boot, pid: getppid())],
                "another process may still hold unsynced commits")
    }

    /// A replica keeps the finding: it must be made again from its cluster, and every open says so.
    @Test func aReplicaKeepsAMarkerOfAnotherBoot() async throws {
        let dir = temporaryDirectory("unsynced-replica")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            try await store.markAsReplica(clusterID: "a-cluster")
            store.close()
        }
        try plantMarker(dir, bootID: otherBoot, pid: 4242)
        for _ in 0..<2 {
            let store = try Store.open(at: dir, schema: try librarySchema())
            #expect(store.crashedWithUnsyncedCommits)
            store.close()
        }
        #expect(markerNames(dir).count == 1)
    }

    @Test func markerNamesParse() {
        let dir = "/nowhere"
        let name = UnsyncedCommits.name(bootID: otherBoot, pid: 77)
        #expect(name == "unsynced-\(otherBoot)-77")
        let temp = temporaryDirectory("unsynced-names")
        defer { try? FileManager.default.removeItem(at: temp) }
        try? FileManager.default.createDirectory(at: temp, withIntermediateDirectories: true)
        for n in [name, "unsynced-", "unsynced-x", "unsynced--5", "unsynced-abc-0", "unsynced-abc-12x", "other-1"] {
            #expect(FileManager.default.createFile(atPath: temp.path + "/" + n, contents: Data()))
        }
        #expect(UnsyncedCommits.markers(in: temp.path)
                == [UnsyncedCommits.Marker(path: temp.path + "/" + name, bootID: otherBoot, pid: 77)])
        #expect(UnsyncedCommits.markers(in: dir).isEmpty)
    }
}
