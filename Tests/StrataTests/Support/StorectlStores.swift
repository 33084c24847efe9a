import Foundation
import LibraryModel
import Testing
@testable import Strata

// Stores made with storectl for the tests that run it as a user does.

/// A store made by `storectl init` holding five genres, `g0` to `g4` (imported from
/// `genres.ndjson` in its directory).
func storeWithGenres() async throws -> (dir: URL, store: String) {
    let dir = temporaryDirectory("store-with-genres")
    let store = dir.appendingPathComponent("store").path
    #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
    let input = dir.appendingPathComponent("genres.ndjson")
    try Data((0..<5).map { "{\"entity\":\"Genre\",\"name\":\"g\($0)\"}\n" }.joined().utf8).write(to: input)
    let r = try await storectl("import", store, input.path, "--quiet")
    #expect(r.status == 0, "\(r.stderr)")
    return (dir, store)
}

/// `storectl query --count` of the store's genres.
func genreCount(_ store: String) async throws -> String {
    try await storectl("query", store, "--entity", "Genre", "--count").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// The generation directories (`gen-…`) of a store directory, sorted.
func generations(_ store: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: store)) ?? []).filter { $0.hasPrefix("gen-") }.sorted()
}

/// A store made by `storectl init` at `dir/s` holding two genres, `a` and `b`.
func libraryStoreWithTwoGenres(in dir: URL) async throws -> String {
    let store = dir.appendingPathComponent("s").path
    #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
    let input = dir.appendingPathComponent("g.ndjson")
    try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\n{\"entity\":\"Genre\",\"name\":\"b\"}\n".utf8).write(to: input)
    #expect(try await storectl("import", store, input.path, "--quiet").status == 0)
    return store
}
