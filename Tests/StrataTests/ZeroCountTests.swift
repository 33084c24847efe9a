import Foundation
import LibraryModel
import Testing
@testable import Strata

/// An entity emptied before a compaction's horizon keeps a count of zero (in `counts`), which a
/// rebuild from the log after the horizon does not write: `verify(rebuild:)` reported it as an
/// extra entry (found in the session-6 review of the migration change). A zero count and no
/// count are now the same to verify; a migration copies the counts and verifies the same way.
@Suite struct ZeroCountTests {
    @Test func anEntityEmptiedBeforeTheHorizonVerifiesAfterCompactionAndMigration() async throws {
        let dir = temporaryDirectory("zero-count")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let artist = all[0].entity(named: "Artist")!
        do {
            let store = try Store.open(at: dir, schema: all[0])
            for name in ["Gone", "Also gone"] {
                var a = Record(entity: artist)
                a["mbid"] = .uuid(UUID())
                a["name"] = .string(name)
                _ = try await store.save { $0.insert(a) }
                _ = try await store.save { $0.delete(a.id) }
            }
            _ = try await store.compact(horizon: TransactionID(2))
            let partly = try store.verify(rebuild: true)
            #expect(partly.ok, "\(partly.problems)")
            _ = try await store.compact()
            let squashed = try store.verify(rebuild: true)
            #expect(squashed.ok, "\(squashed.problems)")
            #expect(try store.verify().ok)
            store.close()
        }
        _ = try await Store.migrate(at: dir, schemas: all, registry: libraryMigrations)
        let store = try Store.open(at: dir, schema: all[1])
        defer { store.close() }
        let migrated = try store.verify(rebuild: true)
        #expect(migrated.ok, "\(migrated.problems)")
        #expect(try store.mainContext.count(Query(entity: "Artist")) == 0)
    }
}
