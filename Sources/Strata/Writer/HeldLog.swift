import Dispatch
import StrataLMDB

/// The log entries of a held write (``HeldWrite``): each encoded (and compressed) on a thread of
/// its own while the writer goes on with the next batch, and all put into the log, in order,
/// before the transaction commits.
///
/// In an import of 20,000 records into a store of 200,000, encoding and compressing the batches'
/// entries took about a twentieth of the writer's time (a `perf` profile of `storectl import`),
/// and the writer is what such an import waits for: the reading and checking of the input run
/// beside it and finish first.
///
/// Used on the writer's queue only, inside one write transaction; nothing in that transaction
/// reads the log between an ``add(_:compressed:)`` and ``putAll(_:env:)``: the writer takes the
/// head from ``head`` instead of the log's last key.
final class HeldLog {
    /// The last transaction id given out: the log's last when the held transaction began, then
    /// that of the last entry added.
    private(set) var head: TransactionID
    /// The transaction after which the entries not yet in the log begin (they follow one another
    /// up to ``head``).
    private var putThrough: TransactionID
    /// Their encoded bytes, in order, once the encoder has made them.
    private let encoded = Locked<[[UInt8]?]>([])
    private let pending = DispatchGroup()
    /// One at a time, in order: a batch's entry is one large encoding, and the writer keeps the
    /// other core busy.
    private let encoder = DispatchQueue(label: "strata.held-log", qos: .userInitiated)

    /// The index entries of the transaction's saves, written sorted together before its commit
    /// (``HeldIndexEntries/write(_:env:schema:releaseMappedPagesEvery:)``).
    let indexes = HeldIndexEntries()

    init(head: TransactionID) {
        self.head = head
        putThrough = head
    }

    /// Starts encoding `entry`, the entry of the transaction after ``head`` (compressed when that
    /// pays, if `compressed`: see ``LogEntryCodec/encode(_:compressIf:)``).
    func add(_ entry: LogEntry, compressed: Bool) {
        precondition(entry.transactionID == head.next, "a held write's entries follow one another")
        let index = Int(head.rawValue - putThrough.rawValue)
        head = entry.transactionID
        encoded.withLock { $0.append(nil) }
        pending.enter()
        let box = encoded, done = pending
        encoder.async {
            let bytes = LogEntryCodec.encode(entry) { compressed }
            box.withLock { $0[index] = bytes }
            done.leave()
        }
    }

    /// Waits for every entry added to be encoded, then appends them to the log of `txn`, in
    /// order. Afterwards the log holds them and this holds nothing.
    func putAll(_ txn: LMDBTransaction, env: LMDBEnvironment) throws {
        pending.wait()
        let all = encoded.withLock { e -> [[UInt8]?] in
            defer { e = [] }
            return e
        }
        precondition(all.count == Int(head.rawValue - putThrough.rawValue), "every entry added has its place")
        for (i, bytes) in all.enumerated() {
            guard let bytes else { preconditionFailure("an entry the encoder finished has its bytes") }
            let tx = putThrough.rawValue + UInt64(i) + 1
            _ = try withUnsafeBytes(of: tx.bigEndian) { key in
                try bytes.withUnsafeBytes { try txn.put(env[.log], key: key, value: $0, mode: .append) }
            }
        }
        putThrough = head
    }
}
