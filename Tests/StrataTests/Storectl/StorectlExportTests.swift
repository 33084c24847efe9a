import Foundation
import Testing
@testable import Strata

/// `storectl export` of several entities (`--entity` repeated, or `--all`): from one snapshot,
/// to one NDJSON output or a file per entity in `--output-dir`, each file renamed into place
/// only after all are written; the files import again in any order to the same records. Option
/// combinations that cannot work are usage errors (exit 64) found before anything is written.
@Suite struct StorectlExportTests {
    /// A store `s` in a new directory, holding the sample library.
    func makeStore(_ name: String) async throws -> (dir: URL, store: String) {
        let dir = temporaryDirectory(name)
        let store = dir.appendingPathComponent("s").path
        let made = try await storectl("init", store, "--schema", librarySchemaDirectory.path)
        #expect(made.status == 0, "\(made.stderr)")
        let sample = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path
        let r = try await storectl("import", store, sample, "--quiet")
        #expect(r.status == 0, "\(r.stderr)")
        return (dir, store)
    }

    /// Every record of `store` as sorted NDJSON lines.
    func allLines(_ store: String) async throws -> [Substring] {
        let r = try await storectl("export", store, "--all")
        #expect(r.status == 0, "\(r.stderr)")
        return r.stdout.split(separator: "\n").sorted()
    }

    /// `--all --format csv --output-dir`: a file per entity named after it, each listed with its
    /// count and the one transaction; imported in the reverse of the schema's order into an
    /// empty store, they give the same records. `--all` to standard output is one NDJSON stream
    /// that imports the same way.
    @Test func allEntitiesRoundTripThroughAFilePerEntityAndOneStream() async throws {
        let (dir, store) = try await makeStore("export-all")
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("dump").path
        let r = try await storectl("export", store, "--all", "--format", "csv", "--output-dir", out)
        #expect(r.status == 0, "\(r.stderr)")
        let names = ["Artist", "Album", "Track", "Genre", "Playlist"]
        #expect(try FileManager.default.contentsOfDirectory(atPath: out).sorted() == names.map { "\($0).csv" }.sorted())
        for name in names { #expect(r.stderr.contains("\(name) record(s) to \(out)/\(name).csv"), "\(r.stderr)") }
        #expect(r.stderr.contains("as of transaction 1"), "\(r.stderr)")
        // The directory's name echoed with its control characters escaped, as every echoed
        // path is (an escape sequence reached the terminal).
        let odd = dir.appendingPathComponent("d\u{1B}[2J").path
        let escaped = try await storectl("export", store, "--entity", "Genre", "--entity", "Artist", "--output-dir", odd)
        #expect(escaped.status == 0 && !escaped.stderr.contains("\u{1B}"), "\(escaped.stderr)")
        #expect(escaped.stderr.contains("Genre record(s) to "), "\(escaped.stderr)")

        let copy = dir.appendingPathComponent("copy").path
        #expect(try await storectl("init", copy, "--schema", librarySchemaDirectory.path).status == 0)
        let imported = try await storectl(["import", copy, "--quiet"] + names.reversed().map { "\(out)/\($0).csv" })
        #expect(imported.status == 0, "\(imported.stderr)")
        let original = try await allLines(store)
        #expect(original.count == 406)
        #expect(try await allLines(copy) == original)

        let stream = dir.appendingPathComponent("all.ndjson")
        let all = try await storectl("export", store, "--all", "--output", stream.path)
        #expect(all.status == 0, "\(all.stderr)")
        let third = dir.appendingPathComponent("third").path
        #expect(try await storectl("init", third, "--schema", librarySchemaDirectory.path).status == 0)
        let again = try await storectl("import", third, stream.path, "--quiet")
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try await allLines(third) == original)
    }

    /// Repeated `--entity` exports those, each once; with `--output-dir` a single entity keeps
    /// its `--where`.
    @Test func repeatedEntitiesAndOneEntityIntoADirectory() async throws {
        let (dir, store) = try await makeStore("export-entities")
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await storectl("export", store, "--entity", "Genre", "--entity", "Artist", "--entity", "Genre")
        #expect(r.status == 0, "\(r.stderr)")
        let entities = try r.stdout.split(separator: "\n").map { try JSONValue.parse(String($0))["entity"] }
        #expect(entities.count == 12 + 25)
        #expect(entities.prefix(12).allSatisfy { $0 == .string("Genre") })
        #expect(entities.suffix(25).allSatisfy { $0 == .string("Artist") })

        let out = dir.appendingPathComponent("long").path
        let long = try await storectl("export", store, "--entity", "Track", "--where", "durationSeconds > 400",
                                      "--output-dir", out)
        #expect(long.status == 0, "\(long.stderr)")
        let lines = try String(contentsOfFile: out + "/Track.ndjson", encoding: .utf8).split(separator: "\n")
        #expect(!lines.isEmpty)
        for line in lines {
            guard case .int(let d)? = try JSONValue.parse(String(line))["durationSeconds"] else {
                Issue.record("no duration: \(line)")
                continue
            }
            #expect(d > 400)
        }
    }

    /// Usage errors, exit 64, with nothing written: no entity; `--entity` with `--all`;
    /// `--output` with `--output-dir`; `--where` with several entities; CSV of several entities
    /// without `--output-dir`; an unknown entity among several (files already in the directory
    /// are left as they were); a directory inside the store.
    @Test func impossibleCombinationsAreUsageErrorsAndWriteNothing() async throws {
        let (dir, store) = try await makeStore("export-usage")
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: false)
        let kept = Data("old\n".utf8)
        try kept.write(to: out.appendingPathComponent("Genre.ndjson"))
        let cases: [([String], String)] = [
            ([], "--entity NAME"),
            (["--all", "--entity", "Genre"], "not both"),
            (["--all", "--output", "x", "--output-dir", out.path], "not both"),
            (["--entity", "Genre", "--entity", "Track", "--where", "name = 'x'"], "--where"),
            (["--all", "--format", "csv"], "--output-dir"),
            (["--entity", "Genre", "--entity", "Horse", "--output-dir", out.path], "unknown entity 'Horse'"),
            (["--all", "--output-dir", store + "/dump"], "inside the store directory"),
            // As an empty --output is (it was exit 73, "cannot make the directory").
            (["--all", "--output-dir", ""], "--output-dir: the path is empty"),
        ]
        for (arguments, message) in cases {
            let r = try await storectl(["export", store] + arguments)
            #expect(r.status == 64, "\(arguments): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains(message), "\(arguments): \(r.stderr)")
            #expect(r.stdout.isEmpty, "\(arguments)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: out.path) == ["Genre.ndjson"])
        #expect(try Data(contentsOf: out.appendingPathComponent("Genre.ndjson")) == kept)
        #expect(!FileManager.default.fileExists(atPath: store + "/dump"))

        // Refused before the directory is made: a bad filter of the one entity it would hold.
        let missing = dir.appendingPathComponent("never").path
        let bad = try await storectl("export", store, "--entity", "Album", "--where", "bogus > 1", "--output-dir", missing)
        #expect(bad.status == 64, "\(bad.stderr)")
        #expect(!FileManager.default.fileExists(atPath: missing))
        // Two entities whose files are one (a link from one name to the other): both would be
        // written to it, the second over the first.
        let linked = dir.appendingPathComponent("linked")
        try FileManager.default.createDirectory(at: linked, withIntermediateDirectories: false)
        #expect(symlink("Album.ndjson", linked.appendingPathComponent("Track.ndjson").path) == 0)
        let same = try await storectl("export", store, "--all", "--output-dir", linked.path)
        #expect(same.status == 64, "\(same.stderr)")
        #expect(same.stderr.contains("the same file as Album's"), "\(same.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: linked.path) == ["Track.ndjson"])
    }

    /// A write that fails on the last file (a full disk, here `/dev/full` behind its name)
    /// replaces none of the files, and no partial file is left; the exit is 74. `--all` to
    /// standard output names its transaction on stderr.
    @Test func aFailedWriteReplacesNoneOfTheFiles() async throws {
        let (dir, store) = try await makeStore("export-full")
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: false)
        let old = Data("old\n".utf8)
        for name in ["Artist", "Album", "Genre", "Playlist"] {
            try old.write(to: out.appendingPathComponent("\(name).ndjson"))
        }
        #expect(symlink("/dev/full", out.appendingPathComponent("Track.ndjson").path) == 0)
        let r = try await storectl("export", store, "--all", "--output-dir", out.path)
        #expect(r.status == 74, "\(r.stderr)")
        #expect(r.stderr.contains("No space left on device"), "\(r.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: out.path).sorted()
                == ["Album.ndjson", "Artist.ndjson", "Genre.ndjson", "Playlist.ndjson", "Track.ndjson"])
        for name in ["Artist", "Album", "Genre", "Playlist"] {
            #expect(try Data(contentsOf: out.appendingPathComponent("\(name).ndjson")) == old, "\(name)")
        }

        let stdout = try await storectl("export", store, "--all")
        #expect(stdout.status == 0, "\(stdout.stderr)")
        #expect(stdout.stderr.contains("as of transaction 1"), "\(stdout.stderr)")
    }

    /// In a sticky directory, another user's file cannot be renamed over: found when the files
    /// are opened, so none is replaced (it was found at the renames, after the first files had
    /// been replaced). Run as an unprivileged user, since root may replace any file.
    @Test(.enabled(if: TestUser.isRoot, "needs root to make files of two users"))
    func anotherUsersFileInAStickyDirectoryIsRefusedBeforeAnyIsWritten() async throws {
        let nobody = try #require(TestUser.nobody, "no user nobody / group nogroup")
        let dir = try TestUser.unprivileged.ownedDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(chmod(dir.path, 0o755) == 0)
        let store = dir.appendingPathComponent("s").path
        let sample = repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path
        #expect(try await TestUser.unprivileged.storectl(["init", store, "--schema", librarySchemaDirectory.path]).status == 0)
        #expect(try await TestUser.unprivileged.storectl(["import", store, sample, "--quiet"]).status == 0)
        let sticky = temporaryDirectory("export-sticky")
        defer { try? FileManager.default.removeItem(at: sticky) }
        #expect(chmod(sticky.path, 0o1777) == 0)
        let old = Data("old\n".utf8)
        for name in ["Artist", "Album", "Track", "Genre", "Playlist"] {
            let file = sticky.appendingPathComponent("\(name).ndjson")
            try old.write(to: file)
            #expect(chmod(file.path, 0o666) == 0)
        }
        // The first file is the unprivileged user's; the second, root's, is the one refused.
        #expect(chown(sticky.appendingPathComponent("Artist.ndjson").path, nobody.uid, nobody.gid) == 0)
        let r = try await TestUser.unprivileged.storectl(["export", store, "--all", "--output-dir", sticky.path])
        #expect(r.status == 73, "\(r.stderr)")
        #expect(r.stderr.contains("Album.ndjson: cannot replace it"), "\(r.stderr)")
        for name in ["Artist", "Album", "Track", "Genre", "Playlist"] {
            #expect(try Data(contentsOf: sticky.appendingPathComponent("\(name).ndjson")) == old, "\(name)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: sticky.path).count == 5)
    }
}
