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
