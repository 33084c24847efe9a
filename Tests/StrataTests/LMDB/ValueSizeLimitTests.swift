import CLMDB
import Foundation
import StrataLMDB
import Testing
@testable import Strata

/// A value longer than LMDB holds (``LMDBLimits/maxDataBytes``, 4 GiB − 1) is refused by every
/// put of the LMDB layer with `MDB_BAD_VALSIZE` naming its size, the limit and the database, and
/// nothing is stored. (The buffers claim a length past the limit over one byte of memory: the
/// size is checked before liblmdb is handed them, so no byte past the first is read.)
@Suite struct ValueSizeLimitTests {
    private func withEnvironment(_ name: String, _ body: (LMDBEnvironment) throws -> Void) throws {
        let dir = temporaryDirectory(name)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let env = try LMDBEnvironment(path: dir.path, options: LMDBOptions(
            mapSizeBytes: 1 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: true, noLock: false))
        defer { env.close() }
        try body(env)
    }

    /// Whether `error` is the refusal of an oversized value in database `db`.
    private func refusesOversizedValue(_ error: any Error, in db: String) -> Bool {
        guard let e = error as? LMDBError, e.isBadValueSize else { return false }
        let text = "\(e)"
        return text.contains("\(db)") && text.contains("\(LMDBLimits.maxDataBytes + 1)-byte value")
            && text.contains("LMDB holds at most \(LMDBLimits.maxDataBytes) bytes")
    }

    @Test func everyPutRefusesAValueLongerThanLMDBHoldsAndStoresNothing() throws {
        let oneByte = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)
        defer { oneByte.deallocate() }
        oneByte.storeBytes(of: 7, as: UInt8.self)
        let oversized = UnsafeRawBufferPointer(start: oneByte, count: LMDBLimits.maxDataBytes + 1)
        let key: [UInt8] = Array("k".utf8)
        try withEnvironment("value-size-limit") { env in
            let db = env[.meta]
            #expect {
                try env.write { txn in
                    try key.withUnsafeBytes { _ = try txn.put(db, key: $0, value: oversized) }
                }
            } throws: { refusesOversizedValue($0, in: db.name) }
            // The put of byte arrays goes through the same check (an array that long is not
            // made here: the check is the buffer put's, which the arrays' put calls).
            #expect {
                try env.write { txn in
                    try txn.withSortedWriter(db) { w in try key.withUnsafeBytes { try w.put(key: $0, value: oversized) } }
                }
            } throws: { refusesOversizedValue($0, in: db.name) }
            #expect {
                try env.write { txn in
                    try txn.withAppender(db) { a in try key.withUnsafeBytes { try a.append(key: $0, value: oversized) } }
                }
            } throws: { refusesOversizedValue($0, in: db.name) }
            let stored = try env.read { try $0.withValue(db, key: key) { $0.count } }
            #expect(stored == nil, "a refused put stored \(stored ?? 0) bytes")
            // A value within the limit still goes in through the same put.
            try env.write { txn in
                try key.withUnsafeBytes { k in
                    try [UInt8](repeating: 1, count: 100).withUnsafeBytes { _ = try txn.put(db, key: k, value: $0) }
                }
            }
            #expect(try env.read { try $0.withValue(db, key: key) { $0.count } } == 100)
        }
    }
}
