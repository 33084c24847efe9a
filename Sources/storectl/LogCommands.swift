import ArgumentParser
import Foundation
import Strata

/// Opens a store read-only for a log command, mapping errors to exit codes.
func openForReading(_ target: StoreArgument) throws -> Store {
    do {
        let store = try Store.openReadOnly(at: target.url, configuration: target.configuration)
        noteUnfinishedClusterInit(store)
        return store
    } catch {
        throw failure(error)
    }
}

struct LogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "List transactions, one line each (id, time, author, changes, entities, metadata).",
        discussion: """
        Examples:
          storectl log ./library.strata
          storectl log ./library.strata --from 100 --to 120 --author import
          storectl log ./library.strata --entity Playlist --json
          storectl log ./library.strata --follow --from 1000

        With --follow, after the log's transactions it goes on printing each new one as it is \
        committed, by any process (about every 50 ms), until interrupted.

        JSON: one object per line: {"transaction": 7, "time": "...", "author": "...", "metadata": {...}, \
        "schemaVersion": 1, "changes": 12, "entities": ["Track"]}
        """
    )

    @OptionGroup var target: StoreArgument
    @Option(parsing: .unconditional, help: "First transaction.") var from: UInt64 = 1
    @Option(parsing: .unconditional, help: "Last transaction (default: the head).") var to: UInt64?
    @Option(help: "Only transactions by this author.") var author: String?
    @Option(help: "Only transactions touching this entity.") var entity: String?
    @Flag(help: "One JSON object per line.") var json = false
    @Flag(help: "After the log, print each new transaction as it is committed (by any process), until interrupted.")
    var follow = false

    func validate() throws {
        if follow, to != nil { throw ValidationError("--follow prints up to the head and beyond: it takes no --to") }
    }

    func run() async throws {
        let store = try openForReading(target)
        defer { store.close() }
        if let entity, store.schema.entity(named: entity) == nil {
            throw failure(unknownEntity(entity, in: store.schema))
        }
        // Subscribed before the log is read: a transaction committed meanwhile is in both, and is
        // printed once (the stream's are skipped up to the last printed).
        let stream = follow ? store.changes() : nil
        var printed = TransactionID(from > 0 ? from - 1 : 0)
        func printLog(through end: TransactionID?) throws {
            // The head read first: what is committed after it comes through the stream.
            let last = try end ?? store.lastTransactionID
            guard last > printed else { return }
            try store.forEachTransaction(from: TransactionID(printed.rawValue + 1), to: last, author: author,
                                         entity: entity) { e in
                let line = entryLine(e, store.schema)
                // Followed, each line is written at once and a failed write ends the command
                // (exit 74): through stdio, a failed write went unnoticed until a return that a
                // follower never makes, and the lines it dropped were lost for good.
                if follow { try StandardStreams.writeOutput(line + "\n") } else { print(line) }
                return true
            }
            printed = last
        }
        do {
            try printLog(through: to.map(TransactionID.init))
            guard let stream else { return }
            for await event in stream {
                switch event {
                case .committed(let tx):
                    guard tx.id > printed else { continue }
                    try printLog(through: tx.id)
                case .fellBehind:
                    try printLog(through: nil)   // the log has what the stream dropped
                }
            }
        } catch { throw failure(error) }
    }

    private func entryLine(_ e: LogEntry, _ schema: Schema) -> String {
        let names = e.entityNames(schema: schema)
        if json {
            return JSONValue.object(e.headerJSON() + [("entities", .array(names.map { .string($0) }))]).serialized
        } else {
            let meta = metadataText(e.metadata)
            return "\(e.transactionID)\t\(ISO8601.string(from: e.timestamp))\t"
                + "\(EchoedText.escaped(e.author))\t\(e.changes.count) change(s)\t"
                + "\(names.joined(separator: ","))\t\(meta)"
        }
    }
}

struct ShowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show everything one transaction changed, with previous values.",
        discussion: """
        Examples:
          storectl show ./library.strata 42
          storectl show ./library.strata 42 --json

        JSON: {"transaction": 42, "time": ..., "author": ..., "metadata": {...}, "schemaVersion": 1, \
        "changes": 3, "list": [{"op": "update", "entity": "Track", "id": "...", "previousVersion": 17, \
        "attributes": {"title": {"old": "a", "new": "b"}}}, {"op": "link", ..., "relationship": "album", \
        "target": "..."}]}
        """
    )

    @OptionGroup var target: StoreArgument
    @Argument(help: "Transaction id.") var transaction: UInt64
    @Flag(help: "Print as JSON.") var json = false

    func run() async throws {
        let store = try openForReading(target)
        defer { store.close() }
        let entry: LogEntry
        do { entry = try store.changes(in: TransactionID(transaction)) } catch { throw failure(error) }
        if json {
            printJSON(
                .object(entry.headerJSON() + [("list", .array(entry.changes.map { $0.json(schema: store.schema) }))]))
            return
        }
        let meta = metadataText(entry.metadata)
        print("transaction \(entry.transactionID)  \(ISO8601.string(from: entry.timestamp))  by " +
              "\(EchoedText.escaped(entry.author))  \(meta)")
        for c in entry.changes { print("  " + c.text(schema: store.schema)) }
    }
}

struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Every transaction that touched an object, with before and after values.",
        discussion: """
        Examples:
          storectl history ./library.strata 000301a200a0ffdf14e218f98df7d3ea
          storectl history ./library.strata 000301a200a0ffdf14e218f98df7d3ea --json
        """
    )

    @OptionGroup var target: StoreArgument
    @Argument(help: "Object id (32 hex digits).") var id: String
    @Flag(help: "One JSON object per transaction per line.") var json = false

    func validate() throws {
        guard ObjectID(string: id) != nil else {
            throw ValidationError("'\(EchoedText.shown(id))' is not an object id (32 hex digits)")
        }
    }

    func run() async throws {
        let store = try openForReading(target)
        defer { store.close() }
        let entries: [HistoryEntry]
        do { entries = try store.history(of: ObjectID(string: id)!) } catch { throw failure(error) }
        if entries.isEmpty { throw failure(CLIError("\(id): no transaction touched this object", code: Exit.noInput)) }
        for h in entries {
            if json {
                printJSON(.object([("transaction", .int(Int64(h.transactionID.rawValue))),
                                   ("time", .string(ISO8601.string(from: h.timestamp))), ("author", .string(h.author)),
                                   ("metadata",
                                    .object(h.metadata.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })),
                                   ("list", .array(h.changes.map { $0.json(schema: store.schema) }))]))
            } else {
                print("\(h.transactionID)  \(ISO8601.string(from: h.timestamp))  by \(EchoedText.escaped(h.author))")
                for c in h.changes { print("  " + c.text(schema: store.schema)) }
            }
        }
    }
}

/// A transaction's metadata as `log` and `show` print it: `key=value` pairs by key, a key or value
/// quoted (``EchoedText/quoted(_:cut:)``) when it is empty or holds a space, `=`, `"` or `\`,
/// so that one pair cannot read as two (`importID=a batch=99` was one value).
func metadataText(_ metadata: [String: String]) -> String {
    func part(_ text: String) -> String {
        // By scalar: a `=` or `"` followed by a combining mark is one Character equal to neither.
        text.isEmpty || text.unicodeScalars.contains(where: {
            $0.properties.isWhitespace || $0 == "=" || $0 == "\"" || $0 == "\\"
        }) ? EchoedText.quoted(text) : EchoedText.escaped(text)
    }
    return metadata.sorted { $0.key < $1.key }.map { "\(part($0.key))=\(part($0.value))" }.joined(separator: " ")
}
