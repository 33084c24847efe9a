import Foundation
import LibraryModel
import Strata
import Testing

// Helpers of both test targets (StrataTests and StrataReliabilityTests); Strata's public API only.

/// The repository root (for Schemas/ and the built storectl).
public let repositoryRoot: URL = {
    var url = URL(fileURLWithPath: #filePath)
    while url.path != "/" {
        url.deleteLastPathComponent()
        if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url }
    }
    fatalError("Package.swift not found above \(#filePath)")
}()

public let librarySchemaDirectory = repositoryRoot.appendingPathComponent("Schemas/library")

public func librarySchema() throws -> Schema { try Schema.load(directory: librarySchemaDirectory) }

/// A fresh directory under the system temporary directory, removed by `cleanup`.
public func temporaryDirectory(_ name: String = "strata-test") -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// A store of the library schema in its own temporary directory; closed and removed after `body`.
public func withLibraryStore<R>(_ configuration: StoreConfiguration = StoreConfiguration(),
                                _ body: (Store) async throws -> R) async throws -> R {
    let store = try Store.temporary(schema: try librarySchema(), configuration: configuration)
    defer { store.close() }
    return try await body(store)
}

/// A small seeded generator (SplitMix64) so random tests repeat exactly.
public struct SeededGenerator: RandomNumberGenerator {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

public func makeTrack(title: String, duration: Int, rating: Double? = nil, added: Date = Date(timeIntervalSince1970: 1_700_000_000)) -> Track {
    Track(mbid: UUID(), title: title, durationSeconds: duration, rating: rating, addedAt: added)
}

/// A store of library schema `v1` at `url` holding 10,000 tracks saved in 20 transactions (what
/// the migration kill tests migrate).
public func makeV1TrackStore(at url: URL, schema v1: Schema) async throws {
    let s = try Store.open(at: url, schema: v1)
    defer { s.close() }
    let track = try #require(v1.entity(named: "Track"))
    for batch in 0..<20 {
        _ = try await s.save { c in
            for i in 0..<500 {
                var r = Record(entity: track)
                r["mbid"] = .uuid(UUID())
                r["title"] = .string("t\(batch)-\(i)")
                r["durationSeconds"] = .int(Int64(i))
                r["addedAt"] = .date(Date())
                c.insert(r)
            }
        }
    }
}

/// The live generation's data file of a store directory.
public func dataFile(ofStore store: URL) -> URL {
    let layered = store.appendingPathComponent("current/data.mdb")
    return FileManager.default.fileExists(atPath: layered.path) ? layered : store.appendingPathComponent("data.mdb")
}

/// Two genres, "Jazz" and "Blues", saved in `store`, then exchanging their names in one child
/// context's commit (through a free name in between, so the commit is judged on its result: its
/// entry holds each genre taking the other's name). Returns the two ids and that commit.
public func exchangeGenreNames(_ store: Store) async throws -> (jazz: ObjectID, blues: ObjectID, commit: TransactionID) {
    let a = Genre(name: "Jazz"), b = Genre(name: "Blues")
    _ = try await store.save { $0.insert(a); $0.insert(b) }
    let child = store.mainContext.newChild(label: "exchange")
    try child.set(Genre.name, of: a.id, to: "Swing")
    try child.set(Genre.name, of: b.id, to: "Jazz")
    try child.set(Genre.name, of: a.id, to: "Blues")
    let commit = try #require(try await child.commit())
    return (a.id, b.id, commit)
}
