import Foundation
import Testing
@testable import Strata

/// A bulk import into an empty store resolves in memory only when its input is small in bytes
/// (``ImportOptions/bulkInMemoryMaxInputBytes``) and in records
/// (``ImportOptions/bulkInMemoryMaxRecords``, by default the most a state in memory can
/// number): a CSV of short rows, small in bytes, could hold more records than that, and the
/// import was refused when it reached them. The count the choice is made on is an upper bound
/// read from the input: a CSV file's lines, an NDJSON file's `{`.
@Suite struct BulkInMemoryChoiceTests {
    /// Genres, one short CSV row each.
    private func genres(_ n: Int, in dir: URL) throws -> String {
        let url = dir.appendingPathComponent("Genre.csv")
        try Data((["name"] + (0..<n).map { "g\($0)" }).map { $0 + "\n" }.joined().utf8).write(to: url)
        return url.path
    }

    private func run(_ file: String, maxRecords: Int) async throws -> ImportSummary {
        let store = try Store.temporary(schema: try Schema.load(directory: librarySchemaDirectory))
        defer { store.close() }
        var options = ImportOptions()
        options.mode = .bulk
        options.bulkInMemoryMaxRecords = maxRecords
        let summary = try await Importer(store: store, options: options).run(files: [file])
        #expect(try store.mainContext.count(Query(entity: "Genre")) == summary.records)
        return summary
    }

    /// 1,000 rows in 8 KB: in memory under a limit of 1,002 (1,001 lines and one), through the
    /// B-trees under 1,000, with the same records either way.
    @Test func manyShortRowsGoThroughTheBTreesPastTheRecordLimit() async throws {
        let dir = temporaryDirectory("bulk-in-memory-choice")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = try genres(1_000, in: dir)
        let fits = try await run(file, maxRecords: 1_002)
        #expect(fits.mode == .bulk)
        #expect(fits.inMemory)
        #expect(fits.records == 1_000)
        let over = try await run(file, maxRecords: 1_000)
        #expect(over.mode == .bulk)
        #expect(!over.inMemory)
        #expect(over.records == 1_000)
    }

    /// The bound for each format: CSV lines plus one per file, NDJSON `{` (nested objects count
    /// too); nil past the limit and for a file of no known format.
    @Test func theRecordBoundOfEachFormat() throws {
        let dir = temporaryDirectory("bulk-record-bound")
        defer { try? FileManager.default.removeItem(at: dir) }
        func file(_ name: String, _ text: String) throws -> String {
            let url = dir.appendingPathComponent(name)
            try Data(text.utf8).write(to: url)
            return url.path
        }
        let csv = try file("Genre.csv", "name\na\nb")
        let ndjson = try file("in.ndjson", #"{"entity":"Genre","name":"{x}"}"# + "\n" + #"{"entity":"Genre","name":"y"}"#)
        let other = try file("in.txt", "{}")
        #expect(Importer.recordsAtMost([csv], identities: nil, format: nil, limit: 10) == 3)
        #expect(Importer.recordsAtMost([ndjson], identities: nil, format: nil, limit: 10) == 3)
        #expect(Importer.recordsAtMost([csv, ndjson], identities: nil, format: nil, limit: 10) == 6)
        #expect(Importer.recordsAtMost([csv, ndjson], identities: nil, format: nil, limit: 5) == nil)
        #expect(Importer.recordsAtMost([other], identities: nil, format: nil, limit: 10) == nil)
        #expect(Importer.recordsAtMost([other], identities: nil, format: .ndjson, limit: 10) == 1)
        #expect(Importer.recordsAtMost([dir.appendingPathComponent("missing.csv").path], identities: nil,
                                       format: nil, limit: 10) == nil)
    }

    /// The word-at-a-time count against a byte-by-byte one, on buffers of every length up to 40
    /// at every offset, filled at random (a replayable seed) from few byte values so that runs of
    /// the needle, its neighbours and bytes with the high bit set all occur.
    @Test(arguments: [1, 2, 3]) func theWordAtATimeCountMatchesAByteCount(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        let alphabet: [UInt8] = [0x0A, 0x0B, 0x09, 0x7B, 0xFB, 0x8A, 0x00, 0xFF, 0x80]
        for _ in 0..<200 {
            let bytes = (0..<48).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
            bytes.withUnsafeBytes { all in
                for start in 0..<8 {
                    for count in 0...40 {
                        let slice = UnsafeRawBufferPointer(rebasing: all[start..<(start + count)])
                        for needle: UInt8 in [0x0A, 0x7B, 0x00, 0xFF] {
                            let expected = slice.filter { $0 == needle }.count
                            #expect(Importer.occurrences(of: needle, in: slice) == expected,
                                    "seed \(seed), start \(start), count \(count), needle \(needle)")
                        }
                    }
                }
            }
        }
    }

    /// The option's range: 0 (never in memory) up to what a state in memory can number.
    @Test func theRecordLimitIsChecked() async throws {
        let store = try Store.temporary(schema: try Schema.load(directory: librarySchemaDirectory))
        defer { store.close() }
        for bad in [-1, ImportOptions.maxBulkInMemoryRecords + 1] {
            var options = ImportOptions()
            options.bulkInMemoryMaxRecords = bad
            await #expect(throws: ImportFailed.self) {
                try await Importer(store: store, options: options).run(files: [])
            }
        }
    }
}
