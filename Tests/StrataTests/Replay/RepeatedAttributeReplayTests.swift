import Foundation
import LibraryModel
import StrataLMDB
import StrataTestSupport
import Testing
@testable import Strata

/// An update that names one attribute more than once (`ChangeSet.update` takes any list) logs one
/// change for it, its first old value and its last new one; a log written before that holds one
/// change per mention, and reading the store as of before it undoes them in reverse. Undone in
/// the order they were applied, `a→b, b→c` came back as `b`: a value the store never held before
/// it, shown by `replay --to`, `diff` and as-of snapshots, and a unique clash for the objects
/// undone after it.
@Suite struct RepeatedAttributeReplayTests {
    private func title(_ store: Store) throws -> Int {
        try #require(store.schema.entity(named: "Genre")?.attributeIndex["name"])
    }

    @Test func anUpdateNamingAnAttributeTwiceLogsOneChangeAndReadsBackAsOfBeforeIt() async throws {
        try await withLibraryStore { store in
            let g = Genre(name: "a")
            _ = try await store.save { $0.insert(g) }
            let name = try title(store)
            var twice = ChangeSet()
            twice.update(g.id, [.init(attribute: name, value: .string("b")), .init(attribute: name, value: .string("c"))])
            let tx = try await store.save(twice)
            let entry = try #require(try store.transactions(from: tx).first)
            guard case .update(_, let changes, _) = try #require(entry.changes.first) else {
                Issue.record("not an update: \(entry.changes)")
                return
            }
            #expect(changes == [AttributeChange(attribute: name, old: .string("a"), new: .string("c"))])
            let before = try store.snapshot(asOf: TransactionID(tx.rawValue - 1))
            defer { before.close() }
            #expect(try before.object(Genre.self, id: g.id)?.name == "a")
            // Set and set back in one update: nothing to save.
            var back = ChangeSet()
            back.update(g.id, [.init(attribute: name, value: .string("x")), .init(attribute: name, value: .string("c"))])
            #expect(try await store.save(back) == tx)
        }
    }

    /// A log entry as a Strata before the merge wrote it (two changes of one attribute), written
    /// here through the state's own applier: the state before it reads as it was.
    @Test func anOlderEntryChangingAnAttributeTwiceIsUndoneInReverse() async throws {
        try await withLibraryStore { store in
            let g = Genre(name: "a")
            let first = try await store.save { $0.insert(g) }
            let name = try title(store)
            let env = store.env, schema = store.schema
            let tx = first.next
            let changes: [LoggedChange] = [.update(id: g.id, changes: [
                AttributeChange(attribute: name, old: .string("a"), new: .string("b")),
                AttributeChange(attribute: name, old: .string("b"), new: .string("c")),
            ], previousVersion: first)]
            try env.write { txn in
                var applier = StateApplier(txn: txn, env: env, schema: schema, transactionID: tx)
                try applier.applyLogged(changes)
                let entry = LogEntry(transactionID: tx, schemaVersion: schema.version, timestampMs: 0, author: "older",
                                     metadata: [:], changes: changes)
                let bytes = LogEntryCodec.encode(entry, compressIf: { false })
                _ = try tx.keyBytes.withUnsafeBytes { key in
                    try bytes.withUnsafeBytes { try txn.put(env[.log], key: key, value: $0, mode: .append) }
                }
            }
            #expect(try store.mainContext.object(Genre.self, id: g.id)?.name == "c")
            let before = try store.snapshot(asOf: first)
            defer { before.close() }
            #expect(try before.object(Genre.self, id: g.id)?.name == "a")
        }
    }
}
