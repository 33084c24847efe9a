import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A store used after fork(): the child program opens a store and forks; the forked child's
/// operations are refused with `usedAfterFork`, it can open the store again, and the parent goes
/// on.
@Suite(.serialized) struct StoreAfterForkTests {
    /// A child program opens a store, forks; the forked child's reads, fetches, snapshots, verify
    /// and listing of open snapshots are refused with usedAfterFork (the listing read a snapshot
    /// the child had released through the parent's registry slot, freed memory there); closing a
    /// view context whose snapshot another thread of the parent was reading at the fork returns;
    /// the parent goes on normally.
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first"), .timeLimit(.minutes(10)))
    func storeUsedAfterForkIsRefusedClearly() async throws {
        let dir = temporaryDirectory("fork")
        defer { try? FileManager.default.removeItem(at: dir) }
        // Freed memory filled by glibc, so that reading a freed snapshot does not pass by luck.
        let r = try await runCrashChild("fork", ["--store", dir.appendingPathComponent("store").path],
                                        environment: ["MALLOC_PERTURB_": "165"])
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        for step in ["read", "fetch", "snapshot", "verify", "open snapshots"] {
            let line = try #require(lines.first { $0.hasPrefix("child \(step):") }, "no answer for \(step): \(lines)")
            #expect(line.contains("store was opened by the parent process before fork()"), "\(line)")
        }
        #expect(lines.contains("child close: returned"), "close() in the forked child did not return: \(lines)")
        // A parent's thread was inside a read of that context's snapshot at the fork, holding
        // its lock for good as far as the child is concerned.
        #expect(lines.contains("child close read at the fork: ok returned"),
                "closing a context whose snapshot was being read at the fork did not return: \(lines)")
        #expect(!lines.contains { $0.hasPrefix("parent apply:") || $0.hasPrefix("parent probe:") },
                "the parent's read at the fork failed: \(lines)")
        // Else the context's snapshot was not being read at the fork, and its close proves nothing.
        #expect(lines.contains("parent read at the fork waits for the merge closure: true"), "\(lines)")
        #expect(!r.stderr.contains("held at the fork"), "the forked child read the snapshot it released: \(r.stderr)")
        #expect(lines.contains("parent child-status 0"), "the forked child did not exit cleanly: \(lines)")
        #expect(lines.contains { $0.hasPrefix("parent read: ok") } && lines.contains { $0.hasPrefix("parent save: ok") }, "\(lines)")
    }

    /// The error tells the forked child to "open it again in the child"; opening it again must
    /// then give a usable store, not the parent's instance.
    @Test(.enabled(if: crashChildBuilt, "build Tools/reliability first"), .timeLimit(.minutes(10)))
    func forkedChildCanOpenTheStoreAgain() async throws {
        let dir = temporaryDirectory("fork-reopen")
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await runCrashChild("fork", ["--store", dir.appendingPathComponent("store").path])
        let line = try #require(r.stdout.split(separator: "\n").first { $0.hasPrefix("child reopen:") })
        #expect(line.hasPrefix("child reopen: ok same instance: false"), "\(line)")
        // A store the parent opened and the child let go of: the parent's entry does not make the
        // child's open wait for a close that never comes.
        let released = try #require(r.stdout.split(separator: "\n").first { $0.hasPrefix("child reopen released:") })
        #expect(released == "child reopen released: ok head 0", "\(released)")
    }
}
