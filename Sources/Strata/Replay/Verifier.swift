import CLMDB
import Foundation

/// The result of ``Store/verify(progress:)``.
public struct VerifyReport: Sendable, Equatable {
    /// True when every log entry checks out, transaction ids run 1…head with no gap, and the
    /// state rebuilt from the log is byte-for-byte the materialized state.
    public var ok: Bool { problems.isEmpty }
    /// The head transaction verified.
    public let head: TransactionID
    public let transactions: Int
    public let changes: Int
    /// Entries compared, in all (objects, links, indexes, uniques and counts together).
    public let entriesCompared: Int
    /// The first problems found (at most ``Store/verifyProblemLimit``), most precise first.
    public let problems: [String]
    /// All problems, including those not listed.
    public let problemCount: Int
    public let seconds: Double
}

/// Progress of a verify run.
public struct VerifyProgress: Sendable {
    public enum Phase: String, Sendable { case replaying, comparing }
    public let phase: Phase
    public let done: Int
    public let total: Int
}

extension Store {
    /// Problems listed in a ``VerifyReport`` at most.
    public static let verifyProblemLimit = 20

    /// Rebuilds state and indexes from the log in a scratch environment and compares them with
    /// the materialized state byte for byte; checks every log entry's checksum and that
    /// transaction ids are contiguous. Reads one snapshot; writers go on meanwhile.
    public func verify(progress: (@Sendable (VerifyProgress) -> Void)? = nil) throws -> VerifyReport {
        try checkUsable()
        let started = ContinuousClock.now
        let snapshot = try self.snapshot(label: "verify")
        defer { snapshot.close() }
        var problems = ProblemList(limit: Self.verifyProblemLimit)
        let scratch = try StateRebuilder.scratch(sizeHint: snapshot.env.fileBytes * 2, storeDirectory: path)
        defer { scratch.close() }
        let head = snapshot.transactionID.rawValue
        var applied = (transactions: 0, changes: 0)
        try snapshot.read { view in
            let horizon = try view.horizon().rawValue
            do {
                _ = try StateRebuilder.loadBase(from: view, horizon: TransactionID(horizon), head: snapshot.transactionID, into: scratch, schema: schema)
            } catch {
                problems.add("base: \(error)")
                return
            }
            applied = try StateRebuilder.replay(from: view, after: horizon, upTo: head, into: scratch, schema: schema,
                                                problem: { problems.add($0) },
                                                progress: { progress?(VerifyProgress(phase: .replaying, done: $0, total: Int(head - horizon))) })
        }
        var compared = 0
        if problems.count == 0 {
            compared = try compare(snapshot, scratch, problems: &problems, progress: progress)
        }
        return VerifyReport(head: snapshot.transactionID, transactions: applied.transactions, changes: applied.changes, entriesCompared: compared,
                            problems: problems.items, problemCount: problems.count, seconds: (ContinuousClock.now - started).seconds)
    }

    /// Compares the state databases (and counts) of the store snapshot and the rebuilt scratch.
    private func compare(_ snapshot: Snapshot, _ scratch: LMDBEnvironment, problems: inout ProblemList,
                         progress: (@Sendable (VerifyProgress) -> Void)?) throws -> Int {
        var compared = 0
        try snapshot.read { live in
            try scratch.read { rebuilt in
                for name in [DatabaseName.objects, .links, .indexes, .uniques, .meta] {
                    compared += try compare(name, live: live.txn, liveEnv: snapshot.env, rebuilt: rebuilt, scratch: scratch, problems: &problems)
                    progress?(VerifyProgress(phase: .comparing, done: compared, total: compared))
                }
            }
        }
        return compared
    }

    /// Walks both databases in key order (merge join). For `meta` only the per-entity counts are state.
    private func compare(_ name: DatabaseName, live: LMDBTransaction, liveEnv: LMDBEnvironment, rebuilt: LMDBTransaction, scratch: LMDBEnvironment,
                         problems: inout ProblemList) throws -> Int {
        let prefix: [UInt8]? = name == .meta ? Array("count/".utf8) : nil
        var a = ChunkedScan(txn: live, db: liveEnv[name], prefix: prefix)
        var b = ChunkedScan(txn: rebuilt, db: scratch[name], prefix: prefix)
        var n = 0
        var x = try a.next(), y = try b.next()
        // Point reads go through branch pages that a scan never consults: look every key of the
        // databases read by key up again, so a corrupt branch page that misroutes them is found.
        let lookUp = name == .objects || name == .uniques || name == .log
        while x != nil || y != nil {
            n += 1
            if lookUp, let l = x, try live.withValue(liveEnv[name], key: l.key, { _ in true }) == nil {
                problems.add("\(name.rawValue): \(describe(l.key, in: name)) is stored but a lookup does not find it (corrupt B-tree page)")
            }
            if let l = x, let r = y, l.key == r.key {
                if l.value != r.value {
                    let detail = l.value.withUnsafeBytes { recordProblem(name, l.key, $0) }
                    problems.add("\(name.rawValue): \(describe(l.key, in: name)) differs from the log\(detail)")
                }
                x = try a.next()
                y = try b.next()
            } else if let l = x, y == nil || Value.compareBytes(l.key, y!.key) < 0 {
                problems.add("\(name.rawValue): extra entry \(describe(l.key, in: name)) (not in the log)")
                x = try a.next()
            } else if let r = y {
                problems.add("\(name.rawValue): missing entry \(describe(r.key, in: name)) (the log has it, the state does not)")
                y = try b.next()
            }
        }
        return n
    }

    private func describe(_ key: [UInt8], in name: DatabaseName) -> String {
        switch name {
        case .objects where key.count == 16:
            let id = key.withUnsafeBytes { ObjectID(keyBytes: $0) }
            return "\(schema.entity(tag: id.entityTag)?.name ?? "?") \(id)"
        case .meta: return String(decoding: key.prefix(6), as: UTF8.self) + (schema.entity(tag: UInt16(key[6]) << 8 | UInt16(key[7]))?.name ?? "?")
        case .links where key.count == 34:
            let (from, to) = key.withUnsafeBytes { (ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: $0[2..<18])), ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: $0[18..<34]))) }
            let r = schema.relationship(tag: UInt16(key[0]) << 8 | UInt16(key[1]))
            return "\(r.map { "\($0.entityName).\($0.name)" } ?? "?") \(from) → \(to)"
        default:
            return key.prefix(24).map { String(format: "%02x", $0) }.joined()
        }
    }

    private func recordProblem(_ name: DatabaseName, _ key: [UInt8], _ value: UnsafeRawBufferPointer) -> String {
        guard name == .objects, key.count == 16 else { return "" }
        let id = key.withUnsafeBytes { ObjectID(keyBytes: $0) }
        do {
            _ = try RecordCodec.decode(value, id: id, schema: schema)
            return " (the record decodes, with other values)"
        } catch {
            return " (\(error))"
        }
    }
}

/// The first problems, and how many there were.
private struct ProblemList {
    let limit: Int
    var items: [String] = []
    var count = 0
    mutating func add(_ p: String) {
        count += 1
        if items.count < limit { items.append(p) }
    }
}
