import Foundation
import LibraryModel
import Strata

/// Strata through its public API only: `Store.open`, `save(ChangeSet)`, `snapshot(label:)`,
/// `object(Track.self, id:)`.
final class StrataSubject: BenchSubject {
    let engine = Engine.strata
    let savesBlockThread = false
    let store: Store

    init(directory: URL, setup: BenchSetup, sync: SyncLevel) throws {
        var config = StoreConfiguration()
        config.durability = sync == .durable ? .durable : .relaxed
        config.initialMapSizeBytes = setup.mapSizeBytes
        config.maxMapSizeBytes = max(config.maxMapSizeBytes, setup.mapSizeBytes)
        store = try Store.open(at: directory, schema: setup.schema, entities: [Track.self], configuration: config)
    }

    func save(_ batch: [TrackData]) async throws {
        var changes = ChangeSet()
        for t in batch { changes.insert(t.track) }
        _ = try await store.save(changes, author: "bench")
    }

    func saveBlocking(_ batch: [TrackData]) throws {
        var changes = ChangeSet()
        for t in batch { changes.insert(t.track) }
        _ = try store.saveAndWait(changes, author: "bench")
    }

    func count() throws -> Int { try store.mainContext.count(Track.self) }

    func timedPointReads(_ indexes: [Int]) throws -> (seconds: Double, checksum: Int) {
        let ids = indexes.map(TrackData.id)
        let snapshot = try store.snapshot(label: "bench-point-reads")
        defer { snapshot.close() }
        let timed = try MonotonicClock.measure {
            var sum = 0
            for (n, id) in ids.enumerated() {
                guard let t = try snapshot.object(Track.self, id: id) else { throw MissingRecord(engine: engine, index: indexes[n]) }
                sum &+= t.durationSeconds &+ t.title.utf8.count
            }
            return sum
        }
        return (timed.seconds, timed.result)
    }

    func timedSnapshotOpens(_ count: Int) throws -> Double {
        try MonotonicClock.measure {
            for _ in 0..<count {
                let s = try store.snapshot(label: "bench-open")
                s.close()
            }
        }.seconds
    }

    func readerLatencies(_ indexes: [Int], until stop: StopFlag?) throws -> [UInt64] {
        let ids = indexes.map(TrackData.id)
        var latencies: [UInt64] = []
        latencies.reserveCapacity(stop == nil ? ids.count : 1 << 20)
        var i = 0
        while true {
            let start = MonotonicClock.nanoseconds()
            let s = try store.snapshot(label: "bench-reader")
            let t = try s.object(Track.self, id: ids[i])
            s.close()
            latencies.append(MonotonicClock.nanoseconds() - start)
            if t == nil { throw MissingRecord(engine: engine, index: indexes[i]) }
            i += 1
            if let stop {
                if stop.isRaised { break }
                if i == ids.count { i = 0 }
            } else if i == ids.count {
                break
            }
        }
        return latencies
    }

    func close() { store.close() }
}
