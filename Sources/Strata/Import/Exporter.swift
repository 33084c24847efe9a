import Foundation

/// Writes the records of one entity (or of a query) as NDJSON or CSV, read from one snapshot
/// while writes go on, streaming (one record in memory at a time).
///
/// The output is import input: each record carries its `id`, and relationships are written by
/// target id (to-one, and to-many whose inverse is to-many as well; a to-many whose inverse is
/// to-one is implied by the other side). Importing an export into an empty store reproduces the
/// same objects with the same ids.
///
/// ```swift
/// try Exporter(store: store).export(Query(entity: "Track"), format: .ndjson) { line in print(line) }
/// ```
public struct Exporter: Sendable {
    public let store: Store

    public init(store: Store) { self.store = store }

    /// Writes every record matching `query` (its sort and window apply when given), one line per
    /// call to `emit`, from one snapshot. Returns the number of records and the snapshot's transaction.
    /// `emit` runs inside the snapshot's read: a ``Store/close()`` from it returns at once, and the
    /// export then throws ``StrataError/closed(path:)``.
    @discardableResult
    public func export(_ query: Query, format: ImportFormat, emit: (String) throws -> Void) throws -> (records: Int, transaction: TransactionID) {
        let snapshot = try store.snapshot(label: "export")
        defer { snapshot.close() }
        let entity = try snapshot.read { try $0.entity(query.entity) }
        let relationships = Self.exportedRelationships(entity, schema: store.schema)
        if format == .csv {
            try emit(csvLine(["id"] + entity.attributes.map(\.name) + relationships.map(\.name)))
        }
        var n = 0
        try withoutActuallyEscaping(emit) { emit in try snapshot.read { view in
            let line: (Record) throws -> Void = { record in
                let links = try relationships.map { try view.targets($0.tag, from: record.id) }
                try emit(format == .csv ? csvRow(record, relationships, links) : Self.jsonRow(record, relationships, links))
                n += 1
                // A close() from `emit` (which runs inside the snapshot's read) ends the export here.
                if store.isClosed { throw StrataError.closed(path: store.path) }
            }
            if query.sort.isEmpty && query.limit == nil && query.offset == 0 {
                try view.validate(query.predicate, entity)
                try view.candidates(entity, query.predicate) { record in
                    if try view.matches(query.predicate, record) { try line(record) }
                    return true
                }
            } else {
                for record in try view.fetch(query) { try line(record) }
            }
        } }
        return (n, snapshot.transactionID)
    }

    /// The relationships written for `entity`: to-one, and to-many whose inverse is to-many too.
    public static func exportedRelationships(_ entity: EntityDescription, schema: Schema) -> [RelationshipDescription] {
        entity.relationships.filter { !$0.isToMany || schema.inverse(of: $0).isToMany }
    }

    /// One NDJSON export line for a record read through any context (used by `storectl replay`).
    public static func jsonLine(_ r: Record, in context: some ObjectReading) throws -> String {
        let rels = exportedRelationships(r.entity, schema: context.schema)
        return jsonRow(r, rels, try rels.map { try context.relatedIDs($0, of: r.id) })
    }

    private static func jsonRow(_ r: Record, _ rels: [RelationshipDescription], _ links: [[ObjectID]]) -> String {
        var members: [(String, JSONValue)] = [("entity", .string(r.entity.name)), ("id", .string(r.id.description))]
        for (a, v) in zip(r.entity.attributes, r.values) where !v.isNull { members.append((a.name, ValueConversion.json(v))) }
        for (rel, targets) in zip(rels, links) {
            if rel.isToMany {
                if !targets.isEmpty { members.append((rel.name, .array(targets.map { .string($0.description) }))) }
            } else if let t = targets.first {
                members.append((rel.name, .string(t.description)))
            }
        }
        return JSONValue.object(members).serialized
    }

    private func csvRow(_ r: Record, _ rels: [RelationshipDescription], _ links: [[ObjectID]]) -> String {
        // An empty string is written quoted (`""`): an empty unquoted field reads back as null.
        let values = r.values.map { v -> String in
            if case .string(let s) = v, s.isEmpty { return "\"\"" }
            return csvField(ValueConversion.text(v))
        }
        return ([csvField(r.id.description)] + values + links.map { csvField($0.map(\.description).joined(separator: "|")) }).joined(separator: ",")
    }

    private func csvLine(_ fields: [String]) -> String {
        fields.map(csvField).joined(separator: ",")
    }

    /// Quoted when it holds a comma, a quote or a line break, or starts or ends with a space.
    /// Checked byte by byte: a `"\r\n"` pair is one `Character`, equal to neither `"\r"` nor
    /// `"\n"`, and went out unquoted.
    private func csvField(_ f: String) -> String {
        f.utf8.contains(where: { $0 == 0x2C || $0 == 0x22 || $0 == 0x0A || $0 == 0x0D }) || f.hasPrefix(" ") || f.hasSuffix(" ")
            ? "\"" + f.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : f
    }
}
