import Foundation
import Testing
import LibraryModel
@testable import Strata

/// Who runs storectl in these tests: the user running the tests (root on the test machine), and
/// an unprivileged one (`nobody` through `setpriv` when the tests run as root; the test user
/// itself when it is not root, since it is unprivileged already).
enum TestUser: String, CaseIterable, CustomTestStringConvertible {
    case testUser, unprivileged

    var testDescription: String { rawValue }

    static let isRoot = geteuid() == 0

    /// `nobody` and `nogroup`, the unprivileged user as root runs it.
    static let nobody: (uid: uid_t, gid: gid_t)? = {
        guard let pw = getpwnam("nobody"), let gr = getgrnam("nogroup") else { return nil }
        return (pw.pointee.pw_uid, gr.pointee.gr_gid)
    }()

    /// Runs storectl as this user with `umask` (octal, e.g. "000") in a shell, so the process
    /// starts with that umask.
    func storectl(umask: String = "022", _ arguments: [String]) async throws -> ProcessResult {
        let shell = ["/bin/sh", "-c", "umask \(umask) && exec \"$0\" \"$@\"", storectlPath] + arguments
        if self == .unprivileged && Self.isRoot {
            return try await run("/usr/bin/setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups"] + shell)
        }
        return try await run(shell[0], Array(shell.dropFirst()))
    }

    /// A new directory this user owns (for the unprivileged user as root: chowned to nobody).
    func ownedDirectory() throws -> URL {
        let dir = temporaryDirectory("permissions-\(rawValue)")
        if self == .unprivileged && Self.isRoot {
            let nobody = try #require(Self.nobody, "no user nobody / group nogroup")
            #expect(chown(dir.path, nobody.uid, nobody.gid) == 0, "chown: \(String(cString: strerror(errno)))")
        }
        return dir
    }
}

/// Stores are private whatever the umask (directories 0700, files 0600), or shared with the
/// group when asked (0770, 0660); stores others may write are refused; `data.mdb`, `lock.mdb`
/// and `strata.lock` are never opened through a symbolic link. Run as root and as an
/// unprivileged user.
@Suite struct StorePermissionTests {
    static let sample = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path

    func mode(_ path: String) -> mode_t {
        var st = stat()
        guard lstat(path, &st) == 0 else { return 0o177777 }
        return st.st_mode & 0o7777
    }

    /// Every directory and file of the store with its mode (symbolic links left out).
    func modes(_ store: String) throws -> [String: mode_t] {
        var out = ["." : mode(store)]
        // A retired generation is being deleted on a background queue: never walked into, as
        // its files may vanish under the walk.
        var entries: [String] = []
        for top in try FileManager.default.contentsOfDirectory(atPath: store) where !top.hasPrefix(".retired-") {
            entries.append(top)
            var st = stat()
            if lstat(store + "/" + top, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR {
                entries += try FileManager.default.subpathsOfDirectory(atPath: store + "/" + top).map { top + "/" + $0 }
            }
        }
        for entry in entries {
            var st = stat()
            guard lstat(store + "/" + entry, &st) == 0, (st.st_mode & S_IFMT) != S_IFLNK else { continue }
            out[entry] = st.st_mode & 0o7777
        }
        return out
    }

    func expectModes(_ store: String, directories: mode_t, files: mode_t, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let all = try modes(store)
        #expect(all.count >= 5, "\(what): \(all)", sourceLocation: sourceLocation)
        for (entry, m) in all {
            var st = stat()
            _ = lstat(store + "/" + entry, &st)
            let wanted = (st.st_mode & S_IFMT) == S_IFDIR ? directories : files
            #expect(m == wanted, "\(what): \(entry) is \(String(m, radix: 8)), not \(String(wanted, radix: 8))", sourceLocation: sourceLocation)
        }
    }

    /// A v1 schema directory (for a store to migrate).
    func v1Schemas(in dir: URL, _ name: String) throws -> String {
        let old = dir.appendingPathComponent("schemas-v1-\(name)")
        try FileManager.default.createDirectory(at: old, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: librarySchemaDirectory.appendingPathComponent("v1.json"), to: old.appendingPathComponent("v1.json"))
        #expect(chmod(old.path, 0o755) == 0 && chmod(old.path + "/v1.json", 0o644) == 0)
        return old.path
    }

    @Test(arguments: TestUser.allCases)
    func storesArePrivateWhateverTheUmask(_ user: TestUser) async throws {
        let dir = try user.ownedDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        for umask in ["000", "022"] {
            let store = dir.appendingPathComponent("s-\(umask)").path
            let made = try await user.storectl(umask: umask, ["init", store, "--schema", librarySchemaDirectory.path])
            #expect(made.status == 0, "\(made.stderr)")
            try expectModes(store, directories: 0o700, files: 0o600, "init, umask \(umask)")
            // Into a new store: a bulk import, into a new generation.
            let imported = try await user.storectl(umask: umask, ["import", store, Self.sample, "--quiet", "--mode", "bulk"])
            #expect(imported.status == 0, "\(imported.stderr)")
            let importedGeneration = try FileManager.default.destinationOfSymbolicLink(atPath: store + "/current")
            #expect(importedGeneration > "gen-0000000000000001", "the bulk import did not switch to a new generation")
            try expectModes(store, directories: 0o700, files: 0o600, "bulk import, umask \(umask)")
            let compacted = try await user.storectl(umask: umask, ["compact", store])
            #expect(compacted.status == 0, "\(compacted.stderr)")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: store + "/current") > importedGeneration)
            try expectModes(store, directories: 0o700, files: 0o600, "compact, umask \(umask)")
            let verified = try await user.storectl(umask: umask, ["verify", store, "--quiet"])
            #expect(verified.status == 0, "\(verified.stderr)")

            // A migration's new generation (and its scratch) likewise.
            let old = dir.appendingPathComponent("v1-\(umask)").path
            #expect(try await user.storectl(umask: umask, ["init", old, "--schema", try v1Schemas(in: dir, umask)]).status == 0)
            let migrated = try await user.storectl(umask: umask, ["migrate", old, "--schema", librarySchemaDirectory.path, "--quiet"])
            #expect(migrated.status == 0, "\(migrated.stderr)")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: old + "/current") == "gen-0000000000000002")
            try expectModes(old, directories: 0o700, files: 0o600, "migrate, umask \(umask)")
        }
    }

    @Test(arguments: TestUser.allCases)
    func aStoreSharedWithTheGroupIsGroupReadableAndWritable(_ user: TestUser) async throws {
        let dir = try user.ownedDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("shared").path
        let made = try await user.storectl(umask: "077", ["init", store, "--schema", librarySchemaDirectory.path, "--shared-with-group"])
        #expect(made.status == 0, "\(made.stderr)")
        try expectModes(store, directories: 0o770, files: 0o660, "init --shared-with-group, umask 077")
        // Its directories are group-writable: opened only as shared with the group.
        let refused = try await user.storectl(["info", store])
        #expect(refused.status == 66, "\(refused.status) \(refused.stderr)")
        #expect(refused.stderr.contains("is writable by its group") && refused.stderr.contains("chmod g-w"), "\(refused.stderr)")
        let imported = try await user.storectl(umask: "000", ["import", store, Self.sample, "--quiet", "--shared-with-group"])
        #expect(imported.status == 0, "\(imported.stderr)")
        let compacted = try await user.storectl(umask: "000", ["compact", store, "--shared-with-group"])
        #expect(compacted.status == 0, "\(compacted.stderr)")
        try expectModes(store, directories: 0o770, files: 0o660, "compact --shared-with-group, umask 000")
        let info = try await user.storectl(["info", store, "--shared-with-group", "--json"])
        #expect(info.status == 0, "\(info.stderr)")
    }

    /// A private store compacted, migrated or bulk-imported into with `--shared-with-group`
    /// becomes shared whole: its directory and `strata.lock` too, not only the new generation
    /// (which left a store the group could not use and a private open refused). Opened shared
    /// after, it reads and verifies.
    @Test(arguments: TestUser.allCases)
    func aPrivateStoreRewrittenSharedIsSharedWhole(_ user: TestUser) async throws {
        let dir = try user.ownedDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("c").path
        #expect(try await user.storectl(["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
        #expect(try await user.storectl(["import", store, Self.sample, "--quiet"]).status == 0)
        let compacted = try await user.storectl(["compact", store, "--shared-with-group"])
        #expect(compacted.status == 0, "\(compacted.stderr)")
        try expectModes(store, directories: 0o770, files: 0o660, "compact --shared-with-group")
        #expect(try await user.storectl(["verify", store, "--quiet", "--shared-with-group"]).status == 0)

        let old = dir.appendingPathComponent("m").path
        #expect(try await user.storectl(["init", old, "--schema", try v1Schemas(in: dir, "m")]).status == 0)
        let migrated = try await user.storectl(["migrate", old, "--schema", librarySchemaDirectory.path, "--quiet",
                                                "--shared-with-group"])
        #expect(migrated.status == 0, "\(migrated.stderr)")
        try expectModes(old, directories: 0o770, files: 0o660, "migrate --shared-with-group")

        let bulk = dir.appendingPathComponent("b").path
        #expect(try await user.storectl(["init", bulk, "--schema", librarySchemaDirectory.path]).status == 0)
        let imported = try await user.storectl(["import", bulk, Self.sample, "--quiet", "--mode", "bulk",
                                                "--shared-with-group"])
        #expect(imported.status == 0, "\(imported.stderr)")
        try expectModes(bulk, directories: 0o770, files: 0o660, "bulk import --shared-with-group")
        #expect(try await user.storectl(["info", bulk, "--shared-with-group"]).status == 0)
    }

    /// A private store at `dir/s` holding one genre, closed again.
    func storeWithAGenre(in dir: URL) async throws -> URL {
        let url = dir.appendingPathComponent("s")
        let store = try Store.open(at: url, schema: try librarySchema())
        defer { store.close() }
        _ = try await store.save { $0.insert(Genre(name: "g")) }
        return url
    }

    /// A store file others may write (`data.mdb`, `lock.mdb`, `strata.lock`), or its group when
    /// the store is not shared with it, is refused at open, as such a directory is: whoever may
    /// write it may change the store. They were opened without a word.
    @Test func aStoreFileOthersMayWriteIsRefused() async throws {
        let dir = temporaryDirectory("writable-files")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = try await storeWithAGenre(in: dir)
        let generation = try FileManager.default.destinationOfSymbolicLink(atPath: url.path + "/current")
        for file in ["\(generation)/data.mdb", "\(generation)/lock.mdb", "strata.lock"] {
            let path = url.path + "/" + file
            for (mode, shared, refused) in [(0o606 as mode_t, false, true), (0o660, false, true), (0o660, true, false)] {
                #expect(chmod(path, mode) == 0)
                var config = StoreConfiguration()
                config.sharedWithGroup = shared
                do {
                    let store = try Store.open(at: url, schema: try librarySchema(), configuration: config)
                    store.close()
                    #expect(!refused, "\(file) \(String(mode, radix: 8)) was opened")
                } catch StrataError.insecure(_, let reason) {
                    #expect(refused && reason.contains(file) && reason.contains("writable by"), "\(reason)")
                }
            }
            #expect(chmod(path, 0o600) == 0)
        }
        let cli = try await storectl("info", url.path)
        #expect(cli.status == 0, "\(cli.stderr)")
        #expect(chmod(url.path + "/strata.lock", 0o666) == 0)
        let refused = try await storectl("info", url.path)
        #expect(refused.status == 66 && refused.stderr.contains("writable by others"), "\(refused.stderr)")
    }

    /// A private store rewritten with `sharedWithGroup` whose lock file's mode cannot be set
    /// (EPERM: another user's file) keeps its directory private too: the directory's mode was
    /// set first and left shared, and every private open then refused the store as writable by
    /// its group.
    @Test func aLockFileWhoseModeCannotBeSetLeavesThePrivateDirectoryPrivate() async throws {
        let dir = temporaryDirectory("shared-lock-mode-fails")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = try await storeWithAGenre(in: dir)
        #expect(mode(url.path) == 0o700)
        var shared = StoreConfiguration()
        shared.sharedWithGroup = true
        let lockPath = url.appendingPathComponent("strata.lock").path
        StoreLock.failSetModeForTesting.withLock { _ = $0.insert(lockPath) }
        defer { StoreLock.failSetModeForTesting.withLock { _ = $0.remove(lockPath) } }
        let store = try Store.open(at: url, schema: try librarySchema(), configuration: shared)
        await #expect { _ = try await store.compact() } throws: { error in
            guard case StrataError.lmdb(let e) = error else { return false }
            return e.code == EPERM
        }
        store.close()
        #expect(mode(url.path) == 0o700, "the directory kept the group's mode \(String(mode(url.path), radix: 8))")
        let reopened = try Store.open(at: url, schema: try librarySchema())
        defer { reopened.close() }
        #expect(try reopened.mainContext.count(Genre.self) == 1)
    }

    /// A private store rewritten with `sharedWithGroup` whose switch fails (here a directory in
    /// the way of the switch's temporary link) keeps its private modes: they were changed before
    /// the switch and left, and every private open then refused the store as writable by its group.
    @Test func aSwitchThatFailsLeavesAPrivateStorePrivate() async throws {
        let dir = temporaryDirectory("shared-switch-fails")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = try await storeWithAGenre(in: dir)
        var shared = StoreConfiguration()
        shared.sharedWithGroup = true
        let store = try Store.open(at: url, schema: try librarySchema(), configuration: shared)
        let blocker = url.appendingPathComponent(".current-\(getpid())")
        try FileManager.default.createDirectory(at: blocker.appendingPathComponent("x"), withIntermediateDirectories: true)
        await #expect(throws: StrataError.self) { _ = try await store.compact() }
        store.close()
        try FileManager.default.removeItem(at: blocker)
        func mode(_ path: String) -> mode_t {
            var st = stat()
            _ = lstat(path, &st)
            return st.st_mode & 0o777
        }
        #expect(mode(url.path) == 0o700 && mode(url.appendingPathComponent("strata.lock").path) == 0o600)
        let reopened = try Store.open(at: url, schema: try librarySchema())
        defer { reopened.close() }
        #expect(try reopened.mainContext.count(Genre.self) == 1)
    }

    /// A member of a shared store's group who does not own its directory and lock file
    /// compacts it and bulk-imports into it: the switch leaves their modes alone (they are
    /// shared already), where setting them again failed with EPERM after the whole copy. Root
    /// makes the store and gives it to the group `nogroup`; `nobody` rewrites it.
    @Test(.enabled(if: TestUser.isRoot && TestUser.nobody != nil))
    func aGroupMemberWhoDoesNotOwnASharedStoreRewritesIt() async throws {
        let nobody = try #require(TestUser.nobody)
        let dir = temporaryDirectory("shared-member")
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(chmod(dir.path, 0o755) == 0)
        let store = dir.appendingPathComponent("s").path
        let owner = TestUser.testUser
        #expect(try await owner.storectl(["init", store, "--schema", librarySchemaDirectory.path, "--shared-with-group"]).status == 0)
        #expect(try await owner.storectl(["import", store, Self.sample, "--quiet", "--shared-with-group"]).status == 0)
        for entry in [""] + (FileManager.default.subpaths(atPath: store) ?? []) {
            let path = entry.isEmpty ? store : store + "/" + entry
            #expect(lchown(path, 0, nobody.gid) == 0, "\(path): \(String(cString: strerror(errno)))")
        }
        let compacted = try await TestUser.unprivileged.storectl(["compact", store, "--shared-with-group"])
        #expect(compacted.status == 0, "\(compacted.stderr)")
        let bulk = try await TestUser.unprivileged.storectl(["import", store, Self.sample, "--quiet", "--mode", "bulk",
                                                             "--shared-with-group"])
        #expect(bulk.status == 0, "\(bulk.stderr)")
        try expectModes(store, directories: 0o770, files: 0o660, "rewritten by a group member")
        #expect(try await owner.storectl(["verify", store, "--quiet", "--shared-with-group"]).status == 0)
    }

    /// A file the user may not write (mode 0444, its own or root's) is not replaced by
    /// `export --output` or by an import's rejects file: exit 73, the file as it was, as `>`
    /// would not write it. Both wrote a new file and renamed it over the old one, which only
    /// needs the directory to be writable (a root-owned file then even became the user's).
    @Test func aFileTheUserMayNotWriteIsNotReplacedByAnOutput() async throws {
        let user = TestUser.unprivileged
        let dir = try user.ownedDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await user.storectl(["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
        #expect(try await user.storectl(["import", store, Self.sample, "--quiet"]).status == 0)
        let bad = dir.appendingPathComponent("bad.ndjson").path
        try Data(#"{"entity":"Genre","name":"ok"}\#n{"entity":"Genre"}\#n"#.utf8).write(to: URL(fileURLWithPath: bad))
        var owners: [(String, uid_t?)] = [("own", TestUser.isRoot ? TestUser.nobody?.uid : nil)]
        if TestUser.isRoot { owners.append(("root's", 0)) }
        for (whose, uid) in owners {
            let kept = dir.appendingPathComponent("kept-\(whose).ndjson").path
            try Data("precious\n".utf8).write(to: URL(fileURLWithPath: kept))
            if let uid { #expect(chown(kept, uid, TestUser.nobody?.gid ?? 0) == 0) }
            #expect(chmod(kept, 0o444) == 0)
            let exported = try await user.storectl(["export", store, "--entity", "Genre", "--output", kept])
            #expect(exported.status == 73 && exported.stderr.contains("Permission denied"), "\(whose): \(exported.stderr)")
            let rejected = try await user.storectl(["import", store, bad, "--continue-on-error", "--rejects", kept])
            #expect(rejected.status == 73 && rejected.stderr.contains("Permission denied"), "\(whose): \(rejected.stderr)")
            #expect(try String(contentsOfFile: kept, encoding: .utf8) == "precious\n", "\(whose) file replaced")
            var st = stat()
            #expect(stat(kept, &st) == 0 && st.st_mode & 0o7777 == 0o444 && (uid.map { st.st_uid == $0 } ?? true))
        }
    }

    /// Another user's private store is refused as one this process may not read (exit 73, the
    /// file named), never as "not a Strata store".
    @Test(.enabled(if: TestUser.isRoot && TestUser.nobody != nil))
    func anotherUsersPrivateStoreIsRefusedAsUnreadable() async throws {
        let dir = temporaryDirectory("unreadable")
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(chmod(dir.path, 0o755) == 0)
        let store = dir.appendingPathComponent("s").path
        #expect(try await TestUser.testUser.storectl(["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
        let r = try await TestUser.unprivileged.storectl(["info", store])
        #expect(r.status == 73 && r.stderr.contains("cannot be read by this process") && !r.stderr.contains("not a Strata store"),
                "\(r.status) \(r.stderr)")
    }

    /// `verify --rebuild` of a store this user may read but not write makes its scratch under
    /// `TMPDIR`; one it cannot make there is "cannot create" (exit 73) whether `TMPDIR` is not
    /// writable or does not exist (that one exited 70, as a software error).
    @Test(.enabled(if: TestUser.isRoot && TestUser.nobody != nil))
    func aScratchThatCannotBeMadeExits73() async throws {
        let dir = temporaryDirectory("scratch-place")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await TestUser.testUser.storectl(["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
        #expect(try await TestUser.testUser.storectl(["import", store, Self.sample, "--quiet"]).status == 0)
        for path in [dir.path] + (FileManager.default.subpaths(atPath: dir.path) ?? []).map({ dir.path + "/" + $0 }) {
            var st = stat()
            guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) != S_IFLNK else { continue }
            #expect(chmod(path, (st.st_mode & S_IFMT) == S_IFDIR ? 0o755 : 0o644) == 0)
        }
        for temporary in ["/nonexistent-\(UUID().uuidString)", "/"] {
            let r = try await run("/usr/bin/setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/env",
                                                       "TMPDIR=\(temporary)", storectlPath, "verify", store, "--rebuild"])
            #expect(r.status == 73 && r.stderr.contains("mkdir \(temporary == "/" ? "" : temporary)/.scratch-"),
                    "TMPDIR=\(temporary): \(r.status) \(r.stderr)")
        }
    }

    /// A generation the compacting user cannot delete (its directory read-only to them) is left
    /// renamed aside with a warning that says so, and the next read-write open says it again: it
    /// stayed through every later compaction and nothing said so.
    @Test(.enabled(if: !TestUser.isRoot || TestUser.nobody != nil))
    func aGenerationThatCannotBeRemovedIsReported() async throws {
        let user = TestUser.unprivileged
        let dir = try user.ownedDirectory()
        defer {
            _ = chmod(dir.path, 0o700)
            for entry in FileManager.default.subpaths(atPath: dir.path) ?? [] { _ = chmod(dir.path + "/" + entry, 0o700) }
            try? FileManager.default.removeItem(at: dir)
        }
        let store = dir.appendingPathComponent("s").path
        #expect(try await user.storectl(["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
        #expect(try await user.storectl(["import", store, Self.sample, "--quiet", "--mode", "incremental"]).status == 0)
        let old = store + "/" + (try FileManager.default.destinationOfSymbolicLink(atPath: store + "/current"))
        #expect(chmod(old, 0o500) == 0)
        let compacted = try await user.storectl(["compact", store])
        #expect(compacted.status == 0, "\(compacted.stderr)")
        #expect(compacted.stderr.contains("could not remove \(store)/.retired-gen-")
                && compacted.stderr.contains("(Permission denied)") && compacted.stderr.contains("remove it by hand"),
                "\(compacted.stderr)")
        let again = try await user.storectl(["import", store, Self.sample, "--quiet"])
        #expect(again.status == 0 && again.stderr.contains("could not remove"), "\(again.stderr)")
    }

    @Test(arguments: TestUser.allCases)
    func aStoreWhoseDirectoriesOthersMayWriteIsRefused(_ user: TestUser) async throws {
        let dir = try user.ownedDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await user.storectl(["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
        let generation = store + "/" + (try FileManager.default.destinationOfSymbolicLink(atPath: store + "/current"))
        for (path, bits, fix) in [(store, mode_t(0o002), "chmod o-w"), (generation, 0o002, "chmod o-w"), (store, 0o020, "chmod g-w"), (generation, 0o020, "chmod g-w")] {
            let before = mode(path)
            #expect(chmod(path, before | bits) == 0)
            let listing = try FileManager.default.contentsOfDirectory(atPath: store).sorted()
            for args in [["info", store], ["import", store, Self.sample, "--quiet"]] {
                let r = try await user.storectl(args)
                #expect(r.status == 66, "\(args[0]) with \(path) mode \(String(mode(path), radix: 8)): \(r.status) \(r.stderr)")
                #expect(r.stderr.contains("refused: the directory \(path) is writable by"), "\(r.stderr)")
                #expect(r.stderr.contains("\(fix) \(path)"), "\(r.stderr)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: store).sorted() == listing)
            #expect(chmod(path, before) == 0)
        }
        let info = try await user.storectl(["info", store])
        #expect(info.status == 0, "\(info.stderr)")
    }

    /// Planted links: the owner of a store replaces `lock.mdb` (or `data.mdb`) with a link
    /// to another file, or plants `strata.lock` as a link, and someone opens the store: another
    /// user (root), or the owner. Refused (exit 66) before LMDB or Strata opens anything through
    /// the link; the file the link points at (writable by both) is untouched and nothing is
    /// created where it points (a directory both may write).
    @Test(arguments: TestUser.allCases)
    func linkedStoreFilesAreRefusedAndNothingIsWrittenThroughThem(_ opener: TestUser) async throws {
        let owner = TestUser.unprivileged
        let dir = try owner.ownedDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await owner.storectl(["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
        #expect(try await owner.storectl(["import", store, Self.sample, "--quiet"]).status == 0)
        let generation = store + "/" + (try FileManager.default.destinationOfSymbolicLink(atPath: store + "/current"))
        // The opener's own file, outside the store.
        let victimDirectory = temporaryDirectory("permissions-victim")
        defer { try? FileManager.default.removeItem(at: victimDirectory) }
        #expect(chmod(victimDirectory.path, 0o1777) == 0)
        let victim = victimDirectory.appendingPathComponent("important").path
        let content = Data("the opener's data\n".utf8)
        try content.write(to: URL(fileURLWithPath: victim))
        #expect(chmod(victim, 0o666) == 0)

        for file in ["lock.mdb", "data.mdb"] {
            let path = generation + "/" + file
            let saved = path + ".saved"
            #expect(rename(path, saved) == 0)
            #expect(symlink(victim, path) == 0)
            for args in [["info", store], ["import", store, Self.sample, "--quiet"], ["compact", store], ["verify", store]] {
                let r = try await opener.storectl(args)
                #expect(r.status == 66, "\(file), \(args[0]): \(r.status) \(r.stderr)")
                #expect(r.stderr.contains("\(path) is a symbolic link"), "\(r.stderr)")
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == content, "\(file): the file behind the link was written")
            #expect(mode(victim) == 0o666)
            #expect(unlink(path) == 0 && rename(saved, path) == 0)
        }

        let lock = store + "/strata.lock"
        let planted = victimDirectory.appendingPathComponent("created-through-the-link").path
        #expect(unlink(lock) == 0)
        #expect(symlink(planted, lock) == 0)
        for args in [["import", store, Self.sample, "--quiet"], ["info", store], ["compact", store]] {
            let r = try await opener.storectl(args)
            #expect(r.status == 66, "strata.lock, \(args[0]): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("strata.lock is a symbolic link"), "\(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: planted), "\(args[0]) created a file through the strata.lock link")
        }
        #expect(unlink(lock) == 0)
        let info = try await owner.storectl(["info", store])
        #expect(info.status == 0, "\(info.stderr)")
    }

    /// A directory in place of `strata.lock`: every command refuses the store as a read does
    /// (exit 66, "is not a regular file"); a write and a compaction exited 70 with LMDB's words
    /// for `EISDIR`.
    @Test func aDirectoryInPlaceOfTheLockFileIsRefusedByEveryCommand() async throws {
        let dir = temporaryDirectory("lock-directory")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        #expect(unlink(store + "/strata.lock") == 0 && mkdir(store + "/strata.lock", 0o700) == 0)
        for args in [["info", store], ["import", store, Self.sample, "--quiet"],
                     ["import", store, Self.sample, "--quiet", "--mode", "bulk"], ["compact", store],
                     ["compact", store, "--wait"], ["verify", store]] {
            let r = try await storectl(args)
            #expect(r.status == 66, "\(args): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("strata.lock is not a regular file"), "\(args): \(r.stderr)")
        }
        #expect(rmdir(store + "/strata.lock") == 0)
        #expect(try await storectl("info", store).status == 0)
    }

    /// The library makes the same modes under the umask of the process it runs in (its own
    /// creation calls set them), for `Store.open`, compaction and `Store.temporary`.
    @Test func theLibraryMakesPrivateStores() async throws {
        let dir = temporaryDirectory("permissions-library")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("s")
        let store = try Store.open(at: url, schema: try librarySchema())
        _ = try await store.save { $0.insert(Genre(name: "g")) }
        _ = try await store.compact()
        store.close()
        try expectModes(url.path, directories: 0o700, files: 0o600, "Store.open and compact")
        let temporary = try Store.temporary(schema: try librarySchema())
        defer { temporary.close() }
        try expectModes(temporary.path, directories: 0o700, files: 0o600, "Store.temporary")
    }

    /// A reader that cannot write the store's directory (another user's store, a read-only
    /// mount) reads without LMDB's lock file, so no writer sees it: such an open is refused while
    /// another process has the store open (its writer could reuse the pages being read), and
    /// works when none has. Root makes the store readable by all; `nobody` reads it.
    @Test(.enabled(if: TestUser.isRoot && TestUser.nobody != nil))
    func aReadWithoutTheLockFileIsRefusedWhileAnotherProcessHasTheStoreOpen() async throws {
        let dir = temporaryDirectory("unlocked-read")
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(chmod(dir.path, 0o755) == 0)
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        #expect(try await storectl("import", store, Self.sample, "--quiet").status == 0)
        for entry in [""] + (FileManager.default.subpaths(atPath: store) ?? []) {
            let path = entry.isEmpty ? store : store + "/" + entry
            var st = stat()
            guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) != S_IFLNK else { continue }
            #expect(chmod(path, (st.st_mode & S_IFMT) == S_IFDIR ? 0o755 : 0o644) == 0, "\(path)")
        }
        let count = ["query", store, "--entity", "Genre", "--count"]
        let alone = try await TestUser.unprivileged.storectl(count)
        #expect(alone.status == 0, "\(alone.stderr)")
        let open = try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema())
        let refused = try await TestUser.unprivileged.storectl(count)
        #expect(refused.status == 75 && refused.stderr.contains("open in other process(es) \(getpid())"),
                "exit \(refused.status): \(refused.stderr)")
        open.close()
        let again = try await TestUser.unprivileged.storectl(count)
        #expect(again.status == 0 && again.stdout == alone.stdout, "\(again.stderr)")
    }
}
