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
/// - ``entries(after:limit:)`` returns the entries after a position in id order, without gaps.
/// - Failing, each method throws ``StrataError/replication(_:)``: with
///   ``ReplicationError/Kind/unavailable`` when nothing was appended, with
///   ``ReplicationError/Kind/outcomeUnknown`` when the append may have happened (the connection
///   broke during the commit).
public protocol ReplicationLog: Sendable {
    /// Appends `entries` after `head` if the shared log's head is still `head`.
    func append(_ entries: [ReplicatedEntry], after head: TransactionID) throws -> ReplicationAppend
    /// Holds off every other machine's append, gives `body` the shared head, and appends the
    /// entries it returns (whose ids follow that head) before letting the others go. `body` may
    /// read the log meanwhile (``entries(after:limit:)``). An error thrown by `body` appends
    /// nothing and is rethrown.
    func appendInTurn(_ body: (TransactionID) throws -> [ReplicatedEntry]) throws
    /// At most `limit` entries after `position`, in id order.
    func entries(after position: TransactionID, limit: Int) throws -> [ReplicatedEntry]
}

/// What ``ReplicationLog/append(_:after:)`` did.
public enum ReplicationAppend: Sendable, Equatable {
    /// The entries are in the shared log, durably, right after the head given.
    case appended
    /// Another machine appended first: nothing was appended.
    case behind
}

/// One log entry as the shared log holds it: Strata's own encoding of a transaction (its changes,
/// header and checksum), with the header fields a shared log stores beside it.
public struct ReplicatedEntry: Sendable, Equatable {
    /// The entry's position in the shared log, which is its transaction id on every replica.
    public var transactionID: TransactionID
    /// The encoded, checksummed entry, byte for byte as the local log stores it.
    public var bytes: [UInt8]
    /// Who saved it (``Store/save(_:author:metadata:)``'s `author`).
    public var author: String
    /// When it was saved, in milliseconds since 1970.
    public var timestampMs: Int64
    /// The schema version it was written with.
    public var schemaVersion: Int

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
