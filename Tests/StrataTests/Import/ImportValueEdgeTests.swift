import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Values at the edges of what import and export carry: a date or number no save would take is
/// found while the input is checked (with its line and field, nothing written); empty bytes,
/// `-0.0` and files without records survive an export and its import; a CSV header that cannot
/// be split ends the import.
@Suite struct ImportValueEdgeTests {
    static let schemaText = #"""
    {"model": "edges", "version": 1, "entities": [
      {"name": "Thing",
       "attributes": [
         {"name": "key", "type": "string"},
         {"name": "when", "type": "date", "optional": true},
         {"name": "ratio", "type": "double", "optional": true},
         {"name": "amount", "type": "decimal", "optional": true},
         {"name": "blob", "type": "bytes", "optional": true},
         {"name": "data", "type": "bytes"}],
       "uniques": [["key"]]},
      {"name": "Unused",
       "attributes": [{"name": "name", "type": "string"}],
       "uniques": [["name"]]}]}
    """#

    /// A new store of the schema above, in its own directory.
    func newStore(_ name: String) async throws -> (dir: URL, store: String) {
        let dir = temporaryDirectory(name)
        return (dir, try await storeOfSchema(Self.schemaText, in: dir))
    }

    func write(_ text: String, _ dir: URL, _ name: String) throws -> String {
        let url = dir.appendingPathComponent(name)
        try Data(text.utf8).write(to: url)
        return url.path
    }

    func count(_ store: String, _ entity: String = "Thing") async throws -> String {
        let r = try await storectl("query", store, "--entity", entity, "--count")
        #expect(r.status == 0, "\(r.stderr)")
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func lastTransaction(_ store: String) async throws -> JSONValue? {
        let r = try await storectl("info", store, "--json")
        #expect(r.status == 0, "\(r.stderr)")
        return try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["lastTransaction"]
    }

    /// A date beyond what a store holds (`±999999-…`), in NDJSON or CSV, is refused while the
    /// input is checked, as `FILE:LINE: field: reason`, and nothing is
    /// written, also when the import commits batch by batch. (The save refused it, with no line,
    /// after the batches before it had committed.)
    /// Integers around the 18 digits the JSON parser sums from their bytes, and past them, where
    /// it reads their text: each is the number written, or, past the int range, a double.
    @Test func integersAroundEighteenDigitsReadAsWritten() throws {
        let edges = ["0", "-0", "7", "-7", "999999999999999999", "-999999999999999999", "1000000000000000000",
                     "-1000000000000000000", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
                     "-9223372036854775809", "123456789012345678", "12345678901234567890"]
        for text in edges {
            let parsed = try JSONValue.parse(Array(text.utf8))
            if let exact = Int64(text) {
                #expect(parsed == .int(exact), "\(text)")
            } else {
                #expect(parsed == .double(Double(text)!), "\(text)")
            }
        }
        // Every count of digits from 1 to 19, with every leading digit, both signs.
        for digits in 1...19 {
            for lead in 1...9 {
                for sign in ["", "-"] {
                    let text = sign + String(lead) + String(repeating: "8", count: digits - 1)
                    let parsed = try JSONValue.parse(Array(text.utf8))
                    #expect(parsed == Int64(text).map(JSONValue.int) ?? .double(Double(text)!), "\(text)")
                }
            }
        }
    }

    @Test func aValueNoSaveTakesIsFoundWhileTheInputIsChecked() async throws {
        let (dir, store) = try await newStore("import-edges-range")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ndjson = try write("""
            {"entity": "Thing", "key": "a", "data": ""}
            {"entity": "Thing", "key": "b", "data": "", "when": "+999999-01-01T00:00:00Z"}

            """, dir, "in.ndjson")
        let r = try await storectl("import", store, ndjson, "--quiet", "--batch", "1", "--mode", "incremental",
                                   "--one-transaction-max-mb", "0")
        #expect(r.status == 65, "exit \(r.status): \(r.stderr)")
        #expect(r.stderr.contains("in.ndjson:2: when: dates must lie within"), "\(r.stderr)")
        #expect(try await count(store) == "0")

        let csv = try write("key,data,when\nc,\"\",2024-01-01T00:00:00Z\nd,\"\",-999999-01-01T00:00:00Z\n", dir,
                            "Thing.csv")
        let c = try await storectl("import", store, csv, "--quiet", "--batch", "1", "--mode", "incremental",
                                   "--one-transaction-max-mb", "0")
        #expect(c.status == 65, "exit \(c.status): \(c.stderr)")
        #expect(c.stderr.contains("Thing.csv:3: when: dates must lie within"), "\(c.stderr)")
        #expect(try await count(store) == "0")
    }

    /// Empty bytes go out in CSV as `""` and come back empty, not as null (a required bytes
    /// attribute made the export impossible to import); an unquoted empty field is still null.
    /// An id of another entity's object where one of the relationship's destination is expected
    /// is refused naming both entities, in NDJSON and CSV: it named the other by its tag number,
    /// which nothing else shows.
    @Test func anIdOfAnotherEntityNamesBoth() throws {
        let schema = try librarySchema()
        let builder = RecordBuilder(schema: schema, file: "in", maxValueBytes: 1 << 20)
        let genre = try #require(schema.entity(named: "Genre")), track = try #require(schema.entity(named: "Track"))
        let ofGenre = ObjectID(high: UInt64(genre.tag) << 48 | 1, low: 2)
        let ofNone = ObjectID(high: UInt64(0x7777) << 48 | 1, low: 2)
        for (id, owner) in [(ofGenre, "a Genre's"), (ofNone, "of no entity of the schema")] {
            let expected = "id \(id) is \(owner), not a Playlist's"
            #expect { try builder.fromJSON(Array(#"{"entity":"Track","playlists":["\#(id)"]}"#.utf8), line: 3) } throws: {
                ($0 as? ImportIssue).map { $0.field == "playlists" && $0.reason == expected } ?? false
            }
            let header = try builder.csvColumns(["title", "playlists"].map { CSVSplitter.Field(text: $0, quoted: false) },
                                                entity: track, line: 1)
            #expect {
                try builder.fromCSV(["t", id.description].map { CSVSplitter.Field(text: $0, quoted: false) },
                                    columns: header, entity: track, line: 2)
            } throws: { ($0 as? ImportIssue).map { $0.field == "playlists" && $0.reason == expected } ?? false }
        }
    }

    @Test func emptyBytesSurviveACSVExportAndItsImport() async throws {
        let (dir, store) = try await newStore("import-edges-bytes")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try write("""
            {"entity": "Thing", "key": "empty", "data": "", "blob": ""}
            {"entity": "Thing", "key": "some", "data": "AAEC"}

            """, dir, "in.ndjson")
        let i = try await storectl("import", store, input, "--quiet")
        #expect(i.status == 0, "\(i.stderr)")
        let csv = dir.appendingPathComponent("Thing.csv").path
        let e = try await storectl("export", store, "--entity", "Thing", "--format", "csv", "--output", csv)
        #expect(e.status == 0, "\(e.stderr)")
        let text = try String(contentsOfFile: csv, encoding: .utf8)
        #expect(text.contains(",empty,,,,\"\",\"\""), "\(text)")

        let (dir2, store2) = try await newStore("import-edges-bytes-2")
        defer { try? FileManager.default.removeItem(at: dir2) }
        let again = try await storectl("import", store2, csv, "--quiet")
        #expect(again.status == 0, "exit \(again.status): \(again.stderr)")
        let before = try await storectl("export", store, "--entity", "Thing").stdout
        #expect(before.contains(#""blob":"""#) && before.contains(#""data":"""#), "\(before)")
        #expect(try await storectl("export", store2, "--entity", "Thing").stdout == before)
    }

    /// `-0.0` keeps its sign through NDJSON also when the schema has a decimal attribute (the
    /// parser read every fraction as a decimal, which has no negative zero); a decimal
    /// attribute given `-0.0` holds 0.
    @Test func negativeZeroKeepsItsSignBesideDecimals() async throws {
        let (dir, store) = try await newStore("import-edges-zero")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = try write("""
            {"entity": "Thing", "key": "z", "data": "", "ratio": -0.0, "amount": -0.0}

            """, dir, "in.ndjson")
        let i = try await storectl("import", store, input, "--quiet")
        #expect(i.status == 0, "\(i.stderr)")
        let out = try await storectl("export", store, "--entity", "Thing").stdout
        let record = try JSONValue.parse(out.trimmingCharacters(in: .whitespacesAndNewlines))
        guard case .double(let ratio)? = record["ratio"] else {
            Issue.record("ratio is \(String(describing: record["ratio"]))")
            return
        }
        #expect(ratio == 0 && ratio.sign == .minus, "\(out)")
        #expect(out.contains(#""amount":0"#), "\(out)")
    }

    /// The export of an entity without objects (an empty NDJSON file, a CSV header alone) and an
    /// empty JSON array import as nothing, with exit 0: the export of a whole store imports again.
    /// (They were refused as "no records", and counted as a rejected record with
    /// `--continue-on-error`.)
    /// An int attribute refuses a number with a fraction also when the fraction is below what a
    /// double holds (`196.00000000000001`), in a schema without decimal attributes (whose numbers
    /// are read as doubles): it was stored as 196, where CSV and a schema with a decimal attribute
    /// refused it. Whole numbers written with a fraction or an exponent still count.
    @Test func anIntTakesNoFractionEvenOneADoubleDoesNotHold() async throws {
        try await withLibraryStore { store in
            let dir = temporaryDirectory("int-fraction")
            defer { try? FileManager.default.removeItem(at: dir) }
            func line(_ n: Int, _ duration: String) -> String {
                #"{"entity":"Track","mbid":"00000000-0000-4000-8000-00000000000\#(n)","title":"t\#(n)","durationSeconds":\#(duration),"addedAt":"2024-01-01T00:00:00Z"}"#
            }
            let bad = try write([line(1, "196.00000000000001")].joined(separator: "\n") + "\n", dir, "bad.ndjson")
            await #expect {
                _ = try await Importer(store: store).run(files: [bad])
            } throws: { error in
                guard let failed = error as? ImportFailed else { return false }
                return failed.issues.first?.field == "durationSeconds" && failed.issues.first?.line == 1
            }
            let good = try write([line(2, "196.0"), line(3, "1.96e2"), line(4, "196"), line(5, "196.000")]
                                    .joined(separator: "\n") + "\n", dir, "good.ndjson")
            let summary = try await Importer(store: store).run(files: [good])
            #expect(summary.records == 4)
            #expect(try store.mainContext.fetch(Track.self).map(\.durationSeconds) == [196, 196, 196, 196])
        }
    }

    @Test func aFileWithoutRecordsImportsAsNothing() async throws {
        let (dir, store) = try await newStore("import-edges-empty")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ndjson = dir.appendingPathComponent("Unused.ndjson").path
        let csv = dir.appendingPathComponent("Unused.csv").path
        #expect(try await storectl("export", store, "--entity", "Unused", "--output", ndjson).status == 0)
        #expect(try await storectl("export", store, "--entity", "Unused", "--format", "csv", "--output", csv).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: ndjson)).isEmpty)
        #expect(try String(contentsOfFile: csv, encoding: .utf8) == "id,name\n")
        let array = try write("[]", dir, "array.json")
        let thing = try write(#"{"entity": "Unused", "name": "one"}"# + "\n", dir, "one.ndjson")
        let before = try await lastTransaction(store)
        for files in [[ndjson], [csv], [array], [ndjson, csv, array]] {
            let r = try await storectl(["import", store] + files + ["--quiet"])
            #expect(r.status == 0, "\(files): exit \(r.status): \(r.stderr)")
        }
        #expect(try await lastTransaction(store) == before)
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let mixed = try await storectl("import", store, ndjson, thing, "--continue-on-error", "--rejects", rejects)
        #expect(mixed.status == 0, "\(mixed.stderr)")
        #expect(!mixed.stdout.contains("rejected"), "\(mixed.stdout)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: rejects)).isEmpty)
        #expect(try await count(store, "Unused") == "1")
    }

    /// A CSV header that cannot be split into fields (a stray quote) ends the import, also with
    /// `--continue-on-error`, naming line 1; nothing is written. (It was rejected as a record
    /// and the next line was taken for the header.)
    @Test func aCSVHeaderThatCannotBeSplitEndsTheImport() async throws {
        let (dir, store) = try await newStore("import-edges-header")
        defer { try? FileManager.default.removeItem(at: dir) }
        let csv = try write("key,da\"ta\nkey,data\nx,\"\"\n", dir, "Thing.csv")
        let rejects = dir.appendingPathComponent("rejects.csv").path
        for extra in [[], ["--continue-on-error", "--rejects", rejects]] {
            let r = try await storectl(["import", store, csv, "--quiet"] + extra)
            #expect(r.status == 65, "\(extra): exit \(r.status): \(r.stderr)")
            #expect(r.stderr.contains("Thing.csv:1:"), "\(r.stderr)")
            #expect(try await count(store) == "0")
        }
        #expect(!FileManager.default.fileExists(atPath: rejects))
        let open = try write("key,\"data\n", dir, "Thing.csv")
        let u = try await storectl("import", store, open, "--quiet", "--continue-on-error", "--rejects", rejects)
        #expect(u.status == 65 && u.stderr.contains("Thing.csv:1:") && u.stderr.contains("unterminated"), "\(u.stderr)")
    }

    /// A CSV double is decimal text: hexadecimal (`0x1p3`, which `Double(_:)` reads as 8) is
    /// refused with its line and field, as `nan` and `inf` are.
    @Test func aCSVDoubleIsDecimalText() async throws {
        let (dir, store) = try await newStore("import-edges-hex")
        defer { try? FileManager.default.removeItem(at: dir) }
        for bad in ["0x1p3", "nan", "inf", "1_000"] {
            let csv = try write("key,data,ratio\nc,\"\",\(bad)\n", dir, "Thing.csv")
            let r = try await storectl("import", store, csv, "--quiet")
            #expect(r.status == 65, "\(bad): exit \(r.status): \(r.stderr)")
            #expect(r.stderr.contains("Thing.csv:2: ratio: '\(bad)' is not a number"), "\(bad): \(r.stderr)")
        }
        // A number is told apart from what no double holds: past the range, or nonzero and read as 0.
        for (bad, reason) in [("1e309", "1e309 is beyond the range of a double"),
                              ("-2e-324", "-2e-324 is too small for a double: it would read as 0")] {
            let csv = try write("key,data,ratio\nc,\"\",\(bad)\n", dir, "Thing.csv")
            let r = try await storectl("import", store, csv, "--quiet")
            #expect(r.status == 65 && r.stderr.contains("Thing.csv:2: ratio: \(reason)"), "\(bad): \(r.stderr)")
            let q = try await storectl("query", store, "--entity", "Thing", "--where", "ratio == \(bad)")
            #expect(q.status == 64 && q.stderr.contains("'ratio' is double: \(reason)"), "\(bad): \(q.stderr)")
        }
        let csv = try write("key,data,ratio\nc,\"\",-2.5E-1\n", dir, "Thing.csv")
        #expect(try await storectl("import", store, csv, "--quiet").status == 0)
        #expect(try await storectl("query", store, "--entity", "Thing", "--where", "ratio == -0.25", "--count").stdout == "1\n")
    }
}
