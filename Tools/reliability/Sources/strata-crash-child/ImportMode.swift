import Foundation
import Strata

/// `import`: runs an ``Importer`` on `--input` in batches of `--batch` (`--one-transaction-max-mb`,
/// `--saves-per-group` as below). Each progress event of the
/// writing phase comes after a commit of its batches returned: it is acknowledged as
/// `ACK-IMPORT <records written so far>`; `DONE <records> <transactions>` at the end.
enum ImportMode {
    static func run(_ o: Options) throws {
        let dir = URL(fileURLWithPath: o.require("store"))
        let input = o.require("input")
        var options = ImportOptions()
        // Batch by batch: an acknowledged batch is committed (a bulk import's are not, until its
        // end). An input under `--one-transaction-max-mb` (the option's default, 32) is one
        // transaction and acknowledges nothing before its commit; 0 commits its batches in
        // groups, each acknowledged.
        options.mode = .incremental
        options.oneTransactionMaxInputBytes = o.int("one-transaction-max-mb", default: 32) << 20
        options.batchSize = o.int("batch", default: 200)
        options.importID = o.string("import-id")
        // `--saves-per-group`: batches a commit takes at most (the store's default when absent);
        // a few make an import of a few thousand records several commits, so that a kill lands
        // between them.
        var config = StoreConfiguration()
        config.maxSavesPerGroup = o.int("saves-per-group", default: config.maxSavesPerGroup)
        let store: Store
        do { store = try Store.open(at: dir, schema: librarySchema(), configuration: config) } catch {
            fail("open: \(error)", code: 2)
        }
        emit("READY \(try store.lastTransactionID.rawValue)")
        let importer = Importer(store: store, options: options)
        let summary = try blocking {
            let watcher = Task {
                // The phase's first report (nothing written yet) acknowledges nothing.
                for await p in importer.progress where p.phase == .writing && p.records > 0 {
                    emit("ACK-IMPORT \(p.records)")
                }
            }
            let s = try await importer.run(files: [input])
            await watcher.value
            return s
        }
        emit("DONE \(summary.records) \(summary.transactions)")
        store.close()
    }
}

/// `gen`: a deterministic library in NDJSON: genres, artists, albums (each with an artist) and
/// tracks (each with an album and a genre). References only point backwards.
enum GenerateMode {
    struct Counts { let genres, artists, albums, tracks: Int }

    static func counts(records n: Int) -> Counts {
        let genres = 12, artists = max(1, n / 100), albums = max(1, n / 10)
        return Counts(genres: genres, artists: artists, albums: albums, tracks: max(0, n - genres - artists - albums))
    }

    static func run(_ o: Options) throws {
        let path = o.require("output")
        let n = o.int("records", default: 4000)
        var rng = SplitMix64(seed: o.uint64("seed", default: 1))
        try write(path: path, records: n, rng: &rng)
    }

    static func uuid(_ rng: inout SplitMix64) -> String {
        let a = rng.next(), b = rng.next()
        let hex = String(format: "%016llx%016llx", a, b)
        let c = Array(hex)
        return "\(String(c[0..<8]))-\(String(c[8..<12]))-4\(String(c[13..<16]))-8\(String(c[17..<20]))-\(String(c[20..<32]))"
    }

    static func write(path: String, records n: Int, rng: inout SplitMix64) throws {
        let c = counts(records: n)
        var lines: [String] = []
        for g in 0..<c.genres { lines.append(#"{"entity":"Genre","name":"genre \#(g)"}"#) }
        var artists: [String] = []
        for a in 0..<c.artists {
            let id = uuid(&rng)
            artists.append(id)
            lines.append(#"{"entity":"Artist","mbid":"\#(id)","name":"artist \#(a)","country":"C\#(a % 7)"}"#)
        }
        var albums: [String] = []
        for a in 0..<c.albums {
            let id = uuid(&rng)
            albums.append(id)
            lines.append(#"{"entity":"Album","mbid":"\#(id)","title":"album \#(a)","year":\#(1960 + a % 60),"artist":{"mbid":"\#(artists[a % artists.count])"}}"#)
        }
        for t in 0..<c.tracks {
            let id = uuid(&rng)
            lines.append(#"{"entity":"Track","mbid":"\#(id)","title":"track \#(t)","durationSeconds":\#(60 + Int(rng.next() % 600)),"addedAt":"2025-01-01T00:00:00Z","album":{"mbid":"\#(albums[Int(rng.next() % UInt64(albums.count))])"},"genre":{"name":"genre \#(t % c.genres)"}}"#)
        }
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: path))
    }
}
