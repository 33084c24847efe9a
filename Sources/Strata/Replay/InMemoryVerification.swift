import CLMDB
import Foundation

/// The fast check behind ``Store/verify(rebuild:progress:)``: the log folded in memory into the state it
/// implies, digested (``EntryDigest``) and compared with a digest of the stored state, without
/// writing a second store.
///
/// It answers only "consistent" or "something differs". When anything differs — a log entry
/// that is missing or fails its checksum, a change that does not apply, a digest that does not
/// match, a key a lookup cannot find — `verify` runs the full rebuild in a scratch environment,
/// which names every problem precisely. A healthy store is therefore verified at the cost of
/// reading it twice; a damaged one costs the rebuild on top.
///
/// What it holds in memory is every object the log ever inserted (id, values, version): about
/// 300–500 bytes per object for typical records. ``StoreConfiguration/verifyInMemoryObjectLimit``
/// bounds it; a larger store goes straight to the rebuild.
///
/// - Complexity: O(changes) to fold the log, O(live entries) to digest each side.
enum InMemoryVerification {
    /// Digests of the state databases `verify` compares (for `meta`, only the per-entity counts).
    struct StateDigests: Equatable {
        var objects = EntryDigest()
        var links = EntryDigest()
        var indexes = EntryDigest()
        var uniques = EntryDigest()
        var counts = EntryDigest()

        var entries: Int { objects.count + links.count + indexes.count + uniques.count + counts.count }

        mutating func formUnion(_ other: StateDigests) {
            objects.formUnion(other.objects)
            links.formUnion(other.links)
            indexes.formUnion(other.indexes)
            uniques.formUnion(other.uniques)
            counts.formUnion(other.counts)
        }
    }

    /// The stored state's digests; nil when the scan returns keys out of order (a digest does not
    /// see order, and range seeks depend on it), or when a key found by the scan is not found by
    /// a lookup (a corrupt branch page misroutes point reads, which a scan never notices).
    static func digestStoredState(_ view: ReadView) throws -> StateDigests? {
        var d = StateDigests()
        var damaged = false
        func digest(_ name: DatabaseName, into digest: inout EntryDigest, lookUp: Bool, prefix: [UInt8]? = nil) throws {
            let db = view.env[name]
            // Keys point into the map, valid for the whole read transaction.
            var previous: UnsafeRawBufferPointer?
            try view.txn.scan(db, prefix: prefix) { key, value in
                digest.add(key: key, value: value)
                if let previous, Layout.compare(previous, key) >= 0 {
                    damaged = true
                    return false
                }
                previous = key
                if lookUp, try view.txn.withValue(db, key: key, { _ in true }) == nil {
                    damaged = true
                    return false
                }
                return true
            }
        }
        try digest(.objects, into: &d.objects, lookUp: true)
        guard !damaged else { return nil }
        try digest(.uniques, into: &d.uniques, lookUp: true)
        guard !damaged else { return nil }
        try digest(.links, into: &d.links, lookUp: false)
        guard !damaged else { return nil }
        try digest(.indexes, into: &d.indexes, lookUp: false)
        guard !damaged else { return nil }
        try digest(.meta, into: &d.counts, lookUp: false, prefix: Array("count/".utf8))
        return damaged ? nil : d
    }

    /// What folding the log found.
    enum FoldResult {
        /// The log is complete and every change applied; the implied state's digests.
        case folded(StateDigests, transactions: Int, changes: Int)
        /// Something the full rebuild has to look at (it will report it precisely).
        case differs
        /// More objects than the limit: the full rebuild verifies this store.
        case tooLarge
    }

    /// Log entries decoded per batch handed from the reading thread to the folding one.
    static let batchChanges = 4_096

    /// Reads transactions 1…`head` of `view`'s log in order, checking that none is missing and
    /// that each passes its checksum, and hands them to `deliver` in batches. Returns false when
    /// an entry is missing, out of order or corrupt, or when `deliver` returned false (stop).
    static func readLog(_ view: ReadView, head: TransactionID, deliver: ([LogEntry]) -> Bool) throws -> Bool {
        guard head.rawValue >= 1 else { return true }
        var next: UInt64 = 1
        var batch: [LogEntry] = [], pending = 0
        var ok = true
        try view.txn.scan(view.env[.log], from: TransactionID(1).keyBytes) { key, value in
            var r = ByteReader(key)
            let tx = try r.u64()
            guard tx <= head.rawValue else { return false }
            guard tx == next, let entry = try? LogEntryCodec.decode(value, transactionID: TransactionID(tx)) else {
                ok = false
                return false
            }
            next += 1
            pending += entry.changes.count
            batch.append(entry)
            if pending >= batchChanges {
                guard deliver(batch) else { ok = false; return false }
                batch.removeAll(keepingCapacity: true)
                pending = 0
            }
            return true
        }
        guard ok, next == head.rawValue + 1 else { return false }
        return batch.isEmpty || deliver(batch)
    }

    /// Folds transactions 1…`head` (a store never compacted) and digests the state they imply.
    /// `entries` produces the log (``readLog(_:head:deliver:)`` here or on another thread) and
    /// returns whether it was complete and sound; its `deliver` returns false to stop it.
    static func foldLog(schema: Schema, head: TransactionID, objectLimit: Int, capacity: Int,
                        progress: ((Int) -> Void)?,
                        entries: (_ deliver: ([LogEntry]) -> Bool) throws -> Bool) throws -> FoldResult {
        var fold = LogFold(schema: schema, capacity: min(objectLimit, capacity), objectLimit: objectLimit)
        var changes = 0, sinceProgress = 0
        var stopped: FoldResult?
        let complete = try entries { batch in
            for entry in batch {
                guard fold.apply(entry) else {
                    stopped = fold.exceededLimit ? .tooLarge : .differs
                    return false
                }
                changes += entry.changes.count
                sinceProgress += entry.changes.count
            }
            if sinceProgress >= 50_000, let last = batch.last {
                progress?(Int(last.transactionID.rawValue))
                sinceProgress = 0
            }
            return true
        }
        if let stopped { return stopped }
        // Small parts, taken by whichever thread is free: the other side's digest runs meanwhile,
        // and two halves on a busy pair of cores left one half running alone at the end.
        guard complete, let digests = fold.takeDigests(parts: 16) else { return .differs }
        progress?(Int(head.rawValue))
        return .folded(digests, transactions: Int(head.rawValue), changes: changes)
    }
}
