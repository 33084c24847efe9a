import Foundation

/// Writes the records of one entity (or of a query), or of several entities, as NDJSON or CSV,
/// read from one snapshot while writes go on, streaming (a chunk of lines in memory at a time: at
/// most `chunkRecords` (512) lines and about `chunkBytes` (8 MiB) of them).
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
    /// The store the records are read from.
    public let store: Store

    /// An exporter of `store`'s records.
    public init(store: Store) { self.store = store }

    /// Writes every record matching `query` (its sort and window apply when given), one line per
    /// call to `emit`, from one snapshot. Returns the number of records and the snapshot's transaction.
    ///
    /// The snapshot is read a chunk of records at a time (512 lines, their relationships'
    /// targets included, or fewer when they reach 8 MiB: records of large values are held a few
    /// at a time), and `emit` runs between the reads, never inside one: a
    /// slow consumer holds no lock of the store, so saves go on meanwhile, including one that
    /// grows the map (which waits for the chunk being read at most). A sorted or windowed export
    /// fetches and sorts its records in one read first. A ``Store/close()`` from `emit` closes
    /// the store, and the export then throws ``StrataError/closed(path:)``.
    @discardableResult
    public func export(_ query: Query, format: ImportFormat,
                       emit: (String) throws -> Void) throws -> (records: Int, transaction: TransactionID) {
        let snapshot = try store.snapshot(label: "export")
        defer { snapshot.close() }
        return (try export(query, format: format, from: snapshot, emit: emit), snapshot.transactionID)
    }

    /// Writes every record of each entity named in `entities` (every entity of the schema, in
    /// its order, when nil), entity after entity, all from one snapshot: the files of a store
    /// exported while saves go on hold the same transaction, so every relationship between them
    /// finds its target and they import again in any order. `emit` gets the entity's name with
    /// each line (a CSV header first, for CSV). Returns each entity's number of records, in the
    /// order exported, and the snapshot's transaction. Reads and `emit` alternate as in
    /// ``export(_:format:emit:)``; the snapshot is held for the whole export, so on a store
    /// saved to meanwhile the file may grow by what those saves write until it ends (LMDB reuses
    /// no page a reader may still see).
    ///
    /// An unknown entity name throws ``StrataError/invalidQuery(entity:reason:)`` before anything
    /// is emitted; a name given twice is exported once.
    @discardableResult
    public func export(entities: [String]? = nil, format: ImportFormat,
                       emit: (_ entity: String, _ line: String) throws -> Void)
        throws -> (records: [(entity: String, records: Int)], transaction: TransactionID) {
        var names: [String] = []
        for name in entities ?? store.schema.entities.map(\.name) where !names.contains(name) {
            guard store.schema.entity(named: name) != nil else {
                throw StrataError.invalidQuery(entity: name, reason: "no such entity in \(store.schema.model) v\(store.schema.version)")
            }
            names.append(name)
        }
        let snapshot = try store.snapshot(label: "export")
        defer { snapshot.close() }
        var counts: [(entity: String, records: Int)] = []
        for name in names {
            let n = try export(Query(entity: name), format: format, from: snapshot) { try emit(name, $0) }
            counts.append((name, n))
        }
        return (counts, snapshot.transactionID)
    }

    /// ``export(_:format:emit:)`` from `snapshot`, which the caller holds and closes: the number
    /// of records written.
    private func export(_ query: Query, format: ImportFormat, from snapshot: Snapshot,
                        emit: (String) throws -> Void) throws -> Int {
        let entity = try snapshot.read { try $0.entity(query.entity) }
        let relationships = Self.exportedRelationships(entity, schema: store.schema)
        var n = 0
        /// The lines of items `position` up to `end` made by `make` (nil: no line), a chunk of at
        /// most ``chunkBytes`` of them; `position` moves past the items taken.
        func chunk(_ position: inout Int, to end: Int, _ make: (Int) throws -> String?) rethrows -> [String] {
            var lines: [String] = [], bytes = 0
            while position < end && bytes < Self.chunkBytes {
                defer { position += 1 }
                guard let text = try make(position) else { continue }
                bytes += text.utf8.count
                lines.append(text)
            }
            return lines
        }
        func send(_ lines: [String]) throws {
            for line in lines {
                try emit(line)
                n += 1
                // A close() from `emit` ends the export here.
                if store.isClosed { throw StrataError.closed(path: store.path) }
            }
        }
        func line(_ record: Record, _ view: ReadView) throws -> String {
            let links = try relationships.map { try view.targets($0.tag, from: record.id) }
            return format == .csv ? csvRow(record, relationships, links) : Self.jsonRow(record, relationships, links)
        }
        if format == .csv {
            try emit(csvLine(["id"] + entity.attributes.map(\.name) + relationships.map(\.name)))
            if store.isClosed { throw StrataError.closed(path: store.path) }
        }
        if query.sort.isEmpty && query.limit == nil && query.offset == 0 {
            let ids = try snapshot.read { view in
                try view.validate(query.predicate, entity)
                return try view.candidateIDs(entity, query.predicate)
            }
            if let ids {
                // Candidates planned onto an index or a list of ids: a chunk of ids per read.
                var position = 0
                while position < ids.count {
                    let end = min(ids.count, position + Self.chunkRecords)
                    try send(try snapshot.read { view in
                        try chunk(&position, to: end) { i in
                            guard let record = try view.candidate(ids[i], of: entity),
                                  try view.matches(query.predicate, record) else { return nil }
                            return try line(record, view)
                        }
                    })
                }
            } else {
                // A scan of the entity, resumed after the last id read (a new cursor per read).
                var after: ObjectID?
                while true {
                    var lines: [String] = []
                    var visited = 0, bytes = 0
                    var more = false
                    try snapshot.read { view in
                        try view.scanObjects(entity, after: after) { record in
                            after = record.id
                            visited += 1
                            if try view.matches(query.predicate, record) {
                                let text = try line(record, view)
                                bytes += text.utf8.count
                                lines.append(text)
                            }
                            // A full chunk ends this read; more may follow.
                            more = lines.count >= Self.chunkRecords || visited >= Self.chunkVisits
                                || bytes >= Self.chunkBytes
                            return !more
                        }
                    }
                    try send(lines)
                    if !more { break }
                }
            }
        } else {
            let records = try snapshot.read { try $0.fetch(query) }
            var position = 0
            while position < records.count {
                let end = min(records.count, position + Self.chunkRecords)
                try send(try snapshot.read { view in try chunk(&position, to: end) { try line(records[$0], view) } })
            }
        }
        return n
    }

    /// Lines an export reads per read of its snapshot (and holds in memory before writing them).
    static let chunkRecords = 512
    /// Bytes of lines after which a read of the snapshot ends, whatever their count: 512 lines of
    /// 16 MiB values (21 MiB of base64 each) were held at once.
    static let chunkBytes = 8 << 20
    /// Records a scanning export looks at per read at most, matching or not (a selective filter
    /// still reads a bounded chunk at a time).
    static let chunkVisits = 8192

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
        // A null attribute is left out, unless it has a default: an import would give it that.
        for (a, v) in zip(r.entity.attributes, r.values) where !v.isNull || a.defaultValue != nil {
            members.append((a.name, v.isNull ? .null : ValueConversion.json(v)))
        }
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
        // An empty string or empty bytes are written quoted (`""`): an empty unquoted field
        // reads back as null.
        let values = r.values.map { v -> String in
            if case .string(let s) = v, s.isEmpty { return "\"\"" }
            if case .bytes(let b) = v, b.isEmpty { return "\"\"" }
            return csvField(ValueConversion.text(v))
        }
        return ([csvField(r.id.description)] + values
                + links.map { csvField($0.map(\.description).joined(separator: "|")) }).joined(separator: ",")
    }

    private func csvLine(_ fields: [String]) -> String {
        fields.map(csvField).joined(separator: ",")
    }

    /// Quoted when it holds a comma, a quote or a line break, or starts or ends with a space.
    /// Checked byte by byte: a `"\r\n"` pair is one `Character`, equal to neither `"\r"` nor
    /// `"\n"`, and went out unquoted.
    /// A field holding any other control character (U+0000–U+001F, U+007F) is quoted too, and
    /// the character written as it is: CSV has no escapes, and the import reads it back byte for
    /// byte.
    /// Quotes are doubled literally too: a `"` followed by a combining mark is one `Character`
    /// that is not `"`, and went out single, ending the field early (the rest of the value then
    /// read as text after the closing quote, or as a record of its own).
    private func csvField(_ f: String) -> String {
        let bytes = f.utf8
        guard bytes.contains(where: { $0 == 0x2C || $0 == 0x22 || $0 < 0x20 || $0 == 0x7F })
                || bytes.first == 0x20 || bytes.last == 0x20 else { return f }
        return "\"" + f.replacingOccurrences(of: "\"", with: "\"\"", options: .literal) + "\""
    }
}
