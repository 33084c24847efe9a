import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `storectl import` as a user runs it: references between input records, records refused
/// before anything is written (a null or over-long unique key), a record the store refuses at
/// its save, `--continue-on-error` with `--rejects`, and inputs and rejects files it must refuse.
@Suite struct StorectlImportTests {
    @Test func importReportsANullUniqueKeyBeforeWriting() async throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(#"{"entity":"Genre","name":null}"#.utf8).write(to: input)
        let r = try await storectl("import", store, input.path, "--quiet")
        #expect(r.status == 65)
        #expect(r.stderr.contains("in.ndjson:1: name:"), "\(r.stderr)")
    }

    /// A file name with control characters (an escape sequence, a line break) reaches the
    /// terminal and the rejects file escaped, as every other echoed name does: raw, it drove the
    /// terminal, and a line break split the rejects file's `# FILE:LINE` comment in two, so that
    /// the rejects file no longer imported.
    @Test func controlCharactersInFileNamesAreEscapedInMessages() async throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("bad\u{1B}[31mX\nY.ndjson").path
        try Data(#"{"entity":"Genre","name":"a"}\#n{"entity":"Genre","name":"a"}\#n{"entity":"Genre"}\#n"#.utf8)
            .write(to: URL(fileURLWithPath: input))
        let refused = try await storectl("import", store, input)
        #expect(refused.status == 65)
        #expect(!refused.stderr.contains("\u{1B}") && refused.stderr.contains(#"bad\u{1B}[31mX\nY.ndjson:2: name:"#),
                "\(refused.stderr)")
        #expect(refused.stderr.contains(#"(first at "# + dir.path + #"/bad\u{1B}[31mX\nY.ndjson:1)"#), "\(refused.stderr)")
        let rejects = dir.appendingPathComponent("rj\u{1B}[31mRED\nx.ndjson").path
        let kept = try await storectl("import", store, input, "--continue-on-error", "--rejects", rejects)
        #expect(kept.status == 0, "\(kept.stderr)")
        #expect(!kept.stdout.contains("\u{1B}") && kept.stdout.contains(#"rj\u{1B}[31mRED\nx.ndjson"#), "\(kept.stdout)")
        let comments = try String(contentsOfFile: rejects, encoding: .utf8).split(separator: "\n").filter { $0.hasPrefix("#") }
        #expect(comments.count == 2 && comments.allSatisfy { !$0.contains("\u{1B}") }, "\(comments)")
        // The rejects file imports again (its comments skipped) once its records are fixed.
        let fixed = try String(contentsOfFile: rejects, encoding: .utf8)
            .replacingOccurrences(of: #"{"entity":"Genre"}"#, with: #"{"entity":"Genre","name":"b"}"#)
            .replacingOccurrences(of: #"{"entity":"Genre","name":"a"}"#, with: #"{"entity":"Genre","name":"c"}"#)
        let again = dir.appendingPathComponent("fixed.ndjson").path
        try Data(fixed.utf8).write(to: URL(fileURLWithPath: again))
        let reimported = try await storectl("import", store, again, "--quiet")
        #expect(reimported.status == 0, "\(reimported.stderr)")
    }

    @Test func importResolvesReferencesToInputRecordsByIdAndOtherKeys() async throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        // The album is referenced by its mbid but given with an explicit id, after the track.
        let albumID = ObjectID.make(entityTag: 2)
        let lines = [
            #"{"entity":"Track","mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e0631","title":"t","durationSeconds":1,"addedAt":"2024-01-01T00:00:00Z","album":{"mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e0632"}}"#,
            #"{"entity":"Album","id":"\#(albumID)","mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e0632","title":"a"}"#,
        ]
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(lines.joined(separator: "\n").utf8).write(to: input)
        let r = try await storectl("import", store, input.path, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let c = try await storectl("query", store, "--entity", "Track", "--where", "album == '\(albumID)'", "--count")
        #expect(c.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1")
    }

    @Test func continueOnErrorSkipsLinksToRejectedRecords() async throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let lines = [
            #"{"entity":"Track","mbid":"7e66a91c-080f-5eea-aa6b-d2e7423e0631","title":"t","durationSeconds":1,"addedAt":"2024-01-01T00:00:00Z","genre":{"name":"Bad"}}"#,
            #"{"entity":"Genre","name":"Bad","oops":1}"#,
        ]
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(lines.joined(separator: "\n").utf8).write(to: input)
        let rejects = dir.appendingPathComponent("rejects").path
        let r = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", rejects, "--json", "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        let summary = try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(summary["rejected"] == .int(2))
        #expect(summary["records"] == .int(0))
    }

    @Test func rejectsFileThatCannotBeCreatedExits73() async throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(#"{"entity":"Genre","name":"a"}"#.utf8).write(to: input)
        let r = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", "/nonexistent/dir/rejects")
        #expect(r.status == 73)
    }

    /// An input the file system cannot read (`read(2)` failing with `EIO`: here a kernel file
    /// that answers every read so) is an I/O error, exit 74, not a bad record (it was exit 65,
    /// "1 bad record(s)", which a script does not retry).
    @Test func anInputThatCannotBeReadIsAnIOError() async throws {
        let dir = temporaryDirectory("imp-eio")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        // A sysfs attribute whose every read fails with EIO while runtime power management
        // does not autosuspend the device (the usual case); a machine with none fails here.
        let candidates = ["/sys/devices/software/power/autosuspend_delay_ms",
                          "/sys/devices/platform/power/autosuspend_delay_ms",
                          "/sys/devices/system/cpu/power/autosuspend_delay_ms"]
        let failing = candidates.first { path in
            let fd = open(path, O_RDONLY)
            guard fd >= 0 else { return false }
            defer { close(fd) }
            var byte: UInt8 = 0
            return read(fd, &byte, 1) < 0 && errno == EIO
        }
        let input = try #require(failing, "no file whose reads fail with EIO among \(candidates)")
        let r = try await storectl("import", store, input, "--format", "ndjson")
        #expect(r.status == 74, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("read error: Input/output error") && r.stderr.contains("could not be read"), "\(r.stderr)")
    }

    /// An output path through a symbolic link another user planted in a sticky directory anyone
    /// may write (`/tmp`) is refused, exit 73, and the file it points at is left alone: the
    /// kernel refuses a shell's `>` through it (`fs.protected_symlinks`), and storectl, which
    /// follows links itself, wrote through it (`--rejects`, `export --output`).
    @Test func anOutputThroughALinkAnotherUserPlantedInASharedDirectoryIsRefused() async throws {
        let dir = temporaryDirectory("imp-planted-link")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(#"{"entity":"Genre","nom":"a"}"#.utf8).write(to: input)
        // A sticky, world-writable directory (as /tmp is), owned by this user, holding links owned
        // by another (nobody) that point at a file of this user.
        let shared = dir.appendingPathComponent("shared")
        try FileManager.default.createDirectory(at: shared, withIntermediateDirectories: true)
        #expect(chmod(shared.path, 0o1777) == 0)
        let victim = dir.appendingPathComponent("victim")
        try Data("precious\n".utf8).write(to: victim)
        let nobody = try #require(getpwnam("nobody")).pointee.pw_uid
        for name in ["rejects", "export"] {
            let link = shared.appendingPathComponent(name).path
            #expect(symlink(victim.path, link) == 0)
            // Another owner than this process's and the directory's: as another user made it.
            #expect(lchown(link, nobody, gid_t(UInt32.max)) == 0, "lchown: \(String(cString: strerror(errno)))")
        }
        let imported = try await storectl("import", store, input.path, "--continue-on-error", "--rejects",
                                          shared.appendingPathComponent("rejects").path)
        #expect(imported.status == 73 && imported.stderr.contains("owned by another user"), "\(imported.status) \(imported.stderr)")
        let exported = try await storectl("export", store, "--entity", "Genre", "--output",
                                          shared.appendingPathComponent("export").path)
        #expect(exported.status == 73 && exported.stderr.contains("owned by another user"), "\(exported.status) \(exported.stderr)")
        #expect(try String(contentsOf: victim, encoding: .utf8) == "precious\n")
        // A link of this user's own there is written through, as before.
        let mine = shared.appendingPathComponent("mine").path
        #expect(symlink(dir.appendingPathComponent("mine-target").path, mine) == 0)
        #expect(try await storectl("export", store, "--entity", "Genre", "--output", mine).status == 0)
        #expect(FileManager.default.fileExists(atPath: dir.appendingPathComponent("mine-target").path))
    }

    /// `--rejects -` is a usage error (it made a file named `-`, where `export` and `generate`
    /// take `-` for standard output), and so is `--rejects /dev/stdout` with `--json` (the
    /// rejected lines came before the JSON summary on standard output). `/dev/stdout` alone
    /// writes the rejected lines there.
    @Test func rejectsOnStandardOutputGoWithoutJSON() async throws {
        let dir = temporaryDirectory("imp-rejects-stdout")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        try Data((#"{"entity":"Genre","nom":"a"}"# + "\n" + #"{"entity":"Genre","name":"b"}"#).utf8).write(to: input)
        let dash = try await run("/bin/bash", ["-c", #"cd "$1" && "$0" import "$2" "$3" --continue-on-error --rejects -"#,
                                               storectlPath, dir.path, store, input.path])
        #expect(dash.status == 64 && dash.stderr.contains("--rejects /dev/stdout"), "\(dash.status) \(dash.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("-").path))
        let mixed = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", "/dev/stdout", "--json")
        #expect(mixed.status == 64 && mixed.stderr.contains("--json"), "\(mixed.status) \(mixed.stderr)")
        let plain = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", "/dev/stdout", "--quiet")
        #expect(plain.status == 0 && plain.stdout.contains(#""nom":"a""#), "\(plain.status) \(plain.stdout) \(plain.stderr)")
    }

    /// `--rejects` naming one of the inputs is a usage error (64) and leaves the input whole;
    /// the rejects file is created only once the input is validated, so a failed import leaves
    /// none behind.
    @Test func aRejectsFileNamingAnInputIsRefused() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("genres.ndjson").path
        let original = try String(contentsOfFile: input, encoding: .utf8)
        let r = try await storectl("import", store, input, "--continue-on-error", "--rejects", input, "--quiet")
        #expect(r.status == 64, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("one of the inputs"), "\(r.stderr)")
        #expect(try String(contentsOfFile: input, encoding: .utf8) == original)
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let missing = try await storectl("import", dir.appendingPathComponent("no-store").path, input, "--continue-on-error", "--rejects", rejects)
        #expect(missing.status == 66, "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: rejects))
    }

    /// A pipe (or a directory) as input: exit 66 with the reason, nothing written. (The import
    /// reads its input twice: a pipe would be read empty the second time, and the import would
    /// exit 0, "imported 0 records".)
    @Test func aPipeOrADirectoryAsInputIsRefused() async throws {
        let (dir, store) = try await storeWithGenres()
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await storectl("import", store, "/dev/stdin", "--format", "ndjson", "--quiet", stdin: "{\"entity\":\"Genre\",\"name\":\"piped\"}\n")
        #expect(r.status == 66, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("not a regular file"), "\(r.stderr)")
        let d = try await storectl("import", store, dir.path, "--quiet")
        #expect(d.status == 66, "\(d.status) \(d.stderr)")
        #expect(d.stderr.contains("is a directory"), "\(d.stderr)")
        #expect(try await genreCount(store) == "5")
    }

    /// A unique key longer than LMDB's key limit is a bad record found by validation, at its
    /// line, with nothing written (not a failed save, without a line, after the batches before it
    /// were committed).
    @Test func aUniqueKeyOverTheKeyLimitIsFoundAtValidation() async throws {
        let dir = temporaryDirectory("import-long-unique-key")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        let long = String(repeating: "x", count: 600)
        try Data("{\"entity\":\"Genre\",\"name\":\"a\"}\n{\"entity\":\"Genre\",\"name\":\"b\"}\n{\"entity\":\"Genre\",\"name\":\"\(long)\"}\n".utf8).write(to: input)
        let r = try await storectl("import", store, input.path, "--batch", "1", "--quiet")
        #expect(r.status == 65, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("in.ndjson:3: name: unique key of 605 bytes exceeds LMDB's 511-byte key limit"), "\(r.stderr)")
        #expect(try await storectl("query", store, "--entity", "Genre", "--count").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    /// `--mode`: a bulk import into a new store says so; an unknown mode is a usage error; while
    /// another process (this one) has the store open, `bulk` is refused with exit 75 naming it
    /// and nothing is written, and `auto` imports batch by batch.
    @Test func modeChoosesBulkOrIncrementalAndBulkNeedsTheStoreToItself() async throws {
        let dir = temporaryDirectory("imp")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let sample = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path
        let bad = try await storectl("import", store, sample, "--mode", "fast", "--quiet")
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("--mode must be auto, bulk or incremental"), "\(bad.stderr)")
        func mode(_ r: ProcessResult) throws -> String? {
            guard case .string(let m)? = try JSONValue.parse(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["mode"]
            else { return nil }
            return m
        }
        let first = try await storectl("import", store, sample, "--quiet", "--json")
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try mode(first) == "bulk")

        let held = try Store.openExisting(at: URL(fileURLWithPath: store))
        defer { held.close() }
        let head = held.currentTransactionID
        let input = dir.appendingPathComponent("more.ndjson")
        try Data(#"{"entity":"Genre","name":"Zydeco"}"#.utf8).write(to: input)
        let refused = try await storectl("import", store, input.path, "--mode", "bulk", "--quiet")
        #expect(refused.status == 75)
        #expect(refused.stderr.contains("\(getpid())"), "\(refused.stderr)")
        #expect(held.currentTransactionID == head)
        let auto = try await storectl("import", store, input.path, "--quiet", "--json")
        #expect(auto.status == 0, "\(auto.stderr)")
        #expect(try mode(auto) == "incremental")
    }

    /// A record whose second unique key an object of the store holds passes the input check
    /// (its first key is new) and is refused by its save. The refusal names the record's file
    /// and line, and, when the batches before it committed, how many records of the import were
    /// written and its id, to run it again (it named an object id only, and said nothing of what
    /// was written); in bulk mode nothing is written. Run again once fixed, the import converges.
    @Test func aRecordTheStoreRefusesAtItsSaveIsReportedWithItsLine() async throws {
        let dir = temporaryDirectory("imp-refused")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schemaDir = try schemaDirectory(#"""
            {"model": "u", "version": 1, "entities": [
              {"name": "Thing", "attributes": [{"name": "key", "type": "string"}, {"name": "u", "type": "string"}],
               "uniques": [["key"], ["u"]]}]}
            """#, in: dir)
        var lines = (1...30).map { #"{"entity": "Thing", "key": "k\#($0)", "u": "u\#($0)"}"# }
        lines.append(#"{"entity": "Thing", "key": "b", "u": "x"}"#)
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(lines.joined(separator: "\n").utf8).write(to: input)
        let first = dir.appendingPathComponent("first.ndjson")
        try Data(#"{"entity": "Thing", "key": "a", "u": "x"}"#.utf8).write(to: first)
        for mode in ["incremental", "bulk"] {
            let store = dir.appendingPathComponent("s-\(mode)").path
            #expect(try await storectl("init", store, "--schema", schemaDir.path).status == 0)
            #expect(try await storectl("import", store, first.path, "--quiet").status == 0)
            let r = try await storectl("import", store, input.path, "--quiet", "--batch", "10", "--mode", mode)
            #expect(r.status == 65, "\(mode): exit \(r.status): \(r.stderr)")
            #expect(r.stderr.contains("in.ndjson:31: u: u=\"x\" is already used by"), "\(mode): \(r.stderr)")
            let count = try await storectl("query", store, "--entity", "Thing", "--count")
            if mode == "incremental" {
                #expect(r.stderr.contains("30 record(s) of this import were written before it stopped, in 3 transaction(s) (import id "),
                        "\(r.stderr)")
                #expect(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "31")
            } else {
                #expect(r.stderr.contains("nothing was written"), "\(r.stderr)")
                #expect(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1")
            }
        }
    }

    /// A line over the line limit is rejected with its reason alone in the rejects file (an
    /// empty line stood in its place, which is not the line).
    @Test func aLineOverTheLimitLeavesItsReasonAloneInTheRejectsFile() async throws {
        let dir = temporaryDirectory("imp-long-reject")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let long = #"{"entity":"Genre","name":""# + String(repeating: "x", count: 1_100_000) + "\"}"
        let input = dir.appendingPathComponent("in.ndjson")
        try Data((long + "\n" + #"{"entity":"Genre","name":"short"}"# + "\n").utf8).write(to: input)
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let r = try await storectl("import", store, input.path, "--quiet", "--max-line-mb", "1",
                                   "--continue-on-error", "--rejects", rejects)
        #expect(r.status == 0, "\(r.stderr)")
        let text = try String(contentsOfFile: rejects, encoding: .utf8)
        #expect(text == "# \(input.path):1: line of \(long.utf8.count) bytes exceeds the 1048576-byte limit\n", "\(text.debugDescription)")
    }

    /// An NDJSON rejects file imports again once its records are fixed: its `# FILE:LINE: reason`
    /// lines are comments (lines starting with `#` are skipped). They were malformed JSON, and
    /// counted as bad records.
    @Test func aFixedRejectsFileImportsAgain() async throws {
        let dir = temporaryDirectory("rejects-again")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(("{\"entity\":\"Genre\",\"name\":\"Rock\"}\n{\"entity\":\"Genre\",\"name\":5}\n" +
                  "  # a comment of the input's own\n{\"entity\":\"Genre\",\"name\":true}\n").utf8).write(to: input)
        let rejects = dir.appendingPathComponent("rejects.ndjson").path
        let first = try await storectl("import", store, input.path, "--continue-on-error", "--rejects", rejects, "--quiet")
        #expect(first.status == 0, "\(first.stderr)")
        let fixed = try String(contentsOfFile: rejects, encoding: .utf8)
            .replacingOccurrences(of: "\"name\":5", with: "\"name\":\"Five\"")
            .replacingOccurrences(of: "\"name\":true", with: "\"name\":\"True\"")
        #expect(fixed.hasPrefix("# "), "\(fixed)")
        let again = dir.appendingPathComponent("fixed.ndjson")
        try Data(fixed.utf8).write(to: again)
        let second = try await storectl("import", store, again.path, "--quiet")
        #expect(second.status == 0, "\(second.stderr)")
        let names = try await storectl("query", store, "--entity", "Genre", "--count")
        #expect(names.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "3", "\(names.stdout)")
    }
}
