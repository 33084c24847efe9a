import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Tracks by id: title, duration and album, as a plain-Swift model of a store's tracks.
typealias TrackStates = [ObjectID: (title: String, duration: Int, album: ObjectID?)]

/// Random saves of tracks and albums into `store` (seeded); the expected state after each
/// transaction is kept for comparison.
func randomTrackHistory(_ store: Store, seed: UInt64, saves: Int) async throws -> [TransactionID: TrackStates] {
    var rng = SeededGenerator(seed: seed)
    var model: TrackStates = [:]
    var albums: [ObjectID] = []
    var states: [TransactionID: TrackStates] = [.zero: [:]]
    for _ in 0..<saves {
        var c = ChangeSet()
        var next = model
        for _ in 0..<Int.random(in: 1...6, using: &rng) {
            switch Int.random(in: 0...9, using: &rng) {
            case 0:
                let a = Album(mbid: UUID(), title: "album")
                c.insert(a)
                albums.append(a.id)
            case 1...4:
                let t = makeTrack(title: "t\(Int.random(in: 0...99, using: &rng))", duration: Int.random(in: 1...900, using: &rng))
                c.insert(t)
                next[t.id] = (t.title, t.durationSeconds, nil)
            case 5...6:
                if let id = next.keys.sorted().randomElement(using: &rng) {
                    let d = Int.random(in: 1...900, using: &rng)
                    c.set(Track.durationSeconds, of: id, to: d)
                    next[id]?.duration = d
                }
            case 7:
                if let id = next.keys.sorted().randomElement(using: &rng), let a = albums.randomElement(using: &rng) {
                    c.set(Track.album, of: id, to: a)
                    next[id]?.album = a
                }
            default:
                if let id = next.keys.sorted().randomElement(using: &rng) {
                    c.delete(id)
                    next[id] = nil
                }
            }
        }
        let tx = try await store.save(c)
        model = next
        states[tx] = model
    }
    return states
}
