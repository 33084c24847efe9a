import Foundation
import LibraryModel
import Testing
@_spi(Fuzz) @testable import Strata

/// The binary decoders of log entries and records, whatever the bytes (checksums sealed right):
/// they return a value or throw `corruptLogEntry` / `corruptRecord`, they never trap. Crafted
/// inputs, and a small deterministic sweep of mutated real entries and records (the fuzz targets
/// fuzz-log-entry and fuzz-record in Tools/Fuzz check the same property at length).
@Suite struct DecoderCorruptionTests {
    /// A varint of 2^63 (ten bytes): as an attribute index it does not fit an `Int`.
    static let hugeVarint: [UInt8] = Array(repeating: 0x80, count: 9) + [0x01]

    /// An update whose attribute index is a varint ≥ 2^63, which does not fit `Int(_:)` in
    /// `decodeChange` ("Not enough bits to represent the passed value"): corrupt, not a trap.
    @Test func logEntryUpdateWithAHugeAttributeIndexIsCorruptNotATrap() throws {
        var w = ByteWriter()
        w.u8(LogEntryCodec.format); w.u8(0); w.u32(1); w.u64(0)
        w.string("main")
        w.varint(0)  // metadata
        w.varint(1)  // one change
        w.u8(2)  // update
        w.u64(0x0003_0000_0000_0001); w.u64(2)  // object id
        w.u64(1)  // previous version
        w.varint(1)  // one attribute change
        w.append(Self.hugeVarint)
        w.u8(0); w.u8(0)  // old, new: null
        let sealed = FuzzEntryPoints.sealLogEntry(w.bytes, transaction: 7)
        #expect {
            try FuzzEntryPoints.decodeLogEntry(sealed, transaction: 7)
        } throws: { error in
            guard case StrataError.corruptLogEntry(let tx, let reason) = error else { return false }
            return tx == TransactionID(7) && reason.contains("attribute index")
        }
    }

    /// A record whose attribute index is a varint ≥ 2^63, in `RecordCodec.decode`: corrupt, not a
    /// trap.
    @Test func recordWithAHugeAttributeIndexIsCorruptNotATrap() throws {
        let schema = try librarySchema()
        let genre = try #require(schema.entity(named: "Genre"))
        let id = ObjectID.make(entityTag: genre.tag)
        var w = ByteWriter()
        w.u8(RecordCodec.format); w.u16(genre.tag); w.u64(1)
        w.varint(1)  // one present attribute
        w.append(Self.hugeVarint)
        w.u8(0)
        let sealed = FuzzEntryPoints.sealRecord(w.bytes, id: id)
        #expect {
            try FuzzEntryPoints.decodeRecord(sealed, id: id, schema: schema)
        } throws: { error in
            guard case StrataError.corruptRecord(let bad, let reason) = error else { return false }
            return bad == id && reason.contains("attribute index")
        }
    }

    /// A record that lists an attribute twice (or out of order), sealed with the right checksum,
    /// is corrupt: it decoded, the last value winning, so a record written wrongly read as a
    /// plausible object.
    @Test func aRecordListingAnAttributeTwiceIsCorrupt() throws {
        let schema = try librarySchema()
        let track = try #require(schema.entity(named: "Track"))
        let good = Track(mbid: UUID(), title: "t", durationSeconds: 5, addedAt: Date(timeIntervalSince1970: 0))
        let record = Record(entity: track, id: good.id, values: good.storedValues, version: TransactionID(1))
        let encoded = RecordCodec.encode(record)
        #expect(try encoded.withUnsafeBytes { try RecordCodec.decode($0, id: good.id, schema: schema) }.values == record.values)
        for order in [[1, 1], [2, 1]] {
            var w = ByteWriter()
            w.u8(RecordCodec.format); w.u16(track.tag); w.u64(1)
            w.varint(UInt64(order.count))
            for i in order {
                w.varint(UInt64(i))
                ValueCodec.encode(.string("x\(i)"), into: &w)
            }
            let sealed = FuzzEntryPoints.sealRecord(w.bytes, id: good.id)
            #expect {
                try FuzzEntryPoints.decodeRecord(sealed, id: good.id, schema: schema)
            } throws: { error in
                guard case StrataError.corruptRecord(let bad, let reason) = error else { return false }
                return bad == good.id && reason.contains("once each, in order")
            }
        }
    }

    /// Every truncation and every single-byte change (8 masks) of real entries and records,
    /// sealed with the right checksum: decoded or refused as corrupt, and what decodes survives
    /// encode → decode with the same bytes.
    @Test func mutatedRealEntriesAndRecordsDecodeOrAreCorrupt() async throws {
        let schema = try librarySchema()
        let store = try Store.temporary(schema: schema)
        defer { store.close() }
        let album = Album(mbid: UUID(), title: "Nocturnes", year: 1999)
        let track = Track(mbid: UUID(), title: "Opus — 1", durationSeconds: 300, addedAt: Date(timeIntervalSince1970: 1_700_000_000))
        _ = try await store.save(metadata: ["importID": "x"]) { c in
            c.insert(album)
            c.insert(track)
            c.set(Track.album, of: track.id, to: album.id)
        }
        _ = try await store.save { $0.set(Track.rating, of: track.id, to: 4.5) }
        _ = try await store.save { $0.delete(track.id) }
        var bodies: [(tx: UInt64, body: [UInt8])] = []
        try store.forEachTransaction { e in
            bodies.append((e.transactionID.rawValue, Array(FuzzEntryPoints.encodeLogEntry(e).dropLast(4))))
            return true
        }
        let records = try store.mainContext.fetch(Query(entity: "Album"))
        #expect(bodies.count == 3 && records.count == 1)
        var decoded = 0, refused = 0
        for (tx, body) in bodies {
            for input in byteMutations(of: body) {
                do {
                    let e = try FuzzEntryPoints.decodeLogEntry(FuzzEntryPoints.sealLogEntry(input, transaction: tx), transaction: tx)
                    let canonical = FuzzEntryPoints.encodeLogEntry(e)
                    #expect(FuzzEntryPoints.encodeLogEntry(try FuzzEntryPoints.decodeLogEntry(canonical, transaction: tx)) == canonical)
                    decoded += 1
                } catch StrataError.corruptLogEntry(let t, _) where t.rawValue == tx {
                    refused += 1
                }
            }
        }
        for r in records {
            for input in byteMutations(of: Array(FuzzEntryPoints.encodeRecord(r).dropLast(4))) {
                do {
                    let d = try FuzzEntryPoints.decodeRecord(FuzzEntryPoints.sealRecord(input, id: r.id), id: r.id, schema: schema)
                    let canonical = FuzzEntryPoints.encodeRecord(d)
                    #expect(FuzzEntryPoints.encodeRecord(try FuzzEntryPoints.decodeRecord(canonical, id: r.id, schema: schema)) == canonical)
                    decoded += 1
                } catch StrataError.corruptRecord(let id, _) where id == r.id {
                    refused += 1
                }
            }
        }
        #expect(decoded > 0 && refused > 0)
    }
}
