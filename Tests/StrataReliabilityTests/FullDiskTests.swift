import Foundation
import LibraryModel
@testable import Strata
import StrataLMDB
import StrataTestSupport
import Testing

/// storectl on a file system that is full: import (both modes), compact, verify --rebuild and migrate exit 74
/// saying "No space left on device" (never a signal), the store still opens and verifies, and a
/// failed build leaves nothing behind. A replica made from a snapshot there fails the same way.
///
/// The file system is a 3 MiB tmpfs mounted by the test (the tests run as root); where tmpfs
/// cannot be mounted, a loop-mounted ext4 image of the same size. If neither can be mounted the
/// test fails (it is not skipped). `TMPDIR` of the commands is inside it, so no command can
/// fall back to a roomier temporary directory. The longer run, with space running out in the
/// middle of builds, is Tools/reliability/full-disk.
@Suite(.serialized) struct FullDiskTests {
    struct Mounted {
        let point: URL
        let image: URL?
    }

    func mountSmallFileSystem(_ dir: URL) async throws -> Mounted {
        let point = dir.appendingPathComponent("mnt")
        try FileManager.default.createDirectory(at: point, withIntermediateDirectories: true)
        if try await run("/bin/mount", ["-t", "tmpfs", "-o", "size=3m", "tmpfs", point.path]).status == 0 { return Mounted(point: point, image: nil) }
        let image = dir.appendingPathComponent("fs.img")
        #expect(try await run("/usr/bin/truncate", ["-s", "3m", image.path]).status == 0)
        #expect(try await run("/sbin/mkfs.ext4", ["-q", image.path]).status == 0)
        let r = try await run("/bin/mount", ["-o", "loop", image.path, point.path])
        try #require(r.status == 0, "neither a tmpfs nor a loop-mounted ext4 image could be mounted (needs root): \(r.stderr)")
        return Mounted(point: point, image: image)
    }

    func tracks(_ range: Range<Int>, padding: Int) -> String {
        let pad = String(repeating: "p", count: padding)
        return range.map { i in
            let mbid = String(format: "%08x-0000-4000-8000-%012x", i, i)
            return "{\"entity\":\"Track\",\"mbid\":\"\(mbid)\",\"title\":\"track \(i) \(pad)\",\"durationSeconds\":\(i % 600 + 1),\"discNumber\":1,\"explicit\":false,\"addedAt\":\"2022-08-01T08:45:23Z\"}\n"
        }.joined()
    }

    /// What is in the store directory besides `current`, `strata.lock` and the live generation,
    /// and anything in `tmp`.
    func leftovers(_ store: URL, tmp: URL) throws -> [String] {
        let fm = FileManager.default
        let live = try fm.destinationOfSymbolicLink(atPath: store.appendingPathComponent("current").path)
        let inStore = try fm.contentsOfDirectory(atPath: store.path).filter { ![live, "current", "strata.lock"].contains($0) }
        return inStore + (try fm.contentsOfDirectory(atPath: tmp.path))
    }

    @Test func maintenanceOnAFullFileSystemExits74AndLeavesTheStoreAsItWas() async throws {
        let dir = temporaryDirectory("full-disk")
        defer { try? FileManager.default.removeItem(at: dir) }
        let mounted = try await mountSmallFileSystem(dir)
        defer { _ = try? runBlocking("/bin/umount", [mounted.point.path]) }
        let tmp = mounted.point.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: tmp, withIntermediateDirectories: true)
        let env = ["TMPDIR": tmp.path]
        func cli(_ args: [String]) async throws -> ProcessResult { try await run(storectlPath, args, environment: env) }

        let v1 = dir.appendingPathComponent("v1")
        try FileManager.default.createDirectory(at: v1, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: librarySchemaDirectory.appendingPathComponent("v1.json"), to: v1.appendingPathComponent("v1.json"))
        let store = mounted.point.appendingPathComponent("lib")
        let small = dir.appendingPathComponent("small.ndjson"), big = dir.appendingPathComponent("big.ndjson")
        try tracks(0..<300, padding: 1).write(to: small, atomically: true, encoding: .utf8)
        try tracks(1000..<16000, padding: 300).write(to: big, atomically: true, encoding: .utf8)
        #expect(try await cli(["init", store.path, "--schema", v1.path]).status == 0)
        // Batch by batch: the live generation's file then leaves too little room for a copy.
        let imported = try await cli(["import", store.path, small.path, "--quiet", "--mode", "incremental"])
        try #require(imported.status == 0, "\(imported.stderr)")
        let before = try await cli(["export", store.path, "--entity", "Track"]).stdout

        let commands: [(String, [String])] = [
            ("import", ["import", store.path, big.path, "--quiet", "--mode", "incremental"]),
            ("bulk import", ["import", store.path, big.path, "--quiet", "--mode", "bulk"]),
            ("compact", ["compact", store.path, "--quiet"]),
            ("verify --rebuild", ["verify", store.path, "--rebuild", "--quiet"]),
            ("migrate", ["migrate", store.path, "--schema", librarySchemaDirectory.path, "--quiet"]),
        ]
        for (name, args) in commands {
            let r = try await cli(args)
            #expect(r.status == 74 && r.stderr.contains("No space left on device"), "\(name): exit \(r.status), \(r.stderr)")
            let verify = try await cli(["verify", store.path, "--quiet"])
            #expect(verify.status == 0, "verify after \(name): \(verify.stderr)")
            #expect(try await cli(["export", store.path, "--entity", "Track"]).stdout == before, "tracks changed by the failed \(name)")
            #expect(try leftovers(store, tmp: tmp) == [], "left behind by \(name)")
        }
    }

    /// A replica made from a snapshot file on a file system without room for it fails with the
    /// system's error (a full disk, not "not a store", which storectl showed as exit 66), and
    /// leaves nothing where the store was to be.
    @Test func aReplicaMadeOnAFullFileSystemSaysSoAndLeavesNothing() async throws {
        let dir = temporaryDirectory("full-disk-replica")
        defer { try? FileManager.default.removeItem(at: dir) }
        let source = try Store.open(at: dir.appendingPathComponent("source"), schema: try librarySchema())
        // About 5 MB of names: the snapshot's file cannot fit in 3 MiB.
        let long = String(repeating: "n", count: 400)
        for batch in 0..<5 {
            _ = try await source.save { c in
                for i in 0..<2_500 { c.insert(Genre(name: "\(batch)-\(i) \(long)")) }
            }
        }
        let snapshot = dir.appendingPathComponent("snapshot")
        _ = try await source.writeReplicaSnapshot(to: snapshot)
        source.close()

        let mounted = try await mountSmallFileSystem(dir)
        defer { _ = try? runBlocking("/bin/umount", [mounted.point.path]) }
        let before = try FileManager.default.contentsOfDirectory(atPath: mounted.point.path)
        let replica = mounted.point.appendingPathComponent("replica")
        #expect {
            _ = try Store.createReplica(fromSnapshot: snapshot.appendingPathComponent(Store.replicaSnapshotFile), at: replica)
        } throws: { error in
            guard case StrataError.lmdb(let e) = error else { return false }
            return e.code == ENOSPC && "\(error)".contains("No space left on device")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: mounted.point.path) == before)
    }

    /// A directory another process makes at the path while a replica is being made there is
    /// refused, and left as it is (the failure's clean-up removed it, whoever had made it).
    @Test func aReplicaIsNotMadeInADirectoryAnotherProcessMadeMeanwhile() async throws {
        let dir = temporaryDirectory("replica-made-meanwhile")
        defer { try? FileManager.default.removeItem(at: dir) }
        let source = try Store.open(at: dir.appendingPathComponent("source"), schema: try librarySchema())
        _ = try await source.save { $0.insert(Genre(name: "g")) }
        let snapshot = dir.appendingPathComponent("snapshot")
        _ = try await source.writeReplicaSnapshot(to: snapshot)
        source.close()
        let target = dir.appendingPathComponent("replica")
        let theirs = target.appendingPathComponent("theirs")
        let targetPath = target.standardizedFileURL.path
        Store.makeReplicaAfterCheckForTesting.withLock { hook in
            hook = { path in
                guard path == targetPath else { return }
                try? FileManager.default.createDirectory(atPath: theirs.path, withIntermediateDirectories: true)
            }
        }
        defer { Store.makeReplicaAfterCheckForTesting.withLock { $0 = nil } }
        #expect {
            _ = try Store.createReplica(fromSnapshot: snapshot.appendingPathComponent(Store.replicaSnapshotFile), at: target)
        } throws: { error in
            guard case StrataError.notAStore(_, let reason) = error else { return false }
            return reason.contains("made by another process meanwhile")
        }
        #expect(FileManager.default.fileExists(atPath: theirs.path), "the other process's directory was removed")
    }
}
