/// How an import writes its records.
public enum ImportMode: String, Sendable, CaseIterable {
    /// ``bulk`` when no other process has the store open and the input files are at least
    /// 1/``autoBulkRatio`` of the store's data file, or, for an input an incremental import would
    /// write in one transaction (at most ``ImportOptions/oneTransactionMaxInputBytes``, without
    /// ``ImportOptions/continueOnError``), at least 1/``autoBulkRatioInOneTransaction`` of it (so
    /// into a new or small store, but for an input smaller than a new store's file, a few tens of
    /// KiB); ``incremental`` otherwise, and always for a replica of a cluster (whose saves go through the
    /// cluster's log). A service whose own saves must not wait for an import to end should ask for
    /// ``incremental``.
    case auto
    /// Into a new generation of the store, switched in at the end: readers see the whole import
    /// at once, a crash or an error leaves the store as it was, and the batches share large
    /// unsynced write transactions. This process's saves wait for the switch; other processes
    /// cannot open the store meanwhile (their open waits), and one that has it open already
    /// makes the import fail with ``StrataError/storeBusy(path:processIDs:)``. Refused on a replica
    /// of a cluster (``StrataError/replication(_:)``).
    case bulk
    /// Batch by batch into the live store, one durable transaction each: readers see each batch
    /// as it commits, other processes go on, and the batches committed before an error stay.
    case incremental

    /// ``auto`` chooses ``bulk`` for inputs at least this fraction (1/8) of the data file: the
    /// bulk path copies the whole store once, which costs about as much as importing an eighth
    /// of its size batch by batch.
    public static let autoBulkRatio = 8

    /// ``auto`` chooses ``bulk`` for an input an incremental import would write in one
    /// transaction only when it is at least this fraction (1/1) of the data file: that one
    /// transaction copies each page it changes once, which costs less than rebuilding the whole
    /// store below it. Measured with `storectl import` of generated library records: 100,000
    /// (25.5 MB) into a store of 200,000 (101 MB), 1.72 s incrementally against 2.44 s in bulk; into a
    /// store of 50,000 (25 MB), 1.56 s against 1.63 s; into an empty store, 1.65 s against 1.40 s.
    public static let autoBulkRatioInOneTransaction = 1
}

/// Options of an import.
public struct ImportOptions: Sendable {
    /// Records per transaction. 5,000 is a default, not a measured optimum: a larger batch means
    /// fewer commits but more memory and a longer write transaction per batch.
    public var batchSize = 5_000
    /// Bytes of string and bytes values per transaction at most: a batch ends at
    /// ``batchSize`` records or at this many bytes of their values, whichever comes first (a
    /// record larger than it alone is a batch of its own). It bounds an import's memory (two
    /// batches, or a bulk import's two chunks of them) and its log entries (one per batch; a
    /// replica's save must fit one append to the cluster) whatever the records hold.
    public var maxBatchBytes = 64 << 20
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
    /// The most records that may wait at once for a required to-one target later in the input
    /// (each is held in memory until its target is written). An input past it is refused with an
    /// issue that says to put the referenced records first; batches written before stay written.
    public var maxHeldRecords = 1_000_000
    /// How the records are written (``ImportMode``): `auto` by default.
    public var mode = ImportMode.auto
    /// The largest input (all files together, in bytes) a bulk import resolves in memory, the
    /// store's state counted in it at the bytes of the pages of its objects, links and unique
    /// keys: the store's state is loaded into hash tables, the saves look keys and links up there instead of
    /// in the new generation's B-trees, and the generation is written once, every database in key
    /// order. Larger inputs or stores, and imports with ``continueOnError``, save through the
    /// B-trees, whose memory does not grow with the input.
    /// The state in memory grows with the input: the default, 256 MiB (about 1,000,000 generated
    /// library records), keeps an import of the generated library to 0.40 GB (measured: 0.18 GB
    /// for its 51 MB of 200,000 records, 0.40 GB for its 256 MB of 1,000,000, where the B-trees
    /// took 0.38 GB and half as long again); link-heavy records take more a byte. 0: never in
    /// memory.
    /// See BENCHMARKS.md (W11) for the time and memory each way.
    public var bulkInMemoryMaxInputBytes = 256 << 20
    /// The most records a bulk import resolves in memory, the store's objects included (besides
    /// ``bulkInMemoryMaxInputBytes``):
    /// by default, and at most, what a state in memory can number (``maxBulkInMemoryRecords``),
    /// so that an input of short records small in bytes (a CSV of one short column holds 60
    /// million rows in 128 MiB) goes through the B-trees where it was refused past that number.
    /// Before it chooses, the import counts the records the input can hold at most (a CSV file's
    /// lines, an NDJSON or JSON file's `{`), reading it once, a MiB at a time.
    public var bulkInMemoryMaxRecords = maxBulkInMemoryRecords
    /// The highest ``bulkInMemoryMaxRecords``: the objects a state in memory can number.
    public static let maxBulkInMemoryRecords = BulkMemoryState.maxObjects
    /// The largest input (bytes, all files) whose records the validation pass of an import keeps
    /// in memory for its write pass, which then does not read and parse the input again (a
    /// fifth of the time of a 20,000-record import into a 200,000-record store). The records
    /// kept take a few times the input's size. 0: always read again. A bulk import into an
    /// empty store has no validation pass and reads its input once either way.
    public var keptRecordsMaxInputBytes = 16 << 20
    /// The largest input (bytes, all files) an incremental import that stops at the first bad
    /// record writes in one pass and one write transaction: each record is checked as it is
    /// read, the writer applies each batch while the next is read, and everything is committed
    /// together once the whole input checked out; a bad record leaves nothing written, and
    /// readers see the whole import at once. The writer is held for the whole import
    /// meanwhile (about 0.4 s for 20,000 generated library records; this process's saves wait
    /// for it, other processes' writers wait for LMDB's lock). Larger inputs, and imports with
    /// ``continueOnError``, are checked in a pass of their own first and then written in
    /// transactions of a few batches each. An input with a record that may take a unique key
    /// from another object (an explicit `id`, or an entity with more than one unique) is read
    /// again in two passes. 0: always two passes.
    ///
    /// The default, 32 MiB, takes about 125,000 generated library records. One transaction
    /// copies each B-tree page it changes once, where two passes commit a group of batches at a
    /// time and copy most of the pages again with each group: 100,000 records into a
    /// 1,000,000-record store took 1.7–2.1 s in one transaction against 3.2–3.6 s in two passes,
    /// and peaked at 0.52 GB of RSS against 0.36 GB (`storectl import`; BENCHMARKS.md, W11). The
    /// transaction's changed pages are held in memory until its commit; LMDB writes them out
    /// early past 512 MiB of them, which bounds that part however large the store.
    public var oneTransactionMaxInputBytes = 32 << 20

    /// Options with the defaults: batches of 5,000 records, stop at the first bad record, author `import`, a new
    /// import id, the format from each file's extension.
    public init() {}

    /// The largest ``batchSize`` accepted (the same bound as `storectl import --batch`).
    public static let maxBatchSize = 1_000_000

    /// The options' mistakes, as issues of the pseudo-file `options` (none when they are usable).
    func problems() -> [ImportIssue] {
        var out: [ImportIssue] = []
        func bad(_ field: String, _ reason: String) {
            out.append(ImportIssue(file: "options", line: 0, field: field, reason: reason))
        }
        if batchSize < 1 || batchSize > Self.maxBatchSize {
            bad("batchSize", "must be between 1 and \(Self.maxBatchSize), not \(batchSize)")
        }
        if maxBatchBytes < 1 { bad("maxBatchBytes", "must be at least 1, not \(maxBatchBytes)") }
        if maxLineBytes < 1 { bad("maxLineBytes", "must be at least 1, not \(maxLineBytes)") }
        if maxReportedIssues < 1 { bad("maxReportedIssues", "must be at least 1, not \(maxReportedIssues)") }
        if maxHeldRecords < 0 { bad("maxHeldRecords", "must be at least 0, not \(maxHeldRecords)") }
        if bulkInMemoryMaxInputBytes < 0 {
            bad("bulkInMemoryMaxInputBytes", "must be at least 0, not \(bulkInMemoryMaxInputBytes)")
        }
        if bulkInMemoryMaxRecords < 0 || bulkInMemoryMaxRecords > Self.maxBulkInMemoryRecords {
            bad("bulkInMemoryMaxRecords",
                "must be between 0 and \(Self.maxBulkInMemoryRecords), not \(bulkInMemoryMaxRecords)")
        }
        if keptRecordsMaxInputBytes < 0 {
            bad("keptRecordsMaxInputBytes", "must be at least 0, not \(keptRecordsMaxInputBytes)")
        }
        if oneTransactionMaxInputBytes < 0 {
            bad("oneTransactionMaxInputBytes", "must be at least 0, not \(oneTransactionMaxInputBytes)")
        }
        if rejectsPath != nil && !continueOnError { bad("rejectsPath", "is only written with continueOnError") }
        // An empty id names no import: its transactions could not be told from another's.
        if importID == "" { bad("importID", "must not be empty (nil: a generated one)") }
        return out
    }
}
