import Foundation
import LibraryModel
@testable import Strata
import StrataTestSupport
import Synchronization
import Testing
@testable import StrataCluster

/// Appending after a later head: a group validated at head H goes into the shared log after the
/// entries other machines appended since H when none of them touches its footprint (what it read
/// and wrote), with its checksums moved to the ids it takes; otherwise nothing is appended and the
/// replica validates it again, as on one machine.
@Suite(.serialized) struct ClusterFootprintTests {
    /// An entry encoded for `tx`, as a replica's writer sends it.
    private func entry(_ tx: TransactionID, author: String) -> ReplicatedEntry {
        let id = ObjectID.make(entityTag: 1)
        let log = LogEntry(transactionID: tx, schemaVersion: 2, timestampMs: 1_000, author: author, metadata: [:],
                           changes: [.unlink(relationship: 1, from: id, to: id)])
        return ReplicatedEntry(transactionID: tx, bytes: LogEntryCodec.encode(log), author: author, timestampMs: 1_000,
                               schemaVersion: 2)
    }

    private func footprint(_ keys: Int64...) -> ReplicationFootprint { ReplicationFootprint(keys: keys) }

    /// Runs `body` with a session on the cluster's database and the shared head, off the pool.
    private func withLog<R: Sendable>(_ c: ClusterFixture,
                                      _ body: @escaping @Sendable (SharedLog, PostgresSession, TransactionID) throws -> R)
        async throws -> R {
        for r in c.replicas { await r.close() }
        let address = c.address
        return try await offThePool {
            let session = PostgresSession(address: address, logger: .init(label: "test"))
            defer { session.close() }
            let head = TransactionID(UInt64(try Cluster.readCluster(session).head))
            return try body(SharedLog(session: session, replica: "test"), session, head)
        }
    }

    @Test func anEntryGoesAfterOthersThatTouchNoneOfItsFootprintWithItsChecksumMoved() async throws {
        try await withCluster(replicas: 1) { c in
            let (outcomes, stored, head) = try await withLog(c) { log, _, head in
                let first = try log.append([entry(head.next, author: "a")], validatedAt: head, footprint: footprint(1, 2))
                let second = try log.append([entry(head.next, author: "b"), entry(head.next.next, author: "b")],
                                            validatedAt: head, footprint: footprint(3))
                return ([first, second], try log.entries(after: head, limit: 10), head)
            }
            #expect(outcomes == [.appended, .appendedLater(first: TransactionID(head.rawValue + 2))])
            #expect(stored.map(\.transactionID.rawValue) == [1, 2, 3].map { head.rawValue + $0 })
            // Each stored entry reads at its id: the moved ones are what an encoding there gives.
            for e in stored {
                let decoded = try e.bytes.withUnsafeBytes { try LogEntryCodec.decode($0, transactionID: e.transactionID) }
                #expect(LogEntryCodec.encode(decoded) == e.bytes)
            }
            #expect(stored.map(\.author) == ["a", "b", "b"])
        }
    }

    @Test func anEntryIsRefusedWhenALaterOneSharesAHashHasNoFootprintOrIsTooFarOn() async throws {
        try await withCluster(replicas: 1) { c in
            let (outcomes, count, head) = try await withLog(c) { log, _, head in
                var outcomes: [ReplicationAppend] = []
                outcomes.append(try log.append([entry(head.next, author: "a")], validatedAt: head, footprint: footprint(1, 7)))
                // Shares 7 with the entry after `head`.
                outcomes.append(try log.append([entry(head.next, author: "b")], validatedAt: head, footprint: footprint(7)))
                // An entry appended without a footprint shares everything.
                let plain = head.next
                outcomes.append(try log.append([entry(plain.next, author: "c")], after: plain))
                outcomes.append(try log.append([entry(plain.next, author: "d")], validatedAt: plain, footprint: footprint(9)))
                // More than the window of moved checksums on.
                var at = plain.next
                for _ in 0..<SharedLog.appendWindow {
                    outcomes.append(try log.append([entry(at.next, author: "e")], validatedAt: at, footprint: footprint(100)))
                    at = at.next
                }
                outcomes.append(try log.append([entry(plain.next.next, author: "f")], validatedAt: plain.next,
                                               footprint: footprint(200)))
                return (outcomes, try log.entries(after: head, limit: 1_000).count, head)
            }
            #expect(outcomes == [.appended, .behind, .appended, .behind]
                    + Array(repeating: .appended, count: SharedLog.appendWindow) + [.behind])
            #expect(count == 2 + SharedLog.appendWindow, "nothing of a refused append is in the log")
            _ = head
        }
    }
}
