import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A replica's reset from a snapshot file (`Store.resetReplica`), and the directory sync every
/// read-write open makes before it removes anything.
@Suite struct ReplicaResetTests {
    /// A replica of cluster "c" with two genres, and a snapshot file of it.
    private func replicaWithASnapshot(_ dir: URL) async throws -> (Store, URL) {
        let store = try Store.open(at: dir.appendingPathComponent("store"), schema: librarySchema())
        _ = try await store.save { $0.insert(Genre(name: "a")); $0.insert(Genre(name: "b")) }
        try await store.markAsReplica(clusterID: "c")
        let snapshot = dir.appendingPathComponent("snapshot")
        _ = try await store.writeReplicaSnapshot(to: snapshot)
        return (store, snapshot.appendingPathComponent(Store.replicaSnapshotFile))
    }

    /// Reset while this process has the store open is refused before anything is touched: the
    /// open instance stays open and usable. (The reset opened the store again, which handed back
    /// that very instance, and closed it.)
    @Test func aResetWhileThisProcessHasTheStoreOpenIsRefusedAndLeavesItOpen() async throws {
        let dir = temporaryDirectory("replica-reset-open")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (store, file) = try await replicaWithASnapshot(dir)
        defer { store.close() }
        do {
            let reset = try Store.resetReplica(at: dir.appendingPathComponent("store"), fromSnapshot: file)
            reset.close()
            Issue.record("a replica open in this process was reset")
        } catch StrataError.alreadyOpen {
        }
        #expect(!store.isClosed)
        #expect(try store.mainContext.count(Genre.self) == 2)
        store.close()
        let reset = try Store.resetReplica(at: dir.appendingPathComponent("store"), fromSnapshot: file)
        defer { reset.close() }
        #expect(try reset.mainContext.count(Genre.self) == 2)
        #expect(try reset.replicaClusterID == "c")
    }

    /// A reset whose switch could not sync the store directory fails with that error instead of
    /// opening the store; the old generation stays. The next read-write open syncs the directory
    /// before it removes the old generation (an open that cannot is refused and removes
    /// nothing), so the link on disk never names a generation that is gone.
    @Test func aSwitchTheDiskMayNotHoldIsMadeDurableByTheNextOpenBeforeTheOldGenerationGoes() async throws {
        let dir = temporaryDirectory("replica-reset-sync")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (store, file) = try await replicaWithASnapshot(dir)
        store.close()
        let path = dir.appendingPathComponent("store").path
        func generations() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasPrefix("gen-") }.sorted()
        }
        #expect(try generations().count == 1)
        do {
            StoreDirectory.failSwitchSyncForTesting.withLock { _ = $0.insert(path) }
            defer { StoreDirectory.failSwitchSyncForTesting.withLock { _ = $0.remove(path) } }
            do {
                let reset = try Store.resetReplica(at: URL(fileURLWithPath: path), fromSnapshot: file)
                reset.close()
                Issue.record("a reset whose directory sync failed opened the store")
            } catch StrataError.lmdb(let e) {
                #expect(e.code == EIO, "\(e)")
            }
        }
        StoreDirectory.failDirectorySyncForTesting.withLock { _ = $0.insert(path) }
        do {
            defer { StoreDirectory.failDirectorySyncForTesting.withLock { _ = $0.remove(path) } }
            let kept = try generations()
            #expect(kept.count == 2, "the old generation is kept: \(kept)")
            do {
                let s = try Store.open(at: URL(fileURLWithPath: path), schema: librarySchema())
                s.close()
                Issue.record("an open whose directory sync failed went on")
            } catch StrataError.lmdb(let e) {
                #expect(e.code == EIO, "\(e)")
            }
            #expect(try generations().count == 2, "nothing is removed before the directory is synced")
        }
        let reopened = try Store.open(at: URL(fileURLWithPath: path), schema: librarySchema())
        defer { reopened.close() }
        #expect(try generations().count == 1)
        #expect(try reopened.mainContext.count(Genre.self) == 2)
    }
}

/// A replica's making killed while it copied its snapshot into the store's first generation:
/// the store made later at that path does not keep the partial copy (as large as the snapshot)
/// for ever.
@Suite struct KilledReplicaMakingTests {
    @Test func aStoreMadeWhereAReplicasMakingWasKilledDropsThePartialCopy() throws {
        let dir = temporaryDirectory("killed-replica-making")
        defer { try? FileManager.default.removeItem(at: dir) }
        let generation = dir.appendingPathComponent(StoreDirectory.generationName(1))
        try FileManager.default.createDirectory(at: generation, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: dir.path)
        let partial = generation.appendingPathComponent(StoreDirectory.partialSnapshotName)
        try Data(repeating: 7, count: 1 << 16).write(to: partial)
        let store = try Store.open(at: dir, schema: try librarySchema())
        defer { store.close() }
        #expect(!FileManager.default.fileExists(atPath: partial.path))
        #expect(try store.mainContext.count(Genre.self) == 0)
    }
}
