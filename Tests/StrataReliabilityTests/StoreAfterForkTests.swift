import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Misuse: the same store opened twice in one process, and a store used after fork().
/// StoreOpenTests.openingTwiceInOneProcessReturnsTheSameStore covers the sequential case and the
/// read-only/read-write clash; this adds concurrent opens and a different schema.
@Suite(.serialized) struct ReliabilityMisuseTests {
    @Test func concurrentOpensOfOneStoreGetTheSameInstance() async throws {
        let dir = temporaryDirectory("open-twice")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let stores = try await withThrowingTaskGroup(of: Store.self) { group in
            for i in 0..<16 {
                // Different spellings of the same directory.
                let url = i % 2 == 0 ? dir : URL(fileURLWithPath: dir.path + "/./")
                group.addTask { try Store.open(at: url, schema: schema) }
            }
            return try await group.reduce(into: [Store]()) { $0.append($1) }
        }
        #expect(Set(stores.map { ObjectIdentifier($0) }).count == 1)
        _ = try await stores[0].save { $0.insert(Genre(name: "x")) }
        #expect(try stores[15].mainContext.count(Genre.self) == 1)
        stores[0].close()
        #expect(stores.allSatisfy { $0.isClosed })
    }

    @Test func openingWithAnotherSchemaWhileOpenIsAClearError() throws {
        let dir = temporaryDirectory("open-other-schema")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schema = try librarySchema()
        let store = try Store.open(at: dir, schema: schema)
        defer { store.close() }
        let other = try Schema.parse(Array(#"{"model":"other","version":1,"entities":[{"name":"A","attributes":[{"name":"x","type":"int"}]}]}"#.utf8), source: "other.json")
        do {
            _ = try Store.open(at: dir, schema: other)
            Issue.record("opened with a second schema")
        } catch StrataError.alreadyOpen(_, let reason) {
            #expect(reason.contains("different schema"), "\(reason)")
        }
    }

    /// A child program opens a store, forks; the forked child's reads, fetches, snapshots and
    /// verify are refused with usedAfterFork; the parent goes on normally.
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first"))
    func storeUsedAfterForkIsRefusedClearly() throws {
        let dir = temporaryDirectory("fork")
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try runCrashChild("fork", ["--store", dir.appendingPathComponent("store").path])
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        for step in ["read", "fetch", "snapshot", "verify"] {
            let line = try #require(lines.first { $0.hasPrefix("child \(step):") }, "no answer for \(step): \(lines)")
            #expect(line.contains("store was opened by the parent process before fork()"), "\(line)")
        }
        #expect(lines.contains("child close: returned"), "close() in the forked child did not return: \(lines)")
        #expect(lines.contains("parent child-status 0"), "the forked child did not exit cleanly: \(lines)")
        #expect(lines.contains { $0.hasPrefix("parent read: ok") } && lines.contains { $0.hasPrefix("parent save: ok") }, "\(lines)")
    }

    /// The error tells the forked child to "open it again in the child"; opening it again must
    /// then give a usable store, not the parent's instance.
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first"))
    func forkedChildCanOpenTheStoreAgain() throws {
        let dir = temporaryDirectory("fork-reopen")
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try runCrashChild("fork", ["--store", dir.appendingPathComponent("store").path])
        let line = try #require(r.stdout.split(separator: "\n").first { $0.hasPrefix("child reopen:") })
        #expect(line.hasPrefix("child reopen: ok same instance: false"), "\(line)")
    }
}
