import Foundation
import LibraryModel
import Strata

/// One benchmark record: a track of about 100 bytes, the same logical content for every engine.
///
/// Record `i` is a pure function of `i` (seeded hashing, no shared generator), so a child process,
/// a reader thread and every engine rebuild exactly the same record and id without sharing state,
/// and memory use does not grow with the number of records generated.
///
/// How each engine stores it (about 100 bytes of value each):
/// - raw LMDB: ``PlainTrack/encode(_:into:)`` — mbid, addedAt, duration and the four strings;
/// - GRDB: one row of `track` (id, mbid, title, artist, album, genre, duration, addedAt);
/// - Strata: a LibraryModel `Track` with `title`, `durationSeconds`, `mbid`, `addedAt`, and
///   `isrc` standing in for the artist, album and genre text (joined with U+001F), since the
///   library schema has no such string attributes on `Track`.
struct TrackData: Sendable {
    let index: Int
    let id: ObjectID
    let mbid: UUID
    let title: String
    let artist: String
    let album: String
    let genre: String
    let durationSeconds: Int
    let addedAt: Date

    static let seed: UInt64 = 0x5354_5241_5441_2D42  // "STRATA-B"
    /// Ids are `Track` ids in creation order (one fixed millisecond, a counter), so inserts
    /// append to every engine's B-tree in the same order.
    static let idHigh = UInt64(Track.entityTag) << 48 | 1_700_000_000_000

    static func id(_ index: Int) -> ObjectID { ObjectID(high: idHigh, low: UInt64(index)) }

    /// The 16 big-endian bytes of the id, the key for raw LMDB and GRDB.
    static func keyBytes(_ index: Int) -> [UInt8] {
        var key = [UInt8](repeating: 0, count: 16)
        writeKey(index, into: &key, at: 0)
        return key
    }

    static func writeKey(_ index: Int, into buffer: inout [UInt8], at offset: Int) {
        let low = UInt64(index)
        for i in 0..<8 {
            buffer[offset + i] = UInt8(truncatingIfNeeded: idHigh >> (56 - 8 * UInt64(i)))
            buffer[offset + 8 + i] = UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64(i)))
        }
    }

    static func make(_ index: Int) -> TrackData {
        let h = SplitMix64.mix(seed ^ UInt64(index) &* 0x9E37_79B9_7F4A_7C15)
        let h2 = SplitMix64.mix(h)
        let m1 = SplitMix64.mix(h2), m2 = SplitMix64.mix(m1)
        let mbid = withUnsafeBytes(of: (m1, m2)) { raw -> UUID in
            var u: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &u) { $0.copyMemory(from: raw) }
            return UUID(uuid: u)
        }
        func pick(_ words: [String], _ shift: UInt64) -> String { words[Int((h >> shift) % UInt64(words.count))] }
        return TrackData(
            index: index,
            id: id(index),
            mbid: mbid,
            title: "\(pick(adjectives, 0)) \(pick(nouns, 8)) no. \(index % 1000)",
            artist: "\(pick(names, 16)) \(pick(surnames, 24))",
            album: "\(pick(nouns, 32)) of \(pick(places, 40))",
            genre: pick(genres, 48),
            durationSeconds: 60 + Int(h2 % 540),
            addedAt: Date(timeIntervalSince1970: 1_600_000_000 + Double(h2 >> 40)))
    }

    static func batch(_ range: Range<Int>) -> [TrackData] { range.map(make) }

    /// Artist, album and genre in one string: Strata's stand-in, stored as `isrc`.
    var joinedArtistAlbumGenre: String { artist + "\u{1F}" + album + "\u{1F}" + genre }

    var track: Track {
        Track(id: id, mbid: mbid, title: title, durationSeconds: durationSeconds, isrc: joinedArtistAlbumGenre, addedAt: addedAt)
    }

    private static let adjectives = ["Silent", "Electric", "Golden", "Broken", "Midnight", "Crimson", "Endless", "Hollow",
                                     "Velvet", "Distant", "Paper", "Northern", "Burning", "Quiet", "Restless", "Frozen"]
    private static let nouns = ["River", "Mirror", "Engine", "Garden", "Harbor", "Signal", "Lantern", "Compass",
                                "Orchard", "Machine", "Window", "Canyon", "Satellite", "Letter", "Horizon", "Meadow"]
    private static let names = ["Ada", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas",
                                "Kaori", "Lior", "Mara", "Nils", "Odile", "Pavel"]
    private static let surnames = ["Lindqvist", "Okafor", "Moreau", "Tanaka", "Kowalski", "Haddad", "Ferreira", "Novak",
                                   "Brennan", "Castillo", "Sorensen", "Adeyemi", "Rossi", "Yilmaz", "Petrov", "Walsh"]
    private static let places = ["Lisbon", "the Valley", "Reykjavik", "Glass", "Tomorrow", "the Coast", "Kyoto", "Smoke",
                                 "Antwerp", "Salt", "the North", "Dakar", "Winter", "Oslo", "Rain", "Marseille"]
    private static let genres = ["Jazz", "Ambient", "Techno", "Folk", "Hip-Hop", "Classical", "Soul", "Metal",
                                 "Reggae", "Blues", "House", "Indie Rock", "Bossa Nova", "Electro", "Punk", "Gospel"]
}
