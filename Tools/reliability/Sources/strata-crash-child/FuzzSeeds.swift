import Foundation
@_spi(Fuzz) import Strata

/// `fuzz-seeds --output DIR`: writes the seed corpora of the binary-decoder fuzz targets from a
/// real store (library schema): `DIR/fuzz-log-entry/tx-N.bin` (a log entry as stored, without its
/// 4-byte checksum: the target seals it) and `DIR/fuzz-record/<Entity>-N.bin` (the object id's
/// 16 key bytes, then the stored record without its checksum).
///
/// The store gets every kind of change (insert, update, delete, link, unlink), every value type
/// (string with non-ASCII text, int including negative and large, double, bool, date, uuid,
/// bytes, null) and metadata, so the seeds cover every branch of both decoders.
enum FuzzSeeds {
    static func run(_ o: Options) throws {
        let output = o.require("output")
        let schema = librarySchema()
        var config = StoreConfiguration()
        config.durability = .relaxed
        let store = try Store.temporary(schema: schema, configuration: config)
        defer { store.close() }
        try populate(store, schema: schema)

        let fm = FileManager.default
        let logDir = output + "/fuzz-log-entry", recordDir = output + "/fuzz-record"
        for dir in [logDir, recordDir] { try fm.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        var entries = 0
        try store.forEachTransaction { entry in
            let stored = FuzzEntryPoints.encodeLogEntry(entry)
            // What the store holds must decode to the entry it gave us (the pair check of the seeds).
            guard (try? FuzzEntryPoints.decodeLogEntry(stored, transaction: entry.transactionID.rawValue)) != nil else {
                fail("transaction \(entry.transactionID) does not decode from its own encoding")
            }
            _ = fm.createFile(atPath: logDir + "/tx-\(entry.transactionID).bin", contents: Data(stored.dropLast(FuzzEntryPoints.checksumBytes)))
            entries += 1
            return true
        }
        var records = 0
        for entity in schema.entities {
            for (i, r) in try store.mainContext.fetch(Query(entity: entity.name, limit: 3)).enumerated() {
                let stored = FuzzEntryPoints.encodeRecord(r)
                guard (try? FuzzEntryPoints.decodeRecord(stored, id: r.id, schema: schema)) == r else { fail("record \(r.id) does not round-trip") }
                let seed = FuzzEntryPoints.keyBytes(of: r.id) + stored.dropLast(FuzzEntryPoints.checksumBytes)
                _ = fm.createFile(atPath: recordDir + "/\(entity.name)-\(i).bin", contents: Data(seed))
                records += 1
            }
        }
        print("fuzz-seeds: \(entries) log entries in \(logDir), \(records) records in \(recordDir)")
    }

    /// A small library with every kind of change and value.
    static func populate(_ store: Store, schema: Schema) throws {
        func entity(_ name: String) -> EntityDescription {
            guard let e = schema.entity(named: name) else { fail("the library schema has no \(name)") }
            return e
        }
        let (genreE, artistE, albumE, trackE, playlistE) = (entity("Genre"), entity("Artist"), entity("Album"), entity("Track"), entity("Playlist"))
        func rel(_ e: EntityDescription, _ name: String) -> RelationshipDescription {
            guard let r = e.relationship(named: name) else { fail("\(e.name) has no relationship \(name)") }
            return r
        }
        var genre = Record(entity: genreE)
        genre["name"] = .string("Música Popular Brasileira ♫")
        var artist = Record(entity: artistE)
        artist["mbid"] = .uuid(UUID(uuidString: "3F2504E0-4F89-11D3-9A0C-0305E82C3301")!)
        artist["name"] = .string("The Velvet Choir")
        artist["country"] = .string("NO")
        var album = Record(entity: albumE)
        album["mbid"] = .uuid(UUID(uuidString: "7D444840-9DC0-11D1-B245-5FFDCE74FAD2")!)
        album["title"] = .string("Nocturnes")
        album["year"] = .int(1999)
        album["releasedAt"] = .date(Date(timeIntervalSince1970: 915_148_800.25))
        var track = Record(entity: trackE)
        track["mbid"] = .uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!)
        track["title"] = .string("Opus — 1")
        track["durationSeconds"] = .int(3_600_000_000)
        track["trackNumber"] = .int(-7)
        track["rating"] = .double(4.75)
        track["explicit"] = .bool(true)
        track["isrc"] = .string("")
        track["addedAt"] = .date(Date(timeIntervalSince1970: 1_700_000_000))
        track["artworkHash"] = .bytes([0, 1, 0x7f, 0x80, 0xff])
        var playlist = Record(entity: playlistE)
        playlist["name"] = .string("Late")
        playlist["createdAt"] = .date(Date(timeIntervalSince1970: -86_400))
        playlist["notes"] = .string(String(repeating: "long note ", count: 20))
        let ids = (genre.id, artist.id, album.id, track.id, playlist.id)
        let (albumArtist, trackAlbum, trackGenre, playlistTracks) = (rel(albumE, "artist"), rel(trackE, "album"), rel(trackE, "genre"), rel(playlistE, "tracks"))
        let (rating, isrc, sortName) = (trackE.attribute(named: "rating")!.index, trackE.attribute(named: "isrc")!.index, artistE.attribute(named: "sortName")!.index)
        var second = Record(entity: trackE)
        second["mbid"] = .uuid(UUID(uuidString: "00000000-0000-0000-0000-000000000001")!)
        second["title"] = .string("x")
        second["durationSeconds"] = .int(0)
        second["addedAt"] = .date(Date(timeIntervalSinceReferenceDate: 0))
        let extra = second
        let first = [genre, artist, album, track, playlist]
        try blocking {
            _ = try await store.save(author: "seeds", metadata: ["importID": "seed-1", "source": "FuzzSeeds"]) { c in
                for r in first { c.insert(r) }
                c.link(albumArtist, from: ids.2, to: ids.1)
                c.link(trackAlbum, from: ids.3, to: ids.2)
                c.link(trackGenre, from: ids.3, to: ids.0)
                c.link(playlistTracks, from: ids.4, to: ids.3)
            }
            _ = try await store.save(author: "main") { c in
                c.update(ids.3, [ChangeSet.AttributeValue(attribute: rating, value: .double(-0.0)),
                                 ChangeSet.AttributeValue(attribute: isrc, value: .null)])
                c.update(ids.1, [ChangeSet.AttributeValue(attribute: sortName, value: .string("Velvet Choir, The"))])
            }
            _ = try await store.save(author: "main") { c in
                c.unlink(playlistTracks, from: ids.4, to: ids.3)
            }
            _ = try await store.save(author: "import", metadata: ["importID": "seed-2"]) { c in
                c.insert(extra)
                c.link(trackAlbum, from: extra.id, to: ids.2)
            }
            _ = try await store.save(author: "main") { c in c.delete(extra.id) }
            _ = try await store.save(author: "main") { c in c.delete(ids.4) }
        }
    }
}
