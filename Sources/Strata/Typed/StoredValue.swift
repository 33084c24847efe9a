import Foundation

/// A Swift type that can be stored in an attribute: `String`, `Int`, `Double`, `Bool`, `Date`,
/// `Data`, `UUID`, and `Optional` of those for optional attributes.
public protocol StoredValue: Sendable {
    /// The schema type this Swift type stores as.
    static var attributeType: AttributeType { get }
    /// Whether the type can hold "no value" (an optional attribute).
    static var isOptional: Bool { get }
    /// Converts a stored value; throws when the stored type does not match.
    init(storedValue: Value) throws
    var storedValue: Value { get }
}

/// A stored value whose type does not match the Swift declaration.
public struct StoredValueMismatch: Error, Sendable, CustomStringConvertible {
    public let expected: AttributeType
    public let found: Value
    /// A mismatch between the expected type and the stored value.
    @inlinable public init(expected: AttributeType, found: Value) {
        self.expected = expected
        self.found = found
    }
    public var description: String { "expected \(expected.rawValue), found \(found)" }
}

extension StoredValue {
    @inlinable public static var isOptional: Bool { false }
}

extension String: StoredValue {
    @inlinable public static var attributeType: AttributeType { .string }
    @inlinable public init(storedValue v: Value) throws {
        guard case .string(let x) = v else { throw StoredValueMismatch(expected: .string, found: v) }
        self = x
    }
    @inlinable public var storedValue: Value { .string(self) }
}

extension Int: StoredValue {
    @inlinable public static var attributeType: AttributeType { .int }
    @inlinable public init(storedValue v: Value) throws {
        guard case .int(let x) = v else { throw StoredValueMismatch(expected: .int, found: v) }
        self = Int(x)
    }
    @inlinable public var storedValue: Value { .int(Int64(self)) }
}

extension Double: StoredValue {
    @inlinable public static var attributeType: AttributeType { .double }
    @inlinable public init(storedValue v: Value) throws {
        guard case .double(let x) = v else { throw StoredValueMismatch(expected: .double, found: v) }
        self = x
    }
    @inlinable public var storedValue: Value { .double(self) }
}

extension Bool: StoredValue {
    @inlinable public static var attributeType: AttributeType { .bool }
    @inlinable public init(storedValue v: Value) throws {
        guard case .bool(let x) = v else { throw StoredValueMismatch(expected: .bool, found: v) }
        self = x
    }
    @inlinable public var storedValue: Value { .bool(self) }
}

extension Date: StoredValue {
    @inlinable public static var attributeType: AttributeType { .date }
    @inlinable public init(storedValue v: Value) throws {
        guard case .date(let x) = v else { throw StoredValueMismatch(expected: .date, found: v) }
        self = x
    }
    @inlinable public var storedValue: Value { .date(self) }
}

extension Data: StoredValue {
    @inlinable public static var attributeType: AttributeType { .bytes }
    @inlinable public init(storedValue v: Value) throws {
        guard case .bytes(let x) = v else { throw StoredValueMismatch(expected: .bytes, found: v) }
        self = Data(x)
    }
    @inlinable public var storedValue: Value { .bytes(Array(self)) }
}

extension UUID: StoredValue {
    @inlinable public static var attributeType: AttributeType { .uuid }
    @inlinable public init(storedValue v: Value) throws {
        guard case .uuid(let x) = v else { throw StoredValueMismatch(expected: .uuid, found: v) }
        self = x
    }
    @inlinable public var storedValue: Value { .uuid(self) }
}

extension Optional: StoredValue where Wrapped: StoredValue {
    @inlinable public static var attributeType: AttributeType { Wrapped.attributeType }
    @inlinable public static var isOptional: Bool { true }
    @inlinable public init(storedValue v: Value) throws {
        self = v.isNull ? nil : try Wrapped(storedValue: v)
    }
    @inlinable public var storedValue: Value { self?.storedValue ?? .null }
}
