/// A comparison of an attribute with a value.
public enum ComparisonOperator: String, Sendable, CaseIterable {
    /// The values are equal (`==`).
    case equal = "=="
    /// The values differ (`!=`).
    case notEqual = "!="
    /// The attribute's value is less than the operand (`<`).
    case less = "<"
    /// The attribute's value is less than or equal to the operand (`<=`).
    case lessOrEqual = "<="
    /// The attribute's value is greater than the operand (`>`).
    case greater = ">"
    /// The attribute's value is greater than or equal to the operand (`>=`).
    case greaterOrEqual = ">="

    func holds(_ c: Int) -> Bool {
        switch self {
        case .equal: c == 0
        case .notEqual: c != 0
        case .less: c < 0
        case .lessOrEqual: c <= 0
        case .greater: c > 0
        case .greaterOrEqual: c >= 0
        }
    }
}
