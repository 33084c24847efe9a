import Foundation
import LibraryModel
import Testing
@testable import Strata

/// log, show, history, replay, diff and verify as a user runs them.
@Suite struct StorectlReplayTests {
    /// A store with the sample library plus one edit (transaction 2) made through the API.
    func prepared() async throws -> (URL, String, ObjectID) {
        let dir = temporaryDirectory("storectl-replay")
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", librarySchemaDirectory.path).status == 0)
        #expect(try await storectl("import", store, repositoryRoot.appendingPathComponent("Tools/sample-library/library.ndjson").path, "--quiet").status == 0)
        let opened = try Store.openExisting(at: URL(fileURLWithPath: store))
        let track = try #require(try opened.mainContext.fetch(Query(entity: "Track", limit: 1)).first)
        _ = try await opened.save(author: "editor") { $0.update(track.id, [ChangeSet.AttributeValue(attribute: 1, value: .string("Renamed"))]) }
        opened.close()
        return (dir, store, track.id)
    }

    @Test func logShowHistory() async throws {
        let (dir, store, id) = try await prepared()
        defer { try? FileManager.default.removeItem(at: dir) }
        let log = try await storectl("log", store, "--json")
        #expect(log.status == 0)
        let lines = log.stdout.split(separator: "\n").map { try? JSONValue.parse(String($0)) }
        #expect(lines.count == 2)
        #expect(lines[0]?["author"] == .string("import") && lines[1]?["author"] == .string("editor"))
        #expect(try await storectl("log", store, "--author", "editor").stdout.hasPrefix("2\t"))
        let show = try await storectl("show", store, "2", "--json")
        let change = try JSONValue.parse(show.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["list"]
        guard case .array(let items)? = change, let first = items.first else {
            Issue.record("no changes in show output")
            return
        }
        #expect(first["op"] == .string("update") && first["attributes"]?["title"]?["new"] == .string("Renamed"))
        let history = try await storectl("history", store, id.description)
        #expect(history.status == 0)
        #expect(history.stdout.contains("insert Track \(id)") && history.stdout.contains("title: ") && history.stdout.contains("→ \"Renamed\""))
        #expect(try await storectl("show", store, "99").status == 66)
        #expect(try await storectl("history", store, "nothex").status == 64)
    }

    /// A damaged log entry ends `log` after the transactions before it, which are printed (the
    /// whole chunk of up to 256 entries it was read with was dropped: nothing was printed for a
    /// damage at transaction 250); the API visits them too before it throws.
    @Test func logPrintsTheTransactionsBeforeADamagedEntry() async throws {
        let dir = temporaryDirectory("storectl-log-damaged")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: try librarySchema())
            defer { store.close() }
            for i in 0..<300 { _ = try await store.save { $0.insert(Genre(name: "g\(i)")) } }
            let env = store.env
            try env.write { txn in
                let key = TransactionID(250).keyBytes
                var bytes = try #require(try txn.withValue(env[.log], key: key) { Array($0) })
                bytes[bytes.count / 2] ^= 0x10
                try txn.put(env[.log], key: key, value: bytes)
            }
            var visited: [UInt64] = []
            #expect {
                try store.forEachTransaction { visited.append($0.transactionID.rawValue); return true }
            } throws: { error in
                guard case StrataError.corruptLogEntry(let tx, _) = error else { return false }
                return tx == TransactionID(250)
            }
            #expect(visited == Array(1...249))
        }
        let log = try await storectl("log", dir.path, "--json")
        #expect(log.status == 65 && log.stderr.contains("250"), "\(log.status) \(log.stderr)")
        let lines = log.stdout.split(separator: "\n")
        #expect(lines.count == 249)
        #expect(try lines.last.map { try JSONValue.parse(String($0))["transaction"] } == .int(249), "\(lines.last ?? "")")
    }

    @Test(.timeLimit(.minutes(15))) func logFollowPrintsNewTransactionsOfAnyProcessOnce() async throws {
        let (dir, store, _) = try await prepared()
        defer { try? FileManager.default.removeItem(at: dir) }
        let before = try Store.openReadOnly(at: URL(fileURLWithPath: store))
        let head = try before.lastTransactionID.rawValue
        before.close()
        let output = dir.appendingPathComponent("follower.out")
        let follower = try ChildProcess.start(storectlPath, ["log", store, "--follow", "--json", "--from", "\(head)"],
                                              stdout: .file(output.path))
        defer {
            follower.kill(SIGTERM)
            follower.wait()
        }
        /// The transactions of the complete lines the follower has written so far.
        func ids() throws -> [UInt64] {
            let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            return try text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map { line in
                guard case .int(let id)? = try JSONValue.parse(String(line))["transaction"] else { return 0 }
                return UInt64(id)
            }
        }
        func wait(for count: Int) async throws {
            let deadline = ContinuousClock.now + .seconds(120)
            while try ids().count < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        }
        try await wait(for: 1)
        // Commits of this process (another one than the follower's) and of a third, storectl.
        let writer = try Store.openExisting(at: URL(fileURLWithPath: store))
        for i in 0..<3 { _ = try await writer.save(author: "editor") { $0.insert(Genre(name: "followed \(i)")) } }
        let input = dir.appendingPathComponent("genre.ndjson")
        try Data(#"{"entity": "Genre", "name": "imported"}"#.utf8).write(to: input)
        #expect(try await storectl("import", store, input.path, "--quiet").status == 0)
        writer.close()
        try await wait(for: 5)
        #expect(try ids() == Array(head...(head + 4)), "\((try? String(contentsOf: output, encoding: .utf8)) ?? "")")
    }

    /// A follower whose standard output cannot be written (`> /dev/full`, or a disk that filled)
    /// ends with exit 74 and the reason, as every command does: it went on following, its
    /// failed writes unnoticed, and the lines they held were lost for good once the disk had room
    /// again.
    @Test(.timeLimit(.minutes(15))) func logFollowEndsWhenItsOutputCannotBeWritten() async throws {
        let (dir, store, _) = try await prepared()
        defer { try? FileManager.default.removeItem(at: dir) }
        let before = try Store.openReadOnly(at: URL(fileURLWithPath: store))
        let head = try before.lastTransactionID.rawValue
        before.close()
        for from in ["1", "\(head + 1)"] {
            // From the start, the first write fails; past the head, the first new transaction's.
            let follower = Task {
                try await run("/usr/bin/timeout", ["60", "/bin/sh", "-c", "exec \"$0\" \"$@\" > /dev/full", storectlPath,
                                                   "log", store, "--follow", "--from", from])
            }
            if from != "1" {
                try await Task.sleep(for: .milliseconds(500))
                let writer = try Store.openExisting(at: URL(fileURLWithPath: store))
                _ = try await writer.save(author: "editor") { $0.insert(Genre(name: "followed into /dev/full")) }
                writer.close()
            }
            let r = try await follower.value
            #expect(r.status == 74, "from \(from): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("cannot write to standard output: No space left on device"), "\(r.stderr)")
        }
    }

    @Test func replayAndDiff() async throws {
        let (dir, store, id) = try await prepared()
        defer { try? FileManager.default.removeItem(at: dir) }
        let before = try await storectl("replay", store, "--to", "1", "--id", id.description, "--json")
        #expect(before.status == 0)
        #expect(try JSONValue.parse(before.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["title"] != .string("Renamed"))
        let after = try await storectl("replay", store, "--to", "2", "--id", id.description, "--json")
        #expect(try JSONValue.parse(after.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["title"] == .string("Renamed"))
        let empty = try await storectl("replay", store, "--to", "0", "--entity", "Track", "--json")
        #expect(empty.status == 0 && empty.stdout.isEmpty)
        let diff = try await storectl("diff", store, "--from", "1", "--to", "2", "--json")
        let rows = diff.stdout.split(separator: "\n")
        #expect(rows.count == 1)
        let row = try JSONValue.parse(String(rows[0]))
        #expect(row["id"] == .string(id.description) && row["change"] == .string("update"))
        #expect(row["attributes"]?["title"]?["new"] == .string("Renamed"))
        #expect(try await storectl("diff", store, "--from", "2", "--to", "1").status == 64)
        // `--entity` with `--id` is checked, not ignored: unknown, or not the id's entity.
        let unknown = try await storectl("replay", store, "--to", "2", "--id", id.description, "--entity", "Nope")
        #expect(unknown.status == 64 && unknown.stderr.contains("unknown entity 'Nope'"), "\(unknown.stderr)")
        // Also with --to past the head: the argument is checked before the transaction (it gave 66).
        let unknownPast = try await storectl("replay", store, "--to", "999", "--entity", "Nope")
        #expect(unknownPast.status == 64 && unknownPast.stderr.contains("unknown entity 'Nope'"), "\(unknownPast.stderr)")
        let other = try await storectl("replay", store, "--to", "2", "--id", id.description, "--entity", "Genre")
        #expect(other.status == 64 && other.stderr.contains("is an id of"), "\(other.stderr)")
        let same = try await storectl("replay", store, "--to", "2", "--id", id.description, "--entity",
                                      try librarySchema().entity(tag: id.entityTag)!.name, "--json")
        #expect(same.status == 0 && same.stdout == after.stdout, "\(same.stderr)")
    }

    @Test func verifyExitCodes() async throws {
        let (dir, store, id) = try await prepared()
        defer { try? FileManager.default.removeItem(at: dir) }
        let ok = try await storectl("verify", store, "--json")
        #expect(ok.status == 0)
        let json = try JSONValue.parse(ok.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(json["ok"] == .bool(true) && json["method"] == .string("inMemory"))
        let rebuilt = try await storectl("verify", store, "--rebuild")
        #expect(rebuilt.status == 0 && rebuilt.stdout.hasPrefix("ok: ") && rebuilt.stdout.contains("rebuilt on disk"), "\(rebuilt.stdout)")
        // Corrupt one state record behind Strata's back.
        let opened = try Store.openExisting(at: URL(fileURLWithPath: store))
        try opened.env.write { txn in
            var bytes = try #require(try txn.withValue(opened.env[.objects], key: id.keyBytes) { Array($0) })
            bytes[20] ^= 0xFF
            try txn.put(opened.env[.objects], key: id.keyBytes, value: bytes)
        }
        opened.close()
        let bad = try await storectl("verify", store)
        #expect(bad.status == 65)
        #expect(bad.stderr.contains("objects: Track \(id) differs from the log"))
        #expect(bad.stderr.contains("verify failed"))
    }
}
