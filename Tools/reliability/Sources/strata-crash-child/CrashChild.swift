import Foundation

/// strata-crash-child MODE [--options]: the reliability harness's child program and drivers.
///
///   save           concurrent durable saves, one `ACK <tx> <kind> <marker> <k>` line per returned save
///   import         an Importer run, `ACK-IMPORT <records>` per commit of its batches
///   gen            a deterministic NDJSON library
///   parent         the kill -9 loop (Tools/kill-loop); `--during compact|migrate|import`: during compaction,
///                  migration or a bulk import
///   compact        compacts a store with `--horizon`, printing progress with times (killed by `parent --during compact`)
///   migrate        migrates a library v1 store to v2 (killed by `parent --during migrate`)
///   import-bulk    a bulk import, printing progress with times (killed by `parent --during import`)
///   fuzz-seeds     writes the seed corpora of fuzz-log-entry and fuzz-record from a real store
///   flips          the on-disk byte-flip campaign (Tools/reliability/flip-campaign)
///   flip-check     one check of a flipped copy (started by `flips`)
///   cli-flips      the byte-flip campaign against storectl's read commands (flip-campaign --cli)
///   hold-snapshot  pins a snapshot and sleeps (stale-reader test)
///   fsize          saves under RLIMIT_FSIZE until a write fails (resource-fault test)
///   fork           uses a store after fork() (misuse test)
///   read-all       opens a store, reads everything, verifies (truncation tests)
///   branch-flip    corrupts one branch-page key of the objects database (verify test)
@main
struct CrashChild {
    static func main() throws {
        let args = CommandLine.arguments
        guard args.count >= 2 else { fail("usage: strata-crash-child MODE [--options]", code: 64) }
        let o = Options(args.dropFirst(2))
        switch args[1] {
        case "save": try SaveMode.run(o)
        case "import": try ImportMode.run(o)
        case "gen": try GenerateMode.run(o)
        case "parent": try KillLoop.run(o)
        case "compact": try MaintenanceModes.compact(o)
        case "migrate": try MaintenanceModes.migrate(o)
        case "import-bulk": try MaintenanceModes.bulkImport(o)
        case "fuzz-seeds": try FuzzSeeds.run(o)
        case "flips": try FlipCampaign.run(o)
        case "flip-check": try FlipCampaign.check(o)
        case "cli-flips": try CLIFlipCampaign.run(o)
        case "hold-snapshot": try FaultModes.holdSnapshot(o)
        case "fsize": try FaultModes.fileSizeLimit(o)
        case "fork": try FaultModes.forkMisuse(o)
        case "read-all": try FaultModes.readAll(o)
        case "branch-flip": try FlipCampaign.branchFlip(o)
        default: fail("unknown mode '\(args[1])'", code: 64)
        }
    }
}
