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

    @Test func recordAndLogChecksumsCoverKeyThenBody() {
        let id = ObjectID(high: 0x1122_3344_5566_7788, low: 0x99AA_BBCC_DDEE_FF00)
        let body: [UInt8] = Array("some record body".utf8)
        #expect(RecordCodec.checksum(id: id, body: body) == CRC32C.checksum(id.keyBytes + body))
        let tx = TransactionID(0x0102_0304_0506_0708)
        #expect(LogEntryCodec.checksum(tx, body) == CRC32C.checksum(tx.keyBytes + body))
    }
}
