import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Whether `chattr +i` works here (root on a file system with immutable files): an immutable file
/// cannot be opened for writing, even by root.
let immutableFilesWork: Bool = {
    let dir = temporaryDirectory("chattr-probe")
    defer { try? FileManager.default.removeItem(at: dir) }
    let f = dir.appendingPathComponent("f")
    guard FileManager.default.createFile(atPath: f.path, contents: Data("x".utf8)),
          let r = try? runBlocking("/usr/bin/env", ["chattr", "+i", f.path]), r.status == 0 else { return false }
    let fd = open(f.path, O_RDWR)
    if fd >= 0 { close(fd) }
    _ = try? runBlocking("/usr/bin/env", ["chattr", "-i", f.path])
    return fd < 0
}()

/// storectl's exit codes for the operating system's refusals: 73 (a write to a store whose files
/// cannot be written; `export --output` and `generate --output` to a path that cannot be
/// written), 74 (output failing while being written: `export`, standard output on `/dev/full`)
/// and 75 (`migrate` while another process has the store open).
@Suite struct StorectlExitCodeTests {
    func emptyStore() async throws -> (dir: URL, store: String) {
        let dir = temporaryDirectory("exit-codes")
        let store = dir.appendingPathComponent("store").path
        let r = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(r.status == 0, "\(r.stderr)")
        return (dir, store)
    }

    /// A regular file, so that `<file>/x` cannot be created, even by root.
    func blocker(in dir: URL) throws -> String {
        let f = dir.appendingPathComponent("a-file").path
        #expect(FileManager.default.createFile(atPath: f, contents: Data("x".utf8)))
        return f
    }

    /// The store's data file is immutable: `import` cannot open it for writing (LMDB `EPERM`):
    /// exit 73, the message names the file, nothing is written; read-only commands still work.
    @Test(.enabled(if: immutableFilesWork, "needs chattr +i")) func importIntoAStoreThatCannotBeWrittenExits73() async throws {
        let (dir, store) = try await emptyStore()
        let data = dataFile(ofStore: URL(fileURLWithPath: store)).path
        defer {
            _ = try? runBlocking("/usr/bin/env", ["chattr", "-i", data])
            try? FileManager.default.removeItem(at: dir)
        }
        let input = dir.appendingPathComponent("in.ndjson")
        try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\n".utf8).write(to: input)
        #expect(try await run("/usr/bin/env", ["chattr", "+i", data]).status == 0)
        let r = try await storectl("import", store, input.path, "--quiet")
        #expect(r.status == 73, "\(r.status): \(r.stderr)")
        #expect(r.stderr.hasPrefix("storectl: error: "), "\(r.stderr)")
        #expect(r.stderr.contains(store), "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        // Readers are not affected; nothing was written.
        let info = try await storectl("info", store, "--json")
        #expect(info.status == 0, "\(info.stderr)")
        #expect(try JSONValue.parse(info.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["lastTransaction"] == .int(0))
        _ = try await run("/usr/bin/env", ["chattr", "-i", data])
        #expect(try await genreCount(store) == "0")
        #expect(try await storectl("import", store, input.path, "--quiet").status == 0)
        #expect(try await genreCount(store) == "1")
    }

    /// `export --output` to a path that cannot be created: exit 73, naming it; no file left.
    @Test func exportToAnUnwritablePathExits73() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = try blocker(in: dir)
        let out = file + "/Genre.csv"
        let r = try await storectl("export", store, "--entity", "Genre", "--format", "csv", "--output", out)
        #expect(r.status == 73, "\(r.status): \(r.stderr)")
        #expect(r.stderr.hasPrefix("storectl: error: \(out): "), "\(r.stderr)")
        #expect(r.stderr.contains("cannot create"), "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(!r.stderr.contains("exported"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["a-file", "store"])
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "x")
    }

    /// `generate --output` to a path that cannot be written: exit 73, naming it; nothing written.
    @Test func generateToAnUnwritablePathExits73() async throws {
        let dir = temporaryDirectory("exit-codes")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = try blocker(in: dir)
        let out = file + "/Model.swift"
        let r = try await storectl("generate", "--schema", librarySchemaDirectory.path, "--output", out)
        #expect(r.status == 73, "\(r.status): \(r.stderr)")
        #expect(r.stderr.hasPrefix("storectl: error: \(out): "), "\(r.stderr)")
        #expect(!r.stderr.contains("wrote"))
        #expect(r.stdout.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["a-file"])
        // A writable path works (the same command).
        let ok = dir.appendingPathComponent("Model.swift").path
        let w = try await storectl("generate", "--schema", librarySchemaDirectory.path, "--output", ok)
        #expect(w.status == 0 && w.stderr.hasPrefix("wrote \(ok)"), "\(w.stderr)")
    }

    /// A schema the generator cannot write Swift for is refused naming its file (`DIR/v1.json`),
    /// not the directory.
    @Test func generateNamesTheSchemaFileItRefuses() async throws {
        let dir = temporaryDirectory("generate-names-file")
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data(#"{"model":"m","version":1,"entities":[{"name":"Swift","attributes":[]}]}"#.utf8)
            .write(to: dir.appendingPathComponent("v1.json"))
        let r = try await storectl("generate", "--schema", dir.path)
        #expect(r.status == 65, "\(r.status): \(r.stderr)")
        #expect(r.stderr.contains(dir.appendingPathComponent("v1.json").path + ": entity 'Swift'"), "\(r.stderr)")
    }

    /// `generate` to standard output that cannot be written (`/dev/full`): exit 74 with the
    /// reason, as every other command; it exited 0, and a full disk left a cut file.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/dev/full"), "needs /dev/full"))
    func generateToAFullStandardOutputExits74() async throws {
        let r = try await run("/bin/sh", ["-c", "exec \"$0\" generate --schema \"$1\" > /dev/full",
                                          storectlPath, librarySchemaDirectory.path])
        #expect(r.status == 74, "\(r.status): \(r.stderr)")
        #expect(r.stderr.hasPrefix("storectl: error: cannot write to standard output: "), "\(r.stderr)")
    }

    /// `storectl` without a subcommand is a usage error (exit 64, the help on standard error), as
    /// `storectl cluster` alone is; it printed the help and exited 0.
    @Test func storectlWithoutASubcommandExits64() async throws {
        let r = try await storectl([])
        #expect(r.status == 64, "\(r.status): \(r.stderr)")
        #expect(r.stderr.hasPrefix("storectl: error: Missing subcommand"), "\(r.stderr)")
        #expect(r.stderr.contains("SUBCOMMANDS:"), "\(r.stderr)")
        #expect(r.stdout.isEmpty)
    }

    /// An export to standard output whose reader left (`| head -c1`) ends as SIGPIPE ends a Unix
    /// tool, exit 141, also with SIGPIPE ignored by the parent (a shell's `trap '' PIPE`, systemd's
    /// default): it reported an I/O error (exit 74, a message), unlike storectl's other outputs.
    @Test func anExportWhoseReaderLeftEndsBySIGPIPEWithSIGPIPEIgnored() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("genres.ndjson")
        try Data((0..<30_000).map { "{\"entity\":\"Genre\",\"name\":\"genre \($0)\"}\n" }.joined().utf8).write(to: input)
        let imported = try await storectl("import", store, input.path, "--quiet")
        #expect(imported.status == 0, "\(imported.stderr)")
        let r = try await run("/bin/bash", ["-c", """
            trap '' PIPE; "$0" export "$1" --entity Genre 2>"$2" | head -c1 >/dev/null; echo "${PIPESTATUS[0]}"
            """, storectlPath, store, dir.appendingPathComponent("stderr.txt").path])
        #expect(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "141", "\(r.stdout) \(r.stderr)")
        let stderr = try String(contentsOf: dir.appendingPathComponent("stderr.txt"), encoding: .utf8)
        #expect(!stderr.contains("error"), "\(stderr)")
    }

    /// `import --rejects` naming a directory: the rejects file cannot be made there, exit 73 as
    /// `export --output` and `generate --output` onto a directory (it exited 64, a usage error).
    @Test func importWithADirectoryAsRejectsFileExits73() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson")
        try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\n".utf8).write(to: input)
        let rejects = dir.appendingPathComponent("rejects")
        try FileManager.default.createDirectory(at: rejects, withIntermediateDirectories: false)
        let r = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", rejects.path,
                                   "--quiet")
        #expect(r.status == 73, "\(r.status): \(r.stderr)")
        #expect(r.stderr.contains("is a directory"), "\(r.stderr)")
        #expect(try await storectl("query", store, "--entity", "Genre", "--count").stdout
                    .trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    /// `export` whose output fails while being written (stdout on `/dev/full`: `ENOSPC`): exit 74.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/dev/full"), "needs /dev/full"))
    func exportFailingWhileWritingExits74() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson")
        try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\n".utf8).write(to: input)
        #expect(try await storectl("import", store, input.path, "--quiet").status == 0)
        for format in ["ndjson", "csv"] {
            let r = try await run("/bin/sh", ["-c", "exec \"$0\" export \"$1\" --entity Genre --format \"$2\" > /dev/full", storectlPath, store, format])
            #expect(r.status == 74, "\(format): \(r.status): \(r.stderr)")
            #expect(r.stderr.hasPrefix("storectl: error: "), "\(r.stderr)")
            #expect(r.stderr.split(separator: "\n").count == 1, "\(r.stderr)")
        }
        // The same export to a pipe succeeds.
        #expect(try await storectl("export", store, "--entity", "Genre").status == 0)
    }

    /// `migrate` (a dry run too) while this process has the store open: exit 75 naming this
    /// process, and the store is left as it was.
    @Test func migrateWhileAnotherProcessHasTheStoreOpenExits75() async throws {
        let dir = temporaryDirectory("exit-codes")
        defer { try? FileManager.default.removeItem(at: dir) }
        let all = try Schema.loadAll(directory: librarySchemaDirectory)
        let url = dir.appendingPathComponent("s")
        let v1 = try #require(all.first { $0.version == 1 })
        let s = try Store.open(at: url, schema: v1)
        _ = try await s.save { c in
            var r = Record(entity: try #require(v1.entity(named: "Genre")))
            r["name"] = .string("Folk")
            c.insert(r)
        }
        for extra in [["--dry-run"], []] {
            let r = try await storectl(["migrate", url.path, "--schema", librarySchemaDirectory.path] + extra)
            #expect(r.status == 75, "\(extra): \(r.status): \(r.stderr)")
            #expect(r.stderr.hasPrefix("storectl: error: "), "\(r.stderr)")
            #expect(r.stderr.contains("\(getpid())"), "\(r.stderr)")
        }
        s.close()
        // Untouched: still v1, still one transaction; a migration now succeeds.
        #expect(try await storectl("migrate", url.path, "--schema", librarySchemaDirectory.path, "--check").status == 10)
        #expect(try await storectl("migrate", url.path, "--schema", librarySchemaDirectory.path).status == 0)
        #expect(try await storectl("migrate", url.path, "--schema", librarySchemaDirectory.path, "--check").status == 0)
        // Migrating again is up to date, not an error: a deploy may migrate every time.
        let again = try await storectl("migrate", url.path, "--schema", librarySchemaDirectory.path)
        #expect(again.status == 0 && again.stdout.hasPrefix("up to date (v"), "\(again.stdout)\(again.stderr)")
        let json = try await storectl("migrate", url.path, "--schema", librarySchemaDirectory.path, "--json")
        #expect(json.status == 0 && json.stdout.contains(#""status":"upToDate""#), "\(json.stdout)")
    }

    /// A command whose output cannot be written (`> /dev/full`) exits 74 with the reason (not 0).
    @Test func aFailedWriteToStandardOutputExits74() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        for command in ["info", "query"] {
            let extra = command == "query" ? " --entity Genre --json" : ""
            let r = try await run("/bin/sh", ["-c", "'\(storectlPath)' \(command) '\(store)'\(extra) > /dev/full"])
            #expect(r.status == 74, "\(command): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("cannot write to standard output"), "\(r.stderr)")
        }
    }

    /// Standard error that cannot be written (`/dev/full`, or closed) changes nothing but the
    /// message: each command exits with its own code (it ended on SIGILL, exit 132, also after an
    /// import had committed).
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/dev/full"), "needs /dev/full"))
    func aStandardErrorThatCannotBeWrittenKeepsTheExitCode() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson")
        try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\n".utf8).write(to: input)
        for redirect in ["2>/dev/full", "2>&-"] {
            let missing = try await run("/bin/sh", ["-c", "exec \"$0\" show \"$1\" 99 \(redirect)", storectlPath, store])
            #expect(missing.status == 66, "\(redirect): \(missing.status)")
            let imported = try await run("/bin/sh", ["-c", "exec \"$0\" import \"$1\" \"$2\" \(redirect)",
                                                     storectlPath, store, input.path])
            #expect(imported.status == 0, "\(redirect): \(imported.status)")
        }
        #expect(try await storectl("query", store, "--entity", "Genre", "--count").stdout
                    .trimmingCharacters(in: .whitespacesAndNewlines) == "1")
    }

    /// Standard output closed: what the command prints fails as a write to a closed descriptor
    /// (exit 74, `Bad file descriptor`); no file the command opens takes its number (the first
    /// one opened did, and the output went into it: `Invalid argument`).
    @Test func aClosedStandardOutputIsReportedAsOne() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await run("/bin/sh", ["-c", "exec \"$0\" query \"$1\" --entity Genre --count >&-", storectlPath, store])
        #expect(r.status == 74 && r.stderr.contains("cannot write to standard output: Bad file descriptor"),
                "\(r.status): \(r.stderr)")
    }

    /// An argument that is not valid UTF-8 is refused (exit 64, naming it with its bytes escaped)
    /// before anything runs: it was read with U+FFFD in place of the bad byte, and `export
    /// --output` replaced a file of that other name.
    /// An empty store argument is a usage error for every subcommand (it named the current
    /// directory: `storectl compact "$STORE"` with `STORE` unset, run inside a store, squashed its
    /// history); so are an empty `--schema`, `--rejects` and input file name. Nothing is touched.
    @Test func anEmptyPathIsAUsageErrorNotTheCurrentDirectory() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("g.ndjson").path
        try Data(#"{"entity":"Genre","name":"Kept"}"#.utf8 + [0x0A]).write(to: URL(fileURLWithPath: input))
        #expect(try await storectl("import", store, input, "--quiet").status == 0)
        let schema = librarySchemaDirectory.path
        let cases: [([String], String)] = [
            (["compact", ""], "the store directory is empty"), (["info", ""], "the store directory is empty"),
            (["verify", ""], "the store directory is empty"), (["log", ""], "the store directory is empty"),
            (["show", "", "1"], "the store directory is empty"), (["replay", ""], "the store directory is empty"),
            (["query", "", "--entity", "Genre"], "the store directory is empty"),
            (["export", "", "--entity", "Genre"], "the store directory is empty"),
            (["import", "", input], "the store directory is empty"),
            (["migrate", "", "--schema", schema], "the store directory is empty"),
            (["init", "", "--schema", schema], "the store directory is empty"),
            (["init", dir.appendingPathComponent("new").path, "--schema", ""], "--schema is empty"),
            (["migrate", store, "--schema", ""], "--schema is empty"), (["generate", "--schema", ""], "--schema is empty"),
            (["import", store, ""], "an input file name is empty"),
            (["import", store, input, "--continue-on-error", "--rejects", ""], "--rejects is empty"),
            // Taken, it tagged the import's transactions with an id that names none.
            (["import", store, input, "--import-id", ""], "--import-id is empty"),
            // Ignored in silence: NDJSON records name their own entity.
            (["import", store, input, "--entity", "Genre"], "--entity names the entity of CSV files"),
            (["import", store, input, "--format", "ndjson", "--entity", "Genre"], "--entity names the entity of CSV files"),
        ]
        for (arguments, message) in cases {
            // Run inside the store's directory, where "" named the store.
            let r = try await run("/bin/sh", ["-c", "cd \"$1\" && shift && exec \"$@\"", "sh", store, storectlPath] + arguments)
            #expect(r.status == 64 && r.stderr.contains(message), "\(arguments): \(r.status) \(r.stderr)")
        }
        let info = try JSONValue.parse(try await storectl("info", store, "--json").stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(info["logEntries"] == .int(1) && info["lastTransaction"] == .int(1), "\(info)")
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("new").path))
    }

    @Test func anArgumentThatIsNotUTF8IsRefused() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let other = dir.appendingPathComponent("out\u{FFFD}.ndjson")
        try Data("precious\n".utf8).write(to: other)
        let r = try await run("/bin/sh", ["-c", "cd \"$1\" && exec \"$0\" export \"$2\" --entity Genre --output \"$(printf 'out\\377.ndjson')\"",
                                          storectlPath, dir.path, store])
        #expect(r.status == 64 && r.stderr.contains("argument 6 ('out\\xff.ndjson') is not valid UTF-8"), "\(r.status): \(r.stderr)")
        #expect(try String(contentsOf: other, encoding: .utf8) == "precious\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["out\u{FFFD}.ndjson", "store"])
        // Renaming is the advice for a file of that name only: a filter is no file.
        #expect(!r.stderr.contains("rename the file"), "\(r.stderr)")
        let filter = try await run("/bin/sh", ["-c", "exec \"$0\" query \"$1\" --entity Genre --where \"$(printf \"name == '\\377'\")\"",
                                               storectlPath, store])
        #expect(filter.status == 64 && filter.stderr.contains("is not valid UTF-8: storectl reads paths and values as " +
                                                              "UTF-8 text, so give it as UTF-8"), "\(filter.stderr)")
        let file = try await run("/bin/sh", ["-c", "cd \"$1\" && : > \"$(printf 'in\\377.ndjson')\" && exec \"$0\" import \"$2\" \"$(printf 'in\\377.ndjson')\"",
                                             storectlPath, dir.path, store])
        #expect(file.status == 64 && file.stderr.contains("rename the file (or the directory) to a UTF-8 name"),
                "\(file.stderr)")
    }

    /// The option parser's errors carry storectl's prefix; a negative number where a value or an
    /// argument is missing is named as what the parser took for an option (`show STORE -1` said
    /// only that the transaction was missing).
    @Test func parserErrorsArePrefixedAndANegativeNumberIsExplained() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await storectl("show", store, "-1")
        #expect(r.status == 64 && r.stderr.hasPrefix("storectl: error: Missing expected argument")
                && r.stderr.contains("'-1' is read as an option"), "\(r.stderr)")
        let batch = try await storectl("import", store, "in.ndjson", "--batch", "0")
        #expect(batch.status == 64 && batch.stderr.hasPrefix("storectl: error: --batch must be"), "\(batch.stderr)")
    }

    /// An open that must wait while another process holds the store exclusively (a bulk import
    /// does for its whole length) says whom it waits for, once, before it waits: it waited without
    /// a word, and a script could not tell a hang from a long bulk import.
    @Test func anOpenWaitingForAnExclusiveHolderSaysSo() async throws {
        let (dir, store) = try await emptyStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let holder = try Store.open(at: URL(fileURLWithPath: store), schema: try librarySchema())
        defer { holder.close() }
        let lock = try #require(holder.lock)
        #expect(lock.tryExclusive())
        // Judged once storectl blocks on the lock (its notice comes before it), not after a fixed
        // two seconds, which a starved storectl could spend starting.
        let errors = dir.appendingPathComponent("info.err").path
        let child = try ChildProcess.start(storectlPath, ["info", store], stderr: .file(errors))
        // Generous: in the whole parallel suite, a minute passed before a storectl started here
        // was seen blocked. It returns as soon as storectl blocks.
        let blocked = try await onOwnThread { waitUntilExitedOrBlockedOnALock(child, seconds: 600) }
        child.kill()
        _ = try await child.finished()
        lock.shared()
        let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
        #expect(blocked, "storectl did not wait for the lock: \(stderr)")
        #expect(stderr.contains("waiting for process \(getpid()), which holds the store exclusively"), "\(stderr)")
    }
}
