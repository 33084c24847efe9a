import Foundation
import Testing
@testable import Strata

/// A store directory whose `current` link (naming the live generation) is broken: dangling,
/// missing beside a generation that holds data, or not a link. Every opener refuses the store
/// and nothing is removed or created over it.
@Suite struct StoreDirectoryTests {
    /// `current` pointing at a generation that does not exist: every opener refuses the store
    /// (exit 66, naming `current`) and removes nothing; with the link restored, the data is there.
    /// (A read-write open must not remove the generations `current` does not name: they hold the
    /// data.)
    @Test func aDanglingCurrentLinkIsRefusedAndNothingIsRemoved() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let live = generations(store)
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: "gen-00000000000000ff")
        let input = dir.appendingPathComponent("genres.ndjson").path
        let initAgain = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(initAgain.status == 73, "\(initAgain.status) \(initAgain.stderr)")
        #expect(initAgain.stderr.contains("a store already exists here"), "\(initAgain.stderr)")
        for args in [["import", store, input, "--quiet"], ["compact", store], ["info", store]] {
            let r = try await storectl(args)
            #expect(r.status == 66, "\(args[0]): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("`current` points at gen-00000000000000ff"), "\(r.stderr)")
            #expect(generations(store) == live, "\(args[0]) removed a generation")
        }
        #expect(throws: StrataError.self) { try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema()) }
        #expect(generations(store) == live)
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try await genreCount(store) == "5")
    }

    /// No `current` while a generation holds data (the link was removed): refused, never a new
    /// empty store created over it (`init` neither adopts nor re-creates it).
    @Test func aMissingCurrentBesideDataIsRefused() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        let r = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(r.status == 66, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("`current` is missing but \(target) holds a store's data"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: current))
        #expect(throws: StrataError.self) { try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema()) }
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try await genreCount(store) == "5")
    }

    /// `current` that is a regular file, not a link: refused, not taken for a missing one.
    @Test func aCurrentThatIsNotALinkIsRefused() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        #expect(FileManager.default.createFile(atPath: current, contents: Data("x".utf8)))
        let r = try await storectl("info", store)
        #expect(r.status == 66, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("`current` is not a symbolic link"), "\(r.stderr)")
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try await genreCount(store) == "5")
    }
}
