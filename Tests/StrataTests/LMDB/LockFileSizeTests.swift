import Foundation
import StrataLMDB
import Testing
@testable import Strata

/// The lock file's reader table is as large as the first opener made it while any process has the
/// environment open: liblmdb in a later opener takes its number of reader slots from the file's
/// size, and the processes that mapped it at the old size would read and write past their map.
/// A later opener asking for more readers therefore leaves the file's size alone (it grew it to
/// its own count before LMDB opened it).
@Suite struct LockFileSizeTests {
    @Test func aLaterOpenerWithMoreReadersLeavesTheLockFileItsSize() throws {
        let dir = temporaryDirectory("lock-file-size")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func options(_ readers: UInt32) -> LMDBOptions {
            LMDBOptions(mapSizeBytes: 1 << 20, maxMapSizeBytes: 1 << 30, maxReaders: readers, readOnly: false,
                        noSync: true, noLock: false)
        }
        let env = try LMDBEnvironment(path: dir.path, options: options(126))
        defer { env.close() }
        let lockFile = dir.appendingPathComponent("lock.mdb").path
        func size() throws -> Int { try #require(try FileManager.default.attributesOfItem(atPath: lockFile)[.size] as? Int) }
        let before = try size()
        #expect(before >= LMDBEnvironment.lockFileBytes(maxReaders: 126))
        // What another process opening it with 512 readers does before LMDB opens it.
        try LMDBEnvironment.prepareFiles(path: dir.path, options: options(512))
        #expect(try size() == before)
    }

    @Test func aNewLockFileGetsTheOpenersReaderTable() throws {
        let dir = temporaryDirectory("lock-file-new")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let options = LMDBOptions(mapSizeBytes: 1 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 300, readOnly: false,
                                  noSync: true, noLock: false)
        try LMDBEnvironment.prepareFiles(path: dir.path, options: options)
        let size = try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent("lock.mdb").path)[.size] as? Int
        #expect(size == LMDBEnvironment.lockFileBytes(maxReaders: 300))
    }
}
