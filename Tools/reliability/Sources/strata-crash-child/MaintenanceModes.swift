import Foundation
import Synchronization
import LibraryModel
import Strata

/// The children of the kill loops during compaction, migration and bulk imports. Each writes `READY <ms>` when
/// it starts the operation, `PHASE <phase> <done> <ms>` for every progress event, `DONE <ms> …`
/// when the operation returned and `CLOSED <ms>` after the store is closed (times are
/// CLOCK_MONOTONIC milliseconds, comparable with the parent's clock), one `write(2)` per line.
enum MaintenanceModes {
    /// The longest `--hold-ms` a child waits (longer asks are cut to it): ten minutes, past any
    /// parent's wait for the kill.
    static let maxHoldMs = 600_000

    /// `compact --store DIR --horizon H [--hold-ms N]`: opens the store (library schema, durable)
    /// and compacts it with horizon H (0: the head). `--hold-ms` as for `migrate`.
    static func compact(_ o: Options) throws {
        let dir = URL(fileURLWithPath: o.require("store"))
        let horizon = o.uint64("horizon", default: 0)
        let holdMs = o.int("hold-ms", default: 0)
        let store: Store
        do { store = try Store.open(at: dir, schema: librarySchema()) } catch { fail("open: \(error)", code: 2) }
        emit("READY \(nowMs())")
        let first = Mutex(true)
        let report = try blocking {
            try await store.compact(horizon: horizon == 0 ? nil : TransactionID(horizon)) { p in
                emit("PHASE \(p.phase.rawValue) \(p.done) \(nowMs())")
                if holdMs > 0, first.withLock({ let was = $0; $0 = false; return was }) {
                    usleep(useconds_t(min(holdMs, maxHoldMs)) * 1000)
                }
            }
        }
        emit("DONE \(nowMs()) horizon \(report.horizon) log \(report.logEntriesBefore)→\(report.logEntriesAfter) bytes \(report.bytesBefore)→\(report.bytesAfter)")
        store.close()
        emit("CLOSED \(nowMs())")
    }

    /// `migrate --store DIR [--hold-ms N]`: migrates the store to the last version of
    /// Schemas/library with the library model's custom steps, as `storectl migrate` does. With
    /// `--hold-ms`, the migration waits N ms in its first progress event (after writing its
    /// line), so a parent that kills it then finds it mid-way whatever the machine's speed.
    static func migrate(_ o: Options) throws {
        let url = URL(fileURLWithPath: o.require("store"))
        let holdMs = o.int("hold-ms", default: 0)
        let schemas: [Schema]
        do { schemas = try Schema.loadAll(directory: repositoryRoot.appendingPathComponent("Schemas/library")) } catch { fail("schemas: \(error)", code: 2) }
        emit("READY \(nowMs())")
        let first = Mutex(true)
        let report = try blocking {
            try await Store.migrate(at: url, schemas: schemas, registry: libraryMigrations) { p in
                emit("PHASE \(p.phase.rawValue) \(p.done) \(nowMs())")
                if holdMs > 0, first.withLock({ let was = $0; $0 = false; return was }) {
                    usleep(useconds_t(min(holdMs, maxHoldMs)) * 1000)
                }
            }
        }
        emit("DONE \(nowMs()) v\(report.from)→v\(report.to) marker \(report.migrationTransaction?.rawValue ?? 0) upcast \(report.transactionsUpcast)")
        emit("CLOSED \(nowMs())")
    }

    /// `import-bulk --store DIR --input FILE`: a bulk import of FILE (batches of 500, import id
    /// `kill-loop`), its progress as `PHASE <phase> <records> <ms>` lines (`switching` starts the
    /// sync and switch).
    static func bulkImport(_ o: Options) throws {
        let url = URL(fileURLWithPath: o.require("store"))
        let input = o.require("input")
        let store: Store
        do { store = try Store.openExisting(at: url) } catch { fail("open: \(error)", code: 2) }
        var options = ImportOptions()
        options.mode = .bulk
        options.batchSize = 500
        options.importID = "kill-loop"
        let importer = Importer(store: store, options: options)
        emit("READY \(nowMs())")
        let summary = try blocking {
            let watcher = Task {
                for await p in importer.progress { emit("PHASE \(p.phase.rawValue) \(p.records) \(nowMs())") }
            }
            let s = try await importer.run(files: [input])
            await watcher.value
            return s
        }
        emit("DONE \(nowMs()) records \(summary.records) transactions \(summary.transactions) \(summary.mode.rawValue)")
        store.close()
        emit("CLOSED \(nowMs())")
    }
}
