/// An attribute of an entity, as declared in the schema.
public struct AttributeDescription: Sendable, Equatable {
    /// The attribute's name, unique within its entity.
    public let name: String
    /// The type every value of the attribute has.
    public let type: AttributeType
    /// Whether the attribute may be left without a value (`null`).
    public let isOptional: Bool
    /// Used when an insert leaves the attribute unset.
    public let defaultValue: Value?
    /// Position in the entity's attribute list; records are encoded by position.
    public let index: Int

    /// Whether `value` may be stored in this attribute.
    public func accepts(_ value: Value) -> Bool {
        if case .null = value { return isOptional }
        return value.type == type
    }
}
