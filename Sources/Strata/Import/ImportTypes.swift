import Foundation

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

    /// The issue as `FILE:LINE: field: reason`.
    public var description: String {
        "\(file):\(line): " + (field.map { "\($0): " } ?? "") + reason
    }
}

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

/// Input formats.
public enum ImportFormat: String, Sendable, CaseIterable {
    /// One JSON object per line with an `"entity"` member.
    case ndjson
    /// One file per entity, a header row of attribute names.
    case csv

    /// The format implied by a file name (`.ndjson`, `.jsonl`, `.json` → NDJSON; `.csv` → CSV).
    public static func guess(_ path: String) -> ImportFormat? {
        switch (path as NSString).pathExtension.lowercased() {
        case "ndjson", "jsonl", "json": .ndjson
        case "csv": .csv
        default: nil
        }
    }
}

/// Options of an import.
public struct ImportOptions: Sendable {
    /// Records per transaction. 5,000 is a default, not a measured optimum: a larger batch means
    /// fewer commits but more memory and a longer write transaction per batch.
    public var batchSize = 5_000
    /// Write the good records and collect the bad ones instead of refusing the whole input.
    public var continueOnError = false
    /// With ``continueOnError``: where rejected lines go, each after a `# FILE:LINE: reason` line.
    public var rejectsPath: String?
    /// Issues kept for the report (the rest are counted).
    public var maxReportedIssues = 20
    /// Lines longer than this are rejected without being held in memory.
    public var maxLineBytes = 16 << 20
    /// Author of the import's transactions.
    public var author = "import"
    /// Tag stored in every transaction's metadata (`importID`); generated when nil.
    public var importID: String?
    /// Format for files whose extension does not say.
    public var format: ImportFormat?
    /// Entity of CSV files (default: the file name without extension, e.g. `Track.csv`).
    public var csvEntity: String?

    /// Options with the defaults: batches of 5,000 records, stop at the first bad record, author `import`, a new
    /// import id, the format from each file's extension.
    public init() {}

    /// The largest ``batchSize`` accepted (the same bound as `storectl import --batch`).
    public static let maxBatchSize = 1_000_000

    /// The options' mistakes, as issues of the pseudo-file `options` (none when they are usable).
    func problems() -> [ImportIssue] {
        var out: [ImportIssue] = []
        func bad(_ field: String, _ reason: String) { out.append(ImportIssue(file: "options", line: 0, field: field, reason: reason)) }
        if batchSize < 1 || batchSize > Self.maxBatchSize { bad("batchSize", "must be between 1 and \(Self.maxBatchSize), not \(batchSize)") }
        if maxLineBytes < 1 { bad("maxLineBytes", "must be at least 1, not \(maxLineBytes)") }
        if maxReportedIssues < 1 { bad("maxReportedIssues", "must be at least 1, not \(maxReportedIssues)") }
        if rejectsPath != nil && !continueOnError { bad("rejectsPath", "is only written with continueOnError") }
        return out
    }
}

/// Progress of a running import.
public struct ImportProgress: Sendable, Equatable {
    /// The steps of an import, in the order they run.
    public enum Phase: String, Sendable {
        /// Reading and checking every record; nothing is written yet.
        case validating
        /// Saving the records in batches, one transaction per batch.
        case writing
        /// Saving the relationships whose target came later in the input, in batches.
        case linking
        /// The import has finished.
        case done
    }
    /// The step the import is in.
    public let phase: Phase
    /// Records processed in this phase. While writing, records whose batch has been committed
    /// (or, with ``ImportOptions/continueOnError``, saved or rejected one by one): never ahead of
    /// the store, even though the next batch is already being read.
    public let records: Int
    /// Bytes of the input read so far in this phase.
    public let bytesRead: Int
    /// The size of all the input files.
    public let totalBytes: Int
    /// Seconds since the import started.
    public let elapsedSeconds: Double

    /// ``records`` over ``elapsedSeconds`` (0 at the start).
    public var recordsPerSecond: Double { elapsedSeconds > 0 ? Double(records) / elapsedSeconds : 0 }
    /// Seconds left in this phase, estimated from bytes.
    public var etaSeconds: Double? {
        guard bytesRead > 0, totalBytes > bytesRead, elapsedSeconds > 0 else { return nil }
        return elapsedSeconds * Double(totalBytes - bytesRead) / Double(bytesRead)
    }
}

/// What an import did.
public struct ImportSummary: Sendable, Equatable {
    /// The import id stored as `importID` in the metadata of every transaction of the import.
    public let importID: String
    /// Records written (inserted or updated).
    public let records: Int
    /// Records rejected (only with ``ImportOptions/continueOnError``).
    public let rejected: Int
    /// With ``ImportOptions/continueOnError``: relationships not linked because their other end
    /// was rejected.
    public let skippedLinks: Int
    /// Transactions this import committed (batches plus deferred-link batches); a batch that
    /// changed nothing is not counted. Other processes' transactions committed meanwhile are
    /// never counted, also when they interleave with this import's.
    public let transactions: Int
    /// The first and the last of this import's own transactions (nil when it committed none);
    /// other transactions may lie between them.
    public let firstTransaction: TransactionID?
    /// The last of this import's own transactions (nil when it committed none).
    public let lastTransaction: TransactionID?
    /// Wall-clock time of the import.
    public let seconds: Double
}
