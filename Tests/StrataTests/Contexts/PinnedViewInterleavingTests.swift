import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A pinned view context read from other threads while it refreshes or closes, and its children
/// after a commit: every read shows one state the store had, never `closed` while the store is
/// open, never a child's commit beside a later transaction's changes.
@Suite struct PinnedViewInterleavingTests {
    /// Runs each body on a thread of its own (not the cooperative pool, which has two threads on
    /// a two-core machine) and resumes when all have returned.
    private func onThreads(_ bodies: [@Sendable () -> Void]) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let group = DispatchGroup()
            for body in bodies {
                group.enter()
                Thread {
                    body()
                    group.leave()
                }.start()
            }
            group.notify(queue: .global()) { c.resume() }
        }
    }

    private func relaxed() -> StoreConfiguration {
        var config = StoreConfiguration()
        config.durability = .relaxed
        return config
    }

    /// A read of a pinned view while another thread refreshes it: the read takes the snapshot the
    /// view pins and reads it; a refresh closing that snapshot in between made the read throw
    /// `closed` although the store was open. Many refreshes against two readers.
    @Test(.timeLimit(.minutes(15))) func aPinnedViewReadRacingRefreshDoesNotThrowClosed() async throws {
        try await withLibraryStore(relaxed()) { store in
            _ = try await store.save { c in
                for i in 0..<300 { c.insert(makeTrack(title: "t\(i)", duration: i)) }
            }
            let view = try store.newViewContext(label: "report")
            let errors = Locked<[String]>([])
            let done = Locked(false)
            let reader: @Sendable () -> Void = {
                while !done.withLock({ $0 }) {
                    do {
                        _ = try view.fetch(Track.self, sortedBy: [Track.title.ascending])
                    } catch {
                        errors.withLock { $0.append("read: \(error)") }
                    }
                }
            }
            await onThreads([
                {
                    for _ in 0..<3_000 {
                        do { try view.refresh() } catch { errors.withLock { $0.append("refresh: \(error)") } }
                    }
                    done.withLock { $0 = true }
                },
                reader,
                reader,
            ])
            let seen = errors.withLock { $0 }
            #expect(seen.isEmpty, "reads of an open pinned view failed while it refreshed: \(seen.prefix(3))")
            #expect(try view.count(Track.self) == 300)
            view.close()
        }
    }

    /// The same race ended a pinned view's live query for good (`closed` ends live queries). It
    /// ends only with the store: after the refreshes it still follows the view.
    @Test(.timeLimit(.minutes(15))) func aPinnedViewsLiveQuerySurvivesRefreshesUnderConcurrentReads() async throws {
        try await withLibraryStore(relaxed()) { store in
            _ = try await store.save { c in
                for i in 0..<300 { c.insert(makeTrack(title: "t\(i)", duration: i)) }
            }
            let view = try store.newViewContext(label: "report")
            let live = Collector(view.observe(FetchRequest<Track>(sortedBy: [Track.title.ascending])).map(\.objects.count))
            defer { live.cancel() }
            #expect(try await live.wait(for: 1) == [300])
            let done = Locked(false)
            let reader: @Sendable () -> Void = {
                while !done.withLock({ $0 }) { _ = try? view.count(Track.self, where: Track.durationSeconds > 10) }
            }
            await onThreads([
                {
                    for _ in 0..<3_000 { try? view.refresh() }
                    done.withLock { $0 = true }
                },
                reader,
            ])
            try await Task.sleep(for: .milliseconds(200))
            #expect(!live.finished.withLock { $0 }, "the live query ended although the store is open")
            // It still follows the view: a save and a refresh are delivered.
            _ = try await store.save { $0.insert(makeTrack(title: "new", duration: 1)) }
            try view.refresh()
            #expect(try await live.wait(for: 2).last == 301)
            view.close()
        }
    }

    /// A child of a pinned view reads its committed changes over the view's snapshot until the
    /// view shows them. The layers were chosen against the view's snapshot before the read took
    /// it: a refresh in between gave a state holding the commit and a later one, under a layer
    /// that still showed the commit's values (X as the child committed it, Y as the later
    /// transaction left it). Many commits, each read while the view refreshes.
    @Test(.timeLimit(.minutes(15))) func aChildOfAPinnedViewNeverMixesItsCommitWithALaterSnapshot() async throws {
        try await withLibraryStore(relaxed()) { store in
            let mixed = Locked(0)
            for i in 0..<400 {
                let x = makeTrack(title: "x\(i)", duration: 1), y = makeTrack(title: "y\(i)", duration: 1)
                _ = try await store.save { $0.insert(x); $0.insert(y) }
                let view = try store.newViewContext(label: "pinned")
                _ = try view.count(Track.self)
                let child = view.newChild(label: "editor")
                try child.set(Track.title, of: x.id, to: "mine")
                _ = try await child.commit()
                // Another writer, after the child's commit: one transaction changing X and Y.
                _ = try await store.save(author: "other") { c in
                    c.set(Track.title, of: x.id, to: "theirs")
                    c.set(Track.title, of: y.id, to: "theirs-y")
                }
                let done = Locked(false)
                await onThreads([
                    {
                        try? view.refresh()
                        done.withLock { $0 = true }
                    },
                    {
                        var after = 0
                        while after < 3 {
                            if done.withLock({ $0 }) { after += 1 }
                            guard let both = try? child.fetch(Track.self, where: .id(in: [x.id, y.id])) else { continue }
                            let titles = Dictionary(uniqueKeysWithValues: both.map { ($0.id, $0.title) })
                            // Consistent: (mine, y_i) before the refresh, (theirs, theirs-y) after it.
                            if titles[x.id] == "mine", titles[y.id] == "theirs-y" { mixed.withLock { $0 += 1 } }
                        }
                    },
                ])
                view.close()
            }
            #expect(mixed.withLock { $0 } == 0, "reads showed the child's commit of X with a later transaction's Y")
        }
    }

    /// The layer a child of a pinned view keeps of its commit is the store right after the commit:
    /// another writer's save landing between the commit and the layer's reading was taken into it
    /// (X from that save, Y from before it). The hook lands that save in between.
    @Test func aPinnedChildsCommittedLayerIsTheStoreRightAfterItsCommit() async throws {
        try await withLibraryStore { store in
            let x = makeTrack(title: "x", duration: 1), y = makeTrack(title: "y", duration: 1)
            _ = try await store.save { $0.insert(x); $0.insert(y) }
            let view = try store.newViewContext(label: "pinned")
            _ = try view.count(Track.self)
            let child = view.newChild(label: "editor")
            try child.set(Track.title, of: x.id, to: "mine")
            child.afterRootSaveForTesting.withLock { hook in
                hook = {
                    _ = try? await store.save(author: "other") { c in
                        c.set(Track.title, of: x.id, to: "later")
                        c.set(Track.title, of: y.id, to: "later-y")
                    }
                }
            }
            let tx = try #require(try await child.commit())
            let seenX = try child.object(Track.self, id: x.id)
            let seenY = try child.object(Track.self, id: y.id)
            #expect(seenX?.title == "mine", "the child reads X as the store had it right after its commit")
            #expect(try child.record(x.id)?.version == tx)
            // Whatever X shows, X and Y must come from one state.
            #expect(!(seenX?.title == "later" && seenY?.title == "y"), "X from the later save, Y from before it")
            view.close()
        }
    }
}
