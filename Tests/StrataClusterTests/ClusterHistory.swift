import Foundation
import LibraryModel
import Strata

/// The saves that writer processes (strata-cluster-child) made against a cluster, read from their
/// history files, and the checks of a run, in the spirit of Jepsen's: each acknowledged save is
/// in the final state exactly once under the transaction id it was acknowledged with; a save
/// that definitely failed is absent; one whose outcome is unknown (killed, or the connection
/// broke during its commit) is there at most once; nothing else is there; and the one order of
/// the log agrees with real time (a save acknowledged before another was called has the smaller
/// transaction id).
struct ClusterHistory {
    enum Outcome: Equatable {
        case ok(UInt64)
        case failed(String)
        /// No outcome recorded (the process was killed), or the failure leaves it open.
        case unknown
    }

    struct Operation {
        let process: String
        let index: Int
        let called: UInt64
        var outcome: Outcome = .unknown
        var completed: UInt64?
        var title: String { "\(process)-\(index)" }
    }

    private(set) var operations: [Operation] = []

    /// Reads history files (lines `call P I T`, `ok P I TX T`, `fail P I KIND T`).
    init(files: [URL]) throws {
        var byKey: [String: Operation] = [:]
        var order: [String] = []
        for file in files {
            for line in try String(contentsOf: file, encoding: .utf8).split(separator: "\n") {
                let f = line.split(separator: " ").map(String.init)
                guard f.count >= 4, let index = Int(f[2]), let time = UInt64(f.last ?? "") else { continue }
                let key = "\(f[1]) \(index)"
                switch f[0] {
                case "call":
                    byKey[key] = Operation(process: f[1], index: index, called: time)
                    order.append(key)
                case "ok":
                    byKey[key]?.outcome = .ok(UInt64(f[3]) ?? 0)
                    byKey[key]?.completed = time
                case "fail":
                    // A broken connection during the commit leaves the save's fate open.
                    byKey[key]?.outcome = f[3] == "outcomeUnknown" ? .unknown : .failed(f[3])
                    byKey[key]?.completed = time
                default: continue
                }
            }
        }
        operations = order.compactMap { byKey[$0] }
    }

    var acknowledged: [Operation] {
        operations.filter { if case .ok = $0.outcome { true } else { false } }
    }

    /// The problems of the run against `store`'s final state, whose tracks titled
    /// `PROCESS-INDEX` are the writers'; tracks with other titles are checked against `others`
    /// (the titles an import wrote), each exactly once.
    func problems(in store: Store, others: Set<String> = []) throws -> [String] {
        var problems: [String] = []
        let tracks = try store.mainContext.fetch(Track.self)
        var byTitle: [String: [Track]] = [:]
        for t in tracks { byTitle[t.title, default: []].append(t) }
        var expected = others
        for op in operations {
            expected.insert(op.title)
            let found = byTitle[op.title] ?? []
            switch op.outcome {
            case .ok(let tx):
                guard found.count == 1 else {
                    problems.append("\(op.title): acknowledged as transaction \(tx), found \(found.count) time(s)")
                    continue
                }
                let inserted = try store.history(of: found[0].id).first?.transactionID.rawValue
                if inserted != tx {
                    problems.append("\(op.title): acknowledged as transaction \(tx), inserted by \(inserted ?? 0)")
                }
            case .failed(let kind):
                if !found.isEmpty { problems.append("\(op.title): failed (\(kind)) but found \(found.count) time(s)") }
            case .unknown:
                if found.count > 1 { problems.append("\(op.title): outcome unknown, found \(found.count) times") }
            }
        }
        for title in others where byTitle[title]?.count != 1 {
            problems.append("\(title): imported, found \(byTitle[title]?.count ?? 0) time(s)")
        }
        for (title, list) in byTitle where !expected.contains(title) {
            problems.append("\(title): in the store \(list.count) time(s), never saved")
        }
        // Real time: an acknowledgement before a call orders the two.
        let acked = acknowledged.compactMap { op -> (called: UInt64, completed: UInt64, tx: UInt64, title: String)? in
            guard case .ok(let tx) = op.outcome, let done = op.completed else { return nil }
            return (op.called, done, tx, op.title)
        }.sorted { $0.completed < $1.completed }
        // For each save, the largest id acknowledged before it was called must be smaller.
        let byCall = acked.sorted { $0.called < $1.called }
        var j = 0
        var maxBefore: (tx: UInt64, title: String)?
        for op in byCall {
            while j < acked.count, acked[j].completed < op.called {
                if maxBefore == nil || acked[j].tx > maxBefore!.tx { maxBefore = (acked[j].tx, acked[j].title) }
                j += 1
            }
            if let m = maxBefore, m.tx >= op.tx {
                problems.append("\(op.title) (transaction \(op.tx)) was called after \(m.title) " +
                                "(transaction \(m.tx)) was acknowledged, yet is ordered before it")
            }
        }
        return problems
    }
}
