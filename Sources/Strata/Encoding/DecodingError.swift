/// A decoding failure: the bytes are not a valid encoding. Carries where it happened.
struct DecodingError: Error, CustomStringConvertible {
    let offset: Int
    let reason: String
    var description: String { "\(reason) at byte \(offset)" }
}
