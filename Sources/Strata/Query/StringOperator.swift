/// A text match on a string attribute.
public enum StringOperator: String, Sendable {
    /// The string contains the text (the empty text matches every string).
    case contains
    /// The string starts with the text.
    case hasPrefix
    /// The string ends with the text.
    case hasSuffix
    /// The whole string matches the text read as a ``GlobPattern`` (`*`, `?`, `[a-z]`, `[^…]`).
    case matches
}
