import Foundation
import LibraryModel
import Testing
@testable import Strata

/// An import reads each input as it was when the import started: a file appended to, rewritten
/// or replaced meanwhile is refused, never written with records its validation did not see.
@Suite(.serialized) struct ImportInputChangeTests {
    private static func genres(_ range: Range<Int>) -> String {
        range.map { #"{"entity":"Genre","name":"G\#($0)"}"# }.joined(separator: "\n") + "\n"
    }

    /// Waits (up to a minute) until `child` has `path` open (a link in `/proc/<pid>/fd`); false
    /// if it ended or the minute passed first.
    private static func waitUntil(_ child: ChildProcess, hasOpen path: String) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline && child.isRunning {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(child.pid)/fd")) ?? []
            if fds.contains(where: { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(child.pid)/fd/\($0)")) == path }) {
                return true
            }
            try await Task.sleep(for: .milliseconds(1))
        }
        return false
    }

    /// Before the fix, a record appended between the validation pass and the write pass was
    /// written unchecked: its reference to a missing track was taken for a forward reference, the
    /// playlist was saved without it, and the import then failed naming a record it had written.
    @Test func anInputChangedAfterItsValidationIsRefusedBeforeAnythingIsWritten() async throws {
        let dir = temporaryDirectory("import-input-change")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson").path
        try Data(Self.genres(0..<50).utf8).write(to: URL(fileURLWithPath: input))
        Importer.beforeReadingAgainForTesting.withLock {
            $0 = { files in
                guard files == [input], let h = FileHandle(forWritingAtPath: input) else { return }
                h.seekToEndOfFile()
                h.write(Data(#"{"entity":"Playlist","name":"late","createdAt":"2024-01-01T00:00:00Z","tracks":[{"mbid":"00000000-0000-4000-8000-000000000001"}]}"#.utf8 + [0x0A]))
                try? h.close()
            }
        }
        defer { Importer.beforeReadingAgainForTesting.withLock { $0 = nil } }
        try await withLibraryStore { store in
            var options = ImportOptions()
            options.mode = .incremental
            options.keptRecordsMaxInputBytes = 0
            options.oneTransactionMaxInputBytes = 0
            let head = try store.lastTransactionID
            do {
                _ = try await Importer(store: store, options: options).run(files: [input])
                Issue.record("an input changed after its validation was imported")
            } catch let failed as ImportFailed {
                let issue = try #require(failed.issues.first)
                #expect(failed.issues.count == 1 && issue.inputChanged, "\(failed)")
                #expect(issue.file == input && issue.line == 0, "\(issue)")
                #expect(issue.reason.contains("changed size") && issue.reason.contains("after the import started"),
                        "\(issue)")
            }
            #expect(try store.lastTransactionID == head)
            #expect(try store.mainContext.count(Genre.self) == 0)
            #expect(try store.mainContext.count(Playlist.self) == 0)
        }
    }

    /// The same input read again unchanged imports as always (the check costs nothing else).
    @Test func anUnchangedInputReadTwiceImports() async throws {
        let dir = temporaryDirectory("import-input-change")
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.ndjson").path
        try Data(Self.genres(0..<50).utf8).write(to: URL(fileURLWithPath: input))
        try await withLibraryStore { store in
            var options = ImportOptions()
            options.mode = .incremental
            options.keptRecordsMaxInputBytes = 0
            options.oneTransactionMaxInputBytes = 0
            options.batchSize = 7
            let summary = try await Importer(store: store, options: options).run(files: [input])
            #expect(summary.records == 50)
            #expect(try store.mainContext.count(Genre.self) == 50)
        }
    }

    /// A reading never goes past the size the import started with, and a file that changes while
    /// it is read ends the reading with an issue; one replaced by another file is refused at open.
    @Test func aReadingStopsAtTheStartingSizeAndNoticesAChange() throws {
        let dir = temporaryDirectory("import-input-change")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("in.ndjson").path
        try Data(Self.genres(0..<3).utf8).write(to: URL(fileURLWithPath: path))
        let schema = try librarySchema()
        let then = try #require(InputFile.identity(of: path))

        var it = RecordIterator(files: [path], schema: schema, options: ImportOptions(), maxValueBytes: 1 << 20,
                                expected: [then])
        defer { it.close() }
        var lines: [Int] = []
        func take(_ item: RecordIterator.Item?) {
            if let item, case .success = item.result { lines.append(item.line) }
        }
        take(try it.next())
        let h = try #require(FileHandle(forWritingAtPath: path))
        h.seekToEndOfFile()
        h.write(Data(Self.genres(3..<4).utf8))
        try h.close()
        var thrown: ImportIssue?
        do {
            while let item = try it.next() { take(item) }
        } catch let issue as ImportIssue { thrown = issue }
        #expect(lines == [1, 2, 3], "read past the size the import started with: \(lines)")
        #expect(thrown?.reason.contains("while it was being read") == true, "\(String(describing: thrown))")

        // Replaced (a new file renamed over the path): refused before a record is read.
        let other = dir.appendingPathComponent("other.ndjson").path
        try Data(Self.genres(0..<3).utf8).write(to: URL(fileURLWithPath: other))
        let before = try #require(InputFile.identity(of: path))
        #expect(rename(other, path) == 0)
        var again = RecordIterator(files: [path], schema: schema, options: ImportOptions(), maxValueBytes: 1 << 20,
                                   expected: [before])
        defer { again.close() }
        let replaced = #expect(throws: ImportIssue.self) { _ = try again.next() }
        #expect(replaced?.reason.contains("replaced by another file") == true, "\(String(describing: replaced))")
        // Nothing of it is read afterwards either.
        #expect(throws: ImportIssue.self) { _ = try again.next() }
    }

    /// A file rewritten in place (same inode, same size, its modification time set back as
    /// `cp -p` or `touch -d` sets it) while it is read: the reader checks the file after each
    /// read, and its change time gives the rewrite away, so no byte written since is handed on.
    @Test func aFileRewrittenInPlaceWhileItIsReadIsNoticedAtTheNextRead() throws {
        let dir = temporaryDirectory("import-input-change")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("in.ndjson").path
        // Two buffers' worth of lines: the rewrite lands between two reads.
        let line = #"{"entity":"Genre","name":"G-padding-padding-padding-padding-padding"}"# + "\n"
        let count = (1 << 21) / line.utf8.count + 10
        try Data(String(repeating: line, count: count).utf8).write(to: URL(fileURLWithPath: path))
        let then = try #require(InputFile.identity(of: path))
        var reader = try LineReader(path: path, maxLineBytes: 1 << 20)
        defer { reader.close() }
        reader.expected = then
        _ = try reader.next()
        // The same bytes written again in place, the modification time put back.
        let fd = open(path, O_WRONLY)
        #expect(fd >= 0)
        let bytes = Array(String(repeating: line, count: count).utf8)
        #expect(pwrite(fd, bytes, bytes.count, 0) == bytes.count)
        var times = [timespec(tv_sec: then.modifiedSeconds, tv_nsec: then.modifiedNanoseconds),
                     timespec(tv_sec: then.modifiedSeconds, tv_nsec: then.modifiedNanoseconds)]
        #expect(futimens(fd, &times) == 0)
        close(fd)
        var thrown: ImportIssue?
        do { while try reader.next() != nil {} } catch let issue as ImportIssue { thrown = issue }
        #expect(thrown?.reason.contains("was modified") == true, "\(String(describing: thrown))")
    }

    /// `storectl import` of an input appended to while it is validated: exit 66 (as for an input
    /// it cannot open), naming the file, nothing written; the same whichever pass notices.
    @Test func storectlRefusesAnInputAppendedToWhileItIsValidated() async throws {
        let dir = temporaryDirectory("import-input-change")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        let input = dir.appendingPathComponent("in.ndjson").path
        try Data(Self.genres(0..<600_000).utf8).write(to: URL(fileURLWithPath: input))
        let errors = dir.appendingPathComponent("stderr").path
        let importing = try ChildProcess.start(
            storectlPath, ["import", store, input, "--mode", "incremental", "--keep-records-max-mb", "0",
                           "--one-transaction-max-mb", "0", "--quiet"], stderr: .file(errors))
        // The append lands once storectl has the input open, not after a guessed delay: on a
        // loaded machine storectl may not have started reading 300 ms after it was started.
        #expect(try await Self.waitUntil(importing, hasOpen: input), "storectl never opened \(input)")
        let h = try #require(FileHandle(forWritingAtPath: input))
        h.seekToEndOfFile()
        h.write(Data(Self.genres(600_000..<600_001).utf8))
        try h.close()
        let ended = try await importing.finished()
        let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
        #expect(ended == Termination(exited: true, code: 66), "\(ended) \(stderr)")
        #expect(stderr.contains("in.ndjson: changed size") && stderr.contains("an input changed while it was imported"),
                "\(stderr)")
        let count = try await storectl("query", store, "--entity", "Genre", "--count")
        #expect(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "\(count.stdout)")
    }
}
