import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A `.json` file whose top level is an array of objects (one line or pretty-printed) imports as
/// its objects would from NDJSON, read one object at a time; a broken array is reported with the
/// line where it breaks.
@Suite struct JSONArrayImportTests {
    private func file(_ text: String, _ dir: URL, _ name: String = "dump.json") throws -> String {
        let url = dir.appendingPathComponent(name)
        try Data(text.utf8).write(to: url)
        return url.path
    }

    private func genres(_ store: Store) throws -> Set<String> {
        Set(try store.mainContext.fetch(Genre.self).map(\.name))
    }

    @Test func aPrettyPrintedArrayImportsObjectByObject() async throws {
        let dir = temporaryDirectory("json-array")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            // Strings holding brackets, braces, commas, escaped quotes and a backslash; nesting.
            let input = try file("""
            \u{FEFF}  [
              {
                "entity": "Genre",
                "name": "Rock [live], {x}"
              },
              {"entity": "Genre", "name": "Say \\"hi\\" \\\\ ]"},
              {
                "entity": "Playlist", "name": "P", "createdAt": "2021-11-02T22:15:00Z",
                "tracks": []
              }
            ]

            """, dir)
            let summary = try await Importer(store: store).run(files: [input])
            #expect(summary.records == 3)
            #expect(try genres(store) == ["Rock [live], {x}", #"Say "hi" \ ]"#])
            #expect(try store.mainContext.count(Playlist.self) == 1)
        }
    }

    /// A raw line break inside a string is refused, as in a line of NDJSON (JSON writes it
    /// `\n`); it was turned into a space, changing the value. A file starting with a byte 0xEF
    /// that is no byte order mark is refused too (two bytes after it were skipped unread).
    @Test func aLineBreakInsideAStringIsRefusedNotChanged() async throws {
        let dir = temporaryDirectory("json-array-newline")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let input = try file("[{\"entity\": \"Genre\", \"name\": \"x\ny\"}]\n", dir)
            await #expect(throws: ImportFailed.self) { _ = try await Importer(store: store).run(files: [input]) }
            #expect(try genres(store).isEmpty)
            let bad = try file("\u{EF}xx[{\"entity\": \"Genre\", \"name\": \"x\"}]\n", dir, "bad.json")
            await #expect(throws: ImportFailed.self) { _ = try await Importer(store: store).run(files: [bad]) }
            #expect(try genres(store).isEmpty)
        }
    }

    @Test func aOneLineArrayMixesWithNDJSONFiles() async throws {
        let dir = temporaryDirectory("json-array")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let array = try file(#"[{"entity":"Genre","name":"A"},{"entity":"Genre","name":"B"}]"#, dir)
            let lines = try file(#"{"entity":"Genre","name":"C"}"# + "\n", dir, "more.ndjson")
            let summary = try await Importer(store: store).run(files: [array, lines])
            #expect(summary.records == 3)
            #expect(try genres(store) == ["A", "B", "C"])
        }
    }

    /// Bad records in an array are rejected with the line they start on, and go to the rejects
    /// file as one line each.
    @Test func aBadObjectIsRejectedWithTheLineItStartsOn() async throws {
        let dir = temporaryDirectory("json-array")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let input = try file("""
            [
              {"entity": "Genre", "name": "A"},
              {
                "entity": "Genre",
                "nom": "B"
              },
              {"entity": "Genre", "name": "C"}
            ]
            """, dir)
            do {
                _ = try await Importer(store: store).run(files: [input])
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.map(\.line) == [3], "\(failed.issues)")
            }
            var options = ImportOptions()
            options.continueOnError = true
            options.rejectsPath = dir.appendingPathComponent("rejects.txt").path
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 2 && summary.rejected == 1)
            let rejects = try String(contentsOfFile: options.rejectsPath!, encoding: .utf8)
            let lines = rejects.split(separator: "\n")
            #expect(lines.count == 2 && lines[0].contains("dump.json:3"), "\(rejects)")
            #expect(lines.last.map { $0.hasPrefix("{") && $0.contains(#""nom": "B""#) } == true, "\(rejects)")
        }
    }

    /// Malformed JSON inside an object of a pretty-printed array is reported on its own line of
    /// the file (the object's line breaks were turned into spaces before it was parsed, so every
    /// problem was reported on the object's first line, at a column counted through the object).
    /// The rejects file still holds the object on one line.
    @Test func malformedJSONInsideAnObjectIsReportedOnItsOwnLine() async throws {
        let dir = temporaryDirectory("json-array-malformed-line")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let input = try file("""
            [
              {"entity": "Genre", "name": "A"},
              {
                "entity": "Genre",
                "name": tru
              }
            ]
            """, dir)
            do {
                _ = try await Importer(store: store).run(files: [input])
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.map(\.line) == [5], "\(failed.issues)")
                #expect(failed.issues.first?.reason.contains("column 13") == true, "\(failed.issues)")
            }
            var options = ImportOptions()
            options.continueOnError = true
            options.rejectsPath = dir.appendingPathComponent("rejects.txt").path
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 1 && summary.rejected == 1)
            let lines = try String(contentsOfFile: options.rejectsPath!, encoding: .utf8).split(separator: "\n")
            #expect(lines.count == 2 && lines[0].contains("dump.json:5") && lines[1].contains(#""name": tru"#), "\(lines)")
        }
    }

    /// The objects of an array on one line are each a record of their own when one of them is
    /// rejected: a key of file and line alone gave them one place, so the bad one's rejection
    /// took the good ones with it (records 0, the rejects file holding all three under its reason).
    @Test func aBadObjectOfAOneLineArrayIsRejectedAlone() async throws {
        let dir = temporaryDirectory("json-array-one-line")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let input = try file(#"[{"entity":"Genre","name":"A"},{"entity":"Genre","nom":"B"},{"entity":"Genre","name":"C"}]"#,
                                 dir)
            var options = ImportOptions()
            options.continueOnError = true
            options.rejectsPath = dir.appendingPathComponent("rejects.txt").path
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 2 && summary.rejected == 1, "\(summary)")
            #expect(try genres(store) == ["A", "C"])
            let rejects = try String(contentsOfFile: options.rejectsPath!, encoding: .utf8).split(separator: "\n")
            #expect(rejects.count == 2 && rejects[1].contains(#""nom":"B""#), "\(rejects)")
        }
    }

    @Test(arguments: [
        (#"[{"entity":"Genre","name":"A"} {"entity":"Genre","name":"B"}]"#, 1, "expected ',' or ']'"),
        ("[\n{\"entity\":\"Genre\",\"name\":\"A\"},\n42\n]", 3, "expected an object in the array"),
        (#"[{"entity":"Genre","name":"A"}] x"#, 1, "after the array"),
        ("[\n{\"entity\":\"Genre\",\"name\":\"A\"},\n", 3, "a ']' is missing"),
        ("[\n{\"entity\":\"Genre\",\n\"name\":\"A\"", 3, "ends inside an object that starts on line 2"),
        ("[\n{\"entity\":\"Genre\",\"name\":\"A\"},\n]", 3, "JSON allows no comma after the last element"),
        (#"[,{"entity":"Genre","name":"A"}]"#, 1, "expected an object in the array, found ','"),
        (#"[{"entity":"Genre","name":"A"},,{"entity":"Genre","name":"B"}]"#, 1, "expected an object in the array, found ','"),
    ])
    /// A broken array is reported where it breaks and nothing is written, also when bad records
    /// are tolerated: the records after the break are neither read nor rejected, so the import
    /// stops, as for a CSV header it cannot read. (Tolerated, the break was rejected as one bad
    /// record and the import succeeded without the rest of the file.)
    func aBrokenArrayIsReportedWhereItBreaks(text: String, line: Int, reason: String) async throws {
        let dir = temporaryDirectory("json-array")
        defer { try? FileManager.default.removeItem(at: dir) }
        for tolerate in [false, true] {
            try await withLibraryStore { store in
                let input = try file(text, dir)
                var options = ImportOptions()
                options.continueOnError = tolerate
                if tolerate { options.rejectsPath = dir.appendingPathComponent("rejects.ndjson").path }
                do {
                    _ = try await Importer(store: store, options: options).run(files: [input])
                    Issue.record("the import was accepted (continueOnError: \(tolerate))")
                } catch let failed as ImportFailed {
                    #expect(failed.issues.contains { $0.line == line && $0.reason.contains(reason) && $0.endsTheFile },
                            "\(failed.issues)")
                }
                #expect(try store.lastTransactionID == TransactionID(0))
            }
        }
    }

    /// storectl exits 65 for a broken array with `--continue-on-error`, saying the file cannot be
    /// read as records; it exited 0 having imported the records before the break.
    @Test func storectlStopsAtABrokenArrayWhenBadRecordsAreTolerated() async throws {
        let dir = temporaryDirectory("json-array-storectl")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = try file("[{\"entity\":\"Genre\",\"name\":\"A\"},\n{\"entity\":\"Genre\",\"name\":\"B\"}\n" +
                             "{\"entity\":\"Genre\",\"name\":\"C\"},\n{\"entity\":\"Genre\",\"name\":7}]\n", dir)
        let r = try await storectl("import", store, input, "--continue-on-error", "--rejects",
                                   dir.appendingPathComponent("rejects.ndjson").path, "--quiet")
        #expect(r.status == 65 && r.stderr.contains("cannot be read as records") && r.stderr.contains("nothing was written"),
                "\(r.status) \(r.stderr)")
        #expect(try await storectl("query", store, "--entity", "Genre", "--count").stdout
                    .trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    @Test func anObjectOverTheLimitIsReportedWithoutBeingHeld() async throws {
        let dir = temporaryDirectory("json-array")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let long = String(repeating: "x", count: 5000)
            let input = try file(#"[{"entity":"Genre","name":"\#(long)"}, {"entity":"Genre","name":"B"}]"#, dir)
            var options = ImportOptions()
            options.maxLineBytes = 1000
            do {
                _ = try await Importer(store: store, options: options).run(files: [input])
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.count == 1 && failed.issues[0].reason.contains("exceeds the 1000-byte limit"),
                        "\(failed.issues)")
            }
        }
    }

    @Test func anNDJSONLineThatIsNotAnObjectSaysWhatIsExpected() async throws {
        let dir = temporaryDirectory("json-array")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let input = try file("{\"entity\":\"Genre\",\"name\":\"A\"}\n[1, 2]\n", dir, "in.ndjson")
            do {
                _ = try await Importer(store: store).run(files: [input])
                Issue.record("the import was accepted")
            } catch let failed as ImportFailed {
                #expect(failed.issues.first?.reason.contains("a .json file may instead hold one array") == true,
                        "\(failed.issues)")
            }
        }
    }
}
