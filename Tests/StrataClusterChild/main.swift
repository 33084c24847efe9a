// The writer process of the cluster tests: opens a replica, saves one track per transaction, and
// records every call and its outcome in a history file (appended and synced line by line), for
// the checker of StrataClusterTests. Optionally kills itself with SIGKILL at a chosen point of a
// chosen save: before its append to PostgreSQL, after PostgreSQL committed it (before the local
// commit), or after its acknowledgement was recorded.
//
// Usage: strata-cluster-child STORE POSTGRES-URL NAME COUNT HISTORY [POINT:INDEX]
//        POINT: before-append | after-append | after-ack, or turn-before-append | turn-after-append:
//        every race for the head is lost (answered `behind`, nothing appended), so each save
//        waits its turn, and the process dies inside the turn of save INDEX, holding the head row
//        (before its append) or right after PostgreSQL committed it.
import Foundation
import LibraryModel
import Strata
import Synchronization
@testable import StrataCluster

let arguments = CommandLine.arguments
guard arguments.count >= 6, let count = Int(arguments[4]) else {
    FileHandle.standardError.write(
        Data("usage: strata-cluster-child STORE URL NAME COUNT HISTORY [POINT:INDEX]\n".utf8))
    exit(64)
}
let (storePath, url, name, historyPath) = (arguments[1], arguments[2], arguments[3], arguments[5])
/// Where to die, from the last argument: a point and a save's index.
struct KillPoint: Sendable {
    let point: String
    let index: Int
}
let killPoint: KillPoint? = {
    guard CommandLine.arguments.count > 6 else { return nil }
    let parts = CommandLine.arguments[6].split(separator: ":")
    guard parts.count == 2, let index = Int(parts[1]) else { exit(64) }
    return KillPoint(point: String(parts[0]), index: index)
}()

let history = open(historyPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
guard history >= 0 else { exit(73) }

func now() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// One history line, on disk before the program goes on.
func record(_ line: String) {
    let bytes = Array((line + " \(now())\n").utf8)
    _ = bytes.withUnsafeBytes { write(history, $0.baseAddress, $0.count) }
    fsync(history)
}

/// The save the process is making (for the kill points inside the append).
let current = Atomic<Int>(-1)

/// The cluster's log with the kill points of this program around the append.
final class KillingLog: ReplicationLog {
    let inner: any ReplicationLog
    let kill: KillPoint?
    init(_ inner: any ReplicationLog, kill: KillPoint?) {
        self.inner = inner
        self.kill = kill
    }

    var takesCompressedEntries: Bool { inner.takesCompressedEntries }
    var readBytes: Int { inner.readBytes }

    /// Whether every race is lost, so that each save waits its turn.
    var losesRaces: Bool { kill?.point.hasPrefix("turn-") == true }

    func append(_ entries: [ReplicatedEntry], after head: TransactionID) throws -> ReplicationAppend {
        if losesRaces { return .behind }
        let index = current.load(ordering: .relaxed)
        if let k = kill, k.point == "before-append", k.index == index { raise(SIGKILL) }
        let outcome = try inner.append(entries, after: head)
        if let k = kill, k.point == "after-append", k.index == index, outcome == .appended { raise(SIGKILL) }
        return outcome
    }

    func append(_ entries: [ReplicatedEntry], validatedAt head: TransactionID,
                footprint: ReplicationFootprint) throws -> ReplicationAppend {
        if losesRaces { return .behind }
        let index = current.load(ordering: .relaxed)
        if let k = kill, k.point == "before-append", k.index == index { raise(SIGKILL) }
        let outcome = try inner.append(entries, validatedAt: head, footprint: footprint)
        if let k = kill, k.point == "after-append", k.index == index, outcome != .behind { raise(SIGKILL) }
        return outcome
    }

    func appendInTurn(_ body: (TransactionID) throws -> [ReplicatedEntry]) throws {
        let index = current.load(ordering: .relaxed)
        var appending = false
        let prefix = losesRaces ? "turn-" : ""
        let (before, after) = (prefix + "before-append", prefix + "after-append")
        try inner.appendInTurn { head in
            let entries = try body(head)
            appending = !entries.isEmpty
            if appending, let k = kill, k.point == before, k.index == index { raise(SIGKILL) }
            return entries
        }
        if appending, let k = kill, k.point == after, k.index == index { raise(SIGKILL) }
    }

    func entries(after position: TransactionID, limit: Int) throws -> [ReplicatedEntry] {
        try inner.entries(after: position, limit: limit)
    }
}

func kind(_ error: Error) -> String {
    switch error {
    case StrataError.replication(let e): return "\(e.kind)"
    case StrataError.validation(let f): return "validation-\(f.kind.rawValue)"
    default: return "other"
    }
}

func fail(_ error: Error) -> Never {
    FileHandle.standardError.write(Data("strata-cluster-child: \(error)\n".utf8))
    exit(75)
}

let store: Store
do { store = try Store.openExisting(at: URL(fileURLWithPath: storePath)) } catch { fail(error) }
// PostgreSQL may be restarting: tries for ten seconds.
var opened: ClusterReplica?
for attempt in 0..<100 {
    do {
        opened = try await ClusterReplica.open(store: store, address: try ClusterAddress(url: url), name: name,
                                               pollInterval: .milliseconds(50))
        break
    } catch let e as ClusterError where e.kind == .unavailable && attempt < 99 {
        try? await Task.sleep(for: .milliseconds(100))
    } catch StrataError.replication(let e) where e.kind == .unavailable && attempt < 99 {
        try? await Task.sleep(for: .milliseconds(100))
    } catch {
        fail(error)
    }
}
guard let replica = opened else { fail(ClusterError(.unavailable, "no replica")) }
do { try store.attachReplication(KillingLog(replica.log, kill: killPoint)) } catch { fail(error) }
for i in 0..<count {
    current.store(i, ordering: .relaxed)
    let track = Track(mbid: UUID(), title: "\(name)-\(i)", durationSeconds: i,
                      addedAt: Date(timeIntervalSince1970: 1_700_000_000))
    record("call \(name) \(i)")
    do {
        let tx = try await store.save(author: name) { $0.insert(track) }
        record("ok \(name) \(i) \(tx.rawValue)")
        if let k = killPoint, k.point == "after-ack", k.index == i { raise(SIGKILL) }
    } catch {
        record("fail \(name) \(i) \(kind(error))")
        try? await Task.sleep(for: .milliseconds(20))
    }
}
await replica.close()
store.close()
