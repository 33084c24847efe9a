/// One bad input record: `FILE:LINE: field: reason`.
public struct ImportIssue: Error, Sendable, CustomStringConvertible, Equatable {
    /// The input file (as given), or `options` for a problem with the ``ImportOptions``.
    public let file: String
    /// 1-based line number (0 when the problem is the file itself).
    public let line: Int
    /// The attribute, relationship or member at fault, when there is one.
    public let field: String?
    /// What is wrong.
    public let reason: String
    /// Whether the problem is an input that changed while the import read it (appended to,
    /// rewritten or replaced): the file is not the one the import started with, rather than bad
    /// data (`storectl import` exits 66 for it, as for an input it cannot open).
    public internal(set) var inputChanged = false
    /// Whether the problem keeps the rest of its file from being read as records: a CSV header
    /// that cannot be read, or a JSON array whose structure breaks. `storectl import` counts it
    /// as a file that cannot be read, not as a bad record.
    public internal(set) var endsTheFile = false
    /// Whether the problem is the file system's: reading the input failed (`EIO` from a failing
    /// disk, a network file system gone), not bad data (`storectl import` exits 74 for it).
    public internal(set) var readFailed = false

    /// The issue as `FILE:LINE: field: reason`; one about a whole file (line 0, or the options)
    /// as `FILE: field: reason`. The file's name is shown with its control characters escaped
    /// (``EchoedText/escaped(_:)-(String)``): it reaches terminals and the rejects file's comment lines,
    /// where a line break or an escape sequence in a name would split a line or drive the
    /// terminal.
    public var description: String {
        let name = EchoedText.escaped(file)
        return (line > 0 ? "\(name):\(line): " : "\(name): ") + (field.map { "\($0): " } ?? "") + reason
    }
}
