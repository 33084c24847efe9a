import ArgumentParser
import Foundation
import Strata

struct QueryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query",
        abstract: "Fetch records with a filter, sort and window.",
        discussion: """
        Filter language (--where):
          durationSeconds > 300 and (title contains 'love' or rating >= 4.5)
          album.year between 1990 and 1999          through a to-one relationship
          playlists.name == 'Road trip'             any target of a to-many relationship
          genre == null    title prefix 'Jó'    title icontains 'night'    year in [1997, 2001]
        Operators: == != < <= > >= contains icontains prefix suffix in between; and or not ( ).
        An indexed attribute in the filter uses its index; the rest is a scan.

        Examples:
          storectl query ./library.strata --entity Track --where "durationSeconds > 600" --sort -durationSeconds --limit 5
          storectl query ./library.strata --entity Album --where "artist.name == 'Sigrún Ásgeirsdóttir'" --json
          storectl query ./library.strata --entity Track --where "playlists.name prefix 'Road'" --count
        """
    )

    @OptionGroup var target: StoreArgument
    @Option(help: ArgumentHelp("Entity to query.", valueName: "name")) var entity: String
    @Option(name: .customLong("where"), help: ArgumentHelp("Filter expression.", valueName: "expr")) var filter: String?
    @Option(parsing: .unconditional, help: ArgumentHelp("Sort keys, comma-separated; '-' for descending (title,-year).", valueName: "keys"))
    var sort: String?
    @Option(help: "At most this many records.") var limit: Int?
    @Option(help: "Skip this many records first.") var offset = 0
    @Option(help: ArgumentHelp("Attributes to show in the table, comma-separated (default: all).", valueName: "names"))
    var fields: String?
    @Flag(help: "Print only the number of matching records.") var count = false
    @Flag(help: "Print records as NDJSON (the export format).") var json = false

    func validate() throws {
        if let limit, limit < 0 { throw ValidationError("--limit must be at least 0") }
        if offset < 0 { throw ValidationError("--offset must be at least 0") }
    }

    func run() async throws {
        let store: Store
        do { store = try Store.openReadOnly(at: target.url) } catch { throw failure(error) }
        defer { store.close() }
        guard let e = store.schema.entity(named: entity) else {
            throw failure(CLIError("unknown entity '\(entity)' (known: \(store.schema.entities.map(\.name).joined(separator: ", ")))", code: Exit.usage))
        }
        var query = Query(entity: e.name, limit: limit, offset: offset)
        do {
            if let filter { query.predicate = try PredicateParser.parse(filter, entity: e, schema: store.schema) }
            if let sort { query.sort = try PredicateParser.parseSort(sort, entity: e) }
        } catch {
            throw failure(CLIError("\(error)", code: Exit.usage))
        }
        do {
            let view = try store.mainContext
            if count {
                print(json ? JSONValue.object([("count", .int(Int64(try view.count(query))))]).serialized : String(try view.count(query)))
                return
            }
            if json {
                try Exporter(store: store).export(query, format: .ndjson) { print($0) }
                return
            }
            let records = try view.fetch(query)
            var shown = e.attributes
            if let fields {
                shown = try fields.split(separator: ",").map { name in
                    guard let a = e.attribute(named: String(name)) else { throw CLIError("--fields: unknown attribute '\(name)' of \(e.name)", code: Exit.usage) }
                    return a
                }
            }
            printTable(records, attributes: shown)
        } catch {
            throw failure(error)
        }
    }

    private func printTable(_ records: [Record], attributes: [AttributeDescription]) {
        let columns = ["id"] + attributes.map(\.name)
        let rows = records.map { r in [r.id.description] + attributes.map { clip(ValueConversion.text(r.values[$0.index])) } }
        let widths = columns.indices.map { c in max(columns[c].count, rows.map { $0[c].count }.max() ?? 0) }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
        }
        print(line(columns))
        for r in rows { print(line(r)) }
        print("(\(records.count) record\(records.count == 1 ? "" : "s"))")
    }

    private func clip(_ s: String) -> String {
        let flat = s.replacingOccurrences(of: "\n", with: " ")
        return flat.count > 40 ? String(flat.prefix(39)) + "…" : flat
    }
}
