import Foundation
@_spi(Fuzz) import Strata

/// The stores the kill loops during compaction and migration start from, and what "the same
/// store" means for them.
enum StoreTemplate {
    /// Builds a store at `path` with `schema` (v1 or v2 of the library model): an import of
    /// `records` generated records in batches of 500, then `history` small transactions
    /// (updates, new playlists with links, unlinks, deletes, new tracks), so there is history to
    /// squash and to upcast. Relaxed durability: the template is copied, never crashed.
    static func build(path: String, schema: Schema, records: Int, history: Int, seed: UInt64, scratch: String) throws {
        var config = StoreConfiguration()
        config.durability = .relaxed
        let store = try Store.open(at: URL(fileURLWithPath: path), schema: schema, configuration: config)
        defer { store.close() }
        let input = scratch + "/template-\(records).ndjson"
        var genRng = SplitMix64(seed: seed)
        try GenerateMode.write(path: input, records: records, rng: &genRng)
        var options = ImportOptions()
        options.batchSize = 500
        options.importID = "template"
        let importer = Importer(store: store, options: options)
        _ = try blocking { try await importer.run(files: [input]) }
        try FileManager.default.removeItem(atPath: input)
        var writer = History(store: store, schema: schema, seed: seed &+ 17)
        try writer.run(transactions: history)
    }
}

/// Small transactions over an imported library, seeded. Works with v1 and v2 of the schema
/// (attributes are looked up by name; `formedYear` is v1, `foundedYear` v2).
struct History {
    let store: Store
    let schema: Schema
    var rng: SplitMix64
    var tracks: [ObjectID] = []
    var artists: [ObjectID] = []
    var albums: [ObjectID] = []
    var genres: [ObjectID] = []
    var playlists: [ObjectID: [ObjectID]] = [:]

    init(store: Store, schema: Schema, seed: UInt64) {
        self.store = store
        self.schema = schema
        rng = SplitMix64(seed: seed)
    }

    func entity(_ name: String) -> EntityDescription {
        guard let e = schema.entity(named: name) else { fail("the library schema has no \(name)") }
        return e
    }

    func attribute(_ entity: EntityDescription, _ name: String) -> Int? { entity.attribute(named: name)?.index }

    func relationship(_ entity: EntityDescription, _ name: String) -> RelationshipDescription {
        guard let r = entity.relationship(named: name) else { fail("\(entity.name) has no relationship \(name)") }
        return r
    }

    mutating func pick(_ ids: [ObjectID]) -> ObjectID { ids[Int(rng.next() % UInt64(ids.count))] }

    mutating func run(transactions: Int) throws {
        let context = try store.newViewContext(label: "template")
        tracks = try context.fetch(Query(entity: "Track")).map(\.id)
        artists = try context.fetch(Query(entity: "Artist")).map(\.id)
        albums = try context.fetch(Query(entity: "Album")).map(\.id)
        genres = try context.fetch(Query(entity: "Genre")).map(\.id)
        context.close()
        guard !tracks.isEmpty, !artists.isEmpty, !albums.isEmpty, !genres.isEmpty else { fail("the template import is empty") }
        for n in 0..<transactions {
            let changes = next(n)
            let store = self.store
            _ = try blocking { [changes] in try await store.save(changes, author: "history", metadata: ["n": String(n)]) }
        }
    }

    /// One transaction of the history.
    mutating func next(_ n: Int) -> ChangeSet {
        var c = ChangeSet()
        let (trackE, artistE, playlistE) = (entity("Track"), entity("Artist"), entity("Playlist"))
        let roll = rng.next() % 100
        switch roll {
        case 0..<35:
            var attrs = [ChangeSet.AttributeValue(attribute: attribute(trackE, "rating")!, value: .double(Double(rng.next() % 1000) / 100))]
            if roll % 3 == 0 { attrs.append(ChangeSet.AttributeValue(attribute: attribute(trackE, "title")!, value: .string("retitled \(n)"))) }
            c.update(pick(tracks), attrs)
        case 35..<50:
            var attrs = [ChangeSet.AttributeValue(attribute: attribute(artistE, "country")!, value: .string("C\(rng.next() % 50)"))]
            if let formed = attribute(artistE, "formedYear") { attrs.append(.init(attribute: formed, value: .int(Int64(1950 + rng.next() % 70)))) }
            if let founded = attribute(artistE, "foundedYear") { attrs.append(.init(attribute: founded, value: .string(String(1950 + rng.next() % 70)))) }
            if roll % 4 == 0 { attrs.append(.init(attribute: attribute(artistE, "sortName")!, value: roll % 8 == 0 ? .null : .string("Sorted \(n)"))) }
            c.update(pick(artists), attrs)
        case 50..<65:
            var p = Record(entity: playlistE)
            p["name"] = .string("playlist \(n)")
            p["createdAt"] = .date(Date(timeIntervalSince1970: 1_700_000_000 + Double(n)))
            if roll % 2 == 0 { p["notes"] = .string("history \(n)") }
            c.insert(p)
            var linked: [ObjectID] = []
            for _ in 0..<(1 + Int(rng.next() % 5)) {
                let t = pick(tracks)
                if linked.contains(t) { continue }
                c.link(relationship(playlistE, "tracks"), from: p.id, to: t)
                linked.append(t)
            }
            playlists[p.id] = linked
        case 65..<75 where tracks.count > 100:
            let i = Int(rng.next() % UInt64(tracks.count))
            let t = tracks.remove(at: i)
            c.delete(t)
            for (p, ts) in playlists where ts.contains(t) { playlists[p] = ts.filter { $0 != t } }
        case 75..<85 where !playlists.isEmpty:
            let p = playlists.keys.sorted()[Int(rng.next() % UInt64(playlists.count))]
            if let t = playlists[p]?.first, roll % 2 == 0 {
                c.unlink(relationship(playlistE, "tracks"), from: p, to: t)
                playlists[p]?.removeFirst()
            } else {
                c.delete(p)
                playlists[p] = nil
            }
        default:
            var t = Record(entity: trackE)
            t["mbid"] = .uuid(UUID(uuid: uuidBytes()))
            t["title"] = .string("new track \(n)")
            t["durationSeconds"] = .int(Int64(60 + rng.next() % 600))
            t["addedAt"] = .date(Date(timeIntervalSince1970: 1_735_689_600 + Double(n)))
            c.insert(t)
            c.link(relationship(trackE, "album"), from: t.id, to: pick(albums))
            c.link(relationship(trackE, "genre"), from: t.id, to: pick(genres))
            tracks.append(t.id)
        }
        return c
    }

    mutating func uuidBytes() -> uuid_t {
        let a = rng.next(), b = rng.next()
        var t: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &t) { raw in
            withUnsafeBytes(of: a) { raw.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: 8) }
            withUnsafeBytes(of: b) { (raw.baseAddress! + 8).copyMemory(from: $0.baseAddress!, byteCount: 8) }
        }
        t.6 = (t.6 & 0x0f) | 0x40
        t.8 = (t.8 & 0x3f) | 0x80
        return t
    }
}

/// What a store holds, compared between "before the operation" and "after it": schema version,
/// head, the log (one FNV-1a hash per entry, from the first one kept), the live objects (every
/// record as stored, and every relationship edge) and the counts per entity.
struct Fingerprint: Equatable {
    var schemaVersion = 0
    var head: UInt64 = 0
    /// The first transaction in the log (horizon + 1), 0 when the log is empty.
    var firstLogged: UInt64 = 0
    var logHashes: [UInt64] = []
    var counts: [String: Int] = [:]
    var stateHash: UInt64 = 0
    var objects = 0

    /// Reads the fingerprint of an open store from one view context and one log scan.
    static func of(_ store: Store) throws -> Fingerprint {
        var f = Fingerprint()
        f.schemaVersion = store.schema.version
        f.head = try store.lastTransactionID.rawValue
        var expected: UInt64 = 0
        var gap: String?
        try store.forEachTransaction { e in
            let tx = e.transactionID.rawValue
            if f.firstLogged == 0 { f.firstLogged = tx } else if tx != expected { gap = "log jumps from \(expected - 1) to \(tx)" }
            expected = tx + 1
            f.logHashes.append(hash(e))
            return true
        }
        if let gap { throw StrataError.corruptLogEntry(transaction: TransactionID(expected), reason: gap) }
        f.counts = try store.info().entities
        let context = try store.newViewContext(label: "fingerprint")
        defer { context.close() }
        var h = FNV()
        for entity in store.schema.entities {
            h.add(Array(entity.name.utf8))
            for r in try context.fetch(Query(entity: entity.name)).sorted(by: { $0.id < $1.id }) {
                f.objects += 1
                h.add(FuzzEntryPoints.keyBytes(of: r.id))
                h.add(FuzzEntryPoints.encodeRecord(r))
                for rel in entity.relationships {
                    h.add([UInt8(truncatingIfNeeded: rel.tag >> 8), UInt8(truncatingIfNeeded: rel.tag)])
                    for other in try context.relatedIDs(rel, of: r.id).sorted() { h.add(FuzzEntryPoints.keyBytes(of: other)) }
                }
            }
        }
        f.stateHash = h.value
        return f
    }

    /// An entry's hash: its stored bytes, except the migration marker and the kill loop's bulk
    /// import, whose commit times differ from run to run (their other fields are hashed).
    static func hash(_ e: LogEntry) -> UInt64 {
        var h = FNV()
        if e.author == "migration" && e.changes.isEmpty && e.metadata["migrationTo"] != nil {
            h.add(Array("marker \(e.transactionID) v\(e.schemaVersion) \(e.metadata.sorted { $0.key < $1.key })".utf8))
        } else if e.metadata["importID"] == "kill-loop" {
            // The kill loop's bulk import: every run logs the same changes, at another time.
            h.add(Array("import \(e.transactionID) v\(e.schemaVersion) \(e.author) \(e.metadata.sorted { $0.key < $1.key })".utf8))
            h.add(Array(String(describing: e.changes).utf8))
        } else {
            h.add(FuzzEntryPoints.encodeLogEntry(e))
        }
        return h.value
    }

    /// What compacting this store with `horizon` must give: the same objects, head and version,
    /// the log entries after the horizon unchanged, nothing before it.
    func compacted(horizon: UInt64) -> Fingerprint {
        var f = self
        let keepFrom = max(horizon + 1, firstLogged)
        if keepFrom > head || firstLogged == 0 {
            f.firstLogged = 0
            f.logHashes = []
        } else {
            f.firstLogged = keepFrom
            f.logHashes = Array(logHashes.dropFirst(Int(keepFrom - firstLogged)))
        }
        return f
    }

    /// How `self` differs from `other`, for a violation message.
    func differences(from other: Fingerprint) -> String {
        var d: [String] = []
        if schemaVersion != other.schemaVersion { d.append("schema v\(schemaVersion) vs v\(other.schemaVersion)") }
        if head != other.head { d.append("head \(head) vs \(other.head)") }
        if firstLogged != other.firstLogged || logHashes.count != other.logHashes.count {
            d.append("log \(firstLogged)+\(logHashes.count) vs \(other.firstLogged)+\(other.logHashes.count)")
        } else if let i = zip(logHashes, other.logHashes).enumerated().first(where: { $0.element.0 != $0.element.1 })?.offset {
            d.append("log entry \(firstLogged + UInt64(i)) differs")
        }
        if counts != other.counts { d.append("counts \(counts) vs \(other.counts)") }
        if stateHash != other.stateHash { d.append("objects/edges differ (\(objects) vs \(other.objects) objects)") }
        return d.isEmpty ? "identical" : d.joined(separator: "; ")
    }
}

/// FNV-1a, 64 bits (a fingerprint, not a defence against crafted collisions).
struct FNV {
    private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325
    mutating func add(_ bytes: [UInt8]) {
        for b in bytes {
            value ^= UInt64(b)
            value &*= 0x100_0000_01b3
        }
        // A separator, so ["ab", "c"] and ["a", "bc"] differ.
        value ^= UInt64(bytes.count)
        value &*= 0x100_0000_01b3
    }
}
