import ArgumentParser
import Foundation
import Strata

struct ReplayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Show the store as it was right after a transaction.",
        discussion: """
        Examples:
          storectl replay ./library.strata --to 10                      # counts per entity as of 10
          storectl replay ./library.strata --to 10 --entity Track --json   # the records (export format)
          storectl replay ./library.strata --to 10 --id 000301a200a0ffdf14e218f98df7d3ea
        """
    )

    @OptionGroup var target: StoreArgument
    @Option(parsing: .unconditional, help: "Transaction to replay up to (0: the empty store).") var to: UInt64
    @Option(help: "Only this entity.") var entity: String?
    @Option(help: "Only this object.") var id: String?
    @Flag(help: "Print records as NDJSON.") var json = false

    func validate() throws {
        if let id, ObjectID(string: id) == nil {
            throw ValidationError("'\(EchoedText.shown(id))' is not an object id (32 hex digits)")
        }
    }

    func run() async throws {
        let store = try openForReading(target)
        defer { store.close() }
        do {
            // The arguments first (an unknown entity is a usage error whatever --to is).
            let entities = try entity.map { name -> [EntityDescription] in
                guard let e = store.schema.entity(named: name) else { throw unknownEntity(name, in: store.schema) }
                return [e]
            } ?? store.schema.entities
            let past = try store.snapshot(asOf: TransactionID(to))
            defer { past.close() }
            if let id = id.flatMap(ObjectID.init(string:)) {
                // With --entity, the id must be one of that entity's (it was ignored).
                if let name = entity, let e = entities.first, e.tag != id.entityTag {
                    let owner = store.schema.entity(tag: id.entityTag)?.name ?? "no entity of this store"
                    throw CLIError("--id \(id) is an id of \(owner), not of \(name)", code: Exit.usage)
                }
                guard let r = try past.record(id) else {
                    throw CLIError("\(id) did not exist after transaction \(to)", code: Exit.noInput)
                }
                try printRecord(r, json: json, past: past)
                return
            }
            if !json && entity == nil {
                print("as of transaction \(to):")
                for e in entities { print("  \(e.name): \(try past.count(Query(entity: e.name)))") }
                return
            }
            for e in entities {
                for r in try past.fetch(Query(entity: e.name)) { try printRecord(r, json: json, past: past) }
            }
        } catch { throw failure(error) }
    }

    private func printRecord(_ r: Record, json: Bool, past: AsOfContext) throws {
        if json { print(try Exporter.jsonLine(r, in: past)) } else { print(r.description) }
    }
}

struct DiffCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "diff",
        abstract: "Net changes between two transactions: objects inserted, deleted, changed, re-linked.",
        discussion: """
        Examples:
          storectl diff ./library.strata --from 1 --to 5
          storectl diff ./library.strata --from 0 --to 1 --json

        JSON: one object per changed object: {"entity": "Track", "id": "...", "change": "update", \
        "attributes": {"title": {"old": "a", "new": "b"}}, \
        "relationships": {"album": {"added": [...], "removed": [...]}}}
        """
    )

    @OptionGroup var target: StoreArgument
    @Option(parsing: .unconditional, help: "Earlier transaction (the state after it).") var from: UInt64
    @Option(parsing: .unconditional, help: "Later transaction.") var to: UInt64
    @Flag(help: "One JSON object per changed object per line.") var json = false

    func validate() throws {
        guard from <= to else { throw ValidationError("--from must not be after --to") }
    }

    func run() async throws {
        let store = try openForReading(target)
        defer { store.close() }
        do {
            // The state at --to first: it is refused past the head, so the log read next holds
            // every transaction up to it (read first, a commit between the two reads made --to
            // a transaction the scan had not seen, and its objects were left out).
            let after = try store.snapshot(asOf: TransactionID(to))
            defer { after.close() }
            var touched = Set<ObjectID>()
            if to > from {
                try store.forEachTransaction(from: TransactionID(from + 1), to: TransactionID(to)) { e in
                    for c in e.changes { touched.formUnion(c.objectIDs) }
                    return true
                }
            }
            let before = try store.snapshot(asOf: TransactionID(from))
            defer { before.close() }
            for id in touched.sorted() {
                guard let e = store.schema.entity(tag: id.entityTag) else { continue }
                let old = try before.record(id), new = try after.record(id)
                var attrs: [(String, JSONValue)] = []
                // For the text: the values as `show` and `history` print them (control characters
                // escaped the same way), not as JSON.
                var changed: [(name: String, old: Value, new: Value)] = []
                if let old, let new {
                    for a in e.attributes where old.values[a.index] != new.values[a.index] {
                        attrs.append((a.name, .object([("old", ValueConversion.json(old.values[a.index])),
                                                       ("new", ValueConversion.json(new.values[a.index]))])))
                        changed.append((a.name, old.values[a.index], new.values[a.index]))
                    }
                }
                var rels: [(String, JSONValue)] = []
                for r in e.relationships {
                    let was = Set(try before.relatedIDs(r, of: id)), now = Set(try after.relatedIDs(r, of: id))
                    if was != now {
                        rels.append(
                            (r.name,
                             .object([("added", .array(now.subtracting(was).sorted().map { .string($0.description) })),
                                      ("removed",
                                       .array(was.subtracting(now).sorted().map { .string($0.description) }))])))
                    }
                }
                let change = old == nil ? (new == nil ? nil : "insert")
                    : (new == nil ? "delete" : (attrs.isEmpty && rels.isEmpty ? nil : "update"))
                guard let change else { continue }
                if json {
                    printJSON(.object([("entity", .string(e.name)), ("id", .string(id.description)),
                                       ("change", .string(change)), ("attributes", .object(attrs)),
                                       ("relationships", .object(rels))]))
                } else {
                    let detail = changed.map { "\($0.name): \($0.old) → \($0.new)" }
                        + rels.map { "\($0.0) +\(countOf($0.1["added"])) -\(countOf($0.1["removed"]))" }
                    print("\(change)\t\(e.name) \(id)\t\(detail.joined(separator: ", "))")
                }
            }
        } catch { throw failure(error) }
    }

    private func countOf(_ v: JSONValue?) -> Int {
        if case .array(let a)? = v { a.count } else { 0 }
    }
}

struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Rebuild state from the log and compare it byte for byte with the store.",
        discussion: """
        Checks every log entry's checksum, that transaction ids run 1…head with no gap, and that the \
        state rebuilt from the log equals the materialized state (records, links, indexes, uniques, \
        counts). Exit 0 only when they are equal; otherwise 65 with the first differences.

        A store never compacted, of at most 2,000,000 objects, is checked in memory first (the log \
        folded and both states compared by digest); a compacted or larger store, or one where that \
        check finds a difference, is rebuilt in a scratch environment and compared entry by entry, \
        which names every problem. --rebuild always takes the second way.

        Examples:
          storectl verify ./library.strata
          storectl verify ./library.strata --json
          storectl verify ./library.strata --rebuild

        JSON: {"ok": true, "head": 42, "transactions": 42, "changes": 5120, "entriesCompared": 9000, \
        "problems": [], "problemCount": 0, "seconds": 0.31, "method": "inMemory"}
        """
    )

    @OptionGroup var target: StoreArgument
    @Flag(help: "Print the report as JSON.") var json = false
    @Flag(help: "No progress output.") var quiet = false
    @Flag(help: "Always rebuild the state in a scratch environment on disk (skip the in-memory check).")
    var rebuild = false

    func run() async throws {
        let store = try openForReading(target)
        defer { store.close() }
        let terminal = isatty(STDERR_FILENO) == 1 && !quiet
        let report: VerifyReport
        do {
            report = try store.verify(rebuild: rebuild) { p in
                if terminal {
                    StandardStreams.writeError("\r\(p.phase.rawValue): \(p.done)/\(p.total)\u{1B}[K")
                }
            }
            if terminal { StandardStreams.writeError("\n") }
        } catch { throw failure(error) }
        if json {
            printJSON(
                .object([("ok", .bool(report.ok)), ("head", .int(Int64(report.head.rawValue))),
                         ("transactions", .int(Int64(report.transactions))), ("changes", .int(Int64(report.changes))),
                         ("entriesCompared", .int(Int64(report.entriesCompared))),
                         ("problems", .array(report.problems.map { .string($0) })),
                         ("problemCount", .int(Int64(report.problemCount))), ("seconds", .double(report.seconds)),
                         ("method", .string(report.method.rawValue))]))
        } else if report.ok {
            let rate = report.seconds > 0 ? Int(Double(report.changes) / report.seconds) : 0
            print("ok: \(report.transactions) transactions, \(report.changes) changes replayed, " +
                  "\(report.entriesCompared) entries compared in \(String(format: "%.2f", report.seconds)) s " +
                  "(\(rate) changes/s, \(report.method == .inMemory ? "in memory" : "rebuilt on disk"))")
        }
        if !report.ok {
            for p in report.problems { note(p) }
            if report.problemCount > report.problems.count {
                note("… and \(report.problemCount - report.problems.count) more")
            }
            note("storectl: error: verify failed: the state does not match the log")
            // Index entries are derived from the objects: a compaction can build them again.
            // Said of the problems listed: past the listing limit, the others are not known here.
            if report.problems.allSatisfy({ $0.hasPrefix("indexes: ") }) {
                let which = report.problemCount > report.problems.count ? "the problems listed are all index entries"
                    : "only index entries differ"
                note("storectl: \(which): `storectl compact STORE --rebuild-indexes` builds them " +
                     "again from the objects")
            }
            throw ExitCode(Exit.dataError)
        }
    }
}
