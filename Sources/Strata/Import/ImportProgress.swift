/// Progress of a running import.
public struct ImportProgress: Sendable, Equatable {
    /// The steps of an import, in the order they run. (An import in one transaction has no
    /// `validating` step; one that has to go back to two passes starts again with it.)
    public enum Phase: String, Sendable {
        /// Reading and checking every record; nothing is written yet.
        case validating
        /// A bulk import (``ImportMode/bulk``) copying the store's state into the new generation
        /// the records go into.
        case copying
        /// Saving the records in batches, one transaction per batch.
        case writing
        /// Saving the relationships whose target came later in the input, in batches.
        case linking
        /// A bulk import that resolved its records in memory writing the new generation's
        /// objects and links, then their index and unique keys, each in key order
        /// (``ImportSummary/inMemory``). `records` counts the work done in objects out of
        /// `totalRecords`: the objects and links are the first half, the keys the second.
        case building
        /// A bulk import making the new generation durable and switching the store to it.
        case switching
        /// The import has finished.
        case done
    }
    /// The step the import is in.
    public let phase: Phase
    /// Records processed in this phase (while linking and when done: records written). While
    /// writing, records whose batch has been committed (or, with
    /// ``ImportOptions/continueOnError``, saved or rejected one by one): never ahead of the store,
    /// even though the next batch is already being read; an import in one transaction
    /// (``ImportSummary/oneTransaction``) commits everything at its end, and reports 0 until the
    /// `done` phase (``applied`` counts what it has applied meanwhile). For a bulk import
    /// (``ImportMode/bulk``), records saved into the new generation, which readers see only once
    /// it is switched in.
    public let records: Int
    /// Bytes of the input read so far in this phase.
    public let bytesRead: Int
    /// The size of all the input files.
    public let totalBytes: Int
    /// Seconds since the import started.
    public let elapsedSeconds: Double
    /// Links saved so far by the linking phase (links whose target came later in the input; in an
    /// import in one transaction, applied in it and committed at its end).
    public let links: Int
    /// Links the linking phase has to save, known once writing has ended (0 before).
    public let totalLinks: Int
    /// Seconds since this phase started.
    public let phaseSeconds: Double
    /// While building: the objects to write (``records`` counts those written); 0 in other phases.
    public let totalRecords: Int
    /// While an import in one transaction (``ImportSummary/oneTransaction``) writes and links:
    /// records the writer has applied in that transaction, which readers see only once it
    /// commits at the end (``records`` stays 0 until then); 0 in every other import and phase.
    public internal(set) var applied: Int = 0

    /// How far this phase is, from 0 to 1: bytes read while validating and writing, links saved
    /// while linking, objects written while building (the keys and links written after them are
    /// the phase's last part, at 1).
    public var fractionDone: Double {
        switch phase {
        case .validating, .writing: return totalBytes > 0 ? min(1, Double(bytesRead) / Double(totalBytes)) : 0
        case .linking: return totalLinks > 0 ? min(1, Double(links) / Double(totalLinks)) : 1
        // Before its total is known (the phase's first report), nothing of the phase is done.
        case .building: return totalRecords > 0 ? min(1, Double(records) / Double(totalRecords)) : 0
        case .copying, .switching: return 0
        case .done: return 1
        }
    }

    /// Records, or while linking links, per second of this phase (0 at its start); when done,
    /// records per second of the whole import. While an import in one transaction writes, the
    /// records it has applied (``applied``) per second.
    public var recordsPerSecond: Double {
        let seconds = phase == .done ? elapsedSeconds : phaseSeconds
        guard seconds > 0 else { return 0 }
        return Double(phase == .linking ? links : max(records, applied)) / seconds
    }

    /// Seconds left in this phase, estimated from ``fractionDone`` (nil until there is a rate).
    public var etaSeconds: Double? {
        let f = fractionDone
        guard f > 0, f < 1, phaseSeconds > 0 else { return nil }
        return phaseSeconds * (1 - f) / f
    }
}
