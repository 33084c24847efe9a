import Foundation
import Glibc
import LibraryModel
import Strata
import StrataTestSupport
import Testing
@testable import StrataCluster

/// A replica whose own commits are not synced (`durability = .relaxed`): PostgreSQL holds every
/// acknowledged save, so only the replica's file is at stake when its machine goes down, and a
/// replica that may have lost part of a commit so must be made again.
@Suite(.serialized) struct ClusterRelaxedReplicaTests {
    private var relaxed: StoreConfiguration {
        var config = StoreConfiguration()
        config.durability = .relaxed
        return config
    }

    private func markers(_ path: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter { $0.hasPrefix("unsynced-") }
    }

    @Test func aRelaxedReplicaSavesThroughTheClusterAndOneFoundAfterACrashMustRejoin() async throws {
        try await withCluster(replicas: 1) { c in try await relaxedReplica(c) }
    }

    private func relaxedReplica(_ c: ClusterFixture) async throws {
        let path = c.root.appendingPathComponent("relaxed").path
        do {
            let store = try await Cluster.join(at: URL(fileURLWithPath: path), address: c.address,
                                               configuration: relaxed)
            let replica = try await ClusterReplica.open(store: store, address: c.address, name: "relaxed",
                                                        pollInterval: .milliseconds(50))
            #expect(markers(path).count == 1, "a relaxed replica marks its directory while it is open")
            let track = newTrack("saved on the relaxed replica")
            let id = try await replica.store.save { $0.insert(track) }
            _ = try await c.replicas[0].catchUp(to: id)
            #expect(try c.replicas[0].store.mainContext.object(Track.self, id: track.id)?.title == track.title)
            await replica.close()
            store.close()
            #expect(markers(path).isEmpty, "closed after its final flush: nothing unsynced")
        }
        // What an OS crash leaves: the marker of a process of another boot.
        let planted = path + "/unsynced-00000000-0000-4000-8000-000000000000-4242-1"
        #expect(FileManager.default.createFile(atPath: planted, contents: Data("x\n".utf8)))
        let store = try Store.open(at: URL(fileURLWithPath: path), schema: try librarySchema())
        #expect(store.crashedWithUnsyncedCommits)
        do {
            _ = try await ClusterReplica.open(store: store, address: c.address, name: "relaxed")
            Issue.record("a replica that may hold part of a commit followed its cluster")
        } catch let e as ClusterError {
            #expect(e.kind == .mustRejoin)
            #expect(e.reason.contains("storectl cluster join"))
        }
        store.close()
        // A migration, which catches the replica up before it migrates, refuses it too (it
        // applied the cluster's entries on the file that may hold part of a commit).
        _ = try await c.replicas[0].store.save { $0.insert(newTrack("saved after the crash")) }
        let before = try Store.openExisting(at: URL(fileURLWithPath: path))
        let head = try before.lastTransactionID
        before.close()
        do {
            _ = try await Cluster.migrate(at: URL(fileURLWithPath: path), address: c.address,
                                          schemas: try Schema.loadAll(directory: librarySchemaDirectory))
            Issue.record("a replica that may hold part of a commit was caught up by a migration")
        } catch let e as ClusterError {
            #expect(e.kind == .mustRejoin, "\(e)")
        }
        let after = try Store.openExisting(at: URL(fileURLWithPath: path))
        #expect(try after.lastTransactionID == head)
        after.close()
        #expect(FileManager.default.fileExists(atPath: planted), "every later open says so again")
        // A new replica from the cluster has every acknowledged save.
        let again = try await Cluster.join(at: c.root.appendingPathComponent("again"), address: c.address,
                                           configuration: relaxed)
        let replica = try await ClusterReplica.open(store: again, address: c.address, name: "again")
        #expect(try again.lastTransactionID == c.replicas[0].store.lastTransactionID)
        #expect(try again.mainContext.count(Track.self) == c.replicas[0].store.mainContext.count(Track.self))
        await replica.close()
        again.close()
    }
}
