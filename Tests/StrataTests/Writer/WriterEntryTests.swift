import Testing
@testable import Strata

/// The writer's entry (`WriterEntry`) on its own: each transition and the rules it keeps, on
/// plain values, without a store or a thread.
@Suite struct WriterEntryTests {
    private func save(_ changes: Int = 1) -> Writer.PendingSave {
        Writer.PendingSave(changes: genres(changes), author: "t", metadata: [:], completion: .waiter(Writer.Waiter()))
    }

    @Test func theFirstAsynchronousSaveStartsTheOnlyDrain() {
        var e = WriterEntry()
        #expect(e.isIdle && e.isQuiescent)
        #expect(e.queueAsync(save(), maxPending: 10) == .startDrain)
        #expect(e.queueAsync(save(), maxPending: 10) == .queued)
        #expect(e.drainScheduled && !e.isIdle && !e.isQuiescent)
        #expect(e.takeDrainGroup(limit: 64).count == 2)
        #expect(e.drainScheduled, "the drain ends only when it finds nothing queued")
        #expect(e.takeDrainGroup(limit: 64).isEmpty)
        #expect(!e.drainScheduled && e.isIdle && e.isQuiescent)
    }

    @Test func aFullOrClosedEntryRefusesSaves() {
        var e = WriterEntry()
        _ = e.queueAsync(save(), maxPending: 1)
        #expect(e.queueAsync(save(), maxPending: 1) == .refusedFull)
        #expect(e.queueCaller(save(), maxPending: 1) == .refusedFull)
        #expect(e.pending.count == 1 && e.callersCommitting == 0)
        e.close()
        #expect(e.queueAsync(save(), maxPending: 10) == .refusedClosed)
        #expect(e.queueCaller(save(), maxPending: 10) == .refusedClosed)
        #expect(e.claimInline(save()) == nil)
        #expect(e.askExclusive({}) == .refusedClosed)
        #expect(e.pending.count == 1 && e.exclusiveBodies == 0)
    }

    @Test func anInlineClaimIsTakenOnlyWhenTheWriterIsIdle() {
        var queued = WriterEntry()
        _ = queued.queueAsync(save(), maxPending: 10)
        #expect(queued.claimInline(save()) == false)
        #expect(queued.pending.count == 1, "a refused claim queued its save")

        var caller = WriterEntry()
        #expect(caller.queueCaller(save(), maxPending: 10) == .commit)
        _ = caller.takeGroup(limit: 64)
        #expect(caller.claimInline(save()) == false, "claimed while a caller commits on its thread")
        caller.endCaller()
        #expect(caller.claimInline(save()) == true)
        #expect(caller.claimInline(save()) == false, "two inline claims at once")

        var body = WriterEntry()
        #expect(body.askExclusive({}) == .run)
        #expect(body.claimInline(save()) == false, "claimed while an exclusive body was queued")
        body.exclusiveEnded()
        #expect(body.claimInline(save()) == true)
    }

    @Test func nothingEntersAheadOfAnInlineClaim() {
        var e = WriterEntry()
        #expect(e.claimInline(save()) == true)
        #expect(e.queueAsync(save(100), maxPending: 10) == .queued, "a drain was started during the claim")
        #expect(!e.drainScheduled)
        #expect(e.queueCaller(save(), maxPending: 10) == .waitForInlineClaim)
        #expect(e.askExclusive({}) == .deferred)
        #expect(!e.isQuiescent)
        // The inline group: its own save and what fits in its budget.
        #expect(e.takeGroup(limit: 64, maxChanges: Writer.inlineCommitMaxChanges).count == 1)
        let (bodies, startDrain) = e.endInline()
        #expect(bodies.count == 1 && startDrain && e.drainScheduled)
        #expect(e.inlineClaim == nil && e.callersCommitting == 1 && e.exclusiveBodies == 1)
        #expect(e.queueAsync(save(), maxPending: 10) == .queued)
        e.endCaller()
        e.exclusiveEnded()
        #expect(e.takeDrainGroup(limit: 64).count == 3)
        #expect(e.takeDrainGroup(limit: 64).isEmpty && e.isQuiescent)
    }

    @Test func anInlineClaimThatLeavesNothingQueuedStartsNoDrain() {
        var e = WriterEntry()
        #expect(e.claimInline(save()) == true)
        #expect(e.takeGroup(limit: 64, maxChanges: Writer.inlineCommitMaxChanges).count == 1)
        let (bodies, startDrain) = e.endInline()
        #expect(bodies.isEmpty && !startDrain && e.isIdle)
    }

    @Test func aQueuedSaveReachingTheGatherTargetWakesTheGatherer() {
        var e = WriterEntry()
        #expect(e.queueAsync(save(), maxPending: 10) == .startDrain)
        e.gatherTarget = 3
        #expect(e.queueAsync(save(), maxPending: 10) == .queued)
        #expect(e.queueAsync(save(), maxPending: 10) == .wakeGatherer)
        #expect(e.gatherTarget == 0, "the save that reached the target clears it")
    }

    @Test func closingForAReplacedStoreHandsBackEveryQueuedSave() {
        var e = WriterEntry()
        _ = e.queueAsync(save(), maxPending: 10)
        _ = e.queueAsync(save(), maxPending: 10)
        #expect(e.closeFailingQueued().count == 2)
        #expect(e.pending.isEmpty && e.closed)
    }
}
