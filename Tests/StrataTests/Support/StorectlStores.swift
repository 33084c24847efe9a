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

/// A schema directory at `dir/schema` holding `v1.json` with `text`.
func schemaDirectory(_ text: String, in dir: URL) throws -> URL {
    let schemaDir = dir.appendingPathComponent("schema")
    try FileManager.default.createDirectory(at: schemaDir, withIntermediateDirectories: true)
    try Data(text.utf8).write(to: schemaDir.appendingPathComponent("v1.json"))
    return schemaDir
}

/// An empty store made by `storectl init` at `dir/name` for the v1 schema `text` (written to
/// `dir/schema` by ``schemaDirectory(_:in:)``).
func storeOfSchema(_ text: String, in dir: URL, name: String = "store") async throws -> String {
    let schemaDir = try schemaDirectory(text, in: dir)
    let store = dir.appendingPathComponent(name).path
    let r = try await storectl("init", store, "--schema", schemaDir.path)
    #expect(r.status == 0, "\(r.stderr)")
    return store
}
