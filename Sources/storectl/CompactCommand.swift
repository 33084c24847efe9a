import ArgumentParser
import Foundation
import Strata

struct CompactCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact",
        abstract: "Squash history up to a horizon and rewrite the store compactly (disk space comes back).",
        discussion: """
        History up to the horizon (default: the head; on a replica of a cluster at most the \
        transaction before its head, whose entry it keeps) is squashed into the state at that point; \
        deleted objects' history disappears; later transactions keep their ids and stay replayable. \
        The store is rebuilt in a new generation and switched in atomically: killed at any moment, \
        it opens as the old store or the new one.

        Refuses (exit 75, naming the process ids) while another process has the store open, \
        unless --wait is given.

        Examples:
          storectl compact ./library.strata
          storectl compact ./library.strata --keep-last 1000 --json
          storectl compact ./library.strata --keep-since 2026-11-01T00:00:00Z --dry-run

        JSON: {"dryRun": false, "horizon": 1200, "previousHorizon": 0, "head": 2200, "bytesBefore": 104857600, \
        "bytesAfter": 31457280, "logEntriesBefore": 2200, "logEntriesAfter": 1000, "objects": 406, "seconds": 1.2}
        """
    )

    @OptionGroup var target: StoreArgument
    @Option(parsing: .unconditional, help: "Squash history up to and including this transaction.") var horizon: UInt64?
    @Option(parsing: .unconditional, help: "Keep the last N transactions replayable.") var keepLast: UInt64?
    @Option(
        help: ArgumentHelp("Keep transactions committed at or after this ISO-8601 time replayable.", valueName: "date"))
    var keepSince: String?
    @Flag(help: "Build the compacted store aside, report, and change nothing.") var dryRun = false
    @Flag(help: "Build the secondary indexes again from the objects instead of copying them (repairs index entries verify reports).")
    var rebuildIndexes = false
    @Flag(help: "Wait for other processes to close the store instead of refusing.") var wait = false
    @Flag(help: "Print the report as JSON.") var json = false
    @Flag(help: "No progress output.") var quiet = false

    func validate() throws {
        let given = [horizon != nil, keepLast != nil, keepSince != nil].filter { $0 }.count
        guard given <= 1 else { throw ValidationError("give at most one of --horizon, --keep-last, --keep-since") }
        if let keepSince, ISO8601.date(from: keepSince) == nil {
            throw ValidationError("--keep-since needs an ISO-8601 time like 2026-11-01T00:00:00Z")
        }
    }

    func run() async throws {
        let terminal = isatty(STDERR_FILENO) == 1 && !quiet
        var report: CompactionReport?
        // With --wait, the store is closed between tries: open, it counts as "another process"
        // to every other process waiting to compact it (two waiting compactions waited for each
        // other for ever). The horizon is resolved at each try, from the head it then finds.
        var waitingFor: [Int32] = []
        // The note of an unfinished `cluster init`, said once, not at every try of --wait.
        var noted = false
        // Compactions that wait take turns: a BSD lock on the store's lock file, which the
        // store's own (fcntl) locks ignore. Two of them would otherwise find the store free at the
        // same moments, open it together, and refuse each other try after try. Released once the
        // store is closed for good (closing a descriptor of the file drops this process's fcntl
        // locks on it, which only an open store holds).
        let turn = wait ? open(target.url.appendingPathComponent("strata.lock").path,
                               O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1
        defer { if turn >= 0 { close(turn) } }
        if turn >= 0 {
            var told = false
            while flock(turn, LOCK_EX | LOCK_NB) != 0 {
                guard errno == EWOULDBLOCK || errno == EINTR else { break }
                if !quiet && !told { note("waiting for another compaction of the store to finish…") }
                told = true
                do { try await Task.sleep(for: .milliseconds(200)) } catch { throw failure(error) }
            }
        }
        func waitFor(_ pids: [Int32]) async throws {
            if !quiet && pids != waitingFor {
                note("waiting for process(es) \(pids.map(String.init).joined(separator: ", ")) to close the store…")
            }
            waitingFor = pids
            // Half a second, and up to a quarter more: two waiting processes that close and open
            // at the same pace would otherwise keep finding each other.
            do {
                try await Task.sleep(for: .milliseconds(500 + Int.random(in: 0...125)))
            } catch { throw failure(error) }
        }
        while report == nil {
            // While others hold the store it is not opened at all: open, it would be one of the
            // processes another compaction (at its switch, after all its copying) finds in its way.
            if wait {
                let holders = Store.processesHolding(at: target.url)
                if !holders.isEmpty {
                    try await waitFor(holders)
                    continue
                }
            }
            let store: Store
            do {
                store = try Store.openExisting(at: target.url, configuration: target.configuration)
                if !noted { noteUnfinishedClusterInit(store) }
                noted = true
            } catch {
                throw failure(error)
            }
            do {
                defer { store.close() }
                let chosen = try resolveHorizon(store)
                report = try await store.compact(horizon: chosen, dryRun: dryRun, rebuildIndexes: rebuildIndexes) { p in
                    if terminal {
                        StandardStreams.writeError("\r\(p.phase.rawValue)… \(p.done > 0 ? String(p.done) : "")\u{1B}[K")
                    }
                }
            } catch StrataError.storeBusy(_, let pids) where wait {
                try await waitFor(pids)
            } catch { throw failure(error) }
        }
        if terminal { StandardStreams.writeError("\n") }
        guard let r = report else { return }
        if json {
            printJSON(.object([("dryRun", .bool(r.dryRun)), ("horizon", .int(Int64(r.horizon.rawValue))),
                               ("previousHorizon", .int(Int64(r.previousHorizon.rawValue))),
                               ("head", .int(Int64(r.head.rawValue))), ("bytesBefore", .int(Int64(r.bytesBefore))),
                               ("bytesAfter", .int(Int64(r.bytesAfter))),
                               ("logEntriesBefore", .int(Int64(r.logEntriesBefore))),
                               ("logEntriesAfter", .int(Int64(r.logEntriesAfter))),
                               ("objects", .int(Int64(r.objects))), ("seconds", .double(r.seconds))]))
        } else {
            print("\(r.dryRun ? "would compact" : "compacted"): horizon \(r.previousHorizon) → \(r.horizon) " +
                  "(head \(r.head)), \(formatBytes(r.bytesBefore)) → \(formatBytes(r.bytesAfter)), log " +
                  "\(r.logEntriesBefore) → \(r.logEntriesAfter) entries, \(r.objects) objects, " +
                  "\(String(format: "%.2f", r.seconds)) s")
        }
    }

    private func resolveHorizon(_ store: Store) throws -> TransactionID? {
        if let horizon { return TransactionID(horizon) }
        let head = try store.lastTransactionID
        if let keepLast { return TransactionID(head.rawValue > keepLast ? head.rawValue - keepLast : 0) }
        if let keepSince, let date = ISO8601.date(from: keepSince) {
            var last = TransactionID.zero
            try store.forEachTransaction { entry in
                guard entry.timestamp < date else { return false }
                last = entry.transactionID
                return true
            }
            return last
        }
        return nil
    }
}
