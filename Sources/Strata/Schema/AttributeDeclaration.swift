/// How a Swift type declares one attribute.
public struct AttributeDeclaration: Sendable, Equatable {
    /// The attribute's name in the schema.
    public let name: String
    /// The schema type the Swift property stores as.
    public let type: AttributeType
    /// Whether the Swift property is optional (the schema's attribute must agree).
    public let isOptional: Bool
    /// Declares the attribute `name` of type `type`, optional or not.
    public init(name: String, type: AttributeType, isOptional: Bool) {
        self.name = name
        self.type = type
        self.isOptional = isOptional
    }
}
