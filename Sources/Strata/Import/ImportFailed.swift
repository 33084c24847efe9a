/// An import refused because of its input: the first issues (up to
/// ``ImportOptions/maxReportedIssues``) and how many there were in all. Nothing was written,
/// except when a save the store refused after the input was checked stopped an import written
/// batch by batch (``written`` > 0): its batches before that save committed, and running the
/// import again once the record is fixed converges (upserts and links are idempotent).
public struct ImportFailed: Error, Sendable, CustomStringConvertible {
    /// The first issues found, sorted by file and line (at most ``ImportOptions/maxReportedIssues``).
    public let issues: [ImportIssue]
    /// How many issues there were in all.
    public let totalIssues: Int
    /// Records this import committed before it stopped (0: nothing was written).
    public var written = 0
    /// The transactions those records were committed in.
    public var transactions: [TransactionID] = []
    /// The import's id (in every one of its transactions' metadata), when it committed any.
    public var importID: String?

    /// One issue per line, then how many more there were, then what was written.
    public var description: String {
        var lines = issues.map(\.description)
        if totalIssues > issues.count { lines.append("… and \(totalIssues - issues.count) more issue(s)") }
        if written > 0 { lines.append(writtenNote) }
        return lines.joined(separator: "\n")
    }

    /// What the import committed before it stopped, and what to do. (A record whose own save
    /// committed and whose link, saved after the records, was refused is among them.)
    public var writtenNote: String {
        "\(written) record(s) of this import were written before it stopped, in \(transactions.count) transaction(s)"
            + (importID.map { " (import id \($0))" } ?? "")
            + ": fix the record and run the import again (it converges)"
    }
}

/// An import written batch by batch that stopped after some of its batches committed, for a
/// reason that is not its input: a full disk, a store that cannot grow, a rejects file that
/// cannot be written. Those batches stay committed; running the import again once the cause is
/// gone converges (upserts and links are idempotent). An import that committed nothing throws
/// the error itself, and one refused because of its input throws ``ImportFailed``.
public struct ImportInterrupted: Error, Sendable, CustomStringConvertible {
    /// What stopped the import.
    public let underlying: any Error
    /// Records this import committed before it stopped (more than 0).
    public let written: Int
    /// The transactions those records were committed in.
    public let transactions: [TransactionID]
    /// The import's id (in every one of its transactions' metadata).
    public let importID: String

    /// The error, then what was written.
    public var description: String {
        "\(underlying); \(written) record(s) of this import were written before it, in \(transactions.count) "
            + "transaction(s) (import id \(importID)): run the import again once that is fixed (it converges)"
    }
}
