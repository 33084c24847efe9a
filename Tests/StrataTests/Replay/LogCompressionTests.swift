import Foundation
import LibraryModel
import Testing
@_spi(Fuzz) @testable import Strata

/// Large log entries are stored with their body compressed (zstd); small ones, and ones that do
/// not compress, stay plain. Both read the same everywhere: decoding, the scan `verify` folds
/// with, replay and history, and a log that mixes them.
@Suite struct LogCompressionTests {
    /// An entry of `count` track inserts with text that compresses as real text does.
    func tracksEntry(_ count: Int, tx: UInt64 = 9) throws -> LogEntry {
        let schema = try librarySchema()
        let track = try #require(schema.entity(named: "Track"))
        let changes: [LoggedChange] = (0..<count).map { i in
            var values = [Value](repeating: .null, count: track.attributes.count)
            values[0] = .string("Track \(i) of the album \(i / 12), remastered")
            values[1] = .int(Int64(180 + i % 300))
            return .insert(id: ObjectID.make(entityTag: track.tag), values: values)
        }
        return LogEntry(transactionID: TransactionID(tx), schemaVersion: schema.version, timestampMs: 1_700_000_000_000,
                        author: "import", metadata: ["importID": "x"], changes: changes)
    }

    func decode(_ bytes: [UInt8], _ tx: UInt64) throws -> LogEntry {
        try FuzzEntryPoints.decodeLogEntry(bytes, transaction: tx)
    }

    @Test func aLargeEntryIsStoredCompressedAndDecodesToTheSameEntry() throws {
        let entry = try tracksEntry(400)
        let stored = LogEntryCodec.encode(entry)
        let plain = LogEntryCodec.encode(entry) { false }
        #expect(stored.first == LogEntryCodec.compressedFormat && plain.first == LogEntryCodec.format)
        #expect(stored.count * 2 < plain.count, "\(stored.count) of \(plain.count) bytes")
        #expect(try decode(stored, 9) == entry)
        #expect(try decode(plain, 9) == entry)
        // Its plain form is exactly the plain encoding, checksum included.
        let expanded = try stored.withUnsafeBytes { try LogEntryCodec.plainEntry($0, transactionID: TransactionID(9)) }
        #expect(expanded == plain)
        // The same entry encodes to the same bytes every time (with one libzstd, whichever pooled context).
        #expect(LogEntryCodec.encode(entry) == stored)
    }

    @Test func smallAndIncompressibleEntriesStayPlain() throws {
        let small = try tracksEntry(2)
        #expect(LogEntryCodec.encode(small).first == LogEntryCodec.format)
        let schema = try librarySchema()
        let track = try #require(schema.entity(named: "Track"))
        var random = SeededGenerator(seed: 7)
        var values = [Value](repeating: .null, count: track.attributes.count)
        values[0] = .bytes((0..<3_000).map { _ in random.byte() })
        let noise = LogEntry(transactionID: TransactionID(3), schemaVersion: schema.version, timestampMs: 1, author: "a",
                             metadata: [:], changes: [.insert(id: ObjectID.make(entityTag: track.tag), values: values)])
        let bytes = LogEntryCodec.encode(noise)
        #expect(bytes.first == LogEntryCodec.format, "random bytes do not shrink by an eighth")
        #expect(try decode(bytes, 3) == noise)
    }

    /// The stored bytes of a compressed entry, changed at every byte after the format byte (a
    /// sweep of masks) and truncated, then sealed with a valid checksum: the decoder refuses each
    /// as a corrupt entry of its transaction or reads a sound entry, and the scan agrees with it.
    @Test func damagedCompressedEntriesAreCorruptAndTheScanAgrees() throws {
        let stored = LogEntryCodec.encode(try tracksEntry(60))
        #expect(stored.first == LogEntryCodec.compressedFormat)
        let body = Array(stored.dropLast(4))
        var inputs: [[UInt8]] = []
        for i in 1..<body.count {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var b = body
                b[i] ^= mask
                inputs.append(b)
            }
        }
        for n in stride(from: 2, to: body.count, by: 7) { inputs.append(Array(body.prefix(n))) }
        var refused = 0, disagreements: [String] = []
        for input in inputs {
            let sealed = FuzzEntryPoints.sealLogEntry(input, transaction: 9)
            if let d = FuzzEntryPoints.scanDisagreement(sealed, transaction: 9) { disagreements.append(d) }
            do {
                _ = try decode(sealed, 9)
            } catch StrataError.corruptLogEntry(let tx, _) {
                #expect(tx == TransactionID(9))
                refused += 1
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(3))")
        #expect(refused > inputs.count / 2, "\(refused) of \(inputs.count) refused")
    }

    /// A compressed entry's declared body size and zstd frame.
    func declaredSizeAndFrame(_ stored: [UInt8]) throws -> (declared: Int, frame: [UInt8]) {
        let header = stored.withUnsafeBytes { raw -> (Int, Int)? in
            var r = ByteReader(raw)
            _ = try? r.u8(); _ = try? r.u8()
            return (try? r.varint()).map { (Int($0), r.offset) }
        }
        let (declared, frameStart) = try #require(header)
        return (declared, Array(stored[frameStart..<(stored.count - 4)]))
    }

    /// A compressed entry of transaction 9 declaring `size` bytes with `body` as its frame,
    /// sealed with a valid checksum, is refused as corrupt for a reason containing `reason`.
    func expectRefused(declaring size: UInt64, body: [UInt8], because reason: String) {
        var w = ByteWriter()
        w.u8(LogEntryCodec.compressedFormat); w.u8(0); w.varint(size)
        w.append(body)
        let sealed = FuzzEntryPoints.sealLogEntry(w.bytes, transaction: 9)
        #expect {
            try decode(sealed, 9)
        } throws: { error in
            guard case StrataError.corruptLogEntry(let tx, let why) = error else { return false }
            return tx == TransactionID(9) && why.contains(reason)
        }
    }

    /// A declared body far larger than its frame could hold is refused before anything that size
    /// is allocated; a frame whose content is not the declared size is refused too.
    @Test func aDeclaredSizeTheFrameCannotHoldIsRefused() throws {
        let (declared, frame) = try declaredSizeAndFrame(LogEntryCodec.encode(try tracksEntry(60)))
        for (size, reason) in [(UInt64(1) << 40, "declares"), (UInt64(declared + 1), "not the"), (UInt64(declared - 1), "decompress")] {
            expectRefused(declaring: size, body: frame, because: reason)
        }
    }

    /// A checksummed entry whose frame is large enough for the size it declares, and that size
    /// more than the process can allocate (here 48 GiB from a 48 MiB frame on a 24 GiB machine),
    /// is refused as damaged: the allocation failed in Swift's array initialiser and ended the
    /// process. Decoding and the plain form alike.
    @Test func aDeclaredSizeTheProcessCannotAllocateIsRefused() throws {
        let frame = [UInt8](repeating: 0x5A, count: 48 << 20)
        let size = UInt64(48) << 30
        guard Compression.allowed(plain: Int(size), compressed: frame.count) else {
            Issue.record("the size must pass the frame check")
            return
        }
        var w = ByteWriter()
        w.u8(LogEntryCodec.compressedFormat); w.u8(0); w.varint(size)
        w.append(frame)
        let sealed = FuzzEntryPoints.sealLogEntry(w.bytes, transaction: 9)
        for attempt in ["decode", "plain"] {
            #expect {
                if attempt == "decode" {
                    _ = try decode(sealed, 9)
                } else {
                    _ = try sealed.withUnsafeBytes { try LogEntryCodec.plainEntry($0, transactionID: TransactionID(9)) }
                }
            } throws: { error in
                guard case StrataError.corruptLogEntry(let tx, let why) = error else { return false }
                // Refused for the size, or (where the memory is there) for the frame's content.
                return tx == TransactionID(9) && (why.contains("more than this process can allocate") || why.contains("zstd"))
            }
        }
    }

    /// The body must be exactly one zstd frame (nothing after it, not a second frame), and a
    /// frame must be at least a byte for any size to be allowed.
    @Test func aBodyThatIsNotExactlyOneFrameIsRefused() throws {
        let (declared, frame) = try declaredSizeAndFrame(LogEntryCodec.encode(try tracksEntry(60)))
        expectRefused(declaring: UInt64(declared * 2), body: frame + frame, because: "one zstd frame")
        expectRefused(declaring: UInt64(declared), body: frame + [0], because: "one zstd frame")
        #expect(Compression.allowed(plain: 1 << 30, compressed: 1 << 20) && !Compression.allowed(plain: (1 << 30) + 1, compressed: 1 << 20))
        #expect(!Compression.allowed(plain: 10, compressed: 0))
    }

    /// A store's large saves are logged compressed, small ones plain, and the mixed log reads as
    /// before: verify (in memory and by rebuilding), replay and history.
    @Test func aLogMixingBothFormatsVerifiesAndReplays() async throws {
        try await withLibraryStore { store in
            let big = try await store.save { c in for i in 0..<2_000 { c.insert(makeTrack(title: "track \(i)", duration: 100 + i % 400)) } }
            let one = makeTrack(title: "alone", duration: 5)
            let small = try await store.save { $0.insert(one) }
            _ = try await store.save { $0.set(Track.title, of: one.id, to: "renamed") }
            let snapshot = try store.snapshot(label: "formats")
            defer { snapshot.close() }
            let formats = try snapshot.read { view in
                try [big, small].map { tx in try view.txn.withValue(view.env[.log], key: tx.keyBytes) { $0.first } }
            }
            #expect(formats == [LogEntryCodec.compressedFormat, LogEntryCodec.format])
            let fast = try store.verify()
            let rebuilt = try store.verify(rebuild: true)
            #expect(fast.ok && fast.method == .inMemory, "\(fast.problems)")
            #expect(rebuilt.ok && rebuilt.method == .rebuild, "\(rebuilt.problems)")
            #expect(fast.changes == 2_002 && rebuilt.changes == 2_002)
            var changes = 0
            try store.forEachTransaction { changes += $0.changes.count; return true }
            #expect(changes == 2_002)
            #expect(try store.history(of: one.id).count == 2)
        }
    }
}
