import Foundation
import GRDB

/// A row of GRDB's `track` table decoded into Swift values.
///
/// Hand-written `init(row:)` with positional access (GRDB's "optimized record" style, no
/// Codable), and dates stored as a REAL of seconds rather than GRDB's default text, so GRDB is
/// measured at its best.
struct GRDBTrack: FetchableRecord, Sendable {
    let id: Data
    let mbid: Data
    let title: String
    let artist: String
    let album: String
    let genre: String
    let durationSeconds: Int
    let addedAt: Date

    static let createTableSQL = """
        CREATE TABLE track (
            id BLOB PRIMARY KEY NOT NULL,
            mbid BLOB NOT NULL,
            title TEXT NOT NULL,
            artist TEXT NOT NULL,
            album TEXT NOT NULL,
            genre TEXT NOT NULL,
            duration INTEGER NOT NULL,
            addedAt REAL NOT NULL
        ) WITHOUT ROWID
        """
    /// The indexes Strata maintains for `Track` in the library schema v1 (unique mbid; title,
    /// durationSeconds): the `grdb-indexed` engine's table before W10's migration.
    static let createV1IndexesSQL = """
        CREATE UNIQUE INDEX track_mbid ON track(mbid);
        CREATE INDEX track_title ON track(title);
        CREATE INDEX track_duration ON track(duration);
        """
    /// The index the v1 → v2 migration adds to `Track`.
    static let createAddedAtIndexSQL = "CREATE INDEX track_added ON track(addedAt)"
    /// The indexes Strata maintains for `Track` in the library schema v2 (unique mbid; title,
    /// durationSeconds, addedAt), for the `grdb-indexed` engine.
    static let createIndexesSQL = createV1IndexesSQL + ";\n" + createAddedAtIndexSQL
    static let insertSQL = "INSERT INTO track (id, mbid, title, artist, album, genre, duration, addedAt) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    static let selectByIDSQL = "SELECT id, mbid, title, artist, album, genre, duration, addedAt FROM track WHERE id = ?"

    init(row: Row) throws {
        id = row[0]
        mbid = row[1]
        title = row[2]
        artist = row[3]
        album = row[4]
        genre = row[5]
        durationSeconds = row[6]
        addedAt = Date(timeIntervalSince1970: row[7])
    }

    static func arguments(_ t: TrackData) -> StatementArguments {
        let mbid = withUnsafeBytes(of: t.mbid.uuid) { Data($0) }
        return [Data(TrackData.keyBytes(t.index)), mbid, t.title, t.artist, t.album, t.genre, t.durationSeconds,
                t.addedAt.timeIntervalSince1970]
    }
}
