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
                let replicas = try await W12Cluster.makeCluster(address, in: dir, schema: schema, configuration: config)
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
        let store = try Store.open(at: root.appendingPathComponent("one-machine"), schema: schema)
        defer { store.close() }
        let rate = try await W12Cluster.oneMachine(store, perSaver: perSaver) { print($0) }
        print(String(format: "one machine: %.0f tx/s", rate))
    }
}
