import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A store directory whose `current` link (naming the live generation) is broken: dangling,
/// missing beside a generation that holds data, or not a link. Every opener refuses the store
/// and nothing is removed or created over it. A store whose creation stopped before its first
/// commit is created again by the next open that may create it.
@Suite struct StoreDirectoryTests {
    /// `current` pointing at a generation that does not exist: every opener refuses the store
    /// (exit 66, naming `current`) and removes nothing; with the link restored, the data is there.
    /// (A read-write open must not remove the generations `current` does not name: they hold the
    /// data.)
    /// A generation directory another process has open (its `lock.mdb` locked as liblmdb locks
    /// it, by a process that holds no `strata.lock`: one whose lock file was deleted and made
    /// again, building a generation) is left by the open's sweep of stale generations, and
    /// removed by the first open after it lets go. (The sweep removed it under that process.)
    @Test(.enabled(if: anotherProcessCanLockFiles, "needs python3"))
    func aGenerationAnotherProcessHasOpenIsNotSweptAtOpen() async throws {
        let dir = temporaryDirectory("sweep-held-generation")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            _ = try await store.save { $0.insert(Genre(name: "g")) }
            store.close()
        }
        let building = dir.appendingPathComponent(StoreDirectory.generationName(9))
        try FileManager.default.createDirectory(at: building, withIntermediateDirectories: true)
        let lockFile = building.appendingPathComponent("lock.mdb").path
        #expect(FileManager.default.createFile(atPath: lockFile, contents: Data(count: 8)))
        let holder = try await lockedByAnotherProcess(lockFile, firstByteOnly: true)
        let store = try Store.open(at: dir, schema: try librarySchema())
        store.close()
        #expect(FileManager.default.fileExists(atPath: building.path), "a generation another process has open was swept")
        try? holder.input?.close()
        holder.wait()
        let again = try Store.open(at: dir, schema: try librarySchema())
        again.close()
        #expect(!FileManager.default.fileExists(atPath: building.path), "the abandoned generation stayed")
    }

    @Test func aDanglingCurrentLinkIsRefusedAndNothingIsRemoved() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let live = generations(store)
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: "gen-00000000000000ff")
        let input = dir.appendingPathComponent("genres.ndjson").path
        let initAgain = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(initAgain.status == 73, "\(initAgain.status) \(initAgain.stderr)")
        #expect(initAgain.stderr.contains("a store already exists here"), "\(initAgain.stderr)")
        for args in [["import", store, input, "--quiet"], ["compact", store], ["info", store]] {
            let r = try await storectl(args)
            #expect(r.status == 66, "\(args[0]): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("`current` points at gen-00000000000000ff"), "\(r.stderr)")
            #expect(generations(store) == live, "\(args[0]) removed a generation")
        }
        #expect(throws: StrataError.self) { try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema()) }
        #expect(generations(store) == live)
        // Nor is a lock file made where there is none (a read-write open made it, then refused).
        try FileManager.default.removeItem(atPath: store + "/strata.lock")
        #expect(throws: StrataError.self) { try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema()) }
        #expect(!FileManager.default.fileExists(atPath: store + "/strata.lock"), "a refused open made the lock file")
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try await genreCount(store) == "5")
    }

    /// `current` pointing at a generation directory that holds no data (empty, only `lock.mdb`,
    /// or an empty `data.mdb`) while another holds the store's: every opener refuses it, naming
    /// both, and removes nothing. The sweep of stale generations ran first and deleted the data,
    /// then the open said there was no store here.
    @Test func aCurrentLinkToAGenerationWithoutDataIsRefusedAndNothingIsRemoved() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        let input = dir.appendingPathComponent("genres.ndjson").path
        for (i, files) in [[], ["lock.mdb"], ["data.mdb"]].enumerated() {
            let empty = "gen-00000000000000f\(i)"
            try FileManager.default.createDirectory(atPath: store + "/" + empty, withIntermediateDirectories: false,
                                                    attributes: [.posixPermissions: 0o700])
            for f in files {
                #expect(FileManager.default.createFile(atPath: store + "/\(empty)/\(f)", contents: nil,
                                                       attributes: [.posixPermissions: 0o600]))
            }
            try FileManager.default.removeItem(atPath: current)
            try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: empty)
            let live = generations(store)
            for args in [["import", store, input, "--quiet"], ["compact", store], ["compact", store, "--dry-run"],
                         ["info", store], ["verify", store]] {
                let r = try await storectl(args)
                #expect(r.status == 66, "\(files) \(args[0]): \(r.status) \(r.stderr)")
                #expect(r.stderr.contains("`current` points at \(empty)") && r.stderr.contains("\(target) holds data"),
                        "\(r.stderr)")
                #expect(generations(store) == live, "\(files) \(args[0]) removed a generation")
            }
            try FileManager.default.removeItem(atPath: current)
            try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
            try FileManager.default.removeItem(atPath: store + "/" + empty)
            #expect(try await genreCount(store) == "5")
        }
    }

    /// `current` naming another directory's generation (`../other/gen-…`): refused as it is. The
    /// store's own generation of that name was opened in its place, while other tools following
    /// the link read the other store.
    @Test func aCurrentLinkWithADirectoryPartIsRefused() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: "../elsewhere/" + target)
        let live = generations(store)
        for args in [["import", store, dir.appendingPathComponent("genres.ndjson").path, "--quiet"], ["info", store]] {
            let r = try await storectl(args)
            #expect(r.status == 66 && r.stderr.contains("`current` points at ../elsewhere/\(target), not at a generation"),
                    "\(args[0]): \(r.status) \(r.stderr)")
            #expect(generations(store) == live)
        }
    }

    /// A creation marker left beside a finished store (copied in, or made by hand): `init` says
    /// the store exists (exit 73), of the same schema or another, and the store keeps its data.
    /// (It printed "created" and exited 0, or reported a schema mismatch.)
    @Test func aStrayCreationMarkerDoesNotMakeInitCreateAFinishedStore() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let marker = store + "/" + StoreDirectory.creationMarker
        for schema in [librarySchemaDirectory.path, try schemaDirectory(#"{"model":"other","version":1,"entities":[{"name":"A","attributes":[]}]}"#, in: dir).path] {
            #expect(FileManager.default.createFile(atPath: marker, contents: nil))
            let r = try await storectl("init", store, "--schema", schema)
            #expect(r.status == 73, "\(r.status) \(r.stdout) \(r.stderr)")
            #expect(r.stderr.contains("a store already exists here"), "\(r.stderr)")
            #expect(!r.stdout.contains("created"), "\(r.stdout)")
            #expect(try await genreCount(store) == "5")
        }
    }

    /// Several `init`s of one new path at once: exactly one creates the store, the others say
    /// it exists (exit 73). Without turns, three or four of four said "created", exit 0; and with
    /// the parents missing, an `init` whose making of them met another's (the outer one made, the
    /// inner not yet) could find no parent to take its turn in, and two said "created" in a few
    /// rounds of a hundred, hence the rounds here.
    @Test func concurrentInitsOfOnePathCreateItOnce() async throws {
        let dir = temporaryDirectory("init-race")
        defer { try? FileManager.default.removeItem(at: dir) }
        let inits = 6
        for round in 0..<40 {
            let store = dir.appendingPathComponent("r\(round)/nested/deeper/store").path
            let results = try await withThrowingTaskGroup(of: ProcessResult.self) { group in
                for _ in 0..<inits { group.addTask { try await storectl("init", store, "--schema", librarySchemaDirectory.path) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.filter { $0.status == 0 && $0.stdout.contains("created") }.count == 1,
                    "round \(round): \(results.map { "\($0.status) \($0.stdout) \($0.stderr)" })")
            #expect(results.filter { $0.status == 73 && $0.stderr.contains("a store already exists here") }.count == inits - 1,
                    "round \(round): \(results.map { "\($0.status) \($0.stderr)" })")
        }
    }

    /// An `init` that fails removes the parent directories it made; it left them behind.
    @Test func aFailedInitLeavesNoParentsItMade() async throws {
        let dir = temporaryDirectory("init-parents")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("a/b/c").appendingPathComponent(String(repeating: "z", count: 300)).path
        let r = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(r.status == 73, "\(r.status) \(r.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    }

    /// No `current` while a generation holds data (the link was removed): refused, never a new
    /// empty store created over it (`init` neither adopts nor re-creates it).
    @Test func aMissingCurrentBesideDataIsRefused() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        let r = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(r.status == 66, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("`current` is missing but \(target) holds a store's data"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: current))
        #expect(throws: StrataError.self) { try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema()) }
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try await genreCount(store) == "5")
    }

    /// `current` that is a regular file, not a link: refused, not taken for a missing one.
    @Test func aCurrentThatIsNotALinkIsRefused() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let current = store + "/current"
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: current)
        try FileManager.default.removeItem(atPath: current)
        #expect(FileManager.default.createFile(atPath: current, contents: Data("x".utf8)))
        let r = try await storectl("info", store)
        #expect(r.status == 66, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("`current` is not a symbolic link"), "\(r.stderr)")
        try FileManager.default.removeItem(atPath: current)
        try FileManager.default.createSymbolicLink(atPath: current, withDestinationPath: target)
        #expect(try await genreCount(store) == "5")
    }

    /// `storectl init` stopped by a full disk (a file-size limit, at each step of the creation:
    /// the lock file's allocation, the data file's first pages, the first commit) exits 74 and
    /// leaves a store whose creation is unfinished: the commands that do not create a store
    /// refuse it, saying so (exit 66), and the next `init` creates it (it said "a store already
    /// exists here", and the other commands "the store's data is gone", for ever).
    @Test func anInitStoppedByAFullDiskIsFinishedByTheNextInit() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        // In 1024-byte blocks (bash) or 512-byte ones (dash): every one below the 28 KiB a new
        // store's data file takes.
        for blocks in [4, 8, 16, 20] {
            let store = dir.appendingPathComponent("s\(blocks)").path
            let r = try await run("/bin/sh", ["-c", "ulimit -f \(blocks) && exec \"$0\" init \"$1\" --schema \"$2\"",
                                              storectlPath, store, librarySchemaDirectory.path])
            #expect(r.status == 74, "\(blocks) blocks: exit \(r.status): \(r.stderr)")
            #expect(FileManager.default.fileExists(atPath: store + "/strata.creating"), "\(blocks) blocks")
            let info = try await storectl("info", store)
            #expect(info.status == 66, "\(blocks) blocks: \(info.status) \(info.stderr)")
            #expect(info.stderr.contains("its creation has not finished"), "\(info.stderr)")
            let again = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
            #expect(again.status == 0, "\(blocks) blocks: \(again.status) \(again.stderr)")
            #expect(!FileManager.default.fileExists(atPath: store + "/strata.creating"), "\(blocks) blocks")
            let input = dir.appendingPathComponent("genres.ndjson")
            try Data(#"{"entity": "Genre", "name": "jazz"}"#.utf8).write(to: input)
            #expect(try await storectl("import", store, input.path, "--quiet").status == 0)
            #expect(try await genreCount(store) == "1")
            let third = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
            #expect(third.status == 73 && third.stderr.contains("a store already exists here"), "\(third.stderr)")
        }
    }

    /// The same through the library: a store left with its creation unfinished is refused by
    /// the opens that may not create a store, and created by one that may. An emptied or deleted
    /// data file of a store whose creation finished is refused by every open: its data is gone.
    @Test func anUnfinishedCreationIsCreatedOnlyByAnOpenThatMayCreate() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        let r = try await run("/bin/sh", ["-c", "ulimit -f 4 && exec \"$0\" init \"$1\" --schema \"$2\"",
                                          storectlPath, store, librarySchemaDirectory.path])
        #expect(r.status == 74, "exit \(r.status): \(r.stderr)")
        let url = URL(fileURLWithPath: store)
        #expect(Store.exists(at: url) == false)
        for open in [{ try Store.openReadOnly(at: url) }, { try Store.openExisting(at: url) }] {
            #expect {
                let s = try open()
                s.close()
            } throws: { error in
                guard case StrataError.notAStore(_, let reason) = error else { return false }
                return reason.contains("its creation has not finished")
            }
        }
        let created = try Store.open(at: url, schema: try librarySchema())
        #expect(try created.lastTransactionID == .zero)
        created.close()
        #expect(Store.exists(at: url))
        #expect(!FileManager.default.fileExists(atPath: store + "/strata.creating"))

        // A store whose creation finished, its data file emptied: refused by every open.
        let data = store + "/current/data.mdb"
        #expect(truncate(data, 0) == 0)
        #expect {
            let s = try Store.open(at: url, schema: try librarySchema())
            s.close()
        } throws: { error in
            guard case StrataError.notAStore(_, let reason) = error else { return false }
            return reason.contains("data.mdb is empty: the store's data is gone")
        }
        let again = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(again.status == 73, "\(again.status) \(again.stderr)")

        // Its data file deleted: named as missing by every open and by storectl, never a new
        // empty store (`Store.open` made one) nor "no store here" (which `init` contradicts).
        #expect(unlink(data) == 0)
        for open in [{ try Store.open(at: url, schema: try librarySchema()) }, { try Store.openReadOnly(at: url) },
                     { try Store.openExisting(at: url) }] {
            #expect {
                let s = try open()
                s.close()
            } throws: { error in
                guard case StrataError.notAStore(_, let reason) = error else { return false }
                return reason.contains("data.mdb is missing: the store's data is gone")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: data))
        let info = try await storectl("info", store)
        #expect(info.status == 66 && info.stderr.contains("data.mdb is missing"), "\(info.status) \(info.stderr)")
    }

    /// Two removers of one leftover directory at once (a retired generation's background
    /// deletion and the next open's sweep, as a `cluster reset` runs them) both succeed without a
    /// warning: each failed on the files the other took first, while the directory was still
    /// there, and one then warned of a directory that was gone a moment later.
    @Test func twoRemoversOfOneLeftoverDirectoryNeitherWarns() async throws {
        let root = temporaryDirectory("leftover")
        defer { try? FileManager.default.removeItem(at: root) }
        for round in 0..<8 {
            let leftover = root.appendingPathComponent(StoreDirectory.retiredPrefix + "gen-\(round)")
            for d in 0..<20 {
                let sub = leftover.appendingPathComponent("d\(d)")
                try FileManager.default.createDirectory(at: sub, withIntermediateDirectories: true)
                for f in 0..<25 { _ = FileManager.default.createFile(atPath: sub.appendingPathComponent("f\(f)").path, contents: Data([1])) }
            }
            let path = leftover.path, store = root.path
            async let first = onOwnThread { StoreDirectory.removeLeftover(path, store: store) }
            async let second = onOwnThread { StoreDirectory.removeLeftover(path, store: store) }
            let (a, b) = try await (first, second)
            #expect(a && b, "round \(round): a remover warned (\(a), \(b))")
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }
}
