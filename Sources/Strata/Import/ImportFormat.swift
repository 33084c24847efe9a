import Foundation

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
