/// An import refused before anything was written: the first issues (up to
/// ``ImportOptions/maxReportedIssues``) and how many there were in all.
public struct ImportFailed: Error, Sendable, CustomStringConvertible {
    /// The first issues found, sorted by file and line (at most ``ImportOptions/maxReportedIssues``).
    public let issues: [ImportIssue]
    /// How many issues there were in all.
    public let totalIssues: Int
    /// One issue per line, then how many more there were.
    public var description: String {
        var lines = issues.map(\.description)
        if totalIssues > issues.count { lines.append("… and \(totalIssues - issues.count) more issue(s)") }
        return lines.joined(separator: "\n")
    }
}
