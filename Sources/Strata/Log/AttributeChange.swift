/// One attribute change inside an update: position, value before, value after.
public struct AttributeChange: Sendable, Equatable {
    /// The attribute's position in its entity.
    public let attribute: Int
    /// The value before the update (``Value/null``: none).
    public let old: Value
    /// The value after the update (``Value/null``: none).
    public let new: Value
}
