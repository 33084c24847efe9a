import Foundation
import StrataLMDB
import Testing
@testable import Strata

/// An environment after its close: every use is refused with an error, none reaches its freed
/// handle.
@Suite struct ClosedEnvironmentTests {
    /// A closed environment refuses writes, growths and syncs (its handle is freed: they used it).
    @Test func aClosedEnvironmentRefusesWritesGrowthsAndSyncs() throws {
        let dir = temporaryDirectory("closed-env")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let env = try LMDBEnvironment(path: dir.path, options: LMDBOptions(
            mapSizeBytes: 1 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: true, noLock: false))
        env.close()
        // The policy's `closed` error, not an error liblmdb returned from a freed handle.
        func closed(_ error: any Error) -> Bool {
            if case StrataError.closed = error { return true }
            return false
        }
        #expect { try env.write { _ in } } throws: { closed($0) }
        #expect { _ = try env.growMap() } throws: { closed($0) }
        #expect { try env.sync() } throws: { closed($0) }
    }
    /// A release of mapped pages after the close is refused: the ranges cached by a release before
    /// it were those of the map the close removed, and `madvise(MADV_DONTNEED)` on them would zero
    /// whatever memory took that address since.
    @Test func aClosedEnvironmentReleasesNoMappedPages() throws {
        let dir = temporaryDirectory("closed-env-pages")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let env = try LMDBEnvironment(path: dir.path, options: LMDBOptions(
            mapSizeBytes: 1 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: true, noLock: false))
        try env.write { try $0.put(env[.meta], key: Array("k".utf8), value: Array(repeating: 7, count: 10_000)) }
        _ = try env.read { try $0.withValue(env[.meta], key: Array("k".utf8)) { $0.count } }
        try env.releaseMappedPages()
        env.close()
        #expect { try env.releaseMappedPages() } throws: { error in
            if case StrataError.closed = error { return true }
            return false
        }
    }
}
