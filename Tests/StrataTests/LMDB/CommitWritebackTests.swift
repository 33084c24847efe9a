import Foundation
import StrataLMDB
import StrataTestSupport
import Testing
@testable import Strata

/// A commit with writeback (`LMDBEnvironment.write(writebackDuringCommit:)`, what an import's
/// held transaction and a large group use) keeps exactly what it wrote, synced or not, through a
/// map growth and after the environment is opened again; a failing body still writes nothing. A
/// synced commit asks the kernel to write back (its thread's first request comes as it starts,
/// well within a commit of megabytes; three such commits are counted); one that does not sync
/// does not.
@Suite struct CommitWritebackTests {
    private func open(_ dir: URL, noSync: Bool) throws -> LMDBEnvironment {
        try LMDBEnvironment(path: dir.path, options: LMDBOptions(
            mapSizeBytes: 1 << 20, maxMapSizeBytes: 1 << 30, maxReaders: 8, readOnly: false, noSync: noSync, noLock: false))
    }

    private func key(_ i: Int) -> [UInt8] { Array(String(format: "k%08d", i).utf8) }

    @Test(arguments: [false, true])
    func aCommitWithWritebackKeepsWhatItWrote(noSync: Bool) throws {
        let dir = temporaryDirectory("commit-writeback")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let value = [UInt8](repeating: 7, count: 300)
        do {
            let env = try open(dir, noSync: noSync)
            defer { env.close() }
            // About 8 MB of pages: past the 1 MiB map, so the transaction is redone after growing it.
            var attempts = 0
            while true {
                attempts += 1
                do {
                    try env.write(writebackDuringCommit: true) { txn in
                        for i in 0..<20_000 { try txn.put(env[.objects], key: key(i), value: value) }
                    }
                    break
                } catch let e as LMDBError where e.isMapFull {
                    #expect(try env.growMap(), "the map grows")
                }
            }
            #expect(attempts > 1, "the first attempt found the map full")
            // Two more commits of as many pages (the same keys written again).
            for _ in 0..<2 {
                try env.write(writebackDuringCommit: true) { txn in
                    for i in 0..<20_000 { try txn.put(env[.objects], key: key(i), value: value) }
                }
            }
            // A body that throws: nothing of it is committed, with or without writeback.
            struct Refused: Error {}
            #expect(throws: Refused.self) {
                try env.write(writebackDuringCommit: true) { txn in
                    try txn.put(env[.objects], key: key(99_999), value: value)
                    throw Refused()
                }
            }
            if noSync { try env.sync() }
            // Synced commits ask the kernel to write back; commits that do not sync leave it alone.
            let requests = env.commitWritebackRequests.load(ordering: .relaxed)
            #expect(noSync ? requests == 0 : requests > 0, "\(requests) writeback requests")
        }
        let env = try open(dir, noSync: noSync)
        defer { env.close() }
        let (count, last, refused, stored) = try env.read { txn in
            (try txn.entryCount(env[.objects]), try txn.contains(env[.objects], key: key(19_999)),
             try txn.contains(env[.objects], key: key(99_999)),
             try txn.withValue(env[.objects], key: key(12_345)) { Array($0) })
        }
        #expect(count == 20_000 && last && !refused)
        #expect(stored == value)
    }
}
