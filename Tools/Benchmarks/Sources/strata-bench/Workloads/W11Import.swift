import Foundation
import GRDB
import Strata
import Synchronization

/// W11 (strata and grdb): importing NDJSON files end to end, from the file: Strata's `Importer`
/// against a GRDB importer of the same files with the same uniques and indexes (and an index on
/// every reference column and both directions of every many-to-many), references resolved by
/// unique key, durable, 5,000 records per transaction, the same JSON parser. Three cases: a
/// generated library into an empty store; a tenth as many records again (another seed) into that
/// store; a link-heavy generated catalog into an empty store. Records per second; for Strata also
/// the bytes the process wrote (`/proc/self/io`) over the final file size. The same three cases
/// run through `storectl import` too (Strata's column), as an operator runs them: each a process of
/// its own, with the allocator settings `storectl` chooses for its input.
enum W11Import {
    static let keys = ["W11_library_empty", "W11_library_incremental", "W11_library_more", "W11_catalog_empty",
                       "W11_written_over_file", "W11_file_mb_fresh", "W11_file_mb_compacted", "W11_fresh_over_compacted",
                       "W11_reader_p99_idle_us", "W11_reader_p99_bulk_us", "W11_validation_mb_per_s",
                       "W11_csv_validation_mb_per_s", "W11_storectl_library_empty", "W11_storectl_library_more",
                       "W11_storectl_catalog_empty"]

    struct Inputs {
        let library: URL, more: URL, catalog: URL
        /// Another tenth, bulk-imported while a reader runs.
        let during: URL
        let libraryRecords: Int, moreRecords: Int, catalogRecords: Int
    }

    /// Objects of each entity after each case (`library`, `more`, `catalog`), by the engine that
    /// imported first: the second must hold the same, or the run stops (an engine that skipped
    /// records would be measured doing less work).
    static let counts = Mutex<[String: (engine: String, counts: [String: Int])]>([:])

    static func agree(_ key: String, _ engine: String, _ found: [String: Int]) throws {
        try counts.withLock { known in
            if let first = known[key] {
                guard first.counts == found else {
                    throw BenchSetupError("W11 \(key): \(engine) holds \(found.sorted { $0.key < $1.key }), " +
                                          "\(first.engine) \(first.counts.sorted { $0.key < $1.key })")
                }
            } else {
                known[key] = (engine, found)
            }
        }
    }

    /// Lines in `url` (records of the NDJSON file).
    static func lines(_ url: URL) throws -> Int {
        try Data(contentsOf: url).reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }
    }

    /// Generates the three files with the repository's generator (`strata-generate`, built by
    /// `Tools/generate-library` when missing).
    static func inputs(_ ctx: WorkloadContext) throws -> Inputs {
        guard let root = Paths.repositoryRoot else { throw BenchSetupError("cannot find the repository") }
        let dir = ctx.runDirectory.appendingPathComponent("W11-inputs")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        func generate(_ name: String, _ args: [String]) throws -> URL {
            let out = dir.appendingPathComponent(name)
            let p = Process()
            p.executableURL = root.appendingPathComponent("Tools/generate-library")
            p.arguments = args + ["--output", out.path]
            p.standardError = FileHandle.nullDevice
            try p.run()
            InterruptCleanup.track(p.processIdentifier)
            p.waitUntilExit()
            InterruptCleanup.untrack(p.processIdentifier)
            guard p.terminationStatus == 0 else { throw BenchSetupError("Tools/generate-library \(args) failed") }
            return out
        }
        let n = ctx.sizes.importFileRecords
        let library = try generate("library.ndjson", ["\(n)", "--seed", "11"])
        let more = try generate("more.ndjson", ["\(max(100, n / 10))", "--seed", "12"])
        let catalog = try generate("catalog.ndjson", ["\(ctx.sizes.catalogImportRecords)", "--shape", "catalog", "--seed", "13"])
        let during = try generate("during.ndjson", ["\(max(100, n / 10))", "--seed", "14"])
        return Inputs(library: library, more: more, catalog: catalog, during: during, libraryRecords: try lines(library),
                      moreRecords: try lines(more), catalogRecords: try lines(catalog))
    }

    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let inputs: Inputs
        do {
            inputs = try Self.inputs(ctx)
        } catch {
            for engine in ctx.engines where engine == .strata || engine == .grdb { report.fail(keys, engine, error) }
            return
        }
        ctx.progress("W11: \(inputs.libraryRecords) + \(inputs.moreRecords) library records, \(inputs.catalogRecords) catalog records")
        await ctx.measureRounds("W11", keys: keys, &report) { engine in
            switch engine {
            case .strata: return try await strata(ctx, inputs)
            case .grdb: return try grdb(ctx, inputs)
            default: return [:]
            }
        }
    }

    // MARK: Strata

    /// Bytes this process has caused to be written to disk: `/proc/self/io`'s `write_bytes` (the
    /// pages it dirtied) less `cancelled_write_bytes` (dirty pages dropped before they were
    /// written, as those of a deleted file: a bulk import's built generation, deleted once it is
    /// copied compactly). Both figures are reported (`written`, `cancelled`).
    static func ioBytes() -> (written: Int, cancelled: Int) {
        guard let text = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return (0, 0) }
        var written = 0, cancelled = 0
        for line in text.split(separator: "\n") {
            let value = Int(line.split(separator: " ").last ?? "0") ?? 0
            if line.hasPrefix("write_bytes:") { written = value }
            if line.hasPrefix("cancelled_write_bytes:") { cancelled = value }
        }
        return (written, cancelled)
    }

    /// Seconds of an import of `file` (the mode `auto` chooses unless given), and the mode it ran
    /// in, as the run prints it (`bulk, in memory` for a bulk import resolved in memory).
    static func strataImport(_ store: Store, _ file: URL,
                             mode: ImportMode = .auto) async throws -> (seconds: Double, mode: ImportMode, shown: String) {
        let run = try await strataImportTimingValidation(store, file, mode: mode)
        return (run.seconds, run.mode, run.mode.rawValue + (run.inMemory ? ", in memory" : ""))
    }

    /// ``strataImport(_:_:mode:)``, also giving how long its validation pass took (an
    /// incremental import reads, parses and checks the whole input before it writes anything):
    /// the import's elapsed time at the first progress event of a later phase, nil when the
    /// import had no separate validation pass (a bulk import checks as it writes).
    static func strataImportTimingValidation(_ store: Store, _ file: URL, mode: ImportMode)
        async throws -> (seconds: Double, mode: ImportMode, inMemory: Bool, validationSeconds: Double?) {
        var options = ImportOptions()
        options.batchSize = 5_000
        options.mode = mode
        let importer = Importer(store: store, options: options)
        let watcher = Task { () -> Double? in
            var sawValidation = false
            for await p in importer.progress {
                if p.phase == .validating { sawValidation = true } else { return sawValidation ? p.elapsedSeconds : nil }
            }
            return nil
        }
        var used = ImportMode.auto, inMemory = false
        let seconds = try await MonotonicClock.measure {
            let summary = try await importer.run(files: [file.path])
            (used, inMemory) = (summary.mode, summary.inMemory)
        }.seconds
        return (seconds, used, inMemory, await watcher.value)
    }

    /// The CSV reader's rate as an import sees it: `store`'s library exported as one CSV file per
    /// entity (`Exporter`, ids and relationships by target id), with one line of a wrong field
    /// count added at the end of the last file, imported incrementally into an empty store. The
    /// validation pass reads, parses and checks every line, then the bad one ends the import
    /// with nothing written: the run's time is the pass's. Megabytes of CSV over seconds.
    static func csvValidationRate(_ store: Store, config: StoreConfiguration, root: URL,
                                  _ ctx: WorkloadContext) async throws -> (mbPerSecond: Double, megabytes: Double,
                                                                           seconds: Double) {
        let dir = try ctx.storeDirectory("W11", .strata, "csv")
        defer { ctx.remove(dir) }
        let files = dir.appendingPathComponent("files")
        try FileManager.default.createDirectory(at: files, withIntermediateDirectories: true)
        var paths: [String] = [], bytes = 0
        for entity in store.schema.entities {
            let url = files.appendingPathComponent("\(entity.name).csv")
            var text = ""
            try Exporter(store: store).export(Query(entity: entity.name), format: .csv) { text += $0 + "\n" }
            if entity === store.schema.entities.last {
                let columns = text.prefix { $0 != "\n" }.split(separator: ",", omittingEmptySubsequences: false).count
                text += String(repeating: ",", count: columns) + "\n"   // one field too many
            }
            try Data(text.utf8).write(to: url)
            bytes += text.utf8.count
            paths.append(url.path)
        }
        let target = try Store.open(at: dir.appendingPathComponent("store"),
                                    schema: Schema.load(directory: root.appendingPathComponent("Schemas/library")),
                                    configuration: config)
        defer { target.close() }
        var options = ImportOptions()
        options.mode = .incremental
        let importer = Importer(store: target, options: options)
        var failure: ImportFailed?
        let seconds = try await MonotonicClock.measure {
            do { _ = try await importer.run(files: paths) } catch let f as ImportFailed { failure = f }
        }.seconds
        guard let failure, failure.totalIssues == 1, failure.issues.first?.reason.contains("fields, the header has") == true
        else { throw BenchSetupError("W11: the CSV validation did not end with exactly the one bad line: \(String(describing: failure))") }
        guard try target.lastTransactionID == .zero else { throw BenchSetupError("W11: the CSV validation wrote") }
        return (Double(bytes) / 1e6 / seconds, Double(bytes) / 1e6, seconds)
    }

    /// A reader's latency (open a snapshot, read one track by id, close), as W6 measures it: on a
    /// thread of its own, first alone (100,000 reads), then while `during` is bulk-imported; and
    /// how that import ran (``strataImport(_:_:mode:)``'s `shown`).
    static func readerLatencies(_ store: Store, during: URL) async throws
        -> (idle: LatencySummary, busy: LatencySummary, importRan: String) {
        let ids = try store.mainContext.fetch(Query(entity: "Track", limit: 10_000)).map(\.id)
        guard !ids.isEmpty else { throw BenchSetupError("W11: no tracks to read") }
        @Sendable func reads(until stop: StopFlag?, started: StopFlag?) throws -> [UInt64] {
            var latencies: [UInt64] = []
            latencies.reserveCapacity(1 << 20)
            var i = 0
            started?.raise()
            while stop.map({ !$0.isRaised }) ?? (latencies.count < 100_000) {
                let start = MonotonicClock.nanoseconds()
                let snapshot = try store.snapshot(label: "bench-reader")
                let record = try snapshot.record(ids[i % ids.count])
                snapshot.close()
                latencies.append(MonotonicClock.nanoseconds() - start)
                if record == nil { throw BenchSetupError("W11: track \(ids[i % ids.count]) not found") }
                i += 1
            }
            return latencies
        }
        _ = try await runOnThread(name: "reader") { try reads(until: nil, started: nil) }   // warm-up
        let idle = LatencySummary(nanoseconds: try await runOnThread(name: "reader") { try reads(until: nil, started: nil) })
        let stop = StopFlag(), started = StopFlag()
        async let busy = runOnThread(name: "reader") { try reads(until: stop, started: started) }
        while !started.isRaised { await Task.yield() }
        let ran: String
        do {
            let run = try await strataImport(store, during, mode: .bulk)
            guard run.mode == .bulk else { throw BenchSetupError("W11: the import during the reads ran \(run.shown)") }
            ran = run.shown
        } catch {
            stop.raise()
            _ = try? await busy
            throw error
        }
        stop.raise()
        return (idle, LatencySummary(nanoseconds: try await busy), ran)
    }

    static func strata(_ ctx: WorkloadContext, _ inputs: Inputs) async throws -> [String: Double] {
        guard let root = Paths.repositoryRoot else { throw BenchSetupError("cannot find the repository") }
        var figures: [String: Double] = [:]
        var config = StoreConfiguration()
        config.initialMapSizeBytes = ctx.setup.mapSizeBytes
        config.maxMapSizeBytes = max(config.maxMapSizeBytes, ctx.setup.mapSizeBytes)
        do {
            let dir = try ctx.storeDirectory("W11", .strata, "library")
            defer { ctx.remove(dir) }
            let store = try Store.open(at: dir, schema: Schema.load(directory: root.appendingPathComponent("Schemas/library")),
                                       configuration: config)
            defer { store.close() }
            let before = ioBytes()
            let (seconds, _, mode) = try await strataImport(store, inputs.library)
            ctx.progress("W11: the library into an empty store ran \(mode)")
            figures["W11_library_empty"] = Double(inputs.libraryRecords) / seconds
            try agree("library", "strata", try store.info().entities)
            let file = try store.info().fileBytes
            let after = ioBytes()
            let written = after.written - before.written, cancelled = after.cancelled - before.cancelled
            ctx.progress("W11: the library import dirtied \(written) bytes, \(cancelled) of them dropped unwritten; " +
                         "file \(file) bytes")
            figures["W11_written_over_file"] = Double(written - cancelled) / Double(max(1, file))
            // The same data compacted (a dry run builds the compacted generation and measures it).
            let compacted = try await store.compact(horizon: .zero, dryRun: true).bytesAfter
            figures["W11_file_mb_fresh"] = Double(file) / 1e6
            figures["W11_file_mb_compacted"] = Double(compacted) / 1e6
            figures["W11_fresh_over_compacted"] = Double(file) / Double(max(1, compacted))
            let csv = try await csvValidationRate(store, config: config, root: root, ctx)
            figures["W11_csv_validation_mb_per_s"] = csv.mbPerSecond
            ctx.progress(String(format: "W11: the CSV validation pass read %.1f MB in %.2f s", csv.megabytes, csv.seconds))
            let (moreSeconds, _, moreMode) = try await strataImport(store, inputs.more)
            ctx.progress("W11: a tenth more into that store ran \(moreMode)")
            figures["W11_library_more"] = Double(inputs.moreRecords) / moreSeconds
            try agree("more", "strata", try store.info().entities)
            let (idle, busy, ran) = try await readerLatencies(store, during: inputs.during)
            ctx.progress(String(format: "W11: reader idle %d reads, p99 %.1f µs; ", idle.count, idle.p99Micros)
                         + String(format: "during a bulk import (\(ran)) %d reads, p99 %.1f µs", busy.count, busy.p99Micros))
            figures["W11_reader_p99_idle_us"] = idle.p99Micros
            figures["W11_reader_p99_bulk_us"] = busy.p99Micros
        }
        do {
            let dir = try ctx.storeDirectory("W11", .strata, "incremental")
            defer { ctx.remove(dir) }
            let store = try Store.open(at: dir, schema: Schema.load(directory: root.appendingPathComponent("Schemas/library")),
                                       configuration: config)
            defer { store.close() }
            let run = try await strataImportTimingValidation(store, inputs.library, mode: .incremental)
            figures["W11_library_incremental"] = Double(inputs.libraryRecords) / run.seconds
            let bytes = try FileManager.default.attributesOfItem(atPath: inputs.library.path)[.size] as? Int ?? 0
            if let v = run.validationSeconds, v > 0, bytes > 0 {
                figures["W11_validation_mb_per_s"] = Double(bytes) / 1e6 / v
                ctx.progress(String(format: "W11: the validation pass read %.1f MB in %.2f s", Double(bytes) / 1e6, v))
            }
        }
        let dir = try ctx.storeDirectory("W11", .strata, "catalog")
        defer { ctx.remove(dir) }
        let store = try Store.open(at: dir, schema: Schema.load(directory: root.appendingPathComponent("Schemas/catalog")),
                                   configuration: config)
        defer { store.close() }
        let (catalogSeconds, _, catalogMode) = try await strataImport(store, inputs.catalog)
        ctx.progress("W11: the catalog into an empty store ran \(catalogMode)")
        figures["W11_catalog_empty"] = Double(inputs.catalogRecords) / catalogSeconds
        try agree("catalog", "strata", try store.info().entities)
        store.close()
        figures.merge(try await storectl(ctx, inputs, root: root)) { $1 }
        return figures
    }

    /// The three cases through `storectl import` (the binary `Paths.storectl` names, which
    /// `Tools/bench` builds): the library into a new store, a tenth more into it, the catalog into
    /// another; records per second by the import's own `seconds` (`--json`: from the reading of
    /// the input to the last commit, as ``strataImport(_:_:mode:)`` times `Importer`, so neither
    /// counts the opening and closing of the store). Each store's objects must agree with the
    /// other engines'. Without a `storectl` to run, these cases are not measured (said on the
    /// progress stream); a `storectl` that fails fails the round.
    static func storectl(_ ctx: WorkloadContext, _ inputs: Inputs, root: URL) async throws -> [String: Double] {
        guard let storectl = Paths.storectl else {
            ctx.progress("W11: no storectl to run, its cases not measured (set STRATA_BENCH_STORECTL to a release " +
                         "build of storectl; Tools/bench builds one)")
            return [:]
        }
        var figures: [String: Double] = [:]
        func imported(_ store: URL, _ file: URL, _ records: Int) async throws -> Double {
            let out = try await ChildProcess.output(storectl, ["import", store.path, file.path, "--json", "--quiet"])
            guard let summary = try JSONSerialization.jsonObject(with: out) as? [String: Any],
                  let count = summary["records"] as? Int, let seconds = summary["seconds"] as? Double, seconds > 0 else {
                throw BenchSetupError("W11: storectl import printed no summary: \(String(decoding: out, as: UTF8.self))")
            }
            guard count == records else {
                throw BenchSetupError("W11: storectl imported \(count) of the \(records) records of \(file.lastPathComponent)")
            }
            ctx.progress("W11: storectl import of \(file.lastPathComponent) ran \(summary["mode"] as? String ?? "?")")
            return Double(count) / seconds
        }
        func entities(_ store: URL) async throws -> [String: Int] {
            let out = try await ChildProcess.output(storectl, ["info", store.path, "--json"])
            guard let info = try JSONSerialization.jsonObject(with: out) as? [String: Any],
                  let entities = info["entities"] as? [String: Int] else {
                throw BenchSetupError("W11: storectl info printed no entities: \(String(decoding: out, as: UTF8.self))")
            }
            return entities
        }
        /// A new store of the schema in `Schemas/<schema>` made by `storectl init`, in the run's
        /// directory for `variant`.
        func newStore(_ variant: String, schema: String) async throws -> URL {
            let store = try ctx.storeDirectory("W11", .strata, variant)
            do {
                _ = try await ChildProcess.output(storectl, ["init", store.path, "--schema",
                                                             root.appendingPathComponent("Schemas/\(schema)").path])
            } catch {
                ctx.remove(store)
                throw error
            }
            return store
        }
        let library = try await newStore("storectl-library", schema: "library")
        defer { ctx.remove(library) }
        figures["W11_storectl_library_empty"] = try await imported(library, inputs.library, inputs.libraryRecords)
        try agree("library", "storectl", try await entities(library))
        figures["W11_storectl_library_more"] = try await imported(library, inputs.more, inputs.moreRecords)
        try agree("more", "storectl", try await entities(library))
        let catalog = try await newStore("storectl-catalog", schema: "catalog")
        defer { ctx.remove(catalog) }
        figures["W11_storectl_catalog_empty"] = try await imported(catalog, inputs.catalog, inputs.catalogRecords)
        try agree("catalog", "storectl", try await entities(catalog))
        return figures
    }

    // MARK: GRDB

    static func grdb(_ ctx: WorkloadContext, _ inputs: Inputs) throws -> [String: Double] {
        guard let root = Paths.repositoryRoot else { throw BenchSetupError("cannot find the repository") }
        var figures: [String: Double] = [:]
        do {
            let dir = try ctx.storeDirectory("W11", .grdb, "library")
            defer { ctx.remove(dir) }
            let importer = try GRDBImporter(schema: Schema.load(directory: root.appendingPathComponent("Schemas/library")),
                                            path: dir.appendingPathComponent("db.sqlite").path)
            figures["W11_library_empty"] = Double(inputs.libraryRecords)
                / (try MonotonicClock.measure { try importer.importFile(inputs.library) }.seconds)
            try agree("library", "grdb", try importer.counts())
            // The same importer either way: the figure Strata's batch-by-batch import is compared with.
            figures["W11_library_incremental"] = figures["W11_library_empty"]
            let file = try importer.fileBytes()
            figures["W11_file_mb_fresh"] = Double(file) / 1e6
            figures["W11_file_mb_compacted"] = Double(file) / 1e6
            figures["W11_library_more"] = Double(inputs.moreRecords)
                / (try MonotonicClock.measure { try importer.importFile(inputs.more) }.seconds)
            try agree("more", "grdb", try importer.counts())
        }
        let dir = try ctx.storeDirectory("W11", .grdb, "catalog")
        defer { ctx.remove(dir) }
        let importer = try GRDBImporter(schema: Schema.load(directory: root.appendingPathComponent("Schemas/catalog")),
                                        path: dir.appendingPathComponent("db.sqlite").path)
        figures["W11_catalog_empty"] = Double(inputs.catalogRecords)
            / (try MonotonicClock.measure { try importer.importFile(inputs.catalog) }.seconds)
        try agree("catalog", "grdb", try importer.counts())
        return figures
    }
}

/// A plain importer of Strata's NDJSON into SQLite through GRDB, for any schema: a table per
/// entity (an `id` key, a column per attribute, a column per to-one reference, indexed), a table
/// per many-to-many relationship (both directions indexed), the schema's uniques and indexes.
/// A record is an upsert by its first unique key; references name their target by unique key and
/// are resolved when the record is written, or after the file (a target later in the file).
final class GRDBImporter {
    let schema: Schema
    let pool: DatabasePool
    let batchSize = 5_000

    init(schema: Schema, path: String) throws {
        self.schema = schema
        pool = try DatabasePool(path: path, configuration: Configuration())
        let level = try pool.writeWithoutTransaction { db -> Int in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            return try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
        }
        guard level == 2 else { throw GRDBSubject.WrongPragma(found: level) }
        try pool.write { db in
            for e in schema.entities {
                var columns = ["id INTEGER PRIMARY KEY"] + e.attributes.map { "\"\($0.name)\"" }
                for r in e.relationships where !r.isToMany { columns.append("\"\(r.name)_id\" INTEGER") }
                try db.execute(sql: "CREATE TABLE \"\(e.name)\"(\(columns.joined(separator: ", ")))")
                for (k, u) in e.uniques.enumerated() {
                    let cols = u.attributes.map { "\"\(e.attributes[$0].name)\"" }.joined(separator: ", ")
                    try db.execute(sql: "CREATE UNIQUE INDEX \"\(e.name)_u\(k)\" ON \"\(e.name)\"(\(cols))")
                }
                for (k, i) in e.indexes.enumerated() {
                    let cols = i.attributes.map { "\"\(e.attributes[$0].name)\"" }.joined(separator: ", ")
                    try db.execute(sql: "CREATE INDEX \"\(e.name)_i\(k)\" ON \"\(e.name)\"(\(cols))")
                }
                for r in e.relationships where !r.isToMany {
                    try db.execute(sql: "CREATE INDEX \"\(e.name)_\(r.name)\" ON \"\(e.name)\"(\"\(r.name)_id\")")
                }
                for r in e.relationships where r.isToMany && Self.isManyToMany(schema, e, r) && Self.owns(e, r) {
                    try db.execute(sql: "CREATE TABLE \"\(Self.joinTable(e, r))\"(a INTEGER NOT NULL, b INTEGER NOT NULL, PRIMARY KEY(a, b)) WITHOUT ROWID")
                    try db.execute(sql: "CREATE INDEX \"\(Self.joinTable(e, r))_b\" ON \"\(Self.joinTable(e, r))\"(b, a)")
                }
            }
        }
    }

    static func isManyToMany(_ schema: Schema, _ e: EntityDescription, _ r: RelationshipDescription) -> Bool {
        guard let d = schema.entity(named: r.destination), let inverse = d.relationship(named: r.inverseName) else { return false }
        return inverse.isToMany
    }

    /// The direction a many-to-many's edges are stored under: the smaller of the two names.
    static func owns(_ e: EntityDescription, _ r: RelationshipDescription) -> Bool {
        (e.name, r.name) <= (r.destination, r.inverseName)
    }

    static func joinTable(_ e: EntityDescription, _ r: RelationshipDescription) -> String { "j_\(e.name)_\(r.name)" }

    struct Pending {
        let entity: EntityDescription
        let id: Int64
        let relationship: RelationshipDescription
        let reference: [(String, JSONValue)]
    }

    struct BadInput: Error, CustomStringConvertible { let description: String }

    /// SQLite's form of a value.
    static func databaseValue(_ v: Value) -> DatabaseValueConvertible? {
        switch v {
        case .null: nil
        case .string(let s): s
        case .int(let i): i
        case .double(let d): d
        case .bool(let b): b
        case .date(let d): d.timeIntervalSince1970
        case .bytes(let b): Data(b)
        // 16 bytes, as Strata stores a UUID (and as W1's GRDB table does): as 36 characters of
        // text, each `mbid` took 20 more bytes in the row and in its unique index.
        case .uuid(let u): withUnsafeBytes(of: u.uuid) { Data($0) }
        case .decimal(let d): "\(d)"
        }
    }

    /// The row id of the record `reference` names in `entity` (its unique key's values), if any.
    func resolve(_ db: Database, _ entity: EntityDescription, _ reference: [(String, JSONValue)]) throws -> Int64? {
        var clauses: [String] = [], arguments: [DatabaseValueConvertible?] = []
        for (name, json) in reference {
            guard let a = entity.attribute(named: name) else { throw BadInput(description: "\(entity.name) has no \(name)") }
            clauses.append("\"\(name)\" = ?")
            arguments.append(Self.databaseValue(try ValueConversion.value(from: json, type: a.type)))
        }
        return try Int64.fetchOne(db.cachedStatement(sql: "SELECT id FROM \"\(entity.name)\" WHERE \(clauses.joined(separator: " AND "))"),
                                  arguments: StatementArguments(arguments))
    }

    /// Every statement through GRDB's cache of prepared statements (`execute(sql:)` compiles its
    /// SQL at each call): an edge costs its execution, not a compilation.
    func link(_ db: Database, _ pending: Pending) throws -> Bool {
        guard let d = schema.entity(named: pending.relationship.destination),
              let target = try resolve(db, d, pending.reference) else { return false }
        let e = pending.entity, r = pending.relationship
        if !r.isToMany {
            try db.cachedStatement(sql: "UPDATE \"\(e.name)\" SET \"\(r.name)_id\" = ? WHERE id = ?")
                .execute(arguments: [target, pending.id])
        } else if Self.isManyToMany(schema, e, r) {
            let (owner, a, b) = Self.owns(e, r) ? (Self.joinTable(e, r), pending.id, target)
                : (Self.joinTable(d, d.relationship(named: r.inverseName)!), target, pending.id)
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO \"\(owner)\"(a, b) VALUES (?, ?)").execute(arguments: [a, b])
        } else {
            try db.cachedStatement(sql: "UPDATE \"\(d.name)\" SET \"\(r.inverseName)_id\" = ? WHERE id = ?")
                .execute(arguments: [pending.id, target])
        }
        return true
    }

    /// The rows of each table: per entity, and the edges of each many-to-many (compared with
    /// Strata's counts after the same import).
    func counts() throws -> [String: Int] {
        try pool.read { db in
            var out: [String: Int] = [:]
            for e in schema.entities {
                out[e.name] = try Int.fetchOne(db, sql: "SELECT count(*) FROM \"\(e.name)\"") ?? -1
            }
            return out
        }
    }

    /// An entity's INSERT and UPDATE, with a column for each attribute and each to-one it holds,
    /// made once.
    struct Statements {
        /// Every attribute and to-one column.
        let insert: String
        /// The attributes (an upsert's to-ones are linked one by one: a to-one it does not name
        /// stays as it is).
        let update: String
        let toOnes: [RelationshipDescription]
    }

    private var statements: [String: Statements] = [:]

    func statements(_ e: EntityDescription) -> Statements {
        if let made = statements[e.name] { return made }
        let toOnes = e.relationships.filter { !$0.isToMany }
        let names = e.attributes.map { "\"\($0.name)\"" } + toOnes.map { "\"\($0.name)_id\"" }
        let attributes = e.attributes.map { "\"\($0.name)\"" }
        let made = Statements(
            insert: "INSERT INTO \"\(e.name)\"(\(names.joined(separator: ", "))) VALUES (\(names.map { _ in "?" }.joined(separator: ", ")))",
            update: "UPDATE \"\(e.name)\" SET \(attributes.map { "\($0) = ?" }.joined(separator: ", ")) WHERE id = ?",
            toOnes: toOnes)
        statements[e.name] = made
        return made
    }

    /// The database file's size, with the write-ahead log checkpointed into it.
    func fileBytes() throws -> Int {
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        let path = pool.path
        return (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    }

    /// Imports one NDJSON file, `batchSize` records per transaction, forward references after the file.
    func importFile(_ url: URL) throws {
        let data = try Data(contentsOf: url)
        var later: [Pending] = []
        var batch: [JSONValue] = []
        func flush() throws {
            try pool.write { db in
                for record in batch { try write(db, record, &later) }
            }
            batch.removeAll(keepingCapacity: true)
        }
        var start = data.startIndex
        while start < data.endIndex {
            let end = data[start...].firstIndex(of: 0x0A) ?? data.endIndex
            if end > start { batch.append(try JSONValue.parse(data[start..<end], exactDecimals: true)) }
            start = end + 1
            if batch.count == batchSize { try flush() }
        }
        if !batch.isEmpty { try flush() }
        var index = 0
        while index < later.count {
            let end = min(later.count, index + batchSize)
            try pool.write { db in
                for p in later[index..<end] where try !link(db, p) {
                    throw BadInput(description: "a reference of \(p.entity.name) names no \(p.relationship.destination)")
                }
            }
            index = end
        }
    }

    func write(_ db: Database, _ record: JSONValue, _ later: inout [Pending]) throws {
        guard case .object(let members) = record, case .string(let name)? = record["entity"],
              let e = schema.entity(named: name) else { throw BadInput(description: "not a record: \(record)") }
        var values = [Value](repeating: .null, count: e.attributes.count)
        var references: [(RelationshipDescription, [[(String, JSONValue)]])] = []
        for (key, json) in members where key != "entity" {
            if let a = e.attribute(named: key) {
                values[a.index] = try ValueConversion.value(from: json, type: a.type)
            } else if let r = e.relationship(named: key) {
                switch json {
                case .object(let ref): references.append((r, [ref]))
                case .array(let refs): references.append((r, refs.compactMap { if case .object(let o) = $0 { o } else { nil } }))
                default: continue
                }
            }
        }
        // Upsert by the first unique key.
        var id: Int64?
        if let u = e.uniques.first {
            id = try resolve(db, e, u.attributes.map { (e.attributes[$0].name, ValueConversion.json(values[$0])) })
        }
        let made = statements(e)
        let attributes = values.map(Self.databaseValue)
        if let id {
            try db.cachedStatement(sql: made.update).execute(arguments: StatementArguments(attributes) + [id])
            for (r, refs) in references {
                for ref in refs {
                    let p = Pending(entity: e, id: id, relationship: r, reference: ref)
                    if try !link(db, p) { later.append(p) }
                }
            }
            return
        }
        // A new row: a to-one whose target is there already is written with it; one whose target
        // comes later in the file, after the file.
        var targets: [DatabaseValueConvertible?] = []
        var unresolved: [(RelationshipDescription, [(String, JSONValue)])] = []
        for r in made.toOnes {
            guard let ref = references.first(where: { $0.0.name == r.name })?.1.first else {
                targets.append(nil)
                continue
            }
            let target = try schema.entity(named: r.destination).flatMap { try resolve(db, $0, ref) }
            targets.append(target)
            if target == nil { unresolved.append((r, ref)) }
        }
        try db.cachedStatement(sql: made.insert).execute(arguments: StatementArguments(attributes + targets))
        let row = db.lastInsertedRowID
        for (r, ref) in unresolved { later.append(Pending(entity: e, id: row, relationship: r, reference: ref)) }
        for (r, refs) in references where r.isToMany {
            for ref in refs {
                let p = Pending(entity: e, id: row, relationship: r, reference: ref)
                if try !link(db, p) { later.append(p) }
            }
        }
    }
}
