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

/// Named value conversions for ``MigrationStep/changeType(entity:attribute:conversion:)``.
public enum TypeConversion: String, Sendable, CaseIterable {
    /// `int` to `double`.
    case intToDouble
    /// `double` to `int`, rounded to the nearest integer; a value that is not finite or does not fit 64 bits fails.
    case doubleToInt
    /// `int` to `string`, in decimal.
    case intToString
    /// `double` to `string`, in Swift's shortest form (`20.4`).
    case doubleToString
    /// `bool` to `string`: `true` or `false`.
    case boolToString
    /// `string` to `int`; spaces around the number are ignored, and text that does not parse fails.
    case stringToInt
    /// `string` to `double`; spaces around the number are ignored, and text that does not parse or is not finite
    /// fails.
    case stringToDouble
    /// `int` to `bool`: non-zero is `true`.
    case intToBool
    /// `bool` to `int`: `true` is 1, `false` is 0.
    case boolToInt
    /// `date` to `int`: seconds since 1970, rounded down.
    case dateToInt
    /// `int` to `date`: seconds since 1970.
    case intToDate
    /// `uuid` to `string`, in lowercase.
    case uuidToString
    /// `string` to `uuid`; text that does not parse fails.
    case stringToUUID

    var from: AttributeType {
        switch self {
        case .intToDouble, .intToString, .intToBool, .intToDate: .int
        case .doubleToInt, .doubleToString: .double
        case .boolToString, .boolToInt: .bool
        case .stringToInt, .stringToDouble, .stringToUUID: .string
        case .dateToInt: .date
        case .uuidToString: .uuid
        }
    }

    var to: AttributeType {
        switch self {
        case .intToDouble, .stringToDouble: .double
        case .doubleToInt, .stringToInt, .boolToInt, .dateToInt: .int
        case .intToString, .doubleToString, .boolToString, .uuidToString: .string
        case .intToBool: .bool
        case .intToDate: .date
        case .stringToUUID: .uuid
        }
    }

    /// Converts one value; `null` stays `null`. Throws a reason for values that do not convert.
    func convert(_ v: Value) throws -> Value {
        switch (self, v) {
        case (_, .null): return .null
        case (.intToDouble, .int(let i)): return .double(Double(i))
        case (.doubleToInt, .double(let d)):
            guard d.isFinite, abs(d) < 9.2e18 else { throw ValueConversion.Failure(reason: "\(d) does not fit an int") }
            return .int(Int64(d.rounded()))
        case (.intToString, .int(let i)): return .string(String(i))
        case (.doubleToString, .double(let d)): return .string(String(d))
        case (.boolToString, .bool(let b)): return .string(b ? "true" : "false")
        case (.stringToInt, .string(let s)):
            guard let i = Int64(s.trimmingCharacters(in: .whitespaces)) else { throw ValueConversion.Failure(reason: "'\(s)' is not an integer") }
            return .int(i)
        case (.stringToDouble, .string(let s)):
            guard let d = Double(s.trimmingCharacters(in: .whitespaces)), d.isFinite else { throw ValueConversion.Failure(reason: "'\(s)' is not a number") }
            return .double(d)
        case (.intToBool, .int(let i)): return .bool(i != 0)
        case (.boolToInt, .bool(let b)): return .int(b ? 1 : 0)
        case (.dateToInt, .date(let d)): return .int(Int64(d.timeIntervalSince1970.rounded(.down)))
        case (.intToDate, .int(let i)): return .date(Date(timeIntervalSince1970: Double(i)))
        case (.uuidToString, .uuid(let u)): return .string(u.uuidString.lowercased())
        case (.stringToUUID, .string(let s)):
            guard let u = UUID(uuidString: s) else { throw ValueConversion.Failure(reason: "'\(s)' is not a UUID") }
            return .uuid(u)
        default: throw ValueConversion.Failure(reason: "\(rawValue) cannot convert \(v)")
        }
    }
}

import Foundation
