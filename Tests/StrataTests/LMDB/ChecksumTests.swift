import Foundation
import Testing
@testable import Strata

/// CRC-32C: the hardware and table paths give the published values and agree with each other;
/// record and log checksums (computed without concatenating the key and the body) equal the
/// checksum of key + body, which is what stores already on disk carry.
@Suite struct ChecksumTests {
    @Test func knownVectors() {
        let cases: [(String, UInt32)] = [("", 0), ("a", 0xC1D0_4330), ("123456789", 0xE306_9283),
                                         (String(repeating: "\u{0}", count: 32), 0x8A91_36AA)]
        for (text, expected) in cases {
            let bytes = Array(text.utf8)
            #expect(CRC32C.checksum(bytes) == expected, "\(text.debugDescription)")
            #expect(bytes.withUnsafeBytes { ~CRC32C.updateWithTables(0xFFFF_FFFF, $0) } == expected, "tables: \(text.debugDescription)")
        }
    }

    @Test func hardwareAndTablesAgreeOnEveryLengthAndSplit() {
        var rng = SeededGenerator(seed: 42)
        for length in 0..<300 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let whole = bytes.withUnsafeBytes { ~CRC32C.updateWithTables(0xFFFF_FFFF, $0) }
            #expect(CRC32C.checksum(bytes) == whole)
            let cut = length == 0 ? 0 : Int.random(in: 0...length, using: &rng)
            let split = bytes.withUnsafeBytes { all in
                ~CRC32C.update(CRC32C.update(0xFFFF_FFFF, UnsafeRawBufferPointer(rebasing: all[0..<cut])),
                               UnsafeRawBufferPointer(rebasing: all[cut...]))
            }
            #expect(split == whole, "length \(length) split at \(cut)")
        }
    }

    @Test func aPrefixsChecksumMovesPastABodyOfAnyLength() {
        var rng = SeededGenerator(seed: 7)
        for length in [0, 1, 3, 8, 57, 4_096, 100_003] {
            let body = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let prefix = (0..<8).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let combined = CRC32C.combine(CRC32C.checksum(prefix), CRC32C.checksum(body),
                                          shiftOfB: CRC32C.shift(bytes: body.count))
            #expect(combined == CRC32C.checksum(prefix + body), "body of \(length) bytes")
        }
    }

    /// What a shared log writes when it moves an entry to a later id: the checksum the entry
    /// would have been encoded with there.
    /// The shift past a body of 512 MiB or more (a byte count with bit 29 or higher set) equals
    /// x^(8·n) computed by squaring and multiplying from x⁸: the table of powers was read modulo
    /// 32 entries, as if x^(2^32) were x modulo the polynomial, which it is not.
    @Test func theShiftPastAHugeBodyIsThePowerOfX() {
        func reference(_ bytes: Int) -> UInt32 {
            var result: UInt32 = 1 << 31   // x⁰
            var base: UInt32 = 1 << 23     // x⁸
            var n = UInt(bytes)
            while n != 0 {
                if n & 1 != 0 { result = CRC32C.multiplyModP(base, result) }
                base = CRC32C.multiplyModP(base, base)
                n >>= 1
            }
            return result
        }
        for n in [0, 1, 3, 4_096, 1 << 28, (1 << 29) - 1, 1 << 29, (1 << 29) + 12_345, 1 << 30, 1 << 32,
                  (1 << 40) + 7, Int.max] {
            #expect(CRC32C.shift(bytes: n) == reference(n), "\(n) bytes")
        }
    }

    @Test func anEntrysChecksumsAtLaterIdsAreThoseItWouldBeEncodedWith() {
        var rng = SeededGenerator(seed: 11)
        for length in [0, 5, 200, 9_000] {
            let body = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let first = TransactionID(UInt64.random(in: 1...UInt64(1) << 40, using: &rng))
            let sums = body.withUnsafeBytes { LogEntryCodec.checksums($0, from: first, count: 70) }
            #expect(sums.count == 70)
            for (i, sum) in sums.enumerated() {
                #expect(sum == LogEntryCodec.checksum(TransactionID(first.rawValue + UInt64(i)), body),
                        "body of \(length) bytes at \(first) + \(i)")
            }
        }
        let id = ObjectID.make(entityTag: 1)
        let entry = LogEntry(transactionID: TransactionID(41), schemaVersion: 1, timestampMs: 5, author: "a",
                             metadata: [:], changes: [.unlink(relationship: 3, from: id, to: id)])
        let shared = ReplicatedEntry(transactionID: TransactionID(41), bytes: LogEntryCodec.encode(entry), author: "a",
                                     timestampMs: 5, schemaVersion: 1)
        let moved = shared.checksumBytes(from: TransactionID(41), count: 3)
        for k in 0..<3 {
            let there = LogEntry(transactionID: TransactionID(41 + UInt64(k)), schemaVersion: 1, timestampMs: 5,
                                 author: "a", metadata: [:], changes: entry.changes)
            #expect(Array(shared.bytes.dropLast(4)) + moved[(k * 4)..<(k * 4 + 4)] == LogEntryCodec.encode(there))
        }
    }

    @Test func recordAndLogChecksumsCoverKeyThenBody() {
        let id = ObjectID(high: 0x1122_3344_5566_7788, low: 0x99AA_BBCC_DDEE_FF00)
        let body: [UInt8] = Array("some record body".utf8)
        #expect(RecordCodec.checksum(id: id, body: body) == CRC32C.checksum(id.keyBytes + body))
        let tx = TransactionID(0x0102_0304_0506_0708)
        #expect(LogEntryCodec.checksum(tx, body) == CRC32C.checksum(tx.keyBytes + body))
    }
}
