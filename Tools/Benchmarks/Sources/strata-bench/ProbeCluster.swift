import Foundation
import LibraryModel
import Strata
import StrataCluster

/// The `cluster-savers` probe: W12's 16 durable savers, spread over all three replicas of a
/// cluster and then put on one replica alone (the other two following), each over synced and
/// over relaxed replicas, and on one machine's store; with each case's breakdown of a group's
/// time (see ``W12Cluster/groupBreakdown(_:before:after:)``). One replica saving alone shows what
/// a group costs without the other machines' appends in its way.
extension ProbeCommand {
    func clusterSavers(_ schema: Schema, _ root: URL) async throws {
        let perSaver = max(1, count / 16)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let server = try PrivatePostgres(directory: root.appendingPathComponent("postgres"))
        defer { server.stop() }
        var first = 0
        for durability in [Durability.durable, .relaxed] {
            for saving in [3, 1] {
                let name = "c\(durability == .durable ? "s" : "r")\(saving)"
                let dir = root.appendingPathComponent(name)
                let address = try server.database(name)
                var config = StoreConfiguration()
                config.durability = durability
                let store = try Store.open(at: dir.appendingPathComponent("r0"), schema: schema, configuration: config)
                var replicas: [ClusterReplica] = []
                do {
                    try await Cluster.initialize(store: store, address: address, name: "r0")
                    replicas.append(try await ClusterReplica.open(store: store, address: address, name: "r0"))
                    for i in 1..<3 {
                        let joined = try await Cluster.join(at: dir.appendingPathComponent("r\(i)"), address: address,
                                                            configuration: config)
                        do {
                            replicas.append(try await ClusterReplica.open(store: joined, address: address, name: "r\(i)"))
                        } catch {
                            joined.close()
                            throw error
                        }
                    }
                } catch {
                    // Closes the first replica's store with it; alone when it never became one.
                    await W12Cluster.close(replicas)
                    if replicas.isEmpty { store.close() }
                    throw error
                }
                let label = "\(durability == .durable ? "synced" : "relaxed") replicas, \(saving) saving"
                do {
                    let rate = try await W12Cluster.sixteenSavers(Array(replicas.prefix(saving)), perSaver: perSaver,
                                                                  firstTrack: first, label: label) { print($0) }
                    print(String(format: "%@: %.0f tx/s", label, rate))
                } catch {
                    await W12Cluster.close(replicas)
                    throw error
                }
                await W12Cluster.close(replicas)
                try server.drop(name)
                try? FileManager.default.removeItem(at: dir)
                first += 16 * perSaver
            }
        }
        let dir = root.appendingPathComponent("one-machine")
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        let seconds = try await MonotonicClock.measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for s in 0..<16 {
                    group.addTask {
                        for k in 0..<perSaver { _ = try await store.save { $0.insert(TrackData.make(s * perSaver + k).track) } }
                    }
                }
                try await group.waitForAll()
            }
        }.seconds
        let st = store.statistics
        print(String(format: "one machine: %.0f tx/s, %.1f saves per commit, a group %.2f ms", Double(16 * perSaver) / seconds,
                     Double(st.saves) / Double(max(1, st.lmdbCommits)), Double(st.commitNanoseconds) / Double(max(1, st.lmdbCommits)) / 1e6))
    }
}
