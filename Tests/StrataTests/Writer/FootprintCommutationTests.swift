import Foundation
import LibraryModel
import StrataLMDB
import StrataTestSupport
import Testing
@testable import Strata

/// What a cluster relies on when it appends a save validated at an old head after other
/// machines' saves (see `ReplicationFootprint`): when save B's footprint shares no hash with save
/// A's, validating B after A has been applied decides exactly what validating B before it did —
/// the same logged changes (previous versions included) or the same refusal.
///
/// A randomized differential test over the library schema: random states, random pairs of change
/// sets (inserts, updates that move unique keys, deletes that cascade, nullify or are denied,
/// links and unlinks), each pair judged both ways inside one LMDB transaction that is then
/// abandoned. Replay a seed with `STRATA_FOOTPRINT_SEED=N` (or `A-B`).
@Suite(.serialized) struct FootprintCommutationTests {
    private struct Abort: Error {}

    static func seeds() -> [UInt64] {
        guard let text = ProcessInfo.processInfo.environment["STRATA_FOOTPRINT_SEED"] else { return Array(1...6) }
        let parts = text.split(separator: "-").compactMap { UInt64($0) }
        return parts.count == 2 ? Array(parts[0]...parts[1]) : parts
    }

    /// The objects a state holds, by entity, to aim operations at.
    private struct Known {
        var artists: [ObjectID] = [], albums: [ObjectID] = [], tracks: [ObjectID] = []
        var genres: [ObjectID] = [], playlists: [ObjectID] = []
    }

    private static let genreNames = ["Jazz", "Rock", "Folk", "Soul", "Funk", "Dub"]
    private static let mbids = (0..<8).map { UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", $0))! }

    /// One random operation (sometimes two) appended to `c`.
    private func randomOperation(_ c: inout ChangeSet, _ k: Known, _ rng: inout SeededGenerator) {
        func pick(_ ids: [ObjectID]) -> ObjectID? { ids.isEmpty ? nil : ids[Int.random(in: 0..<ids.count, using: &rng)] }
        let mbid = Self.mbids[Int.random(in: 0..<Self.mbids.count, using: &rng)]
        let name = Self.genreNames[Int.random(in: 0..<Self.genreNames.count, using: &rng)]
        switch Int.random(in: 0..<14, using: &rng) {
        case 0: c.insert(Genre(name: name))
        case 1: if let g = pick(k.genres) { c.update(g, [ChangeSet.AttributeValue(attribute: Genre.name.index, value: .string(name))]) }
        case 2: if let g = pick(k.genres) { c.delete(g) }
        case 3: c.insert(Artist(mbid: mbid, name: "A"))
        case 4:
            let album = Album(mbid: mbid, title: "T")
            c.insert(album)
            if let a = pick(k.artists) { c.append(.link(relationship: Album.artist.tag, from: .id(album.id), to: .id(a))) }
        case 5:
            let track = Track(mbid: mbid, title: "t", durationSeconds: 100, addedAt: Date(timeIntervalSince1970: 0))
            c.insert(track)
            if let a = pick(k.albums) { c.append(.link(relationship: Track.album.tag, from: .id(track.id), to: .id(a))) }
            if let g = pick(k.genres) { c.append(.link(relationship: Track.genre.tag, from: .id(track.id), to: .id(g))) }
        case 6: if let t = pick(k.tracks) { c.update(t, [ChangeSet.AttributeValue(attribute: Track.mbid.index, value: .uuid(mbid))]) }
        case 7: if let t = pick(k.tracks) { c.update(t, [ChangeSet.AttributeValue(attribute: Track.title.index, value: .string(name))]) }
        case 8: if let t = pick(k.tracks) { c.delete(t) }
        case 9: if let a = pick(k.albums) { c.delete(a) }
        case 10: if let a = pick(k.artists) { c.delete(a) }
        case 11:
            if let t = pick(k.tracks), let g = pick(k.genres) {
                c.append(.link(relationship: Track.genre.tag, from: .id(t), to: .id(g)))
            }
        case 12: if let t = pick(k.tracks) { c.append(.unlink(relationship: Track.genre.tag, from: .id(t), to: nil)) }
        default:
            if let p = pick(k.playlists), let t = pick(k.tracks) {
                c.append(.link(relationship: Playlist.tracks.tag, from: .id(p), to: .id(t)))
            }
        }
    }

    private func randomChangeSet(_ k: Known, _ rng: inout SeededGenerator) -> ChangeSet {
        var c = ChangeSet()
        for _ in 0..<Int.random(in: 1...3, using: &rng) { randomOperation(&c, k, &rng) }
        return c
    }

    /// `changes` resolved in a nested transaction of `txn` that is then abandoned: the logged
    /// changes or the refusal, and the footprint (nil when it has none).
    private func judge(_ changes: ChangeSet, _ store: Store, _ txn: LMDBTransaction, tx: TransactionID)
        -> (outcome: Result<[LoggedChange], StrataErrorText>, footprint: Set<Int64>?) {
        let env = store.env, builder = FootprintBuilder()
        var outcome: Result<[LoggedChange], StrataErrorText> = .failure(StrataErrorText(text: "not run"))
        // The nested transaction is abandoned by throwing `Abort` out of it; any other failure
        // (it could not begin) leaves the outcome "not run", which the caller refuses.
        do {
          try env.nested(in: txn) { nested -> Void in
            let applier = StateApplier(txn: nested, env: env, schema: store.schema, transactionID: tx)
            var resolver = SaveResolver(applier: FootprintRecorder(base: applier, footprint: builder),
                                        limits: store.configuration)
            do {
                try resolver.run(changes)
                outcome = .success(resolver.changes)
            } catch {
                outcome = .failure(StrataErrorText(text: "\(error)"))
            }
            throw Abort()
          }
        } catch is Abort {} catch {
            outcome = .failure(StrataErrorText(text: "not run: \(error)"))
        }
        return (outcome, builder.footprint.map { Set($0.keys) })
    }

    struct StrataErrorText: Error, Equatable { let text: String }

    @Test(arguments: seeds())
    func aSaveSharingNoHashWithAnotherDecidesTheSameAfterIt(seed: UInt64) async throws {
        try await withLibraryStore { store in
            var rng = SeededGenerator(seed: seed)
            var k = Known()
            // A state of a few objects of each kind, links included.
            for i in 0..<Int.random(in: 2...5, using: &rng) {
                let artist = Artist(mbid: UUID(), name: "Artist \(i)")
                let album = Album(mbid: UUID(), title: "Album \(i)")
                let genre = Genre(name: "Genre \(seed)-\(i)")
                let playlist = Playlist(name: "Playlist \(i)", createdAt: Date(timeIntervalSince1970: 0))
                var c = ChangeSet()
                c.insert(artist); c.insert(album); c.insert(genre); c.insert(playlist)
                c.append(.link(relationship: Album.artist.tag, from: .id(album.id), to: .id(artist.id)))
                k.artists.append(artist.id); k.albums.append(album.id); k.genres.append(genre.id)
                k.playlists.append(playlist.id)
                for j in 0..<Int.random(in: 0...3, using: &rng) {
                    let track = Track(mbid: UUID(), title: "Track \(i).\(j)", durationSeconds: 60,
                                      addedAt: Date(timeIntervalSince1970: 0))
                    c.insert(track)
                    c.append(.link(relationship: Track.album.tag, from: .id(track.id), to: .id(album.id)))
                    if Bool.random(using: &rng) {
                        c.append(.link(relationship: Track.genre.tag, from: .id(track.id), to: .id(genre.id)))
                    }
                    k.tracks.append(track.id)
                }
                _ = try await store.save(c)
            }
            var disjoint = 0, sharing = 0, refusedAlike = 0
            for trial in 0..<150 {
                let a = randomChangeSet(k, &rng), b = randomChangeSet(k, &rng)
                let env = store.env
                let first = TransactionID(1 << 40), second = TransactionID(1 << 40 + 1)
                var verdict: (before: Result<[LoggedChange], StrataErrorText>, after: Result<[LoggedChange], StrataErrorText>,
                              shared: Bool)?
                do {
                    try env.write { txn -> Void in
                        let judgedA = judge(a, store, txn, tx: first)
                        guard case .success = judgedA.outcome, let fpA = judgedA.footprint else { throw Abort() }
                        let before = judge(b, store, txn, tx: second)
                        guard let fpB = before.footprint else { throw Abort() }
                        // A applied for real inside the transaction, then B judged again after it.
                        try env.nested(in: txn) { nested in
                            let applier = StateApplier(txn: nested, env: env, schema: store.schema, transactionID: first)
                            var resolver = SaveResolver(applier: applier, limits: store.configuration)
                            try resolver.run(a)
                        }
                        let after = judge(b, store, txn, tx: second)
                        verdict = (before.outcome, after.outcome, !fpA.isDisjoint(with: fpB))
                        throw Abort()
                    }
                } catch is Abort {}
                guard let verdict else { continue }
                if verdict.shared {
                    sharing += 1
                    continue
                }
                disjoint += 1
                for outcome in [verdict.before, verdict.after] {
                    if case .failure(let e) = outcome { #expect(!e.text.hasPrefix("not run"), "seed \(seed), trial \(trial): \(e.text)") }
                }
                if case .failure = verdict.before { refusedAlike += 1 }
                #expect(verdict.before == verdict.after,
                        "seed \(seed), trial \(trial): B decided differently after A although their footprints share nothing")
            }
            // The seeds reach both sides of the rule, and refusals among the disjoint pairs.
            #expect(disjoint >= 20, "seed \(seed): \(disjoint) disjoint pairs")
            #expect(sharing >= 20, "seed \(seed): \(sharing) pairs sharing a hash")
            #expect(refusedAlike >= 1, "seed \(seed): no refusal among \(disjoint) disjoint pairs")
        }
    }
}
