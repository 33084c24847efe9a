import Foundation
import GRDB
import LibraryModel
import Strata

/// W10: migrating `migrationObjects` tracks from library v1 to v2 (a transform of every record:
/// playCount added with its default, the v2 steps) against GRDB changing every row the same way
/// (`ALTER TABLE ADD COLUMN` and an `UPDATE` of all rows, durable). Objects per second.
///
/// `grdb-indexed` does the equal work: its table starts with v1's `Track` indexes (unique mbid,
/// title, duration), and the migration also builds the addedAt index that v2 adds, as Strata's does.
enum W10Migration {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        await ctx.measureRounds("W10", keys: ["W10_migration"], &report) { engine in
            switch engine {
            case .strata: return ["W10_migration": try await strata(ctx)]
            case .grdb: return ["W10_migration": try grdb(ctx, indexed: false)]
            case .grdbIndexed: return ["W10_migration": try grdb(ctx, indexed: true)]
            case .lmdb, .lmdbIndexed: return [:]
            }
        }
    }

    static func strata(_ ctx: WorkloadContext) async throws -> Double {
        let n = ctx.sizes.migrationObjects
        let dir = try ctx.storeDirectory("W10", .strata)
        defer { ctx.remove(dir) }
        let schemas = try Schema.loadAll(directory: ctx.schemaDirectory)
        guard schemas.count >= 2 else { throw NotEnoughVersions() }
        try await makeV1Store(at: dir, schema: schemas[0], tracks: n, batch: ctx.sizes.batchSize, mapSizeBytes: ctx.setup.mapSizeBytes)
        let r = try await Store.migrate(at: dir, schemas: schemas, registry: libraryMigrations)
        return Double(n) / r.seconds
    }

    /// A library v1 store (relaxed) holding `tracks` tracks, saved `batch` per transaction: the
    /// store W10 migrates (also `strata-bench probe migration`'s).
    static func makeV1Store(at dir: URL, schema v1: Schema, tracks n: Int, batch: Int, mapSizeBytes: Int) async throws {
        guard let track = v1.entity(named: "Track") else { throw NotEnoughVersions() }
        var config = StoreConfiguration()
        config.durability = .relaxed
        config.initialMapSizeBytes = mapSizeBytes
        let store = try Store.open(at: dir, schema: v1, configuration: config)
        defer { store.close() }
        var start = 0
        while start < n {
            let end = min(n, start + batch)
            var c = ChangeSet()
            for i in start..<end {
                let t = TrackData.make(i)
                var r = Record(entity: track)
                r["mbid"] = .uuid(t.mbid)
                r["title"] = .string(t.title)
                r["durationSeconds"] = .int(Int64(t.durationSeconds))
                r["addedAt"] = .date(t.addedAt)
                c.insert(r)
            }
            _ = try await store.save(c)
            start = end
        }
    }

    static func grdb(_ ctx: WorkloadContext, indexed: Bool) throws -> Double {
        let n = ctx.sizes.migrationObjects
        let engine: Engine = indexed ? .grdbIndexed : .grdb
        let dir = try ctx.storeDirectory("W10", engine)
        defer { ctx.remove(dir) }
        let subject = try GRDBSubject(engine: engine, directory: dir, sync: .durable, indexesSQL: indexed ? GRDBTrack.createV1IndexesSQL : nil)
        defer { subject.close() }
        var start = 0
        while start < n {
            let end = min(n, start + ctx.sizes.batchSize)
            try subject.saveBlocking(TrackData.batch(start..<end))
            start = end
        }
        // The statements' times, for the progress line (the commit's sync is in the total only).
        var updateSeconds = 0.0
        var indexSeconds = 0.0
        let seconds = try MonotonicClock.measure {
            try subject.pool.write { db in
                updateSeconds = try MonotonicClock.measure {
                    try db.execute(sql: "ALTER TABLE track ADD COLUMN playCount INTEGER")
                    try db.execute(sql: "UPDATE track SET playCount = 0")
                }.seconds
                if indexed {
                    indexSeconds = try MonotonicClock.measure { try db.execute(sql: GRDBTrack.createAddedAtIndexSQL) }.seconds
                }
            }
        }.seconds
        ctx.progress(String(format: "  W10 %@: %.2f s in all: ALTER TABLE and UPDATE %.2f s%@, the commit the rest", engine.rawValue, seconds,
                            updateSeconds, indexed ? String(format: ", CREATE INDEX (addedAt) %.2f s", indexSeconds) : ""))
        return Double(n) / seconds
    }

    struct NotEnoughVersions: Error, CustomStringConvertible {
        var description: String { "W10 needs Schemas/library/v1.json and v2.json" }
    }
}
