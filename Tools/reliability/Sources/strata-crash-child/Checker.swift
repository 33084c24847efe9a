import Foundation
import LibraryModel
import Strata

/// One acknowledgement read back from a child's stdout.
struct Ack {
    let tx: UInt64
    let kind: String
    let marker: String
    let k: Int

    init?(_ line: String) {
        let f = line.split(separator: " ")
        guard f.count == 5, f[0] == "ACK", let tx = UInt64(f[1]), let k = Int(f[4]) else { return nil }
        self.tx = tx
        kind = String(f[2])
        marker = String(f[3])
        self.k = k
    }
}

/// The checks run on a store after a crash: acknowledged transactions present and whole, every
/// logged transaction whole, the state invariant of the save workload, `verify()`.
enum Checker {
    /// Problems with one log entry written by the save workload (nil when it is whole).
    static func wholeness(_ e: LogEntry) -> String? {
        guard let kind = e.metadata["kind"], let k = e.metadata["k"].flatMap(Int.init) else { return nil }
        var inserts = 0, links = 0, updates = 0, deletes = 0
        for c in e.changes {
            switch c {
            case .insert: inserts += 1
            case .link: links += 1
            case .update: updates += 1
            case .delete: deletes += 1
            case .unlink: break
            }
        }
        switch kind {
        case "group" where inserts == k + 1 && links == k && updates == 0 && deletes == 0: return nil
        case "update" where updates == 1 && inserts == 0 && deletes == 0: return nil
        case "delete" where deletes == k + 1 && inserts == 0: return nil
        default:
            return "transaction \(e.transactionID) (\(e.metadata["marker"] ?? "?"), \(kind) k=\(k)) is partial: \(inserts) inserts, \(links) links, \(updates) updates, \(deletes) deletes"
        }
    }

    /// Checks the acknowledgements against the log; returns the violations.
    static func acknowledged(_ store: Store, _ acks: [Ack], head: UInt64) -> (violations: [String], lost: Int, partial: Int) {
        var violations: [String] = []
        var lost = 0, partial = 0
        for a in acks {
            guard a.tx <= head else {
                violations.append("acknowledged transaction \(a.tx) (\(a.marker)) is after the head \(head)")
                lost += 1
                continue
            }
            do {
                let e = try store.changes(in: TransactionID(a.tx))
                if e.metadata["marker"] != a.marker {
                    violations.append("transaction \(a.tx) was acknowledged as \(a.marker), the log has \(e.metadata["marker"] ?? "no marker")")
                    lost += 1
                } else if let p = wholeness(e) {
                    violations.append(p)
                    partial += 1
                }
            } catch {
                violations.append("acknowledged transaction \(a.tx) (\(a.marker)): \(error)")
                lost += 1
            }
        }
        return (violations, lost, partial)
    }

    /// Every log entry after `after` must be whole; returns violations and the entries seen.
    static func logWholeness(_ store: Store, after: UInt64) -> (violations: [String], entries: Int) {
        var violations: [String] = []
        var n = 0
        do {
            try store.forEachTransaction(from: TransactionID(after + 1)) { e in
                n += 1
                if let p = wholeness(e) { violations.append(p) }
                return true
            }
        } catch {
            violations.append("reading the log after \(after): \(error)")
        }
        return (violations, n)
    }

    /// Every live group of the save workload has its K tracks linked.
    static func groupsInvariant(_ store: Store, partitionPrefix: String = "") -> [String] {
        var violations: [String] = []
        do {
            let context = try store.newViewContext(label: "checker")
            defer { context.close() }
            for p in try context.fetch(Playlist.self) where p.notes?.hasPrefix("k=") == true && p.name.hasPrefix(partitionPrefix) {
                let k = Int(p.notes!.dropFirst(2)) ?? -1
                let tracks = try context.related(p.id, Playlist.tracks)
                if tracks.count != k { violations.append("group \(p.name) has \(tracks.count) tracks linked, its transaction wrote \(k)") }
                for t in tracks where !t.title.hasPrefix(p.name + "-") {
                    violations.append("group \(p.name) links track \(t.title) of another transaction")
                }
            }
        } catch {
            violations.append("reading the groups: \(error)")
        }
        return violations
    }

    static func verify(_ store: Store) -> [String] {
        do {
            let report = try store.verify()
            return report.ok ? [] : report.problems.map { "verify: \($0)" }
        } catch {
            return ["verify threw: \(error)"]
        }
    }
}
