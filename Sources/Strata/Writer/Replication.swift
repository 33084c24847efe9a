/// A log shared by several machines that a store's writer appends its saves to before it commits
/// them locally: what a cluster (the `StrataCluster` library) gives a replica.
///
/// The store calls these methods on its writer's thread, never on Swift's cooperative pool, and
/// waits for them: an implementation may block on network I/O. The writer is the only caller for
/// a store, so calls never overlap.
///
/// The contract, which the writer relies on for one total order:
/// - ``append(_:after:)`` appends the entries, whose ids are `head + 1`, `head + 2`, …, only if
///   the shared log's head is still `head`, atomically (all of them or none), and returns
///   ``ReplicationAppend/appended`` once they are durable; when the head has moved it appends
///   nothing and returns ``ReplicationAppend/behind``.
/// - ``appendInTurn(_:)`` waits until no other machine is appending, then keeps every other
///   machine from appending until it is done: it gives its closure the shared head, appends the
///   entries the closure returns right after that head (none: nothing), and returns once they
///   are durable. What the closure judged against that head is still true when it appends. A
///   writer that lost the race to other machines several times in a row waits its turn this way
///   instead of racing again.
/// - ``append(_:validatedAt:footprint:)`` may also append the entries after a later head, when
///   none of the entries appended since `head` touches the footprint of the group (what its
///   validation read and wrote): the group would then validate the same at that head (see
///   ``ReplicationFootprint``). The entries then carry their new ids, checksums included, and the
///   method returns ``ReplicationAppend/appendedLater(first:)``.
/// - ``entries(after:limit:)`` returns the entries after a position in id order, without gaps.
/// - Failing, each method throws ``StrataError/replication(_:)``: with
///   ``ReplicationError/Kind/unavailable`` when nothing was appended, with
///   ``ReplicationError/Kind/outcomeUnknown`` when the append may have happened (the connection
///   broke while it ran).
public protocol ReplicationLog: Sendable {
    /// Appends `entries` after `head` if the shared log's head is still `head`.
    func append(_ entries: [ReplicatedEntry], after head: TransactionID) throws -> ReplicationAppend
    /// Appends `entries`, validated against the state at `head`, after `head` if the shared head
    /// is still there, or after a later head if no entry appended since `head` touches
    /// `footprint`. A log that cannot compare footprints appends only after `head` (the default).
    func append(_ entries: [ReplicatedEntry], validatedAt head: TransactionID,
                footprint: ReplicationFootprint) throws -> ReplicationAppend
    /// Holds off every other machine's append, gives `body` the shared head, and appends the
    /// entries it returns (whose ids follow that head) before letting the others go. `body` may
    /// read the log meanwhile (``entries(after:limit:)``). An error thrown by `body` appends
    /// nothing and is rethrown.
    func appendInTurn(_ body: (TransactionID) throws -> [ReplicatedEntry]) throws
    /// At most `limit` entries after `position`, in id order. A log may answer with fewer while
    /// it holds more only when those it answers with reach ``readBytes``
    /// (``mayBeFollowed(_:limit:)`` says whether to read again).
    func entries(after position: TransactionID, limit: Int) throws -> [ReplicatedEntry]
    /// The bytes of entries after which ``entries(after:limit:)`` may stop
    /// (``ReplicatedEntry/maxReadBytes`` by default).
    var readBytes: Int { get }
    /// Whether every replica reading this log decodes compressed log entries (``ReplicatedEntry``
    /// bytes of the compressed form, which a Strata of store format 2 and earlier cannot read).
    /// When false, a replica's writer encodes every entry it appends plain. True by default.
    var takesCompressedEntries: Bool { get }
}

extension ReplicationLog {
    /// True: a log's readers decode compressed entries unless it says otherwise.
    public var takesCompressedEntries: Bool { true }

    /// ``ReplicatedEntry/maxReadBytes``.
    public var readBytes: Int { ReplicatedEntry.maxReadBytes }

    /// Whether the log may hold entries after `entries`, an answer to
    /// ``entries(after:limit:)``: it was full, or it reached ``readBytes``.
    public func mayBeFollowed(_ entries: [ReplicatedEntry], limit: Int) -> Bool {
        ReplicatedEntry.mayBeFollowed(entries, limit: limit, readBytes: readBytes)
    }

    /// Appends only right after `head` (``append(_:after:)``): footprints are not compared.
    public func append(_ entries: [ReplicatedEntry], validatedAt head: TransactionID,
                       footprint: ReplicationFootprint) throws -> ReplicationAppend {
        try append(entries, after: head)
    }
}

/// What ``ReplicationLog/append(_:after:)`` and ``ReplicationLog/append(_:validatedAt:footprint:)`` did.
public enum ReplicationAppend: Sendable, Equatable {
    /// The entries are in the shared log, durably, right after the head given.
    case appended
    /// Other machines appended after the head given, none of it touching the group's footprint:
    /// the entries are in the shared log, durably, from `first` on (their ids and checksums
    /// moved there).
    case appendedLater(first: TransactionID)
    /// Another machine appended first: nothing was appended.
    case behind
}

/// What a group of saves read and wrote while a replica validated it, as a set of 64-bit hashes:
/// every object it read, wrote or linked (by id; a link names both ends) and every unique key it
/// looked up, took or gave up. Per-entity counts are left out: an entry changes them by a delta,
/// which commutes.
///
/// Why a group validated at head H may be appended after a later head H′ when no entry in
/// (H, H′] shares a hash with its footprint: validation is a function of the state it reads. Every
/// state an entry in (H, H′] changed is in that entry's footprint (what it wrote), so the state the
/// group read — all of it in the group's footprint — is the same at H′ as at H, and validating at
/// H′ would have decided the same: the same refusals, the same merges, the same changes (an
/// update's or delete's previous version included, since the object did not change). Applying the
/// group's changes at H′ then leaves what the group would have left there. A hash shared by
/// chance only refuses an append that could have gone through (the group validates again).
///
/// Hashes are stable across processes and machines (FNV-1a over a kind byte and the key's bytes,
/// then a 64-bit finalizer), never Swift's per-process seeded `Hasher`.
public struct ReplicationFootprint: Sendable, Equatable {
    /// The hashes, sorted and distinct.
    public let keys: [Int64]
    /// The most hashes a footprint holds: a group that touches more is appended only after the
    /// head it was validated at (comparing large footprints would hold the shared log's lock).
    public static let maxKeys = 1_024

    /// A footprint of `keys` (sorted and deduplicated here).
    public init(keys: some Sequence<Int64>) {
        self.keys = Array(Set(keys)).sorted()
    }
}

extension ReplicatedEntry {
    /// The last four bytes ``bytes`` ends with (its checksum, which covers the id) at each of
    /// `count` ids from `first`, one after another: what a shared log writes when it appends the
    /// entry at a later id than it was encoded for. The entry's body is read once.
    public func checksumBytes(from first: TransactionID, count: Int) -> [UInt8] {
        precondition(bytes.count >= 4, "an encoded entry ends with its checksum")
        let sums = bytes.withUnsafeBytes { raw in
            LogEntryCodec.checksums(UnsafeRawBufferPointer(rebasing: raw.dropLast(4)), from: first, count: count)
        }
        var out: [UInt8] = []
        out.reserveCapacity(sums.count * 4)
        for s in sums { withUnsafeBytes(of: s.bigEndian) { out.append(contentsOf: $0) } }
        return out
    }
}

/// One log entry as the shared log holds it: Strata's own encoding of a transaction (its changes,
/// header and checksum), with the header fields a shared log stores beside it.
public struct ReplicatedEntry: Sendable, Equatable {
    /// The entry's position in the shared log, which is its transaction id on every replica.
    public var transactionID: TransactionID
    /// The encoded, checksummed entry, byte for byte as the local log stores it.
    public var bytes: [UInt8]
    /// Who saved it (``Store/save(_:author:metadata:)``'s `author`), as the shared log's header
    /// holds it (a log may show characters it cannot store otherwise: StrataCluster's shows a NUL
    /// as U+FFFD). ``bytes`` hold the author exactly, and replicas take it from there.
    public var author: String
    /// When it was saved, in milliseconds since 1970.
    public var timestampMs: Int64
    /// The schema version it was written with.
    public var schemaVersion: Int

    /// The most bytes of encoded entries one append of several saves to the shared log carries:
    /// 256 MiB. A replica's group of saves over it is appended again in halves.
    public static let maxAppendBytes = 256 << 20

    /// The most bytes of one save's encoded entry in the shared log: 768 MiB. PostgreSQL holds
    /// one value (an append's array of entries) to 1 GB, with the footprint and the checksums
    /// beside it. A save over it is refused (``ReplicationError/Kind/saveTooLarge``).
    public static let maxSaveBytes = 768 << 20

    /// The bytes of entries one read of the shared log gathers, about: an entry is read when
    /// those before it in the answer total less than this (64 MiB), so one answer holds at
    /// most this plus one entry, not `limit` entries of any size.
    public static let maxReadBytes = 64 << 20

    /// Whether a log may hold entries after `entries`, an answer to
    /// ``ReplicationLog/entries(after:limit:)`` from a log that stops at `readBytes`: it was
    /// full, or it reached them.
    public static func mayBeFollowed(_ entries: [ReplicatedEntry], limit: Int, readBytes: Int) -> Bool {
        entries.count >= limit || entries.reduce(0) { $0 + $1.bytes.count } >= readBytes
    }

    /// The schema version a cluster's migration entry migrates to (it has no changes, and its
    /// metadata names its own version as `migrationTo`); nil for any other entry. Throws when the
    /// bytes do not decode (damage).
    public func migratesTo() throws -> Int? {
        let entry = try bytes.withUnsafeBytes { try LogEntryCodec.decode($0, transactionID: transactionID) }
        guard entry.changes.isEmpty, entry.metadata["migrationTo"] == String(entry.schemaVersion) else { return nil }
        return entry.schemaVersion
    }

    /// An entry with its header fields (as a shared log stores them beside the bytes).
    public init(transactionID: TransactionID, bytes: [UInt8], author: String, timestampMs: Int64,
                schemaVersion: Int) {
        self.transactionID = transactionID
        self.bytes = bytes
        self.author = author
        self.timestampMs = timestampMs
        self.schemaVersion = schemaVersion
    }
}
