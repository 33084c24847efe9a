import Foundation
import LibraryModel
import Testing
@_spi(Fuzz) @testable import Strata

/// The scan `verify` reads the log with (`LogEntryCodec.scan`, which decodes nothing) must accept
/// and refuse exactly what the decoder does, and its checks of single values and strings must be
/// the decoder's. The fuzz target `fuzz-log-entry` checks the same agreement on its inputs.
@Suite struct LogScanTests {
    /// `checkString` refuses exactly the byte strings `string()` refuses: every one- and two-byte
    /// string, and many longer ones built from the bytes UTF-8 treats specially (lead bytes of
    /// each length, continuation bytes, the overlong and surrogate leads, bytes never allowed).
    @Test func checkStringAgreesWithStringDecoding() throws {
        func agree(_ bytes: [UInt8]) -> Bool {
            var w = ByteWriter()
            w.lengthPrefixed(bytes)
            return w.bytes.withUnsafeBytes { raw in
                var a = ByteReader(raw), b = ByteReader(raw)
                let decoded = (try? a.string()) != nil
                let checked = (try? b.checkString()) != nil
                return decoded == checked && (!decoded || a.offset == b.offset)
            }
        }
        var disagreements: [[UInt8]] = []
        for x in 0...255 {
            if !agree([UInt8(x)]) { disagreements.append([UInt8(x)]) }
            for y in 0...255 where !agree([UInt8(x), UInt8(y)]) { disagreements.append([UInt8(x), UInt8(y)]) }
        }
        let special: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC,
                                0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF7, 0xF8, 0xFE, 0xFF]
        var random = SeededGenerator(seed: 11)
        var valid = 0
        for _ in 0..<200_000 {
            let n = 3 + random.below(6)
            let bytes = (0..<n).map { _ in random.below(4) == 0 ? random.byte() : special[random.below(special.count)] }
            if !agree(bytes) { disagreements.append(bytes) }
            if String(validating: bytes, as: UTF8.self) != nil { valid += 1 }
        }
        for s in ["", "plain", "Jóga", "日本語", "🎵 track", "a\u{0}b", String(repeating: "ü", count: 300)] {
            if !agree(Array(s.utf8)) { disagreements.append(Array(s.utf8)) }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
        // The random strings must include valid ones, or the sweep would test refusals only.
        #expect(valid > 1_000)
    }

    /// `ValueCodec.check` throws for exactly the bytes `decode` throws for, and ends where it ends.
    @Test func valueCheckAgreesWithValueDecoding() {
        var random = SeededGenerator(seed: 5)
        var disagreements: [[UInt8]] = []
        var decodedCount = 0
        var samples: [[UInt8]] = []
        for v: Value in [.null, .string("t"), .string(String(repeating: "x", count: 200)), .int(-5), .int(.max), .double(.nan), .double(-0.0),
                         .bool(true), .date(Date(timeIntervalSince1970: 7)), .bytes([1, 2, 3]), .uuid(UUID())] {
            var w = ByteWriter()
            ValueCodec.encode(v, into: &w)
            samples.append(w.bytes)
        }
        for _ in 0..<50_000 {
            var bytes = samples[random.below(samples.count)]
            for _ in 0..<(1 + random.below(3)) where !bytes.isEmpty {
                switch random.below(3) {
                case 0: bytes[random.below(bytes.count)] = random.byte()
                case 1: bytes.removeLast(random.below(bytes.count) + 1)
                default: bytes.append(random.byte())
                }
            }
            let agreed = bytes.withUnsafeBytes { raw -> Bool in
                var a = ByteReader(raw), b = ByteReader(raw)
                let decoded = (try? ValueCodec.decode(from: &a)) != nil
                let checked = (try? ValueCodec.check(from: &b)) != nil
                if decoded { decodedCount += 1 }
                return decoded == checked && (!decoded || a.offset == b.offset)
            }
            if !agreed { disagreements.append(bytes) }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
        #expect(decodedCount > 5_000)
    }

    /// Real entries (inserts with every value type, updates, deletes, edges, metadata), each
    /// truncated at every length and with every bit flipped, then sealed with a valid checksum so
    /// the structure is what is tested: the scan and the decoder agree on every one.
    @Test func scanAgreesWithDecodeOnMutatedEntries() async throws {
        try await withLibraryStore { store in
            _ = try await randomTrackHistory(store, seed: 3, saves: 12)
            let track = makeTrack(title: "Ünïcode — 日本", duration: 301)
            let playlist = Playlist(name: "p", createdAt: Date(timeIntervalSince1970: 1))
            _ = try await store.save(metadata: ["importID": "x", "by": "test"]) { c in
                c.insert(track)
                c.insert(playlist)
                c.add(track.id, to: Playlist.tracks, of: playlist.id)
            }
            _ = try await store.save { c in
                c.set(Track.title, of: track.id, to: "second")
                c.set(Track.rating, of: track.id, to: 4.5)
            }
            _ = try await store.save { c in c.remove(track.id, from: Playlist.tracks, of: playlist.id) }
            _ = try await store.save { $0.delete(track.id) }
            var bodies: [(tx: UInt64, body: [UInt8])] = []
            try store.forEachTransaction { e in
                bodies.append((e.transactionID.rawValue, Array(FuzzEntryPoints.encodeLogEntry(e).dropLast(4))))
                return true
            }
            var kinds = Set<String>()
            var checked = 0, accepted = 0
            var disagreements: [String] = []
            for (tx, body) in bodies {
                let sealed = FuzzEntryPoints.sealLogEntry(body, transaction: tx)
                try sealed.withUnsafeBytes { raw in
                    _ = try LogEntryCodec.scan(raw, transactionID: TransactionID(tx)) { change in
                        kinds.insert(String(describing: change).prefix { $0 != "(" }.description)
                    }
                }
                for input in byteMutations(of: body) {
                    let bytes = FuzzEntryPoints.sealLogEntry(input, transaction: tx)
                    if let d = FuzzEntryPoints.scanDisagreement(bytes, transaction: tx) { disagreements.append("tx \(tx): \(d)") }
                    if (try? FuzzEntryPoints.decodeLogEntry(bytes, transaction: tx)) != nil { accepted += 1 }
                    checked += 1
                }
                // Unsealed, the checksum refuses nearly all: they must agree on that too.
                if let d = FuzzEntryPoints.scanDisagreement(body + [0, 0, 0, 0], transaction: tx) { disagreements.append("tx \(tx) unsealed: \(d)") }
            }
            #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
            #expect(kinds == ["insert", "update", "set", "delete", "link", "unlink"], "\(kinds)")
            // Both outcomes must be well represented, or agreement would be trivial.
            #expect(accepted > 1_000 && checked - accepted > 1_000, "\(accepted) of \(checked)")
        }
    }
}

extension SeededGenerator {
    /// The low byte of the next number.
    mutating func byte() -> UInt8 { UInt8(truncatingIfNeeded: next()) }
    /// A number in 0..<n (modulo bias is of no matter to these sweeps).
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}
