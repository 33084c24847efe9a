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
}
