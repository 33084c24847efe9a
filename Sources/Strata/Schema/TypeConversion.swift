import Foundation

/// Named value conversions for ``MigrationStep/changeType(entity:attribute:conversion:)``.
public enum TypeConversion: String, Sendable, CaseIterable {
    /// `int` to `double`.
    case intToDouble
    /// `double` to `int`, rounded to the nearest integer; a value that is not finite or does not fit 64 bits fails.
    case doubleToInt
    /// `int` to `string`, in decimal.
    case intToString
    /// `double` to `string`, in Swift's shortest form (`20.4`).
    case doubleToString
    /// `bool` to `string`: `true` or `false`.
    case boolToString
    /// `string` to `int`; spaces around the number are ignored, and text that does not parse fails.
    case stringToInt
    /// `string` to `double`; spaces around the number are ignored, and text that does not parse or is not finite
    /// fails.
    case stringToDouble
    /// `int` to `bool`: non-zero is `true`.
    case intToBool
    /// `bool` to `int`: `true` is 1, `false` is 0.
    case boolToInt
    /// `date` to `int`: seconds since 1970, rounded down.
    case dateToInt
    /// `int` to `date`: seconds since 1970.
    case intToDate
    /// `uuid` to `string`, in lowercase.
    case uuidToString
    /// `string` to `uuid`; text that does not parse fails.
    case stringToUUID
    /// `int` to `decimal`, exactly.
    case intToDecimal
    /// `double` to `decimal`: the double's shortest text (`0.1` becomes exactly one tenth); a
    /// value that is not finite fails.
    case doubleToDecimal
    /// `decimal` to `double`, rounded to the nearest double.
    case decimalToDouble
    /// `string` to `decimal`; spaces around the number are ignored, and text that is not a
    /// decimal number of at most 38 significant digits fails.
    case stringToDecimal
    /// `decimal` to `string`: plain decimal text (`2328.6`).
    case decimalToString

    var from: AttributeType {
        switch self {
        case .intToDouble, .intToString, .intToBool, .intToDate, .intToDecimal: .int
        case .doubleToInt, .doubleToString, .doubleToDecimal: .double
        case .boolToString, .boolToInt: .bool
        case .stringToInt, .stringToDouble, .stringToUUID, .stringToDecimal: .string
        case .dateToInt: .date
        case .uuidToString: .uuid
        case .decimalToDouble, .decimalToString: .decimal
        }
    }

    var to: AttributeType {
        switch self {
        case .intToDouble, .stringToDouble, .decimalToDouble: .double
        case .doubleToInt, .stringToInt, .boolToInt, .dateToInt: .int
        case .intToString, .doubleToString, .boolToString, .uuidToString, .decimalToString: .string
        case .intToBool: .bool
        case .intToDate: .date
        case .stringToUUID: .uuid
        case .intToDecimal, .doubleToDecimal, .stringToDecimal: .decimal
        }
    }

    /// Converts one value; `null` stays `null`. Throws a reason for values that do not convert,
    /// and for a result a save would refuse as a number (an `intToDate` past what a date may be).
    func convert(_ v: Value) throws -> Value {
        let converted = try convertedValue(v)
        if let reason = converted.unstorableReason {
            throw ValueConversion.Failure(reason: "\(v) gives \(converted): \(reason)")
        }
        return converted
    }

    private func convertedValue(_ v: Value) throws -> Value {
        switch (self, v) {
        case (_, .null): return .null
        case (.intToDouble, .int(let i)):
            // As an import refuses a number past 2^53 that no double holds exactly.
            guard let d = Double(exactly: i) else {
                throw ValueConversion.Failure(reason: "\(i) has no exact double (one past 2^53 would be rounded)")
            }
            return .double(d)
        case (.doubleToInt, .double(let d)):
            guard d.isFinite, let i = Int64(exactly: d.rounded()) else {
                throw ValueConversion.Failure(reason: "\(d) does not fit an int")
            }
            return .int(i)
        case (.intToString, .int(let i)): return .string(String(i))
        case (.doubleToString, .double(let d)): return .string(String(d))
        case (.boolToString, .bool(let b)): return .string(b ? "true" : "false")
        case (.stringToInt, .string(let s)):
            guard let i = Int64(s.trimmingCharacters(in: .whitespaces)) else {
                throw ValueConversion.Failure(reason: "'\(s)' is not an integer")
            }
            return .int(i)
        case (.stringToDouble, .string(let s)):
            return .double(try ValueConversion.double(decimalText: s.trimmingCharacters(in: .whitespaces)))
        case (.intToBool, .int(let i)): return .bool(i != 0)
        case (.boolToInt, .bool(let b)): return .int(b ? 1 : 0)
        case (.dateToInt, .date(let d)):
            let seconds = d.timeIntervalSince1970.rounded(.down)
            guard seconds.isFinite, abs(seconds) < 9.2e18 else {
                throw ValueConversion.Failure(reason: "\(seconds) seconds since 1970 do not fit a 64-bit integer")
            }
            return .int(Int64(seconds))
        case (.intToDate, .int(let i)): return .date(Date(timeIntervalSince1970: Double(i)))
        case (.uuidToString, .uuid(let u)): return .string(u.uuidString.lowercased())
        case (.stringToUUID, .string(let s)):
            guard let u = UUID(uuidString: s) else { throw ValueConversion.Failure(reason: "'\(s)' is not a UUID") }
            return .uuid(u)
        case (.intToDecimal, .int(let i)): return .decimal(Decimal(i))
        case (.doubleToDecimal, .double(let d)):
            guard d.isFinite else { throw ValueConversion.Failure(reason: "\(d) is not a decimal number") }
            return try ValueConversion.decimal(DecimalNumber.parse(String(d)), shown: String(d))
        case (.decimalToDouble, .decimal(let d)):
            return .double(Double(DecimalNumber(d)?.text ?? "") ?? .nan)
        case (.stringToDecimal, .string(let s)):
            let t = s.trimmingCharacters(in: .whitespaces)
            return try ValueConversion.decimal(DecimalNumber.parse(t), shown: t)
        case (.decimalToString, .decimal(let d)): return .string(DecimalNumber(d)?.text ?? "NaN")
        default: throw ValueConversion.Failure(reason: "\(rawValue) cannot convert \(v)")
        }
    }
}
