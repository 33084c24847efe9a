/// The object a custom migration step changes: its entity and attributes by name, as they are at
/// that step.
public struct MigrationRecord: Sendable {
    /// The entity's name at this step.
    public let entity: String
    /// The object's id (migration never changes ids).
    public let id: ObjectID
    var values: [String: Value]

    /// The value of attribute `name` (`.null` when unset or unknown).
    public subscript(name: String) -> Value {
        get { values[name] ?? .null }
        set { values[name] = newValue }
    }
}
