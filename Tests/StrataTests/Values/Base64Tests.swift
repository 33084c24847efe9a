import Foundation
import Testing
@testable import Strata

/// `bytes` values as text: only canonical base64 is read, so a value is stored as the bytes its
/// text encodes or refused (Foundation's decoder read `====` as one zero byte and `AAAA==` as
/// `AAAA`).
@Suite struct Base64Tests {
    /// Every byte string's standard encoding decodes to it (lengths 0 to 64, random bytes).
    @Test(arguments: 1...3)
    func encodingsDecodeToTheirBytes(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        for length in 0...64 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let text = Data(bytes).base64EncodedString()
            #expect(Base64.decode(text) == bytes, "seed \(seed), \(text)")
        }
    }

    /// Random strings over the alphabet and `=`: whatever is read is the canonical encoding of
    /// what it is read as, so no two texts give the same bytes.
    @Test(arguments: 1...3)
    func whatIsReadIsCanonical(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/==")
        var read = 0
        for _ in 0..<20_000 {
            let text = String((0..<Int.random(in: 0...12, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! })
            guard let bytes = Base64.decode(text) else { continue }
            read += 1
            #expect(Data(bytes).base64EncodedString() == text, "seed \(seed): \(text)")
        }
        #expect(read > 100)
    }

    @Test func malformedTextIsRefused() {
        for text in ["====", "AA=A", "AAAA==", "A", "AB", "AB=", "A===", "AB==AAAA", "AB=C", "QQ==\n", " QQ==", "QR==",
                     "QUI=QUI=", "QUJ=", "-_8=", "AAA=="] {
            #expect(Base64.decode(text) == nil, "\(text)")
        }
        #expect(Base64.decode("") == [])
        #expect(Base64.decode("QQ==") == [0x41])
        #expect(Base64.decode("QUI=") == [0x41, 0x42])
        #expect(Base64.decode("QUJD") == [0x41, 0x42, 0x43])
    }

    /// Through an import: the malformed values are refused at their line, nothing written.
    @Test func anImportRefusesMalformedBytes() async throws {
        let store = try Store.temporary(schema: try librarySchema())
        defer { store.close() }
        let dir = temporaryDirectory("base64")
        defer { try? FileManager.default.removeItem(at: dir) }
        let lines = [#"{"entity":"Genre","name":"g"}"#] + ["====", "AA=A", "AAAA=="].enumerated().map { i, hash in
            #"{"entity":"Track","mbid":"00000000-0000-0000-0000-00000000000\#(i)","title":"t","durationSeconds":1,"addedAt":"2024-01-01T00:00:00Z","artworkHash":"\#(hash)"}"#
        }
        await #expect { _ = try await Importer(store: store).run(files: [try writeInput(lines, in: dir)]) } throws: { error in
            guard let failed = error as? ImportFailed else { return false }
            return failed.issues.count == 3 && failed.issues.allSatisfy { $0.description.contains("artworkHash: not valid base64") }
        }
        #expect(try store.mainContext.count(Query(entity: "Genre")) == 0)
    }
}
