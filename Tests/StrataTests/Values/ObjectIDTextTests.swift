import Foundation
import Testing
@testable import Strata

/// Ids written as text (`ObjectID(string:)`) and CSV cells listing several targets
/// (`RecordBuilder.pipeSeparated`), each against a plain reference written with the standard
/// library's own parsing, on random input from replayable seeds.
@Suite struct ObjectIDTextTests {
    /// The reference: 32 ASCII hexadecimal digits, either case, read as two halves by
    /// `UInt64(_:radix:)`.
    private func referenceID(_ s: String) -> ObjectID? {
        let utf8 = Array(s.utf8)
        guard utf8.count == 32, utf8.allSatisfy({ $0 < 128 && Character(Unicode.Scalar($0)).isHexDigit }),
              let h = UInt64(String(s.prefix(16)), radix: 16), let l = UInt64(String(s.suffix(16)), radix: 16)
        else { return nil }
        return ObjectID(high: h, low: l)
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func idTextAgreesWithTheReference(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        // Hex digits of both cases, near misses and characters of several UTF-8 lengths.
        let alphabet = Array("0123456789abcdefABCDEFgG -xé光😀")
        for round in 0..<20_000 {
            let id = ObjectID(high: rng.next(), low: rng.next())
            #expect(ObjectID(string: id.description) == id, "seed \(seed) round \(round)")
            #expect(ObjectID(string: id.description.uppercased()) == id, "seed \(seed) round \(round)")
            let length = [31, 32, 32, 32, 33, 0, 16][Int(rng.next() % 7)]
            var text = ""
            let mostlyHex = rng.next() % 2 == 0
            for _ in 0..<length {
                let pool = mostlyHex && rng.next() % 16 != 0 ? 22 : alphabet.count
                text.append(alphabet[Int(rng.next() % UInt64(pool))])
            }
            #expect(ObjectID(string: text) == referenceID(text), "seed \(seed) round \(round): \(text)")
        }
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func pipeSeparatedCellsAgreeWithSplittingByCharacters(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        let alphabet = Array("ab|||é光😀 0")
        for round in 0..<20_000 {
            var text = ""
            for _ in 0..<Int(rng.next() % 12) { text.append(alphabet[Int(rng.next() % UInt64(alphabet.count))]) }
            #expect(RecordBuilder.pipeSeparated(text) == text.split(separator: "|").map(String.init),
                    "seed \(seed) round \(round): \(text)")
        }
    }
}
