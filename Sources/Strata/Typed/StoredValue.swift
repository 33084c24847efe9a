import Foundation

/// A Swift type that can be stored in an attribute: `String`, `Int`, `Double`, `Bool`, `Date`,
/// `Data`, `UUID`, `Decimal`, and `Optional` of those for optional attributes.
public protocol StoredValue: Sendable {
    /// The schema type this Swift type stores as.
    static var attributeType: AttributeType { get }
    /// Whether the type can hold "no value" (an optional attribute).
    static var isOptional: Bool { get }
    /// Converts a stored value; throws when the stored type does not match.
    init(storedValue: Value) throws
    /// The value as it is stored in an attribute (``Value/null`` for "no value").
    var storedValue: Value { get }
}

/// A stored value whose type does not match the Swift declaration.
public struct StoredValueMismatch: Error, Sendable, CustomStringConvertible {
    /// The attribute type the Swift type stores as.
    public let expected: AttributeType
    /// The stored value that was found instead.
    public let found: Value
    /// A mismatch between the expected type and the stored value.
    @inlinable public init(expected: AttributeType, found: Value) {
        self.expected = expected
        self.found = found
    }
    /// A one-line description, such as `expected int, found "x"`.
    public var description: String { "expected \(expected.rawValue), found \(found)" }
}

extension StoredValue {
    /// `false`: a non-optional Swift type needs a value.
    @inlinable public static var isOptional: Bool { false }
}

extension String: StoredValue {
    /// A `String` is stored in an attribute of type ``AttributeType/string``.
    @inlinable public static var attributeType: AttributeType { .string }
    /// Reads a stored ``Value/string(_:)`` value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        guard case .string(let x) = v else { throw StoredValueMismatch(expected: .string, found: v) }
        self = x
    }
    /// The value stored as ``Value/string(_:)``.
    @inlinable public var storedValue: Value { .string(self) }
}

extension Int: StoredValue {
    /// An `Int` is stored in an attribute of type ``AttributeType/int``.
    @inlinable public static var attributeType: AttributeType { .int }
    /// Reads a stored ``Value/int(_:)`` value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        guard case .int(let x) = v else { throw StoredValueMismatch(expected: .int, found: v) }
        self = Int(x)
    }
    /// The value stored as ``Value/int(_:)``.
    @inlinable public var storedValue: Value { .int(Int64(self)) }
}

extension Double: StoredValue {
    /// A `Double` is stored in an attribute of type ``AttributeType/double``.
    @inlinable public static var attributeType: AttributeType { .double }
    /// Reads a stored ``Value/double(_:)`` value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        guard case .double(let x) = v else { throw StoredValueMismatch(expected: .double, found: v) }
        self = x
    }
    /// The value stored as ``Value/double(_:)``.
    @inlinable public var storedValue: Value { .double(self) }
}

extension Bool: StoredValue {
    /// A `Bool` is stored in an attribute of type ``AttributeType/bool``.
    @inlinable public static var attributeType: AttributeType { .bool }
    /// Reads a stored ``Value/bool(_:)`` value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        guard case .bool(let x) = v else { throw StoredValueMismatch(expected: .bool, found: v) }
        self = x
    }
    /// The value stored as ``Value/bool(_:)``.
    @inlinable public var storedValue: Value { .bool(self) }
}

extension Date: StoredValue {
    /// A `Date` is stored in an attribute of type ``AttributeType/date``.
    @inlinable public static var attributeType: AttributeType { .date }
    /// Reads a stored ``Value/date(_:)`` value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        guard case .date(let x) = v else { throw StoredValueMismatch(expected: .date, found: v) }
        self = x
    }
    /// The value stored as ``Value/date(_:)``.
    @inlinable public var storedValue: Value { .date(self) }
}

extension Data: StoredValue {
    /// A `Data` is stored in an attribute of type ``AttributeType/bytes``.
    @inlinable public static var attributeType: AttributeType { .bytes }
    /// Reads a stored ``Value/bytes(_:)`` value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        guard case .bytes(let x) = v else { throw StoredValueMismatch(expected: .bytes, found: v) }
        self = Data(x)
    }
    /// The value stored as ``Value/bytes(_:)``.
    @inlinable public var storedValue: Value { .bytes(Array(self)) }
}

extension UUID: StoredValue {
    /// A `UUID` is stored in an attribute of type ``AttributeType/uuid``.
    @inlinable public static var attributeType: AttributeType { .uuid }
    /// Reads a stored ``Value/uuid(_:)`` value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        guard case .uuid(let x) = v else { throw StoredValueMismatch(expected: .uuid, found: v) }
        self = x
    }
    /// The value stored as ``Value/uuid(_:)``.
    @inlinable public var storedValue: Value { .uuid(self) }
}

extension Decimal: StoredValue {
    /// A `Decimal` is stored in an attribute of type ``AttributeType/decimal``.
    @inlinable public static var attributeType: AttributeType { .decimal }
    /// Reads a stored ``Value/decimal(_:)`` value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        guard case .decimal(let x) = v else { throw StoredValueMismatch(expected: .decimal, found: v) }
        self = x
    }
    /// The value stored as ``Value/decimal(_:)``.
    @inlinable public var storedValue: Value { .decimal(self) }
}

extension Optional: StoredValue where Wrapped: StoredValue {
    /// An optional stores as the type of its wrapped value.
    @inlinable public static var attributeType: AttributeType { Wrapped.attributeType }
    /// `true`: an optional Swift type is used for optional attributes.
    @inlinable public static var isOptional: Bool { true }
    /// Reads a stored value: `nil` for ``Value/null``, otherwise the wrapped type's value.
    ///
    /// - Throws: ``StoredValueMismatch`` for a value of another type.
    @inlinable public init(storedValue v: Value) throws {
        self = v.isNull ? nil : try Wrapped(storedValue: v)
    }
    /// The wrapped value's stored form, or ``Value/null`` for `nil`.
    @inlinable public var storedValue: Value { self?.storedValue ?? .null }
}
