import Foundation
import LibraryModel
import Strata

/// `save`: several concurrent savers append small transactions in durable mode until killed (or
/// until `--saves` each). After `save` returns, and only then, a line
/// `ACK <tx> <kind> <marker> <k>` is written to stdout: the acknowledgement the parent checks.
///
/// Every transaction carries its shape in its metadata (`marker`, `kind`, `k`) so the checker
/// can prove it is whole:
/// - `group`: a Playlist (notes `k=K`) and K Tracks, each track linked to the playlist;
/// - `update`: one track's rating set to a fresh value;
/// - `delete`: a whole group removed (the playlist and its K tracks).
/// A worker only touches groups of its own partition prefix, so concurrent workers never race
/// on the same object. Each worker is its own task: saves overlap and share commits (group commit).
enum SaveMode {
    struct Group {
        let playlist: ObjectID
        var tracks: [ObjectID]
    }

    static func run(_ o: Options) throws {
        let dir = URL(fileURLWithPath: o.require("store"))
        let workers = o.int("workers", default: 4)
        let saves = o.int("saves", default: 0)
        let run = o.string("run") ?? "r\(getpid())"
        let partition = o.string("partition") ?? "k"
        let seed = o.uint64("seed", default: UInt64(getpid()))
        var config = StoreConfiguration()
        config.durability = o.string("durability") == "relaxed" ? .relaxed : .durable
        let store: Store
        do { store = try Store.open(at: dir, schema: librarySchema(), configuration: config) } catch { fail("open: \(error)", code: 2) }
        let existing = try loadGroups(store, partition: partition, workers: workers)
        emit("READY \(try store.lastTransactionID.rawValue)")
        try blocking {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                for w in 0..<workers {
                    let groups = existing[w] ?? []
                    tasks.addTask {
                        try await worker(store, w: w, run: run, partition: partition, seed: seed &+ UInt64(w) &* 7919, saves: saves, groups: groups)
                    }
                }
                try await tasks.waitForAll()
            }
        }
        let s = store.statistics
        emit("STATS \(s.transactions) \(s.lmdbCommits)")
        store.close()
        emit("DONE")
    }

    /// The live groups of each worker of this partition, from a previous (killed) run.
    static func loadGroups(_ store: Store, partition: String, workers: Int) throws -> [Int: [Group]] {
        let context = store.mainContext
        var out: [Int: [Group]] = [:]
        for p in try context.fetch(Playlist.self) where p.name.hasPrefix(partition + "w") {
            let rest = p.name.dropFirst(partition.count + 1)
            guard let dash = rest.firstIndex(of: "-"), let w = Int(rest[..<dash]), w < workers else { continue }
            let tracks = try context.related(p.id, Playlist.tracks).map(\.id)
            out[w, default: []].append(Group(playlist: p.id, tracks: tracks))
        }
        return out
    }

    static func worker(_ store: Store, w: Int, run: String, partition: String, seed: UInt64, saves: Int, groups initial: [Group]) async throws {
        var rng = SplitMix64(seed: seed)
        var groups = initial
        var seq = 0
        let created = Date(timeIntervalSince1970: 1_700_000_000)
        while saves == 0 || seq < saves {
            seq += 1
            let marker = "\(partition)w\(w)-\(run)-\(seq)"
            var changes = ChangeSet()
            let roll = Int(rng.next() % 100)
            let kind: String
            let k: Int
            var deleted: Int?
            var inserted: Group?
            if roll < 60 || groups.isEmpty {
                kind = "group"
                k = 1 + Int(rng.next() % 4)
                let playlist = Playlist(name: marker, createdAt: created, notes: "k=\(k)")
                changes.insert(playlist)
                var tracks: [ObjectID] = []
                for i in 0..<k {
                    let t = Track(mbid: UUID(), title: "\(marker)-\(i)", durationSeconds: 1 + Int(rng.next() % 900), addedAt: created)
                    changes.insert(t)
                    changes.add(t.id, to: Playlist.tracks, of: playlist.id)
                    tracks.append(t.id)
                }
                inserted = Group(playlist: playlist.id, tracks: tracks)
            } else if roll < 85 {
                kind = "update"
                let g = groups[Int(rng.next() % UInt64(groups.count))]
                k = 1
                // A fresh 52-bit value: the update always changes something, so it is always logged.
                changes.set(Track.rating, of: g.tracks[Int(rng.next() % UInt64(g.tracks.count))], to: Double(rng.next() >> 12))
            } else {
                kind = "delete"
                let i = Int(rng.next() % UInt64(groups.count))
                let g = groups[i]
                k = g.tracks.count
                changes.delete(g.playlist)
                for t in g.tracks { changes.delete(t) }
                deleted = i
            }
            let tx: TransactionID
            do {
                tx = try await store.save(changes, author: "crash-child", metadata: ["marker": marker, "kind": kind, "k": String(k)])
            } catch {
                emit("SAVEERROR \(marker) \(error)")
                throw error
            }
            emit("ACK \(tx.rawValue) \(kind) \(marker) \(k)")
            if let inserted { groups.append(inserted) }
            if let deleted { groups.remove(at: deleted) }
            if w == 0 && seq % 50 == 0 {
                let s = store.statistics
                emit("STATS \(s.transactions) \(s.lmdbCommits)")
            }
        }
    }
}
