import Foundation
import Testing
@testable import Strata

/// A unique constraint holds an entry only for an object with a value for every one of its
/// attributes. A filter on the first attribute of a constraint of several, whose others may be
/// null, must not be served from it: the objects with a null in the others have no entry.
@Suite struct UniqueAccessPathTests {
    static let schemaText = #"""
    {"model": "r", "version": 1, "entities": [
      {"name": "P",
       "attributes": [
         {"name": "pk", "type": "int"},
         {"name": "a", "type": "int", "optional": true},
         {"name": "b", "type": "int", "optional": true},
         {"name": "c", "type": "int", "optional": true},
         {"name": "d", "type": "int"}],
       "relationships": [{"name": "group", "destination": "G", "inverse": "items", "optional": true}],
       "uniques": [["pk"], ["a", "b"], ["c", "d"]]},
      {"name": "G",
       "attributes": [{"name": "name", "type": "string"}],
       "relationships": [{"name": "items", "destination": "P", "inverse": "group", "toMany": true}],
       "uniques": [["name"]]}]}
    """#

    /// Filters on `a` (first of `[a, b]`, `b` optional) find the objects whose `b` is null, as a
    /// scan does (they were lost: one of three found); also through a relationship. A filter on
    /// `c` (first of `[c, d]`, `d` required) may still use that constraint, and agrees too.
    @Test func aFilterOnTheFirstAttributeOfAUniqueFindsObjectsWithANullInTheOthers() async throws {
        let dir = temporaryDirectory("unique-access-path")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await storeOfSchema(Self.schemaText, in: dir)
        var lines = [#"{"entity": "G", "name": "g"}"#]
        for pk in 0..<30 {
            let b = pk % 3 == 0 ? "null" : "\(pk)"
            lines.append(#"{"entity": "P", "pk": \#(pk), "a": \#(pk % 2 == 0 ? 5 : 6), "b": \#(b), "c": \#(pk % 4), "d": \#(pk), "group": {"name": "g"}}"#)
        }
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(lines.joined(separator: "\n").utf8).write(to: input)
        let i = try await storectl("import", store, input.path, "--quiet")
        #expect(i.status == 0, "\(i.stderr)")

        func count(_ entity: String, _ filter: String) async throws -> String {
            let r = try await storectl("query", store, "--entity", entity, "--where", filter, "--count")
            #expect(r.status == 0, "\(filter): \(r.stderr)")
            return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func listed(_ filter: String) async throws -> Int {
            let r = try await storectl("query", store, "--entity", "P", "--where", filter, "--json")
            #expect(r.status == 0, "\(filter): \(r.stderr)")
            return r.stdout.split(separator: "\n").count
        }
        // Each filter, and the same condition written so that no access path serves it.
        let pairs = [
            ("a == 5", "not (a != 5)"), ("a >= 5", "not (a < 5)"), ("a in [5]", "not (a != 5)"),
            ("a between 5 and 5", "not (a != 5)"), ("a > 5", "not (a <= 5)"),
            ("c == 1", "not (c != 1)"), ("c <= 2", "not (c > 2)"),
        ]
        for (filter, scanned) in pairs {
            let expected = try await count("P", scanned)
            #expect(try await count("P", filter) == expected, "\(filter)")
            #expect(try await listed(filter) == Int(expected), "\(filter)")
        }
        #expect(try await count("P", "a == 5") == "15")
        #expect(try await count("G", "items.a == 5") == "1")
        #expect(try await count("G", "items.a == 6") == "1")
    }
}
