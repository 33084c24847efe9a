import Foundation
import Testing
@testable import Strata

/// Files storectl writes for the user (`export --output`, `import --rejects`, `generate
/// --output`) never land inside a store directory or on one of its files, however the path
/// gets there: directly, through `..`, through a symbolic link (also one pointing at nothing
/// yet), or as a hard link to a store file. Refused with exit 64 and a message naming the path
/// and why, before anything is created or truncated.
@Suite struct StorectlOutputPathTests {
    /// A directory holding a store `s` with the sample genres, and the store's path.
    func makeStore() async throws -> (dir: URL, store: String) {
        let dir = temporaryDirectory("output-path")
        let store = dir.appendingPathComponent("s").path
        let made = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(made.status == 0, "\(made.stderr)")
        let input = dir.appendingPathComponent("genres.ndjson")
        try Data((0..<5).map { "{\"entity\":\"Genre\",\"name\":\"g\($0)\"}\n" }.joined().utf8).write(to: input)
        let r = try await storectl("import", store, input.path, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        return (dir, store)
    }

    /// Every entry of the store's tree (symbolic links as their target text) with its bytes.
    func contents(_ store: String) throws -> [String: Data] {
        var out: [String: Data] = [:]
        let fm = FileManager.default
        for entry in try fm.subpathsOfDirectory(atPath: store) {
            let path = store + "/" + entry
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }
            switch st.st_mode & S_IFMT {
            case S_IFLNK: out[entry] = Data(try fm.destinationOfSymbolicLink(atPath: path).utf8)
            case S_IFREG: out[entry] = try Data(contentsOf: URL(fileURLWithPath: path))
            default: out[entry] = Data()
            }
        }
        return out
    }

    func generation(_ store: String) throws -> String {
        try FileManager.default.destinationOfSymbolicLink(atPath: store + "/current")
    }

    /// Paths into the store by every route: direct, `..`, a link to a store file, a link to the
    /// store directory, a dangling link into it, and a new file inside it.
    func routesIntoTheStore(_ dir: URL, _ store: String) throws -> [String] {
        let gen = try generation(store)
        let fm = FileManager.default
        try fm.createDirectory(at: dir.appendingPathComponent("elsewhere"), withIntermediateDirectories: true)
        let linkToData = dir.appendingPathComponent("link-to-data").path
        try fm.createSymbolicLink(atPath: linkToData, withDestinationPath: store + "/current/data.mdb")
        let linkToStore = dir.appendingPathComponent("link-to-store").path
        try fm.createSymbolicLink(atPath: linkToStore, withDestinationPath: "s")
        let dangling = dir.appendingPathComponent("dangling").path
        try fm.createSymbolicLink(atPath: dangling, withDestinationPath: "s/\(gen)/not-yet-there")
        return [
            store + "/current/data.mdb",
            store + "/\(gen)/lock.mdb",
            store + "/strata.lock",
            store + "/export.ndjson",
            dir.appendingPathComponent("elsewhere").path + "/../s/current/data.mdb",
            linkToData,
            linkToStore + "/current/data.mdb",
            dangling,
        ]
    }

    @Test func exportOutputIntoTheStoreIsRefusedByEveryRoute() async throws {
        let (dir, store) = try await makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let before = try contents(store)
        for path in try routesIntoTheStore(dir, store) {
            let r = try await storectl("export", store, "--entity", "Genre", "--output", path)
            #expect(r.status == 64, "\(path): exit \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("storectl: error: --output: \(path): is inside the store directory"), "\(path): \(r.stderr)")
            #expect(r.stdout.isEmpty)
            #expect(try contents(store) == before, "\(path): the store changed")
        }
        let count = try await storectl("query", store, "--entity", "Genre", "--count")
        #expect(count.status == 0 && count.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "5", "\(count.stderr)")
    }

    /// A symbolic link named `current` that is not a store's (a deploy layout's `current ->
    /// releases/…`) does not make the directory holding it a store: an output below it is
    /// written. It was refused as inside a store directory (exit 64). A `current` link beside
    /// a generation directory, or pointing at one, still is a store's.
    @Test func anOutputBelowALinkNamedCurrentThatIsNoStoresIsWritten() async throws {
        let (dir, store) = try await makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let fm = FileManager.default
        let app = dir.appendingPathComponent("app")
        try fm.createDirectory(at: app.appendingPathComponent("releases/r1"), withIntermediateDirectories: true)
        try fm.createDirectory(at: app.appendingPathComponent("shared"), withIntermediateDirectories: true)
        try fm.createSymbolicLink(atPath: app.appendingPathComponent("current").path, withDestinationPath: "releases/r1")
        let out = app.appendingPathComponent("shared/genres.ndjson").path
        let r = try await storectl("export", store, "--entity", "Genre", "--output", out)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").count == 5)
        // A directory with a `current` link to a generation's name is taken for a store.
        let other = dir.appendingPathComponent("other")
        try fm.createDirectory(at: other.appendingPathComponent("sub"), withIntermediateDirectories: true)
        try fm.createSymbolicLink(atPath: other.appendingPathComponent("current").path,
                                  withDestinationPath: "gen-0000000000000001")
        let refused = try await storectl("export", store, "--entity", "Genre", "--output",
                                         other.appendingPathComponent("sub/genres.ndjson").path)
        #expect(refused.status == 64, "\(refused.stderr)")
    }

    @Test func exportOutputThatIsAHardLinkToAStoreFileIsRefused() async throws {
        let (dir, store) = try await makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let gen = try generation(store)
        for file in ["\(gen)/data.mdb", "\(gen)/lock.mdb", "strata.lock"] {
            let link = dir.appendingPathComponent("hard-\(file.replacingOccurrences(of: "/", with: "-"))").path
            #expect(Glibc.link(store + "/" + file, link) == 0, "link: \(String(cString: strerror(errno)))")
            let before = try contents(store)
            let r = try await storectl("export", store, "--entity", "Genre", "--output", link)
            #expect(r.status == 64, "\(file): exit \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("is the store's file \(file) under another name (a hard link)"), "\(r.stderr)")
            #expect(try contents(store) == before)
        }
    }

    /// Bad lines with `--continue-on-error` and the rejects file on the store's data file (or
    /// any other route into the store, or a hard link to `data.mdb`): refused with exit 64,
    /// nothing written, `data.mdb` left as it was.
    @Test func importRejectsIntoTheStoreIsRefusedAndNothingIsWritten() async throws {
        let (dir, store) = try await makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("bad.ndjson").path
        try Data("{\"entity\":\"Genre\",\"name\":\"new\"}\nnot json\n".utf8).write(to: URL(fileURLWithPath: input))
        let gen = try generation(store)
        let hard = dir.appendingPathComponent("hard-data").path
        #expect(Glibc.link(store + "/\(gen)/data.mdb", hard) == 0)
        let before = try contents(store)
        for path in try routesIntoTheStore(dir, store) + [hard] {
            let r = try await storectl("import", store, input, "--continue-on-error", "--rejects", path, "--quiet")
            #expect(r.status == 64, "\(path): exit \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("storectl: error: --rejects: \(path): "), "\(path): \(r.stderr)")
            #expect(r.stderr.contains("is inside the store directory") || r.stderr.contains("(a hard link)"), "\(r.stderr)")
            #expect(try contents(store) == before, "\(path): the store changed")
        }
        let info = try await storectl("info", store, "--json")
        #expect(info.status == 0, "\(info.stderr)")
        #expect(try JSONValue.parse(info.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["lastTransaction"] == .int(1))
        // Outside the store it goes ahead.
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let ok = try await storectl("import", store, input, "--continue-on-error", "--rejects", rejects, "--quiet")
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(try String(contentsOfFile: rejects, encoding: .utf8).contains("not json"))
    }

    /// The library refuses the same rejects path (`ImportOptions.rejectsPath`) before writing.
    @Test func importerRefusesARejectsPathInsideTheStore() async throws {
        let dir = temporaryDirectory("output-path-lib")
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("s")
        let store = try Store.open(at: url, schema: try librarySchema())
        defer { store.close() }
        let input = dir.appendingPathComponent("in.ndjson").path
        try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\nbad\n".utf8).write(to: URL(fileURLWithPath: input))
        var options = ImportOptions()
        options.continueOnError = true
        options.rejectsPath = url.path + "/current/data.mdb"
        await #expect {
            _ = try await Importer(store: store, options: options).run(files: [input])
        } throws: { error in
            guard let failed = error as? ImportFailed else { return false }
            return failed.issues.contains { $0.field == "rejectsPath" && $0.reason.contains("is inside the store directory") }
        }
        #expect(try store.lastTransactionID == .zero)
    }

    /// `export --output` and `generate --output` on a symbolic link that points at nothing yet
    /// write through it, as they do through a link to a file: the link stays a link and its
    /// target is made (the link itself was replaced by the new file).
    @Test func outputThroughADanglingSymbolicLinkMakesItsTarget() async throws {
        let (dir, store) = try await makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let fm = FileManager.default
        for (name, command) in [("export", ["export", store, "--entity", "Genre", "--output"]),
                                ("generate", ["generate", "--schema", librarySchemaDirectory.path, "--output"])] {
            let link = dir.appendingPathComponent("\(name)-link").path, target = "\(name)-target"
            try fm.createSymbolicLink(atPath: link, withDestinationPath: target)
            let r = try await storectl(command + [link])
            #expect(r.status == 0, "\(name): \(r.stderr)")
            #expect(try fm.destinationOfSymbolicLink(atPath: link) == target, "\(name)")
            #expect(fm.fileExists(atPath: dir.appendingPathComponent(target).path), "\(name)")
        }
    }

    /// `/dev/stdout` when standard output is a pipe (as here: the test reads it) is written in
    /// place by every writer: its link reads `pipe:[N]`, which is no path to write aside next to.
    @Test func outputToStandardOutputThatIsAPipeIsWrittenInPlace() async throws {
        let (dir, store) = try await makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let export = try await storectl("export", store, "--entity", "Genre", "--output", "/dev/stdout")
        #expect(export.status == 0 && export.stdout.contains(#""entity":"Genre""#), "\(export.stderr)")
        let input = dir.appendingPathComponent("one-bad.ndjson")
        try Data(#"{"entity": "Genre"}"#.utf8).write(to: input)
        let rejects = try await storectl("import", store, input.path, "--quiet", "--continue-on-error",
                                         "--rejects", "/dev/stdout")
        #expect(rejects.status == 0 && rejects.stdout.contains(#"{"entity": "Genre"}"#), "\(rejects.stderr)")
        let generator = URL(fileURLWithPath: storectlPath).deletingLastPathComponent().appendingPathComponent("strata-generate").path
        let generated = try await run(generator, ["100", "--output", "/dev/stdout"])
        #expect(generated.status == 0 && generated.stdout.hasPrefix("{"), "\(generated.stderr)")
    }

    /// `/dev/stdout` when the shell sent standard output to a file with `>>` is written through
    /// standard output itself, by every writer: the file keeps what it held, and is the same
    /// file afterwards. (Its link leads to the file, which was replaced by a file written aside,
    /// losing the earlier lines and the summary printed to standard output.)
    @Test func outputToStandardOutputAppendedToAFileKeepsTheFile() async throws {
        let (dir, store) = try await makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("one-bad.ndjson")
        try Data(#"{"entity": "Genre"}"#.utf8).write(to: input)
        let generator = URL(fileURLWithPath: storectlPath).deletingLastPathComponent()
            .appendingPathComponent("strata-generate").path
        let log = dir.appendingPathComponent("log.txt").path
        let cases: [(name: String, command: [String], expected: [String])] = [
            ("export", [storectlPath, "export", store, "--entity", "Genre", "--output", "/dev/stdout"],
             [#""entity":"Genre""#]),
            ("rejects", [storectlPath, "import", store, input.path, "--continue-on-error", "--rejects", "/dev/stdout"],
             [#"{"entity": "Genre"}"#, "rejected 1 record(s)"]),
            ("generate", [storectlPath, "generate", "--schema", librarySchemaDirectory.path, "--output", "/dev/stdout"],
             ["struct"]),
            ("strata-generate", [generator, "100", "--output", "/dev/stdout"], [#"{"entity""#]),
        ]
        for c in cases {
            try Data("old line\n".utf8).write(to: URL(fileURLWithPath: log))
            var before = stat()
            #expect(stat(log, &before) == 0)
            // `"$@" >> log`: the command's arguments as they are, standard output appended to the log.
            let r = try await run("/bin/sh", ["-c", "\"$@\" >> \"$LOG\"", "sh"] + c.command,
                                  environment: ["LOG": log])
            #expect(r.status == 0, "\(c.name): \(r.stderr)")
            var after = stat()
            #expect(stat(log, &after) == 0 && after.st_ino == before.st_ino, "\(c.name): the file was replaced")
            let text = try String(contentsOfFile: log, encoding: .utf8)
            #expect(text.hasPrefix("old line\n"), "\(c.name): \(text.prefix(200))")
            for e in c.expected { #expect(text.contains(e), "\(c.name): no \(e) in \(text.prefix(300))") }
        }
    }

    @Test func generateOutputIntoAStoreIsRefused() async throws {
        let (dir, store) = try await makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let before = try contents(store)
        for path in try routesIntoTheStore(dir, store) {
            let r = try await storectl("generate", "--schema", librarySchemaDirectory.path, "--output", path)
            #expect(r.status == 64, "\(path): exit \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("storectl: error: --output: \(path): is inside the store directory"), "\(path): \(r.stderr)")
            #expect(try contents(store) == before, "\(path): the store changed")
        }
        let beside = dir.appendingPathComponent("Model.swift").path
        let ok = try await storectl("generate", "--schema", librarySchemaDirectory.path, "--output", beside)
        #expect(ok.status == 0, "\(ok.stderr)")
    }
}

/// Output files that exist already: a directory is never replaced, a file is replaced whole,
/// symbolic links and devices are written through.
@Suite struct OutputFileTests {
    func isSymbolicLink(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK
    }

    /// `export --output` naming a directory leaves it as it was (exit 73; the store directory
    /// itself is refused as an output inside the store, exit 64): it is never removed to write
    /// the export in its place. A file is replaced whole, with no `.partial-` file left.
    @Test func exportNeverReplacesADirectory() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let before = generations(store)
        let r = try await storectl("export", store, "--entity", "Genre", "--output", store)
        #expect(r.status == 64, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("is the store directory"), "\(r.stderr)")
        #expect(generations(store) == before)
        #expect(try await genreCount(store) == "5")
        let other = dir.appendingPathComponent("out/sub")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: other.appendingPathComponent("keep").path, contents: Data("k".utf8)))
        #expect(try await storectl("export", store, "--entity", "Genre", "--output", dir.appendingPathComponent("out").path).status == 73)
        #expect(FileManager.default.fileExists(atPath: other.appendingPathComponent("keep").path))
        let file = dir.appendingPathComponent("g.ndjson").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("old\n".utf8)))
        #expect(try await storectl("export", store, "--entity", "Genre", "--output", file).status == 0)
        #expect(try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").count == 5)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).allSatisfy { !$0.contains(".partial-") })
    }

    /// Partial files that killed exports left beside their output: the next export to the same
    /// file removes those no process holds and not written for a minute, and leaves a partial
    /// file a running export holds, a recent one, and files merely named alike. (They piled up.)
    @Test func anExportRemovesThePartialFilesKilledExportsLeft() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("g.ndjson").path
        func partial(_ suffix: String, ageSeconds: Int) throws -> String {
            let path = out + ".partial-" + suffix
            #expect(FileManager.default.createFile(atPath: path, contents: Data("part\n".utf8)))
            let then = Date().addingTimeInterval(-TimeInterval(ageSeconds))
            try FileManager.default.setAttributes([.modificationDate: then], ofItemAtPath: path)
            return path
        }
        let killed = try [partial("999991", ageSeconds: 300), partial("999992", ageSeconds: 120),
                          partial("999995-1a2b3c4d", ageSeconds: 300)]
        let recent = try partial("999993", ageSeconds: 0)
        let alike = try partial("x1", ageSeconds: 300)
        let alsoAlike = try partial("999996-zz", ageSeconds: 300)
        let held = try partial("999994", ageSeconds: 300)
        let fd = open(held, O_RDONLY)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX) == 0, "an export running in another process holds its partial file")
        let r = try await storectl("export", store, "--entity", "Genre", "--output", out)
        #expect(r.status == 0, "\(r.stderr)")
        for path in killed { #expect(!FileManager.default.fileExists(atPath: path), "\(path) left") }
        for path in [recent, alike, alsoAlike, held] {
            #expect(FileManager.default.fileExists(atPath: path), "\(path) removed")
        }
        #expect(try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").count == 5)
    }

    /// The hidden rejects files that killed imports left: the next import with the same
    /// `--rejects` removes those no process holds and not written for a minute, as an export does
    /// its partial files, and leaves a held one, a recent one and files merely named alike.
    @Test func anImportRemovesTheRejectsFilesKilledImportsLeft() async throws {
        let dir = temporaryDirectory("rejects-leftovers")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await libraryStoreWithTwoGenres(in: dir)
        let rejects = dir.appendingPathComponent("rejects.txt").path
        func partial(_ suffix: String, ageSeconds: Int) throws -> String {
            let path = dir.appendingPathComponent(".rejects.txt.partial-" + suffix).path
            #expect(FileManager.default.createFile(atPath: path, contents: Data("# x\n".utf8)))
            let then = Date().addingTimeInterval(-TimeInterval(ageSeconds))
            try FileManager.default.setAttributes([.modificationDate: then], ofItemAtPath: path)
            return path
        }
        let killed = try [partial("999991-0A1B2C3D", ageSeconds: 300), partial("999992-DEADBEEF", ageSeconds: 120)]
        let recent = try partial("999993-0A1B2C3D", ageSeconds: 0)
        let alike = try [partial("999995", ageSeconds: 300), partial("x-0A1B2C3D", ageSeconds: 300)]
        let held = try partial("999994-0A1B2C3D", ageSeconds: 300)
        let fd = open(held, O_RDONLY)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX) == 0, "an import running in another process holds its rejects file")
        let input = dir.appendingPathComponent("bad.ndjson")
        try Data("{\"entity\":\"Genre\",\"name\":\"c\"}\nnot json\n".utf8).write(to: input)
        let r = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", rejects, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        for path in killed { #expect(!FileManager.default.fileExists(atPath: path), "\(path) left") }
        for path in [recent, held] + alike { #expect(FileManager.default.fileExists(atPath: path), "\(path) removed") }
        #expect(try String(contentsOfFile: rejects, encoding: .utf8).contains("not json"))
    }

    /// `export --output`, `import --rejects` and `generate --output` naming a symbolic link write
    /// through it (a device such as `/dev/stdout` likewise); they never rename a new file over the
    /// link (as FileManager's atomic writes do), nor over `/dev/full` as root.
    @Test func outputsWriteThroughLinksAndDevices() async throws {
        let dir = temporaryDirectory("output-links")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await libraryStoreWithTwoGenres(in: dir)
        for (i, command) in ["export", "rejects", "generate"].enumerated() {
            let target = dir.appendingPathComponent("target-\(i)").path
            let link = dir.appendingPathComponent("link-\(i)").path
            #expect(FileManager.default.createFile(atPath: target, contents: nil))
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
            let r: ProcessResult
            switch command {
            case "export": r = try await storectl("export", store, "--entity", "Genre", "--output", link)
            case "rejects":
                let input = dir.appendingPathComponent("bad.ndjson")
                try Data("{\"entity\":\"Genre\",\"name\":\"c\"}\nnot json\n".utf8).write(to: input)
                r = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", link, "--quiet")
            default: r = try await storectl("generate", "--schema", librarySchemaDirectory.path, "--output", link)
            }
            #expect(r.status == 0, "\(command): \(r.status) \(r.stderr)")
            #expect(isSymbolicLink(link), "\(command) replaced the link")
            #expect(try String(contentsOfFile: target, encoding: .utf8).isEmpty == false, "\(command) wrote nothing through the link")
        }
        let devnull = try await storectl("export", store, "--entity", "Genre", "--output", "/dev/null")
        #expect(devnull.status == 0, "\(devnull.stderr)")
        var st = stat()
        #expect(stat("/dev/null", &st) == 0 && (st.st_mode & S_IFMT) == S_IFCHR, "/dev/null is no longer a device")
        let full = try await storectl("export", store, "--entity", "Genre", "--output", "/dev/full")
        #expect(full.status == 74, "\(full.status) \(full.stderr)")
        #expect(full.stderr.contains("No space left on device"), "\(full.stderr)")
        #expect(stat("/dev/full", &st) == 0 && (st.st_mode & S_IFMT) == S_IFCHR, "/dev/full is no longer a device")
        let generate = try await storectl("generate", "--schema", librarySchemaDirectory.path, "--output", "/dev/full")
        #expect(generate.status == 74, "\(generate.status) \(generate.stderr)")
        #expect(generate.stderr.contains("No space left on device") && !generate.stderr.contains("NSCocoaErrorDomain"), "\(generate.stderr)")
    }

    /// A file `export --output` or `generate --output` replaces keeps its mode, also through a
    /// symbolic link (a 0600 file became 0644, the umask's, readable by everyone); an empty
    /// `--output` is a usage error (it was an I/O error, exit 73), and `-` is standard output (it
    /// made a file named `-`).
    @Test func aReplacedFileKeepsItsModeAndDashIsStandardOutput() async throws {
        let dir = temporaryDirectory("output-mode")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await libraryStoreWithTwoGenres(in: dir)
        func mode(_ path: String) -> mode_t {
            var st = stat()
            return stat(path, &st) == 0 ? st.st_mode & 0o7777 : 0
        }
        for (i, command) in ["export", "generate"].enumerated() {
            let target = dir.appendingPathComponent("private-\(i)").path
            let link = dir.appendingPathComponent("link-\(i)").path
            #expect(FileManager.default.createFile(atPath: target, contents: Data("old\n".utf8),
                                                   attributes: [.posixPermissions: 0o600]))
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
            for path in [target, link] {
                try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: target)
                let r = command == "export"
                    ? try await storectl("export", store, "--entity", "Genre", "--output", path)
                    : try await storectl("generate", "--schema", librarySchemaDirectory.path, "--output", path)
                #expect(r.status == 0, "\(command) \(path): \(r.stderr)")
                #expect(mode(target) == 0o640, "\(command) \(path): \(String(mode(target), radix: 8))")
                #expect(try String(contentsOfFile: target, encoding: .utf8) != "old\n")
            }
        }
        let empty = try await storectl("export", store, "--entity", "Genre", "--output", "")
        #expect(empty.status == 64 && empty.stderr.contains("the path is empty"), "\(empty.status) \(empty.stderr)")
        let before = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        for arguments in [["export", store, "--entity", "Genre"], ["generate", "--schema", librarySchemaDirectory.path]] {
            // Run in `dir`, where a file named `-` would be made.
            let r = try await run("/bin/sh", ["-c", "cd \"$1\" && shift && exec \"$0\" \"$@\" --output -", storectlPath,
                                              dir.path] + arguments)
            #expect(r.status == 0 && !r.stdout.isEmpty, "\(arguments[0]): \(r.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == before)
    }
}
