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
    /// Entries compared per database (objects, links, indexes, uniques, counts).
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
        let scratchPath = FileManager.default.temporaryDirectory.appendingPathComponent("strata-verify-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratchPath, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratchPath) }
        let scratch = try LMDBEnvironment(path: scratchPath, options: LMDBOptions(
            mapSizeBytes: max(64 << 20, env.fileBytes * 2), maxMapSizeBytes: 1 << 42, maxReaders: 8, readOnly: false, noSync: true, noLock: false))
        defer { scratch.close() }
        let (transactions, changes) = try replay(snapshot, into: scratch, problems: &problems, progress: progress)
        var compared = 0
        if problems.count == 0 {
            compared = try compare(snapshot, scratch, problems: &problems, progress: progress)
        }
        return VerifyReport(head: snapshot.transactionID, transactions: transactions, changes: changes, entriesCompared: compared,
                            problems: problems.items, problemCount: problems.count, seconds: (ContinuousClock.now - started).seconds)
    }

    /// Applies every log entry up to the snapshot's head to the scratch environment.
    private func replay(_ snapshot: Snapshot, into scratch: LMDBEnvironment, problems: inout ProblemList,
                        progress: (@Sendable (VerifyProgress) -> Void)?) throws -> (Int, Int) {
        let head = snapshot.transactionID.rawValue
        var next: UInt64 = 1
        var changes = 0
        var batch: [LogEntry] = []
        var batchChanges = 0
        func flush() throws {
            guard !batch.isEmpty else { return }
            try writeGrowing(scratch) { txn in
                for entry in batch {
                    var applier = StateApplier(txn: txn, env: scratch, schema: schema, transactionID: entry.transactionID)
                    for c in entry.changes { try applier.apply(c) }
                    try applier.flushCounts()
                }
            }
            batch.removeAll(keepingCapacity: true)
            batchChanges = 0
            progress?(VerifyProgress(phase: .replaying, done: Int(next - 1), total: Int(head)))
        }
        guard head > 0 else { return (0, 0) }
        try snapshot.read { view in
            try view.txn.scan(view.env[.log]) { key, value in
                var r = ByteReader(key)
                let tx = try r.u64()
                guard tx <= head else { return false }
                if tx != next {
                    problems.add(tx > next ? "log: transaction\(tx - next > 1 ? "s \(next)…\(tx - 1) are" : " \(next) is") missing" : "log: key \(tx) out of order")
                    return false
                }
                do {
                    let entry = try LogEntryCodec.decode(value, transactionID: TransactionID(tx))
                    batch.append(entry)
                    batchChanges += entry.changes.count
                    changes += entry.changes.count
                } catch {
                    problems.add("log: \(error)")
                    return false
                }
                next += 1
                if batchChanges >= 50_000 { try flush() }
                return true
            }
        }
        if problems.count == 0 && next <= head { problems.add("log: transactions \(next)…\(head) are missing") }
        if problems.count == 0 {
            do { try flush() } catch { problems.add("replay: \(error)") }
        }
        return (Int(next - 1), changes)
    }

    private func writeGrowing(_ env: LMDBEnvironment, _ body: (LMDBTransaction) throws -> Void) throws {
        while true {
            do {
                try env.write(body)
                return
            } catch let e as LMDBError where e.isMapFull {
                guard try env.growMap() else { throw e }
            }
        }
    }

    /// Compares the state databases (and counts) of the store snapshot and the rebuilt scratch.
    private func compare(_ snapshot: Snapshot, _ scratch: LMDBEnvironment, problems: inout ProblemList,
                         progress: (@Sendable (VerifyProgress) -> Void)?) throws -> Int {
        var compared = 0
        try snapshot.read { live in
            try scratch.read { rebuilt in
                for name in [DatabaseName.objects, .links, .indexes, .uniques, .meta] {
                    compared += try compare(name, live: live.txn, rebuilt: rebuilt, scratch: scratch, problems: &problems)
                    progress?(VerifyProgress(phase: .comparing, done: compared, total: compared))
                }
            }
        }
        return compared
    }

    /// Walks both databases in key order (merge join). For `meta` only the per-entity counts are state.
    private func compare(_ name: DatabaseName, live: LMDBTransaction, rebuilt: LMDBTransaction, scratch: LMDBEnvironment,
                         problems: inout ProblemList) throws -> Int {
        let prefix: [UInt8]? = name == .meta ? Array("count/".utf8) : nil
        var a = ChunkedScan(txn: live, db: env[name], prefix: prefix)
        var b = ChunkedScan(txn: rebuilt, db: scratch[name], prefix: prefix)
        var n = 0
        var x = try a.next(), y = try b.next()
        while x != nil || y != nil {
            n += 1
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

/// Reads a database in key order a chunk at a time (bounded memory, no cursor kept across chunks).
private struct ChunkedScan {
    let txn: LMDBTransaction
    let db: LMDBDatabase
    let prefix: [UInt8]?
    private var buffer: [(key: [UInt8], value: [UInt8])] = []
    private var index = 0
    private var lastKey: [UInt8]?
    private var done = false

    init(txn: LMDBTransaction, db: LMDBDatabase, prefix: [UInt8]?) {
        self.txn = txn
        self.db = db
        self.prefix = prefix
    }

    mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
        if index == buffer.count {
            if done { return nil }
            try refill()
            if buffer.isEmpty {
                done = true
                return nil
            }
        }
        defer { index += 1 }
        return buffer[index]
    }

    private mutating func refill() throws {
        var chunk: [(key: [UInt8], value: [UInt8])] = []
        let after = lastKey
        try txn.scan(db, from: after ?? prefix, prefix: prefix) { k, v in
            if let after, k.elementsEqual(after) { return true }
            chunk.append((Array(k), Array(v)))
            return chunk.count < 4096
        }
        buffer = chunk
        index = 0
        lastKey = chunk.last?.key ?? lastKey
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
