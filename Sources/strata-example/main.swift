// The end-to-end example of README.md ("Using Strata from Swift"), built and run by Tools/test
// so the README's code keeps compiling and working. Usage: strata-example [STORE_DIR]
import Foundation
import LibraryModel   // Artist, Album, Track, Genre, Playlist and `libraryEntities`
import Strata

// Open (or create) the store for the newest schema version, and check the generated Swift
// types against that schema before anything else.
let schema = try Schema.load(directory: URL(fileURLWithPath: "Schemas/library"))
let store = try Store.open(at: URL(fileURLWithPath: CommandLine.arguments.dropFirst().first ?? ".strata/example"),
                           schema: schema, entities: libraryEntities)

// Ids are permanent from the moment a value is created.
let jazz = Genre(name: "Jazz")
let artist = Artist(mbid: UUID(), name: "Sigrún Ásgeirsdóttir", country: "IS")
let album = Album(mbid: UUID(), title: "Hvítur Vetur", year: 2012)
let track = Track(mbid: UUID(), title: "Norðurljós", durationSeconds: 412, addedAt: Date())
let playlist = Playlist(name: "Late Night", createdAt: Date())

// One change set = one transaction, all or nothing. Later operations see earlier ones.
var changes = ChangeSet()
changes.insert(jazz)
changes.insert(artist)
changes.insert(album)
changes.insert(track)
changes.insert(playlist)
changes.set(Album.artist, of: album.id, to: artist.id)        // to-one; the inverse Artist.albums follows
changes.set(Track.album, of: track.id, to: album.id)
changes.set(Track.genre, of: track.id, to: jazz.id)
changes.add(track.id, to: Playlist.tracks, of: playlist.id)   // to-many
changes.set(Track.rating, of: track.id, to: 4.5)              // one attribute of an existing object
let tx = try await store.save(changes, author: "example")
print("committed transaction", tx)

// The main context reads the latest committed state on every call.
let long = try store.mainContext.fetch(Track.self, where: Track.durationSeconds > 300,
                                       sortedBy: [Track.title.ascending], limit: 10)
let context = store.mainContext                            // the same ViewContext while one is referenced
for t in long {
    let onAlbum = try context.related(t.id, Track.album)        // Album?
    print(t.title, t.durationSeconds, onAlbum?.title ?? "-")
}
let listed = try context.related(playlist.id, Playlist.tracks)  // [Track], in id order
let jazzTracks = try context.count(Track.self, where: Track.genre == jazz.id)
let fromThe2010s = try context.fetch(Track.self, where: Track.album.matches(Album.year.between(2010, 2019)))
print(listed.count, jazzTracks, fromThe2010s.count)

// Committed transactions as a stream (each call to changes() is a new subscriber).
let stream = store.changes()
let watcher = Task {
    for await event in stream {
        switch event {
        case .committed(let committed):
            print("transaction \(committed.id) by \(committed.author):",
                  committed.changedObjects["Track"]?.count ?? 0, "track(s) changed")
        case .fellBehind(let missed):
            print("missed \(missed) transaction(s): refetch instead of applying deltas")
        }
    }
}

// A pinned view context reads one snapshot until refresh().
let report = try store.newViewContext(label: "report")       // autoRefresh defaults to false
let before = try report.count(Track.self)
var more = ChangeSet()
more.insert(Track(mbid: UUID(), title: "Coda", durationSeconds: 95, addedAt: Date()))
_ = try await store.save(more)
print(try report.count(Track.self) == before)                // true: still pinned
try report.refresh()
print(try report.count(Track.self) == before + 1, try report.transactionID)
report.close()

// A snapshot is a pinned, read-only view; pinned snapshots are counted and reported.
let snapshot = try store.snapshot(label: "nightly-export")
let explicitCount = try snapshot.count(Track.self, where: Track.explicit == true)
for s in try store.openSnapshots() {                           // oldest first
    print(s.label, s.transactionID, s.ageSeconds, s.lagTransactions)
}
snapshot.close()
print(explicitCount)

// Refused saves throw, naming the rule, object and field; nothing of them is written.
var duplicate = ChangeSet()
duplicate.insert(Genre(name: "Jazz"))
do {
    _ = try await store.save(duplicate)
} catch StrataError.validation(let failure) {
    print(failure.kind, failure.field ?? "", failure.reason) // uniqueConstraint name name="Jazz" is already used by …
}

stream.cancel()                                               // the watcher's loop ends
await watcher.value
print(store.statistics)                                       // saves, transactions, LMDB commits, map growths
store.close()
