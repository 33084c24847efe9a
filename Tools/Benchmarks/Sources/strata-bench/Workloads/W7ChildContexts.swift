import Foundation
import LibraryModel
import Strata

/// W7 (Strata only): (a) `childChanges` inserts made in a child context and committed, over the
/// same inserts saved directly — the child's own cost is the ratio above 1; (b) a fetch in a child
/// holding `childPending` pending updates, over the same fetch in a child with none.
///
/// The direct save and the child's commit each go into a fresh, empty store (in the store the
/// direct save had filled, the same inserts would cost more: B-tree leaves are split and copied
/// instead of appended). A round runs `childPairs` such pairs and divides the totals.
enum W7ChildContexts {
    static func run(_ ctx: WorkloadContext, _ report: inout Report) async {
        let keys = ["W7_child_commit_ratio", "W7_child_fetch_ratio"]
        await ctx.measureRounds("W7", keys: keys, &report) { engine in
            guard engine == .strata else { return [:] }
            let n = ctx.sizes.childChanges, pending = ctx.sizes.childPending
            // (a) `childPairs` pairs, alternating: the inserts saved directly, then the same
            // inserts made in a child and committed, each into a fresh, empty store of its own.
            // One pair is about 0.1 s, short enough for a scheduling hiccup on a shared machine
            // to move a single ratio by ±30 %; the round sums several.
            guard ctx.sizes.childPairs >= 1 else { throw BenchSetupError("W7 needs at least one pair a round") }
            var direct = 0.0, viaChild = 0.0, fetchRatio = 0.0
            for pair in 0..<ctx.sizes.childPairs {
                direct += try await ctx.withSubject("W7", .strata, variant: "direct") { subject -> Double in
                    guard let store = (subject as? StrataSubject)?.store else { throw BenchSetupError("W7 needs a Strata subject") }
                    return try await MonotonicClock.measure {
                        var c = ChangeSet()
                        for i in 0..<n { c.insert(TrackData.make(i).track) }
                        _ = try await store.save(c)
                    }.seconds
                }
                try await ctx.withSubject("W7", .strata, variant: "child") { subject in
                    guard let store = (subject as? StrataSubject)?.store else { throw BenchSetupError("W7 needs a Strata subject") }
                    viaChild += try await MonotonicClock.measure {
                        let child = store.mainContext.newChild(label: "bench-child")
                        for i in 0..<n { try child.insert(TrackData.make(i).track) }
                        try await child.commit()
                    }.seconds
                    // (b), in the last pair's child store: the same fetch with no pending change,
                    // then with `pending` pending updates.
                    guard pair == ctx.sizes.childPairs - 1 else { return }
                    _ = try await ctx.load(subject, 2 * n..<2 * n + pending)   // ids after the child's
                    let query = FetchRequest<Track>(where: Track.durationSeconds > 450, sortedBy: [Track.title.ascending], limit: 100)
                    let clean = store.mainContext.newChild(label: "bench-clean")
                    _ = try clean.fetch(query)
                    let none = try MonotonicClock.measure { for _ in 0..<5 { _ = try clean.fetch(query) } }.seconds
                    let busy = store.mainContext.newChild(label: "bench-busy")
                    try busy.change { c in
                        for i in 2 * n..<2 * n + pending { c.set(Track.playCount, of: TrackData.id(i), to: 1) }
                    }
                    _ = try busy.fetch(query)
                    let withPending = try MonotonicClock.measure { for _ in 0..<5 { _ = try busy.fetch(query) } }.seconds
                    fetchRatio = withPending / none
                }
            }
            return ["W7_child_commit_ratio": viaChild / direct, "W7_child_fetch_ratio": fetchRatio]
        }
    }
}
