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
/// What it holds in memory is every object the log ever inserted (id, version, where its values
/// are in the map: ``LogFold``): about 60 bytes an object, plus 24 bytes for each distinct
/// attribute its updates set, and a decompressed copy of each compressed log entry (at most
/// ``ExpandedEntries/maxBytes``). ``StoreConfiguration/verifyInMemoryObjectLimit`` bounds both (the
/// attributes at ``LogFold/patchesPerObject`` per object); a larger store goes to the rebuild.
///
/// - Complexity: O(changes) to fold the log, O(live entries) to digest each side.
enum InMemoryVerification {
    /// Digests of the state databases `verify` compares (of ``DatabaseName/counts``, only the
    /// per-entity `count/` keys).
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
        let databases: [(DatabaseName, WritableKeyPath<StateDigests, EntryDigest>, lookUp: Bool, prefix: [UInt8]?)] = [
            (.objects, \.objects, true, nil), (.uniques, \.uniques, true, nil), (.links, \.links, false, nil),
            (.indexes, \.indexes, false, nil), (.counts, \.counts, false, MetaKey.countPrefix),
        ]
        for (name, digestPath, lookUp, prefix) in databases {
            try digest(name, into: &d[keyPath: digestPath], lookUp: lookUp, prefix: prefix)
            if damaged { return nil }
        }
        return d
    }

    /// Decompressed copies of the log's compressed entries, which fold ops point into as they
    /// point into the map (``readLog(_:head:expanded:deliver:)``). Freed when the last holder lets
    /// go: the fold and the thread reading the log both hold it until they are done.
    final class ExpandedEntries: Sendable {
        /// Decompressed bytes held at most: past it the in-memory check stops, and the rebuild
        /// (which decodes one batch at a time) verifies the store.
        static let maxBytes = 512 << 20
        private let held = Locked<(addresses: [UInt], bytes: Int)>(([], 0))

        /// `count` bytes that stay until this is freed; nil past ``maxBytes``.
        func allocate(_ count: Int) -> UnsafeMutableRawBufferPointer? {
            guard count > 0 else { return nil }
            return held.withLock { h -> UnsafeMutableRawBufferPointer? in
                guard h.bytes + count <= Self.maxBytes else { return nil }
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 8)
                h.bytes += count
                h.addresses.append(UInt(bitPattern: buffer.baseAddress))
                return buffer
            }
        }

        /// The plain form of the compressed entry `stored` (of transaction `tx`), decompressed
        /// straight into a buffer that stays until this is freed; nil when the entry is damaged
        /// or past ``maxBytes``.
        func plainEntry(_ stored: UnsafeRawBufferPointer, _ tx: TransactionID) -> UnsafeRawBufferPointer? {
            (try? LogEntryCodec.plainEntry(stored, transactionID: tx, allocate: allocate)) ?? nil
        }

        deinit {
            for a in held.withLock({ $0.addresses }) { UnsafeMutableRawPointer(bitPattern: a)?.deallocate() }
        }
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

    /// Fold ops per batch handed from the reading thread to the folding one (a batch ends with a
    /// whole transaction, so it may hold more).
    static let batchOps = 4_096

    /// Parts the implied state is digested in, taken by whichever worker thread is free: the
    /// stored side's digest runs meanwhile, and two halves on a busy pair of cores left one half
    /// running alone at the end.
    static let digestParts = 16

    /// Whether transactions 1…`head` of `view`'s log are all there and pass every check of
    /// decoding (checksums, structure, every value: ``LogEntryCodec/scan(_:transactionID:visit:)``),
    /// handed to `deliver` as ``FoldOp`` batches pointing into `view`'s map. Nothing is decoded,
    /// so nothing is allocated per plain entry; the rebuild names a problem, so none is kept here.
    /// A compressed entry is decompressed into `expanded`, and its ops point there instead: the
    /// caller keeps `expanded` until the fold is done, as it keeps the map.
    static func readLog(_ view: ReadView, head: TransactionID, expanded: ExpandedEntries,
                        deliver: ([FoldOp]) -> Bool) throws -> Bool {
        var batch: [FoldOp] = []
        batch.reserveCapacity(batchOps + 64)
        let scan = try StateRebuilder.scanLog(view, after: 0, upTo: head.rawValue, problem: { _ in }) { tx, stored in
            var bytes = stored
            if LogEntryCodec.isCompressed(stored) {
                // A damaged entry, or more decompressed bytes than are held: the rebuild decides.
                guard let plain = expanded.plainEntry(stored, TransactionID(tx)) else { return false }
                bytes = plain
            }
            guard let base = bytes.baseAddress else { return false }
            func address(_ span: Range<Int>) -> UInt { UInt(bitPattern: base + span.lowerBound) }
            var updated = ObjectID(high: 0, low: 0)
            let changes: Int
            do {
                changes = try LogEntryCodec.scan(bytes, transactionID: TransactionID(tx)) { change in
                    switch change {
                    case .insert(let id, let count, let values):
                        batch.append(FoldOp(kind: .insert, count: count, id: id, transaction: tx,
                                            address: address(values), length: values.count))
                    case .update(let id):
                        updated = id
                        batch.append(FoldOp(kind: .version, id: id, transaction: tx))
                    case .set(let attribute, let value):
                        batch.append(FoldOp(kind: .set, count: attribute, id: updated, transaction: tx,
                                            address: address(value), length: value.count))
                    case .delete(let id):
                        batch.append(FoldOp(kind: .delete, id: id, transaction: tx))
                    case .link(let r, let a, let b):
                        batch.append(FoldOp(kind: .link, relationship: r, id: a, other: b, transaction: tx))
                    case .unlink(let r, let a, let b):
                        batch.append(FoldOp(kind: .unlink, relationship: r, id: a, other: b, transaction: tx))
                    }
                }
            } catch {
                return false
            }
            batch.append(FoldOp(kind: .end, count: changes, transaction: tx))
            if batch.count >= batchOps {
                guard deliver(batch) else { return false }
                batch = []
                batch.reserveCapacity(batchOps + 64)
            }
            return true
        }
        guard scan.complete else { return false }
        return batch.isEmpty || deliver(batch)
    }

    /// Folds transactions 1…`head` (a store never compacted) and digests the state they imply.
    /// `entries` produces the log (``readLog(_:head:expanded:deliver:)`` here or on another thread) and
    /// returns whether it was complete and sound; its `deliver` returns false to stop it.
    ///
    /// The ops point into the store's map: the map lock must be held shared — by this thread or
    /// by the one making the ops — without a break from when the first op is made until this
    /// returns, so the map is not moved under the digests.
    static func foldLog(schema: Schema, head: TransactionID, objectLimit: Int, capacity: Int,
                        progress: ((Int) -> Void)?,
                        entries: (_ deliver: ([FoldOp]) -> Bool) throws -> Bool) throws -> FoldResult {
        var fold = LogFold(schema: schema, capacity: min(objectLimit, capacity), objectLimit: objectLimit)
        var changes = 0, sinceProgress = 0
        var stopped: FoldResult?
        let complete = try entries { batch in
            for op in batch {
                guard fold.apply(op) else {
                    stopped = fold.exceededLimit ? .tooLarge : .differs
                    return false
                }
                if op.kind == .end {
                    changes += op.count
                    sinceProgress += op.count
                }
            }
            if sinceProgress >= 50_000, let last = batch.last {
                progress?(Int(last.transaction))
                sinceProgress = 0
            }
            return true
        }
        if let stopped { return stopped }
        guard complete, let digests = fold.impliedDigests(parts: digestParts) else { return .differs }
        progress?(Int(head.rawValue))
        return .folded(digests, transactions: Int(head.rawValue), changes: changes)
    }
}
