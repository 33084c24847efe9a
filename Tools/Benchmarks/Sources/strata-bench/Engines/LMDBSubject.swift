import CLMDBBench
import Foundation

/// Raw LMDB: 16-byte keys, ~100-byte values (``PlainTrack``), one named database.
final class LMDBSubject: BenchSubject {
    let engine = Engine.lmdb
    let savesBlockThread = true
    let db: RawLMDB

    init(directory: URL, setup: BenchSetup, sync: SyncLevel) throws {
        db = try RawLMDB(directory: directory, mapSizeBytes: setup.mapSizeBytes, noSync: sync == .relaxed)
    }

    func save(_ batch: [TrackData]) async throws { try saveBlocking(batch) }

    func saveBlocking(_ batch: [TrackData]) throws {
        var value: [UInt8] = []
        value.reserveCapacity(160)
        var key = [UInt8](repeating: 0, count: 16)
        try db.write { txn in
            for t in batch {
                TrackData.writeKey(t.index, into: &key, at: 0)
                PlainTrack.encode(t, into: &value)
                try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in try db.put(txn, key: k, value: v) } }
            }
        }
    }

    func count() throws -> Int { try db.entryCount() }

    /// All keys of `indexes`, 16 bytes each, in one buffer.
    private func keys(_ indexes: [Int]) -> [UInt8] {
        var keys = [UInt8](repeating: 0, count: indexes.count * 16)
        for (n, i) in indexes.enumerated() { TrackData.writeKey(i, into: &keys, at: n * 16) }
        return keys
    }

    func timedPointReads(_ indexes: [Int]) throws -> (seconds: Double, checksum: Int) {
        let keys = keys(indexes)
        let txn = try db.beginRead()
        defer { mdb_txn_abort(txn) }
        let timed = try keys.withUnsafeBytes { all in
            try MonotonicClock.measure {
                var sum = 0
                for n in 0..<indexes.count {
                    let key = UnsafeRawBufferPointer(rebasing: all[(n * 16)..<(n * 16 + 16)])
                    guard let t = try db.get(txn, key: key, PlainTrack.decode) else { throw MissingRecord(engine: engine, index: indexes[n]) }
                    sum &+= t.durationSeconds &+ t.title.utf8.count
                }
                return sum
            }
        }
        return (timed.seconds, timed.result)
    }

    /// Reset/renew, the cheap way to reuse a read transaction (what Strata does internally too).
    func timedSnapshotOpens(_ count: Int) throws -> Double {
        let txn = try db.beginRead()
        mdb_txn_reset(txn)
        defer { mdb_txn_abort(txn) }
        return try MonotonicClock.measure {
            for _ in 0..<count {
                try lmdbCheck(mdb_txn_renew(txn), "mdb_txn_renew")
                mdb_txn_reset(txn)
            }
        }.seconds
    }

    func readerLatencies(_ indexes: [Int], until stop: StopFlag?) throws -> [UInt64] {
        let keys = keys(indexes)
        let txn = try db.beginRead()
        mdb_txn_reset(txn)
        defer { mdb_txn_abort(txn) }
        var latencies: [UInt64] = []
        latencies.reserveCapacity(stop == nil ? indexes.count : 1 << 20)
        try keys.withUnsafeBytes { all in
            var i = 0
            while true {
                let key = UnsafeRawBufferPointer(rebasing: all[(i * 16)..<(i * 16 + 16)])
                let start = MonotonicClock.nanoseconds()
                try lmdbCheck(mdb_txn_renew(txn), "mdb_txn_renew")
                let t = try db.get(txn, key: key, PlainTrack.decode)
                mdb_txn_reset(txn)
                latencies.append(MonotonicClock.nanoseconds() - start)
                if t == nil { throw MissingRecord(engine: engine, index: indexes[i]) }
                i += 1
                if let stop {
                    if stop.isRaised { break }
                    if i == indexes.count { i = 0 }
                } else if i == indexes.count {
                    break
                }
            }
        }
        return latencies
    }

    func close() {
        if db.noSync { try? db.sync() }
        db.close()
    }
}
