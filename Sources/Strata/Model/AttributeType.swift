/// The type of an attribute, as declared in a schema file.
public enum AttributeType: String, Sendable, CaseIterable, Codable {
    /// Text (``Value/string(_:)``, `String` in Swift).
    case string
    /// A 64-bit signed integer (``Value/int(_:)``, `Int`).
    case int
    /// A 64-bit floating-point number (``Value/double(_:)``, `Double`).
    case double
    /// A Boolean (``Value/bool(_:)``, `Bool`).
    case bool
    /// A point in time, to the millisecond in text forms (``Value/date(_:)``, `Date`).
    case date
    /// Raw bytes (``Value/bytes(_:)``, `Data`).
    case bytes
    /// A UUID (``Value/uuid(_:)``, `UUID`).
    case uuid
    /// An exact decimal number of at most 38 significant digits, for money and measures
    /// (``Value/decimal(_:)``, `Decimal`): parsed from text and JSON numbers without binary
    /// floating point, summed exactly, indexed and sorted by value.
    case decimal

    var tag: UInt8 {
        switch self {
        case .string: 1
        case .int: 2
        case .double: 3
        case .bool: 4
        case .date: 5
        case .bytes: 6
        case .uuid: 7
        case .decimal: 8
        }
    }
}
