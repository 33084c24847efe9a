/// A schema file that cannot be used, with where and why.
///
/// ```
/// Schemas/library/v1.json: entity 'Track', attribute 'duration': unknown type 'integer' (expected one of: string, int, double, bool, date, bytes, uuid, decimal)
/// ```
public struct SchemaError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The file (or "<stored schema>" for a schema read back from a store).
    public let file: String
    /// The entity involved, when there is one.
    public let entity: String?
    /// The member involved (`attribute 'x'`, `relationship 'y'`, `uniques[0]`, …), when there is one.
    public let field: String?
    /// What is wrong.
    public let reason: String

    /// The error as `file: entity 'E', field: reason`.
    public var description: String {
        var s = file + ": "
        if let entity { s += "entity '\(entity)', " }
        if let field { s += field + ": " }
        return s + reason
    }
}
