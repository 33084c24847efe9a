/// Human and JSON renderings of log entries with entity, attribute and relationship names, for
/// `storectl log/show/history/diff` and for debugging output in apps.
extension LoggedChange {
    /// A JSON object:
    /// `{"op": "update", "entity": "Track", "id": "…", "attributes": {"title": {"old": …, "new": …}}}`.
    public func json(schema: Schema) -> JSONValue {
        func entityName(_ id: ObjectID) -> JSONValue {
            .string(schema.entity(tag: id.entityTag)?.name ?? "tag \(id.entityTag)")
        }
        func valuesObject(_ id: ObjectID, _ values: [Value]) -> JSONValue {
            guard let e = schema.entity(tag: id.entityTag) else { return .null }
            return .object(
                zip(e.attributes, values).filter { !$0.1.isNull }.map { ($0.0.name, ValueConversion.json($0.1)) })
        }
        switch self {
        case .insert(let id, let values):
            return .object([("op", .string("insert")), ("entity", entityName(id)), ("id", .string(id.description)),
                            ("values", valuesObject(id, values))])
        case .update(let id, let changes, let previous):
            let e = schema.entity(tag: id.entityTag)
            let attrs: [(String, JSONValue)] = changes.map { c in
                (e.flatMap { c.attribute < $0.attributes.count ? $0.attributes[c.attribute].name : nil }
                     ?? "#\(c.attribute)",
                 .object([("old", ValueConversion.json(c.old)), ("new", ValueConversion.json(c.new))]))
            }
            return .object([("op", .string("update")), ("entity", entityName(id)), ("id", .string(id.description)),
                            ("previousVersion", .int(Int64(previous.rawValue))), ("attributes", .object(attrs))])
        case .delete(let id, let values, let previous):
            return .object([("op", .string("delete")), ("entity", entityName(id)), ("id", .string(id.description)),
                            ("previousVersion", .int(Int64(previous.rawValue))), ("values", valuesObject(id, values))])
        case .link(let tag, let a, let b), .unlink(let tag, let a, let b):
            let r = schema.relationship(tag: tag)
            let op = if case .link = self { "link" } else { "unlink" }
            return .object([("op", .string(op)), ("entity", entityName(a)), ("id", .string(a.description)),
                            ("relationship", .string(r?.name ?? "tag \(tag)")), ("target", .string(b.description))])
        }
    }

    /// One line: `update Track 0003… title: "a" → "b"`.
    public func text(schema: Schema) -> String {
        func name(_ id: ObjectID) -> String { schema.entity(tag: id.entityTag)?.name ?? "tag \(id.entityTag)" }
        func values(_ id: ObjectID, _ vs: [Value]) -> String {
            guard let e = schema.entity(tag: id.entityTag) else { return "" }
            return zip(e.attributes, vs).filter { !$0.1.isNull }.map { "\($0.0.name)=\($0.1)" }.joined(separator: " ")
        }
        // A change with nothing after its object (an update of attributes a migration removed, an
        // insert of none but nulls) ends with the id, not with a space.
        func line(_ head: String, _ rest: String) -> String { rest.isEmpty ? head : head + " " + rest }
        switch self {
        case .insert(let id, let vs): return line("insert \(name(id)) \(id)", values(id, vs))
        case .update(let id, let changes, _):
            let e = schema.entity(tag: id.entityTag)
            let parts = changes.map { c in
                """
                \(e.flatMap { c.attribute < $0.attributes.count ? $0.attributes[c.attribute].name : nil }
                    ?? "#\(c.attribute)"): \(c.old) → \(c.new)
                """
            }
            return line("update \(name(id)) \(id)", parts.joined(separator: ", "))
        case .delete(let id, let vs, _): return line("delete \(name(id)) \(id)", values(id, vs))
        case .link(let tag, let a, let b):
            return "link   \(name(a)) \(a) .\(schema.relationship(tag: tag)?.name ?? "?") → \(b)"
        case .unlink(let tag, let a, let b):
            return "unlink \(name(a)) \(a) .\(schema.relationship(tag: tag)?.name ?? "?") ↛ \(b)"
        }
    }
}

extension LogEntry {
    /// The entry's header as JSON: id, time, author, metadata, schema version and change count.
    public func headerJSON() -> [(String, JSONValue)] {
        [("transaction", .int(Int64(transactionID.rawValue))), ("time", .string(ISO8601.string(from: timestamp))),
         ("author", .string(author)),
         ("metadata", .object(metadata.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })),
         ("schemaVersion", .int(Int64(schemaVersion))), ("changes", .int(Int64(changes.count)))]
    }

    /// Entity names this entry touches, sorted.
    public func entityNames(schema: Schema) -> [String] {
        Set(changes.flatMap(\.objectIDs).map { schema.entity(tag: $0.entityTag)?.name ?? "tag \($0.entityTag)" })
            .sorted()
    }
}
