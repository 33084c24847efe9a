import Foundation

/// Options for opening a store. Every limit is named here and enforced.
///
/// ```swift
/// var config = StoreConfiguration()
/// config.durability = .relaxed
/// config.maxOpenSnapshots = 32
/// let store = try Store.open(at: url, schema: schema, configuration: config)
/// ```
public struct StoreConfiguration: Sendable {
    /// When a save counts as done: after its fsync (``Durability/durable``, the default) or after its commit
    /// (``Durability/relaxed``).
    public var durability: Durability = .durable
    /// Flush interval in relaxed mode.
    public var relaxedSyncIntervalMs = 100
    /// Open read-only (no writer; the store must exist).
    public var readOnly = false
    /// Create the store directory and files when missing (ignored when read-only).
    public var createIfMissing = true
    /// Whether the store is shared with the group of its directory. Off (the default), what
    /// Strata creates is private whatever the umask: directories 0700, files 0600, and a store
    /// whose directories its group may write is refused. On, directories are made 0770 and
    /// files 0660 (the group reads and writes the store as its owner does: LMDB's readers write
    /// to `lock.mdb`), and group-writable directories are accepted. A directory that others may
    /// write is refused either way. Open a store created shared with this on (its directories
    /// are group-writable). See the README, "The store directory".
    public var sharedWithGroup = false
    /// Map size at open (at most ``maxMapSizeBytes``). The map is address space, not disk: LMDB
    /// maps the data file read-only and the file grows with the data, not with the map. When a
    /// save needs more, the writer grows the map to at least twice its size and by at least
    /// 1 GiB, up to ``maxMapSizeBytes``, and redoes the save. The default reserves 64 GiB, so a
    /// store smaller than that never grows its map. Less is reserved at open when the process
    /// cannot reserve this much address space (`RLIMIT_AS`); the map then grows on demand.
    ///
    /// Saves never wait for readers, a growth included: a growth waits only for the reads in
    /// progress at that moment, each of which holds the map for a bounded chunk of work (see the
    /// README, "Map size and growth").
    public var initialMapSizeBytes = 64 << 30
    /// The map never grows past this; a save that needs more fails with ``StrataError/storeFull(maxMapSizeBytes:)``.
    public var maxMapSizeBytes = 1 << 40
    /// LMDB reader slots, shared by every process using the store. When every slot is taken, a
    /// read fails with LMDB's `MDB_READERS_FULL` (``StrataError/lmdb(_:)``), which `storectl`
    /// reports as a temporary failure. At most ``maxReadersLimit``.
    public var maxReaders: UInt32 = 126
    /// The highest ``maxReaders`` a store accepts: 65,536. LMDB's lock file holds 64 bytes a
    /// slot and is allocated whole when made (4 MiB at this limit), and kept at its size by
    /// later opens: `UInt32.max` slots asked for 256 GiB of disk.
    public static let maxReadersLimit: UInt32 = 65_536
    /// Pinned snapshots this process may hold at once; must be below ``maxReaders`` (checked
    /// when the store opens), since each holds a reader slot.
    public var maxOpenSnapshots = 64
    /// A snapshot pinned longer than this is reported through swift-log.
    public var snapshotAgeWarningSeconds: Double = 60
    /// Saves queued for the writer before `save` fails with ``StrataError/writerOverloaded(limit:)``.
    public var maxPendingSaves = 10_000
    /// Saves coalesced into one LMDB transaction (one fsync) at most.
    public var maxSavesPerGroup = 512
    /// Longest the writer waits, before a commit, for the savers its previous group commit just
    /// answered to queue their next saves (in microseconds; 0 turns the wait off). It waits only
    /// when that group had more than one save and fewer are queued than it had, and never longer
    /// than half the previous commit took, so a lone saver never waits and many concurrent
    /// savers share one fsync instead of alternating between a group of one and the rest.
    public var groupCommitGatherMicroseconds = 1_000
    /// Operations in one change set at most.
    public var maxChangesPerSave = 2_000_000
    /// Bytes of one string or bytes value at most (at most ``maxValueBytesLimit``).
    public var maxValueBytes = 16 << 20
    /// The highest ``maxValueBytes`` a store accepts: 1 GiB (PostgreSQL's limit for one value,
    /// which a replica's log entry must stay under; LMDB's is 4 GiB).
    public static let maxValueBytesLimit = 1 << 30
    /// The longest interval (in milliseconds) the timers of a configuration may have: a day.
    public static let maxIntervalMilliseconds = 86_400_000
    /// For a save of at least this many changes (a bulk import batch), the writer tells the
    /// kernel the process no longer needs the store's mapped pages (`madvise(MADV_DONTNEED)`)
    /// every 128 index and unique writes while it applies the save (unless this process read
    /// the store in the last second or two: readers would fault their pages back in again and
    /// again), and once more after the commit. The pages stay in the page cache and are faulted back in on use, but the
    /// process's resident set stays bounded instead of growing with every page a bulk load
    /// touches (each fault also maps the neighbouring cached pages). A bulk import's saves into
    /// its new generation, which nobody else maps, release every 2,048 such writes whatever
    /// their size and the readers; for them the value only says on or off. 0 turns it off.
    public var releaseMappedPagesAfterChanges = 5_000
    /// Events buffered per change-stream subscriber before it is told it fell behind.
    public var changeStreamBufferSize = 1024
    /// How often, in milliseconds, a store with change-stream subscribers (and so live queries)
    /// looks for transactions other processes committed, to publish them as its own (a check of
    /// LMDB's shared meta page; the log is read only when it moved). It bounds the latency with
    /// which another process's commit reaches a subscriber; 0 turns the watch off (then only this
    /// process's commits are published).
    public var otherProcessPollMilliseconds = 50
    /// Objects ``Store/verify(rebuild:progress:)`` may hold in memory to check the store without
    /// writing a second one: about 60 bytes each, plus 24 for each distinct attribute its updates
    /// set (about 60 MB of heap for 500,000 tracks updated once). The fold also holds at most 4 such
    /// attributes per object on average (`4 ×` this limit), so with the default its objects and
    /// attributes stay under about 330 MB; and link entries (both directions of each edge, about
    /// 60 bytes each) up to 8 per object on average (`8 ×` this limit, under about 1 GB with the
    /// default); a decompressed copy of each compressed log entry, at most 512 MiB of them, comes
    /// on top. A store whose log inserted more objects, set more attributes or made more edges, or a compacted store, is
    /// verified by rebuilding its state in a scratch environment on disk instead (about 8× slower,
    /// bounded memory). 0 always rebuilds on disk.
    public var verifyInMemoryObjectLimit = 2_000_000
    /// Bytes of index keys a bulk import holds in memory while it builds the new generation's
    /// secondary indexes (its saves leave them out; they are built from the objects at the end
    /// and appended in key order). Past it, sorted runs go to temporary files in the new
    /// generation's directory and are merged: about 150 bytes per library track, so the default
    /// sorts about half a million tracks in memory. The key buffers take up to about twice this
    /// while they grow and while a run is sorted, and so does the final merge (the keys still in
    /// memory, and the run files' read buffers). A bulk import resolved in memory holds its index
    /// keys and its unique keys to it together (past it, the larger part goes to a run file). At
    /// least 4,096.
    public var indexSortBudgetBytes = 64 << 20
    /// Whether opening the store first checks every page of its data file (meta pages, page
    /// headers, nodes, page numbers, value sizes, key order; read with `pread`, not through the
    /// map) and refuses a damaged one with ``StrataError/damagedStore(path:reason:)``. liblmdb
    /// trusts its pages: on a damaged one it may fault or return a value past the end of the file.
    /// The check reads the whole file once; `storectl` does it for every command that reads a
    /// store, and ``Store/verify(rebuild:progress:)`` always does it.
    public var checkPagesOnOpen = false
    /// With ``checkPagesOnOpen``: a directory of the user's (created 0700) where a data file whose
    /// every page passed is remembered, with its device, inode, size, modification time and last
    /// transaction; an open that finds its file unchanged since skips the page walk (any commit,
    /// by any process, changes them). Nil: every open checks. The memo is kept outside the store,
    /// so a store from elsewhere is always checked. `storectl` uses `~/.cache/strata/page-checks`
    /// (or `$XDG_CACHE_HOME/strata/page-checks`); ``Store/verify(rebuild:progress:)`` always checks.
    public var checkedPagesMemo: URL?

    /// Throws ``StrataError/invalidConfiguration(field:value:reason:)`` for the first value out of
    /// its range. `Store.open` calls it before touching the directory: a count of zero here
    /// would leave the writer unable to take a save (`maxSavesPerGroup`) or refuse every one.
    func validate() throws {
        func check<V: Comparable & CustomStringConvertible>(_ field: String, _ value: V, atLeast minimum: V) throws {
            guard value >= minimum else {
                throw StrataError.invalidConfiguration(field: field, value: value.description,
                                                       reason: "must be at least \(minimum)")
            }
        }
        func check<V: Comparable & CustomStringConvertible>(_ field: String, _ value: V, atMost maximum: V,
                                                            _ what: String) throws {
            guard value <= maximum else {
                throw StrataError.invalidConfiguration(field: field, value: value.description,
                                                       reason: "must be at most \(maximum) (\(what))")
            }
        }
        try check("relaxedSyncIntervalMs", relaxedSyncIntervalMs, atLeast: 0)
        try check("relaxedSyncIntervalMs", relaxedSyncIntervalMs, atMost: Self.maxIntervalMilliseconds, "a day")
        try check("initialMapSizeBytes", initialMapSizeBytes, atLeast: 1)
        try check("maxMapSizeBytes", maxMapSizeBytes, atLeast: 1)
        try check("maxReaders", maxReaders, atLeast: 1)
        try check("maxReaders", maxReaders, atMost: Self.maxReadersLimit, "64 bytes of the lock file each")
        try check("maxOpenSnapshots", maxOpenSnapshots, atLeast: 1)
        guard maxOpenSnapshots < Int(maxReaders) else {
            throw StrataError.invalidConfiguration(
                field: "maxOpenSnapshots", value: "\(maxOpenSnapshots)",
                reason: "must be below maxReaders (\(maxReaders)): each pinned snapshot holds one of LMDB's " +
                        "reader slots, and reads and other processes need slots of their own")
        }
        try check("maxPendingSaves", maxPendingSaves, atLeast: 1)
        try check("maxSavesPerGroup", maxSavesPerGroup, atLeast: 1)
        try check("groupCommitGatherMicroseconds", groupCommitGatherMicroseconds, atLeast: 0)
        try check("groupCommitGatherMicroseconds", groupCommitGatherMicroseconds, atMost: 1_000_000, "a second")
        try check("maxChangesPerSave", maxChangesPerSave, atLeast: 1)
        try check("maxValueBytes", maxValueBytes, atLeast: 0)
        try check("maxValueBytes", maxValueBytes, atMost: Self.maxValueBytesLimit, "1 GiB")
        try check("releaseMappedPagesAfterChanges", releaseMappedPagesAfterChanges, atLeast: 0)
        try check("changeStreamBufferSize", changeStreamBufferSize, atLeast: 1)
        try check("otherProcessPollMilliseconds", otherProcessPollMilliseconds, atLeast: 0)
        try check("otherProcessPollMilliseconds", otherProcessPollMilliseconds, atMost: Self.maxIntervalMilliseconds,
                  "a day")
        try check("verifyInMemoryObjectLimit", verifyInMemoryObjectLimit, atLeast: 0)
        try check("indexSortBudgetBytes", indexSortBudgetBytes, atLeast: 4_096)
        guard !snapshotAgeWarningSeconds.isNaN, snapshotAgeWarningSeconds >= 0 else {
            throw StrataError.invalidConfiguration(field: "snapshotAgeWarningSeconds",
                                                   value: "\(snapshotAgeWarningSeconds)",
                                                   reason: "must be a number of seconds, at least 0")
        }
    }

    /// The default configuration: durable saves, read-write, the store created when missing, private to its owner,
    /// and every limit at its default.
    public init() {}
}

extension StoreConfiguration {
    /// The names of the options that differ between this configuration and `other`, in
    /// declaration order, leaving out `createIfMissing` (it only decides whether an open may
    /// create the store). Every option counts, so one added later counts too.
    func differences(from other: StoreConfiguration) -> [String] {
        let mine = Mirror(reflecting: self).children, theirs = Mirror(reflecting: other).children
        return zip(mine, theirs).compactMap { a, b in
            guard let name = a.label, name != "createIfMissing" else { return nil }
            return String(describing: a.value) == String(describing: b.value) ? nil : name
        }
    }
}
