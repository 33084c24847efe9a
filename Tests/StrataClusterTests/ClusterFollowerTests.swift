import Dispatch
import Foundation
import LibraryModel
import Strata
import StrataTestSupport
import Synchronization
import Testing
@testable import StrataCluster

/// The follower's reads of the log: after a notification when the replica is idle; left to the
/// writer's own appends, which bring what other machines appended, while it saves.
@Suite struct NotificationLedgerTests {
    @Test func aNotificationBeforeAnAppendWasSentIsCoveredOnceTheReplicaAppliedTheEnd() {
        let ledger = NotificationLedger(wake: DispatchSemaphore(value: 0))
        let t = ContinuousClock.now + .seconds(10)
        #expect(ledger.verdict(localHead: TransactionID(0), now: t) == .nothingNew)
        ledger.noteNotification()
        #expect(ledger.verdict(localHead: TransactionID(0), now: t) == .read,
                "a notification with the writer idle is read at once")
        let mark = ledger.begin(at: t)
        ledger.end(mark, reached: TransactionID(7), at: t + .milliseconds(2))
        // The append reached the end of the log (7); the writer is applying it.
        #expect(ledger.verdict(localHead: TransactionID(5), now: t + .milliseconds(3)) == .writerBusy)
        #expect(ledger.verdict(localHead: TransactionID(5), now: t + .seconds(1)) == .read,
                "the writer stopped before applying what its append brought: the follower reads it")
        #expect(ledger.verdict(localHead: TransactionID(7), now: t + .seconds(1)) == .nothingNew)
    }

    @Test func aNotificationDuringAnAppendWaitsForTheNextOne() {
        let ledger = NotificationLedger(wake: DispatchSemaphore(value: 0))
        let t = ContinuousClock.now + .seconds(10)
        let first = ledger.begin(at: t)
        ledger.noteNotification()  // arrived after the append was sent: not covered by it
        ledger.end(first, reached: TransactionID(3), at: t + .milliseconds(2))
        #expect(ledger.verdict(localHead: TransactionID(3), now: t + .milliseconds(3)) == .writerBusy)
        let second = ledger.begin(at: t + .milliseconds(4))
        #expect(ledger.verdict(localHead: TransactionID(3), now: t + .seconds(5)) == .writerBusy,
                "an append in flight keeps the writer busy however long it takes")
        ledger.end(second, reached: TransactionID(6), at: t + .seconds(5))
        #expect(ledger.verdict(localHead: TransactionID(6), now: t + .seconds(6)) == .nothingNew)
    }

    @Test func anAppendThatDidNotReachTheEndCoversNothing() {
        let ledger = NotificationLedger(wake: DispatchSemaphore(value: 0))
        let t = ContinuousClock.now + .seconds(10)
        ledger.noteNotification()
        let mark = ledger.begin(at: t)
        ledger.end(mark, reached: nil, at: t)  // refused: another machine's entry touched the group
        #expect(ledger.verdict(localHead: TransactionID(0), now: t + .seconds(1)) == .read)
        // A read of the follower through the end covers what was announced before it was sent.
        let read = ledger.markForRead()
        ledger.noteNotification()
        ledger.noteRead(read, reached: TransactionID(4))
        #expect(ledger.verdict(localHead: TransactionID(4), now: t + .seconds(1)) == .read,
                "the notification after the read was sent is not covered by it")
        ledger.noteRead(ledger.markForRead(), reached: TransactionID(5))
        #expect(ledger.verdict(localHead: TransactionID(5), now: t + .seconds(1)) == .nothingNew)
    }
}

@Suite(.serialized) struct ClusterFollowerTests {
    /// With polls far apart, an idle replica applies another machine's save on its notification;
    /// while it saves itself, its appends bring the other machine's entries and its follower
    /// reads the log far less than once per notification. Every save is on both afterwards.
    @Test func aBusyReplicaLeavesNotificationsToItsAppendsAndAnIdleOneReadsThem() async throws {
        try await withCluster(replicas: 2, pollInterval: .seconds(600)) { c in
            let (a, b) = (c.replicas[0], c.replicas[1])
            let first = try await a.store.save { $0.insert(Genre(name: "Announced")) }
            let deadline = ContinuousClock.now + .seconds(30)
            while try b.store.lastTransactionID < first, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(try b.store.lastTransactionID >= first, "the idle replica did not apply the notified save")

            let readsBefore = b.followerReads
            let aSaves = 120
            let progress = SaversProgress()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for k in 0..<aSaves { _ = try await a.store.save { $0.insert(newTrack("a \(k)")) } }
                    progress.aDone.store(true, ordering: .releasing)
                }
                for s in 0..<4 {
                    group.addTask {
                        var k = 0
                        while !progress.aDone.load(ordering: .acquiring) {
                            _ = try await b.store.save { $0.insert(newTrack("b \(s) \(k)")) }
                            progress.bSaved.add(1, ordering: .relaxed)
                            k += 1
                        }
                    }
                }
                try await group.waitForAll()
            }
            let reads = b.followerReads - readsBefore
            // A read per notification would be one per save of a; b's own appends bring a's
            // entries, so its follower reads only while b's savers start and stop, and when a
            // gap between two of b's appends outlasts the deferral (more of them on a loaded
            // machine: half the notifications were read once, in the whole suite on two cores).
            #expect(reads < aSaves * 3 / 4, "b's follower read the log \(reads) times for \(aSaves) appends of a")

            let head = try await c.catchUpAll()
            for r in [a, b] {
                #expect(try r.store.lastTransactionID == head)
                #expect(try r.store.mainContext.count(Track.self) == aSaves + progress.bSaved.load(ordering: .relaxed))
                #expect(try r.store.verify().ok)
            }
            #expect(try ClusterFixture.exported(a.store) == ClusterFixture.exported(b.store))
        }
    }
}

/// Whether a's saver finished, and how many saves b's savers made.
private final class SaversProgress: Sendable {
    let aDone = Atomic<Bool>(false)
    let bSaved = Atomic<Int>(0)
}
