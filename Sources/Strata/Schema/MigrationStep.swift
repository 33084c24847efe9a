/// One step from the previous schema version to the one that declares it, as written in
/// `Schemas/<model>/vN.json` under `"migration": {"steps": [...]}`.
///
/// ```json
/// {"op": "addAttribute",       "entity": "Track",  "attribute": "playCount"}
/// {"op": "removeAttribute",    "entity": "Track",  "attribute": "artworkHash"}
/// {"op": "renameEntity",       "from": "Genre",    "to": "Style"}
/// {"op": "renameAttribute",    "entity": "Artist", "from": "formedYear", "to": "foundedYear"}
/// {"op": "renameRelationship", "entity": "Track",  "from": "genre", "to": "style"}
/// {"op": "changeType",         "entity": "Artist", "attribute": "foundedYear", "conversion": "intToString"}
/// {"op": "addIndex",           "entity": "Track",  "attributes": ["addedAt"]}
/// {"op": "removeIndex",        "entity": "Album",  "attributes": ["year"]}
/// {"op": "addUnique",          "entity": "Track",  "attributes": ["isrc"]}
/// {"op": "removeUnique",       "entity": "Track",  "attributes": ["isrc"]}
/// {"op": "custom",             "entity": "Artist", "name": "deriveSortName"}
/// ```
/// Entity and attribute names are the ones in force at that step (after earlier renames). The
/// definition of an added attribute (type, optional, default) and the new type of a changed one
/// come from the new version's entity list.
public enum MigrationStep: Sendable, Equatable {
    /// Adds an attribute declared by the new version: each object gets the declared default, unless an earlier
    /// custom step gave it a value.
    case addAttribute(entity: String, attribute: String)
    /// Removes an attribute and its values. Remove the indexes and unique constraints that use it first.
    case removeAttribute(entity: String, attribute: String)
    /// Renames an entity; ids, values and relationship edges stay.
    case renameEntity(from: String, to: String)
    /// Renames an attribute; its values, indexes and unique constraints follow.
    case renameAttribute(entity: String, from: String, to: String)
    /// Renames a relationship; its edges stay. Rename the inverse with a step of its own.
    case renameRelationship(entity: String, from: String, to: String)
    /// Converts every value of an attribute to another type; a value that does not convert fails the migration.
    case changeType(entity: String, attribute: String, conversion: TypeConversion)
    /// Adds an index over the attributes and builds its entries for every object.
    case addIndex(entity: String, attributes: [String])
    /// Removes the index over exactly these attributes.
    case removeIndex(entity: String, attributes: [String])
    /// Adds a unique constraint over the attributes; data that violates it, now or at any transaction of the log,
    /// fails the migration.
    case addUnique(entity: String, attributes: [String])
    /// Removes the unique constraint over exactly these attributes.
    case removeUnique(entity: String, attributes: [String])
    /// A transform written in Swift and registered under `name` (see ``MigrationRegistry``).
    case custom(entity: String, name: String)

    /// A short description for progress and reports.
    public var summary: String {
        switch self {
        case .addAttribute(let e, let a): "add \(e).\(a)"
        case .removeAttribute(let e, let a): "remove \(e).\(a)"
        case .renameEntity(let f, let t): "rename \(f) → \(t)"
        case .renameAttribute(let e, let f, let t): "rename \(e).\(f) → \(t)"
        case .renameRelationship(let e, let f, let t): "rename \(e).\(f) → \(t)"
        case .changeType(let e, let a, let c): "convert \(e).\(a) (\(c.rawValue))"
        case .addIndex(let e, let a): "add index \(e)(\(a.joined(separator: ", ")))"
        case .removeIndex(let e, let a): "remove index \(e)(\(a.joined(separator: ", ")))"
        case .addUnique(let e, let a): "add unique \(e)(\(a.joined(separator: ", ")))"
        case .removeUnique(let e, let a): "remove unique \(e)(\(a.joined(separator: ", ")))"
        case .custom(let e, let n): "custom \(n) on \(e)"
        }
    }
}
