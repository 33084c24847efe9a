/// Custom migration steps, registered by the name schema files use.
///
/// ```swift
/// var registry = MigrationRegistry()
/// registry.register("deriveSortName") { record in
///     if record["sortName"].isNull, case .string(let name) = record["name"] { record["sortName"] = .string(name) }
/// }
/// ```
public struct MigrationRegistry: Sendable {
    var steps: [String: @Sendable (inout MigrationRecord) throws -> Void] = [:]
    /// An empty registry.
    public init() {}
    /// Registers (or replaces) the step `name`. It must be a pure function of the record: it
    /// runs for every object of the entity and for every historical version in the log.
    public mutating func register(_ name: String, _ step: @escaping @Sendable (inout MigrationRecord) throws -> Void) {
        steps[name] = step
    }
}
