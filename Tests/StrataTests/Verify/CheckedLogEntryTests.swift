import Foundation
import LibraryModel
import StrataTestSupport
import Testing
@testable import Strata

/// A log entry whose checksum is right but whose changes do not fit the schema (an insert or a
/// delete with the wrong number of values, an update naming an attribute the entity does not
/// have) is refused as corrupt wherever the log is applied: verify's in-memory fold and its
/// on-disk rebuild, and an as-of context's undo. Applying it trapped (an index out of range, a
/// record's value-count precondition).
@Suite struct CheckedLogEntryTests {
    /// A store whose transactions 2–4 insert, rename and delete one genre (1 inserts another),
    /// with `damage` applied to the changes of entry `tx` and the result sealed back in place.
    private func damagedStore(_ tx: UInt64, _ damage: (LoggedChange) -> LoggedChange,
                              _ body: (Store) throws -> Void) async throws {
        try await withLibraryStore { store in
            let g = Genre(name: "first")
            _ = try await store.save { $0.insert(Genre(name: "kept")) }
            let inserted = try await store.save { $0.insert(g) }
            _ = try await store.save { $0.set(Genre.name, of: g.id, to: "second") }
            _ = try await store.save { $0.delete(g.id) }
            #expect(inserted == TransactionID(2))
            let env = store.env, id = TransactionID(tx)
            try env.write { txn in
                let entry = try #require(try txn.withValue(env[.log], key: id.keyBytes) {
                    try LogEntryCodec.decode($0, transactionID: id)
                })
                let changed = LogEntry(transactionID: entry.transactionID, schemaVersion: entry.schemaVersion,
                                       timestampMs: entry.timestampMs, author: entry.author, metadata: entry.metadata,
                                       changes: entry.changes.map(damage))
                try txn.put(env[.log], key: id.keyBytes, value: LogEntryCodec.encode(changed, compressIf: { false }))
            }
            try body(store)
        }
    }

    /// Every way of applying the log meets the damage as an error, never a trap.
    /// `asOf`: a transaction before the damaged one whose undo reads its values (an update's,
    /// a delete's), or nil.
    /// `verifyMeetsIt`: false for a delete's values, which only its undo reads (verify may pass).
    private func expectRefusedEverywhere(_ store: Store, asOf: TransactionID?, verifyMeetsIt: Bool = true) {
        for rebuild in [false, true] {
            do {
                let report = try store.verify(rebuild: rebuild)
                #expect(!report.ok || !verifyMeetsIt, "verify(rebuild: \(rebuild)) passed a damaged entry")
            } catch let e as StrataError {
                #expect("\(e)".contains("corrupt"), "verify(rebuild: \(rebuild)): \(e)")
            } catch {
                Issue.record("verify(rebuild: \(rebuild)): \(error)")
            }
        }
        guard let asOf else { return }
        #expect(throws: StrataError.self, "an as-of context undid a damaged entry") {
            let past = try store.snapshot(asOf: asOf)
            defer { past.close() }
            _ = try past.count(Query(entity: "Genre"))
        }
    }

    /// A change whose checksum is right but that does not apply to the state before it (an id
    /// inserted again while it is live) is a problem verify reports, naming the transaction, by
    /// either method; it escaped `verify()` as a thrown validation error, with no report.
    @Test func aChangeThatDoesNotApplyIsReportedByVerifyNotThrown() async throws {
        try await withLibraryStore { store in
            let kept = Genre(name: "kept")
            _ = try await store.save { $0.insert(kept) }
            _ = try await store.save { $0.insert(Genre(name: "second")) }
            let env = store.env, id = TransactionID(2)
            try env.write { txn in
                let entry = try #require(try txn.withValue(env[.log], key: id.keyBytes) {
                    try LogEntryCodec.decode($0, transactionID: id)
                })
                let changed = LogEntry(transactionID: entry.transactionID, schemaVersion: entry.schemaVersion,
                                       timestampMs: entry.timestampMs, author: entry.author, metadata: entry.metadata,
                                       changes: entry.changes.map { c in
                                           guard case .insert(_, let values) = c else { return c }
                                           return .insert(id: kept.id, values: values)
                                       })
                try txn.put(env[.log], key: id.keyBytes, value: LogEntryCodec.encode(changed, compressIf: { false }))
            }
            for rebuild in [false, true] {
                let report = try store.verify(rebuild: rebuild)
                #expect(!report.ok, "verify(rebuild: \(rebuild))")
                #expect(report.problems.contains { $0.hasPrefix("log: transaction 2 does not apply") },
                        "verify(rebuild: \(rebuild)): \(report.problems)")
            }
        }
    }

    @Test func anInsertWithTooFewValuesIsCorruptNotATrap() async throws {
        try await damagedStore(2, { c in
            guard case .insert(let id, let values) = c else { return c }
            return .insert(id: id, values: Array(values.dropLast()))
        }) { store in
            expectRefusedEverywhere(store, asOf: nil)
        }
    }

    @Test func anUpdateOfAnAttributePastTheEntityIsCorruptNotATrap() async throws {
        try await damagedStore(3, { c in
            guard case .update(let id, let changes, let previous) = c else { return c }
            return .update(id: id, changes: changes.map { AttributeChange(attribute: 50, old: $0.old, new: $0.new) },
                           previousVersion: previous)
        }) { store in
            expectRefusedEverywhere(store, asOf: TransactionID(2))
        }
    }

    @Test func aDeleteWithTooFewValuesIsCorruptNotATrap() async throws {
        try await damagedStore(4, { c in
            guard case .delete(let id, let values, let previous) = c else { return c }
            return .delete(id: id, values: Array(values.dropLast()), previousVersion: previous)
        }) { store in
            expectRefusedEverywhere(store, asOf: TransactionID(3), verifyMeetsIt: false)
        }
    }

    /// A previous version past the largest transaction id decodes as corrupt (JSON output turned
    /// it into a signed integer, which trapped).
    @Test func aPreviousVersionPastTheLargestIdIsCorrupt() throws {
        let id = ObjectID.make(entityTag: try #require(try librarySchema().entity(named: "Genre")).tag)
        for change in [LoggedChange.update(id: id, changes: [], previousVersion: TransactionID(UInt64.max)),
                       .delete(id: id, values: [], previousVersion: TransactionID(UInt64(Int64.max)))] {
            let entry = LogEntry(transactionID: TransactionID(5), schemaVersion: 2, timestampMs: 0, author: "a",
                                 metadata: [:], changes: [change])
            let bytes = LogEntryCodec.encode(entry, compressIf: { false })
            #expect(throws: StrataError.self) {
                try bytes.withUnsafeBytes { try LogEntryCodec.decode($0, transactionID: TransactionID(5)) }
            }
        }
    }

    /// A log key or a compaction horizon past the largest transaction id (the next id, and its
    /// JSON form, overflowed): the head is refused as corrupt, and so is a save.
    @Test func aHeadPastTheLargestIdIsCorruptAndTakesNoSave() async throws {
        for place in ["log key", "horizon"] {
            try await withLibraryStore { store in
                let env = store.env
                try env.write { txn in
                    let huge = TransactionID(UInt64.max).keyBytes
                    if place == "log key" {
                        try txn.put(env[.log], key: huge, value: [0])
                    } else {
                        try txn.put(env[.meta], key: MetaKey.horizon, value: huge)
                    }
                }
                #expect(throws: StrataError.self, "\(place)") { _ = try store.lastTransactionID }
                await #expect(throws: StrataError.self, "\(place)") {
                    _ = try await store.save { $0.insert(Genre(name: "after")) }
                }
            }
        }
    }

    /// An object count past what a store can hold (counts carry no checksum): refused as
    /// corrupt by a count and by a save that would change it, where the save's addition
    /// overflowed.
    @Test func aCountPastWhatAStoreCanHoldIsCorrupt() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(Genre(name: "one")) }
            let genre = try #require(store.schema.entity(named: "Genre"))
            let env = store.env
            try env.write { txn in
                try txn.put(env[.counts], key: MetaKey.count(genre.tag), value: TransactionID(UInt64(Int64.max)).keyBytes)
            }
            #expect(throws: StrataError.self) { _ = try store.mainContext.count(Genre.self) }
            await #expect(throws: StrataError.self) { _ = try await store.save { $0.insert(Genre(name: "two")) } }
        }
    }

    /// A live generation numbered with all ones (a store made elsewhere, or tampered with): a
    /// compaction, which numbers its new generation after it, is refused instead of overflowing.
    @Test func aGenerationNumberedWithAllOnesLeavesNoRoomAndIsRefused() async throws {
        let dir = temporaryDirectory("gen-max")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            _ = try await store.save { $0.insert(Genre(name: "g")) }
            store.close()
        }
        let fm = FileManager.default
        let current = dir.appendingPathComponent("current").path
        let live = try fm.destinationOfSymbolicLink(atPath: current)
        let last = StoreDirectory.generationName(UInt64.max)
        try fm.moveItem(atPath: dir.appendingPathComponent(live).path, toPath: dir.appendingPathComponent(last).path)
        try fm.removeItem(atPath: current)
        try fm.createSymbolicLink(atPath: current, withDestinationPath: last)
        let store = try Store.open(at: dir, schema: try librarySchema())
        defer { store.close() }
        #expect(try store.mainContext.count(Genre.self) == 1)
        await #expect(throws: StrataError.self) { _ = try await store.compact() }
        #expect(try store.mainContext.count(Genre.self) == 1)
    }
}
