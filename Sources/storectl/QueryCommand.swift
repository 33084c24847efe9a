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
        Operators: == != < <= > >= contains icontains prefix suffix matches imatches in between;
        and or not ( ).
        An indexed attribute in the filter uses its index; the rest is a scan.

        Examples:
          storectl query ./library.strata --entity Track --where "durationSeconds > 600" \
        --sort -durationSeconds --limit 5
          storectl query ./library.strata --entity Album --where "artist.name == 'Sigrún Ásgeirsdóttir'" --json
          storectl query ./library.strata --entity Track --where "playlists.name prefix 'Road'" --count
        """
    )

    @OptionGroup var target: StoreArgument
    @Option(help: ArgumentHelp("Entity to query.", valueName: "name")) var entity: String
    @Option(name: .customLong("where"),
            help: ArgumentHelp("Filter expression (repeatable: every one must hold).", valueName: "expr"))
    var filters: [String] = []
    @Option(name: .customLong("sort"), parsing: .unconditionalSingleValue,
            help: ArgumentHelp("Sort keys, comma-separated; '-' for descending (title,-year).", valueName: "keys"))
    var sorts: [String] = []
    var sort: String? { sorts.last }
    @Option(parsing: .unconditional, help: "At most this many records.") var limit: Int?
    @Option(parsing: .unconditional, help: "Skip this many records first.") var offset: Int?
    @Option(help: ArgumentHelp("Attributes to show in the table, comma-separated (default: all).", valueName: "names"))
    var fields: String?
    @Flag(help: "Print only the number of matching records (with --group-by: per group).") var count = false
    @Option(name: .customLong("group-by"),
            help: ArgumentHelp("Group the matching records by an attribute, a path to one (album.year), a to-one " +
                               "relationship (its target) or count(rel) (the size of a to-many); prints one row " +
                               "per group with its count and the --sum/--min/--max/--avg asked for.",
                               valueName: "key"))
    var groupBys: [String] = []
    var groupBy: String? { groupBys.last }
    @Option(help: ArgumentHelp("Sum of an int, double or decimal attribute (per group; repeatable).", valueName: "attr"))
    var sum: [String] = []
    @Option(help: ArgumentHelp("Least value of an attribute (per group; repeatable).", valueName: "attr"))
    var min: [String] = []
    @Option(help: ArgumentHelp("Greatest value of an attribute (per group; repeatable).", valueName: "attr"))
    var max: [String] = []
    @Option(help: ArgumentHelp("Mean of an int, double or decimal attribute (per group; repeatable).", valueName: "attr"))
    var avg: [String] = []
    @Flag(help: "Print records as NDJSON (the export format).") var json = false

    func validate() throws {
        // Given twice, each of these took the last silently, and a second --where widened the
        // result a user meant to narrow: --where is repeatable (all must hold), the others are
        // refused.
        if sorts.count > 1 { throw ValidationError("--sort given \(sorts.count) times: list the keys in one (--sort title,-year)") }
        if groupBys.count > 1 { throw ValidationError("--group-by given \(groupBys.count) times: one key per query") }
        if let limit, limit < 0 { throw ValidationError("--limit must be at least 0") }
        if let offset, offset < 0 { throw ValidationError("--offset must be at least 0") }
    }

    func run() async throws {
        let store: Store
        do {
            store = try Store.openReadOnly(at: target.url, configuration: target.configuration)
            noteUnfinishedClusterInit(store)
        } catch {
            throw failure(error)
        }
        defer { store.close() }
        guard let e = store.schema.entity(named: entity) else {
            throw failure(unknownEntity(entity, in: store.schema))
        }
        var query = Query(entity: e.name, limit: limit, offset: offset ?? 0)
        do {
            if let filter = try Self.filter(filters, entity: e, schema: store.schema) { query.predicate = filter }
            if let sort { query.sort = try PredicateParser.parseSort(sort, entity: e, schema: store.schema) }
        } catch {
            throw failure(CLIError("\(error)", code: Exit.usage))
        }
        // `--fields` chooses the columns of rows; a count or an aggregate has none to choose.
        if fields != nil, count || groupBy != nil || !(sum.isEmpty && min.isEmpty && max.isEmpty && avg.isEmpty) {
            throw failure(CLIError("--fields chooses the columns of the objects listed; it does not apply to --count, " +
                                   "--group-by, --sum, --min, --max or --avg", code: Exit.usage))
        }
        do {
            let view = store.mainContext
            if groupBy != nil || !(sum.isEmpty && min.isEmpty && max.isEmpty && avg.isEmpty) {
                try printAggregate(view, query, entity: e, schema: store.schema)
                return
            }
            if count {
                // A count is of every match (as an aggregate's is): a window would be ignored.
                if query.sort.count > 0 || query.limit != nil || offset != nil {
                    throw CLIError("--sort, --limit and --offset do not apply to --count (it counts every match)",
                                   code: Exit.usage)
                }
                print(json ? JSONValue.object([("count", .int(Int64(try view.count(query))))]).serialized
                      : String(try view.count(query)))
                return
            }
            if json {
                try Exporter(store: store).export(query, format: .ndjson) { print($0) }
                return
            }
            let records = try view.fetch(query)
            var shown = e.attributes
            if let fields {
                shown = try fields.split(separator: ",", omittingEmptySubsequences: false).map { part in
                    // Spaces after the commas (`title, year`) as `--sort` allows them.
                    let name = part.trimmingCharacters(in: .whitespacesAndNewlines)
                    guard !name.isEmpty else {
                        throw CLIError("--fields: an empty attribute name (write names separated by commas)",
                                       code: Exit.usage)
                    }
                    guard let a = e.attribute(named: String(name)) else {
                        throw CLIError("--fields: unknown attribute '\(EchoedText.shown(String(name)))' of \(e.name)",
                                       code: Exit.usage)
                    }
                    return a
                }
            }
            printTable(records, attributes: shown)
        } catch {
            throw failure(error)
        }
    }

    /// `--group-by` and the aggregate options: one row per group (one row without a group).
    private func printAggregate(_ view: ViewContext, _ query: Query, entity e: EntityDescription,
                                schema: Schema) throws {
        if query.sort.count > 0 || query.limit != nil || offset != nil {
            throw CLIError("--sort, --limit and --offset do not apply to --group-by, --sum, --min, --max, --avg",
                           code: Exit.usage)
        }
        func attribute(_ name: String, _ option: String) throws -> AttributeDescription {
            guard let a = e.attribute(named: name) else {
                throw CLIError("--\(option): unknown attribute '\(EchoedText.shown(name))' of \(e.name)", code: Exit.usage)
            }
            return a
        }
        var functions: [AggregateFunction] = []
        var headers: [String] = []
        for (option, names) in [("sum", sum), ("min", min), ("max", max), ("avg", avg)] {
            for name in names {
                let a = try attribute(name, option)
                if option == "sum" || option == "avg", ![.int, .double, .decimal].contains(a.type) {
                    throw CLIError("--\(option): '\(a.name)' is a \(a.type.rawValue) attribute of \(e.name); --sum and " +
                                   "--avg need an int, double or decimal attribute", code: Exit.usage)
                }
                // Asked twice, given once: a JSON object holds each key once.
                guard !headers.contains("\(option)(\(a.name))") else { continue }
                switch option {
                case "sum": functions.append(.sum(attribute: a.index))
                case "min": functions.append(.min(attribute: a.index))
                case "max": functions.append(.max(attribute: a.index))
                default: functions.append(.average(attribute: a.index))
                }
                headers.append("\(option)(\(a.name))")
            }
        }
        let key = try groupBy.map { try groupKey($0, e, schema) }
        let rows = try view.aggregate(query, groupedBy: key, functions)
        if json {
            for row in rows {
                var members: [(String, JSONValue)] = []
                // Keyed by what is grouped by, or `group(…)` where that is also the key of an
                // aggregate (an attribute named `count`): a JSON object holds each key once.
                if let groupBy {
                    let taken = groupBy == "count" || headers.contains(groupBy)
                    members.append((taken ? "group(\(groupBy))" : groupBy, ValueConversion.json(row.group)))
                }
                members.append(("count", .int(Int64(row.count))))
                for (h, v) in zip(headers, row.values) { members.append((h, ValueConversion.json(v))) }
                print(JSONValue.object(members).serialized)
            }
            return
        }
        let columns = (groupBy.map { [$0] } ?? []) + ["count"] + headers
        let cells = rows.map { row in
            (groupBy != nil ? [cell(row.group)] : []) + [String(row.count)] + row.values.map(cell)
        }
        printColumns(columns, cells)
        if groupBy != nil { print("(\(rows.count) group\(rows.count == 1 ? "" : "s"))") }
    }

    /// `--group-by`'s key: `count(rel)`, a to-one relationship, an attribute or a path to one.
    private func groupKey(_ text: String, _ e: EntityDescription, _ schema: Schema) throws -> GroupKey {
        func usage(_ reason: String) -> CLIError { CLIError("--group-by: \(reason)", code: Exit.usage) }
        if text.hasPrefix("count("), text.hasSuffix(")") {
            let name = String(text.dropFirst(6).dropLast())
            guard let r = e.relationship(named: name), r.isToMany else {
                throw usage("'\(EchoedText.shown(name))' is not a to-many relationship of \(e.name)")
            }
            return .count(relationship: r.tag)
        }
        if let r = e.relationship(named: text) {
            guard !r.isToMany else {
                throw usage("\(e.name) has no attribute or to-one relationship '\(EchoedText.shown(text))' " +
                            "(a to-many is grouped by its size: count(\(text)))")
            }
            return .target(relationship: r.tag)
        }
        // An attribute or a path to one: walked as a sort key is (one rule for both).
        guard !text.contains(","), !text.hasPrefix("-") else { throw usage("one key, an attribute or a path") }
        do {
            let (path, attribute) = try PredicateParser.parseAttributePath(text, entity: e, schema: schema, use: "group-by")
            return .attribute(path: path, attribute: attribute)
        } catch let error as PredicateParser.ParseError {
            throw usage(error.reason)
        }
    }

    private func printTable(_ records: [Record], attributes: [AttributeDescription]) {
        let columns = ["id"] + attributes.map(\.name)
        let rows = records.map { r in
            [r.id.description] + attributes.map { cell(r.values[$0.index]) }
        }
        printColumns(columns, rows)
        print("(\(records.count) record\(records.count == 1 ? "" : "s"))")
    }

    /// A header and rows, each column as wide as its widest cell on a terminal (a wide CJK
    /// character or an emoji takes two columns), the last one not padded (no trailing spaces).
    private func printColumns(_ columns: [String], _ rows: [[String]]) {
        let widths = columns.indices.map { c in
            Swift.max(displayWidth(columns[c]), rows.map { displayWidth($0[c]) }.max() ?? 0)
        }
        func line(_ cells: [String]) -> String {
            // Padded up to the last cell that holds something: empty cells at the end add nothing.
            let last = cells.lastIndex { !$0.isEmpty } ?? 0
            return cells.indices.prefix(last + 1).map { i in
                i == last ? cells[i] : cells[i] + String(repeating: " ", count: Swift.max(0, widths[i] - displayWidth(cells[i])))
            }.joined(separator: "  ")
        }
        print(line(columns))
        for r in rows { print(line(r)) }
    }

    /// Terminal columns a string takes: East Asian wide characters and emoji take two.
    private func displayWidth(_ s: String) -> Int {
        s.unicodeScalars.reduce(0) { w, u in
            let v = u.value
            if u.properties.generalCategory == .nonspacingMark || v == 0x200D || (0xFE00...0xFE0F).contains(v) {
                return w
            }
            let wide = (0x1100...0x115F).contains(v) || (0x2E80...0xA4CF).contains(v) || (0xAC00...0xD7A3).contains(v)
                || (0xF900...0xFAFF).contains(v) || (0xFE30...0xFE4F).contains(v) || (0xFF00...0xFF60).contains(v)
                || (0xFFE0...0xFFE6).contains(v) || (0x1F300...0x1FAFF).contains(v) || (0x20000...0x3FFFD).contains(v)
            return w + (wide ? 2 : 1)
        }
    }

    /// The cell of a value: a number whole (a decimal's 38 digits, or a sum's, cut would read as
    /// another number); any other value as ``clip(_:)`` shows it.
    private func cell(_ v: Value) -> String {
        switch v {
        case .int, .double, .decimal: ValueConversion.text(v)
        default: clip(ValueConversion.text(v))
        }
    }

    /// Text as a cell: control characters escaped (`\u{0}`, `\n`; nothing read from the
    /// store reaches the terminal raw), cut at 40 characters as shown, never inside an escape.
    private func clip(_ s: String) -> String {
        let shown = EchoedText.escaped(s)
        guard shown.count > 40 else { return shown }
        var out = ""
        var count = 0
        for c in s {
            let piece = EchoedText.escaped(c)
            if count + piece.count > 39 { break }
            out += piece
            count += piece.count
        }
        return out + "…"
    }

    /// The filters of `--where` given `texts` times (all must hold), nil when none. A mistake in
    /// one of several names which (`--where 2 of 3: …`).
    static func filter(_ texts: [String], entity: EntityDescription, schema: Schema) throws -> Filter? {
        let filters = try texts.enumerated().map { k, text in
            do { return try PredicateParser.parse(text, entity: entity, schema: schema) } catch {
                guard texts.count > 1 else { throw error }
                throw CLIError("--where \(k + 1) of \(texts.count): \(error)", code: Exit.usage)
            }
        }
        return filters.count > 1 ? .and(filters) : filters.first
    }
}
