import Foundation
import LibraryModel
import Strata

/// The children of the kill loops during compaction and migration. Each writes `READY <ms>` when
/// it starts the operation, `PHASE <phase> <done> <ms>` for every progress event, `DONE <ms> …`
/// when the operation returned and `CLOSED <ms>` after the store is closed (times are
/// CLOCK_MONOTONIC milliseconds, comparable with the parent's clock), one `write(2)` per line.
enum MaintenanceModes {
    /// `compact --store DIR --horizon H`: opens the store (library schema, durable) and compacts
    /// it with horizon H (0: the head).
    static func compact(_ o: Options) throws {
        let dir = URL(fileURLWithPath: o.require("store"))
        let horizon = o.uint64("horizon", default: 0)
        let store: Store
        do { store = try Store.open(at: dir, schema: librarySchema()) } catch { fail("open: \(error)", code: 2) }
        emit("READY \(nowMs())")
        let report = try blocking {
            try await store.compact(horizon: horizon == 0 ? nil : TransactionID(horizon)) { p in
                emit("PHASE \(p.phase.rawValue) \(p.done) \(nowMs())")
            }
        }
        emit("DONE \(nowMs()) horizon \(report.horizon) log \(report.logEntriesBefore)→\(report.logEntriesAfter) bytes \(report.bytesBefore)→\(report.bytesAfter)")
        store.close()
        emit("CLOSED \(nowMs())")
    }

    /// `migrate --store DIR`: migrates the store to the last version of Schemas/library with the
    /// library model's custom steps, as `storectl migrate` does.
    static func migrate(_ o: Options) throws {
        let url = URL(fileURLWithPath: o.require("store"))
        let schemas: [Schema]
        do { schemas = try Schema.loadAll(directory: repositoryRoot.appendingPathComponent("Schemas/library")) } catch { fail("schemas: \(error)", code: 2) }
        emit("READY \(nowMs())")
        let report = try blocking {
            try await Store.migrate(at: url, schemas: schemas, registry: libraryMigrations) { p in
                emit("PHASE \(p.phase.rawValue) \(p.done) \(nowMs())")
            }
        }
        emit("DONE \(nowMs()) v\(report.from)→v\(report.to) marker \(report.migrationTransaction?.rawValue ?? 0) upcast \(report.transactionsUpcast)")
        emit("CLOSED \(nowMs())")
    }
}
