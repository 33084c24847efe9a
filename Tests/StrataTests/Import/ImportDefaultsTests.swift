import Foundation
import Testing
@testable import Strata

/// Defaults and nulls in an import: an attribute a record leaves out takes its default; one it
/// gives as `null` (or an empty unquoted CSV field) has no value, also when it has a default, so
/// that an export imported again, or into an empty store, reproduces a null. An import gave the
/// default for both, so a null could never be imported and an export's round trip changed it.
@Suite struct ImportDefaultsTests {
    static let schemaText = #"""
    {"model": "notes", "version": 1, "entities": [
      {"name": "W",
       "attributes": [
         {"name": "k", "type": "string"},
         {"name": "note", "type": "string", "optional": true, "default": "n/a"},
         {"name": "count", "type": "int", "default": 7},
         {"name": "plain", "type": "string", "optional": true}],
       "uniques": [["k"]]}]}
    """#

    func write(_ text: String, _ dir: URL, _ name: String) throws -> String {
        let url = dir.appendingPathComponent(name)
        try Data(text.utf8).write(to: url)
        return url.path
    }

    /// Each object's `k`, `note` and `count`, as `storectl query --json` prints them, by key.
    func rows(_ store: String) async throws -> [String: String] {
        let r = try await storectl("export", store, "--entity", "W")
        #expect(r.status == 0, "\(r.stderr)")
        var out: [String: String] = [:]
        for line in r.stdout.split(separator: "\n") {
            let o = try JSONValue.parse(Array(line.utf8))
            guard case .string(let k)? = o["k"] else { continue }
            out[k] = "note=\(o["note"].map { "\($0.serialized)" } ?? "absent") count=\(o["count"].map { "\($0.serialized)" } ?? "absent")"
        }
        return out
    }

    @Test(arguments: ["incremental", "bulk"])
    func aNullGivenStaysNullAndALeftOutAttributeTakesItsDefault(mode: String) async throws {
        let dir = temporaryDirectory("import-defaults")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await storeOfSchema(Self.schemaText, in: dir)
        let first = try write("""
            {"entity": "W", "k": "left-out"}
            {"entity": "W", "k": "given-null", "note": null, "count": null}
            {"entity": "W", "k": "cleared", "note": "x"}

            """, dir, "first.ndjson")
        #expect(try await storectl("import", store, first, "--quiet", "--mode", mode).status == 0)
        var found = try await rows(store)
        #expect(found["left-out"] == "note=\"n/a\" count=7")
        // A required attribute given null takes its default, as left out.
        #expect(found["given-null"] == "note=null count=7")
        #expect(found["cleared"] == "note=\"x\" count=7")

        // An update by key clears the value; CSV's empty unquoted field is null, a column left
        // out takes the default.
        let second = try write(#"{"entity": "W", "k": "cleared", "note": null}"# + "\n", dir, "second.ndjson")
        #expect(try await storectl("import", store, second, "--quiet", "--mode", "incremental").status == 0)
        let csv = try write("k,note\ncsv-null,\ncsv-empty,\"\"\n", dir, "W.csv")
        #expect(try await storectl("import", store, csv, "--quiet", "--mode", "incremental").status == 0)
        let csvLeftOut = try write("k\ncsv-left-out\n", dir, "W2.csv")
        #expect(try await storectl("import", store, csvLeftOut, "--entity", "W", "--quiet").status == 0)
        found = try await rows(store)
        #expect(found["cleared"] == "note=null count=7")
        #expect(found["csv-null"] == "note=null count=7")
        #expect(found["csv-empty"] == "note=\"\" count=7")
        #expect(found["csv-left-out"] == "note=\"n/a\" count=7")
    }

    /// An export writes a null attribute that has a default as `null` (one without a default is
    /// left out, as before), so that importing it into an empty store reproduces the null, and
    /// importing it into the store it came from changes nothing; in CSV too.
    @Test(arguments: ["ndjson", "csv"])
    func anExportOfANullWithADefaultImportsBackUnchanged(format: String) async throws {
        let dir = temporaryDirectory("import-defaults-round-trip")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await storeOfSchema(Self.schemaText, in: dir, name: "a")
        let input = try write("""
            {"entity": "W", "k": "null", "note": null}
            {"entity": "W", "k": "default"}
            {"entity": "W", "k": "value", "note": "v", "plain": "p"}

            """, dir, "in.ndjson")
        #expect(try await storectl("import", store, input, "--quiet").status == 0)
        let exported = try await storectl("export", store, "--entity", "W", "--format", format)
        #expect(exported.status == 0, "\(exported.stderr)")
        if format == "ndjson" {
            let line = exported.stdout.split(separator: "\n").first { $0.contains(#""k":"null""#) } ?? ""
            #expect(line.contains(#""note":null"#) && !line.contains("plain"), "\(line)")
        }
        let file = try write(exported.stdout, dir, format == "csv" ? "W.csv" : "W.ndjson")
        let before = try await rows(store)
        #expect(before["null"] == "note=null count=7")

        let empty = try await storeOfSchema(Self.schemaText, in: dir, name: "b")
        #expect(try await storectl("import", empty, file, "--quiet").status == 0)
        #expect(try await rows(empty) == before)
        #expect(try await storectl("export", empty, "--entity", "W", "--format", format).stdout == exported.stdout)

        let again = try await storectl("import", store, file, "--quiet", "--json")
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try JSONValue.parse(Array(again.stdout.trimmingCharacters(in: .whitespacesAndNewlines).utf8))["transactions"]
                == .int(0), "\(again.stdout)")
        #expect(try await rows(store) == before)
    }
}
