import ArgumentParser
import Foundation
import Strata

/// The ways the same work is done: Strata, raw LMDB and GRDB's plain table (the baselines the
/// targets compare with), and raw LMDB and GRDB doing Strata's index work (the equal-work
/// comparisons).
enum Engine: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// Strata through its public API.
    case strata
    /// The LMDB C API directly (the floor Strata is built on): one record per track, one B-tree.
    case lmdb
    /// The LMDB C API writing the entries Strata's data model implies (record, log entry, three
    /// index entries, a unique entry, the count): the equal-work floor, for W1–W3 only.
    case lmdbIndexed = "lmdb-indexed"
    /// GRDB 7 (SQLite), `DatabasePool` in WAL mode: a plain table, no secondary index.
    case grdb
    /// GRDB with the indexes Strata maintains for `Track` (unique mbid; title, duration, addedAt):
    /// the equal-work relational comparison, for W1–W3 and W10 (where it migrates a table with
    /// v1's indexes and builds the index v2 adds).
    case grdbIndexed = "grdb-indexed"

    /// Whether the engine measures writes only (W1–W3; `grdb-indexed` also W10). The `-indexed`
    /// engines read exactly as their plain twins do.
    var writesOnly: Bool { self == .lmdbIndexed || self == .grdbIndexed }

    /// Whether the engine takes part in the read workloads (W4–W6).
    var measuresReads: Bool { !writesOnly }
}

/// When a commit counts as done, in each engine's own terms.
enum SyncLevel: Sendable {
    /// Strata `.durable`; LMDB synchronous commits; GRDB `PRAGMA synchronous = FULL`.
    case durable
    /// Strata `.relaxed`; LMDB `MDB_NOSYNC`; GRDB's default for a pool (WAL + `synchronous = NORMAL`).
    case relaxed
}

/// What every engine is opened with.
struct BenchSetup: Sendable {
    let schema: Schema
    /// Map size for LMDB and Strata's initial map (the same for both, so neither grows mid-run).
    let mapSizeBytes: Int
}

/// One engine with one store open, doing the benchmark's primitives.
///
/// Each primitive measures only the engine's work: record generation and key preparation happen
/// before the clock starts.
protocol BenchSubject: AnyObject, Sendable {
    var engine: Engine { get }
    /// True when saving blocks the calling thread (raw LMDB, GRDB): concurrent savers then run on
    /// their own OS threads through ``saveBlocking(_:)``; otherwise they are tasks calling ``save(_:)``.
    var savesBlockThread: Bool { get }
    /// Inserts `batch` as one transaction.
    func save(_ batch: [TrackData]) async throws
    func saveBlocking(_ batch: [TrackData]) throws
    /// Records stored (to check every import landed).
    func count() throws -> Int
    /// Fetches and decodes the records at `indexes` from one snapshot; seconds of the loop and a checksum.
    func timedPointReads(_ indexes: [Int]) throws -> (seconds: Double, checksum: Int)
    /// Seconds to open and close `count` snapshots.
    func timedSnapshotOpens(_ count: Int) throws -> Double
    /// Latency (ns) of reader operations (open a snapshot, fetch one record, close), cycling through
    /// `indexes` once, or until `stop` is raised when given.
    func readerLatencies(_ indexes: [Int], until stop: StopFlag?) throws -> [UInt64]
    func close()
}

struct MissingRecord: Error, CustomStringConvertible {
    let engine: Engine
    let index: Int
    var description: String { "\(engine.rawValue): record \(index) not found" }
}

struct Unsupported: Error, CustomStringConvertible {
    let what: String
    var description: String { what }
}

extension Engine {
    func open(in directory: URL, setup: BenchSetup, sync: SyncLevel) throws -> any BenchSubject {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        switch self {
        case .strata: return try StrataSubject(directory: directory, setup: setup, sync: sync)
        case .lmdb: return try LMDBSubject(directory: directory, setup: setup, sync: sync)
        case .lmdbIndexed: return try IndexedLMDBSubject(directory: directory, setup: setup, sync: sync)
        case .grdb: return try GRDBSubject(engine: .grdb, directory: directory, sync: sync)
        case .grdbIndexed: return try GRDBSubject(engine: .grdbIndexed, directory: directory, sync: sync, indexesSQL: GRDBTrack.createIndexesSQL)
        }
    }
}
