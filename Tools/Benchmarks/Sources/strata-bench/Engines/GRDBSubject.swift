import Foundation
import GRDB

/// GRDB 7: a `DatabasePool` (WAL), cached prepared statements, hand-written record decoding;
/// with Strata's `Track` indexes for the `grdb-indexed` engine.
final class GRDBSubject: BenchSubject {
    let engine: Engine
    let savesBlockThread = true
    let pool: DatabasePool

    struct WrongPragma: Error, CustomStringConvertible {
        let found: Int
        var description: String { "GRDB: PRAGMA synchronous is \(found), expected 2 (FULL)" }
    }

    /// Opens a fresh database with the `track` table and, when given, `indexesSQL` (the
    /// `grdb-indexed` engine's indexes; W10 gives v1's).
    init(engine: Engine, directory: URL, sync: SyncLevel, indexesSQL: String? = nil) throws {
        self.engine = engine
        pool = try DatabasePool(path: directory.appendingPathComponent("db.sqlite").path, configuration: Configuration())
        if sync == .durable {
            // synchronous is per connection; only the writer's commits need it.
            let level = try pool.writeWithoutTransaction { db -> Int in
                try db.execute(sql: "PRAGMA synchronous = FULL")
                return try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
            }
            guard level == 2 else { throw WrongPragma(found: level) }
        }
        try pool.write { db in
            try db.execute(sql: GRDBTrack.createTableSQL)
            if let indexesSQL { try db.execute(sql: indexesSQL) }
        }
    }

    func save(_ batch: [TrackData]) async throws { try saveBlocking(batch) }

    func saveBlocking(_ batch: [TrackData]) throws {
        try pool.write { db in
            let insert = try db.cachedStatement(sql: GRDBTrack.insertSQL)
            for t in batch { try insert.execute(arguments: GRDBTrack.arguments(t)) }
        }
    }

    func count() throws -> Int { try pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM track") ?? 0 } }

    func timedPointReads(_ indexes: [Int]) throws -> (seconds: Double, checksum: Int) {
        let keys = indexes.map { Data(TrackData.keyBytes($0)) }
        let timed = try pool.read { db in
            let select = try db.cachedStatement(sql: GRDBTrack.selectByIDSQL)
            return try MonotonicClock.measure {
                var sum = 0
                for (n, key) in keys.enumerated() {
                    guard let t = try GRDBTrack.fetchOne(select, arguments: [key]) else { throw MissingRecord(engine: engine, index: indexes[n]) }
                    sum &+= t.durationSeconds &+ t.title.utf8.count
                }
                return sum
            }
        }
        return (timed.seconds, timed.result)
    }

    func timedSnapshotOpens(_ count: Int) throws -> Double {
        try MonotonicClock.measure {
            for _ in 0..<count { try pool.read { _ in } }
        }.seconds
    }

    func readerLatencies(_ indexes: [Int], until stop: StopFlag?) throws -> [UInt64] {
        let keys = indexes.map { Data(TrackData.keyBytes($0)) }
        var latencies: [UInt64] = []
        latencies.reserveCapacity(stop == nil ? keys.count : 1 << 20)
        var i = 0
        while true {
            let key = keys[i]
            let start = MonotonicClock.nanoseconds()
            let t = try pool.read { db in try GRDBTrack.fetchOne(db.cachedStatement(sql: GRDBTrack.selectByIDSQL), arguments: [key]) }
            latencies.append(MonotonicClock.nanoseconds() - start)
            if t == nil { throw MissingRecord(engine: engine, index: indexes[i]) }
            i += 1
            if let stop {
                if stop.isRaised { break }
                if i == keys.count { i = 0 }
            } else if i == keys.count {
                break
            }
        }
        return latencies
    }

    func close() { try? pool.close() }
}
