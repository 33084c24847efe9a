import ArgumentParser
import Foundation
import Strata
import StrataCluster

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import NDJSON or CSV records (validated, upserted by unique key, in batches).",
        discussion: """
        By default any bad record is reported as FILE:LINE: field: reason and the command exits \
        65 with nothing written. A bulk import (--mode bulk, or auto for an input large next to \
        the store) writes into a new generation switched in at the end: all or nothing, even \
        after kill -9. Re-running an import (for example after Ctrl-C) converges to the same state.

        Examples:
          storectl import ./library.strata Tools/sample-library/library.ndjson
          storectl import ./library.strata Track.csv Album.csv --batch 10000
          storectl import ./library.strata dump.ndjson --continue-on-error --rejects rejects.ndjson
        """
    )

    @OptionGroup var target: StoreArgument
    @OptionGroup var cluster: PostgresOption
    @Argument(help: ArgumentHelp("Input files (.ndjson/.jsonl or .csv named after its entity).", valueName: "file"))
    var files: [String]
    @Option(parsing: .unconditional, help: "Records per transaction.") var batch = ImportOptions().batchSize
    @Option(help: ArgumentHelp("Input format when the file name does not say (ndjson or csv).", valueName: "format"))
    var format: String?
    @Option(help: ArgumentHelp("Entity of CSV input (default: the file name, e.g. Track.csv).", valueName: "name"))
    var entity: String?
    @Flag(help: "Write the good records; reject the bad ones (needs --rejects).") var continueOnError = false
    @Option(help: ArgumentHelp("File for rejected lines with their reasons.", valueName: "file")) var rejects: String?
    @Option(
        help: ArgumentHelp("Import id stored in each transaction's metadata (default: a new UUID).", valueName: "id"))
    var importID: String?
    @Option(parsing: .unconditional, help: "Issues listed before the rest are only counted.") var maxErrors = 20
    @Option(help: ArgumentHelp(
        "auto (the default: bulk when no other process has the store open and the input is at least an eighth of " +
        "its data file, or as large as it for an input of at most --one-transaction-max-mb without " +
        "--continue-on-error), bulk (into a new generation switched in at the end: all or nothing) or incremental " +
        "(batch by batch into the live store).", valueName: "mode"))
    var mode = ImportOptions().mode.rawValue
    @Flag(help: ArgumentHelp(
        "Keep the store's pages mapped while saving (faster on a large store, but the process's resident set " +
        "grows towards the store's size: a 10M-record library import took 319 s and 5.6 GB instead of 497 s " +
        "and 1.3 GB)."))
    var keepPagesMapped = false
    @Option(help: ArgumentHelp(
        "The largest input (MiB, all files) a bulk import resolves in memory, the store's state counted in " +
        "it at the bytes of the pages of its objects, links and unique keys (it is loaded too): faster (a " +
        "1,000,000-record library in about two thirds of the time), with memory growing with the input " +
        "(0.40 GB for a 256 MB library, against 0.38 GB and half as long again). 0: never.",
        valueName: "MiB"))
    var inMemoryMaxMb = ImportOptions().bulkInMemoryMaxInputBytes >> 20
    @Option(help: ArgumentHelp(
        "The most records a bulk import resolves in memory, the store's objects included, besides " +
        "--in-memory-max-mb (default and at most " +
        "16,777,215, what its tables can number): past it, through the B-trees. Counted from the input before " +
        "choosing (CSV lines, NDJSON '{'). 0: never.", valueName: "n"))
    var inMemoryMaxRecords = ImportOptions().bulkInMemoryMaxRecords
    @Option(name: .customLong("keep-records-max-mb"), help: ArgumentHelp(
        "The largest input (MiB, all files) whose records the validation pass keeps in memory for the " +
        "write pass, which then does not read and parse the input again (memory: a few times the input). " +
        "0: always read it again.", valueName: "MiB"))
    var keepRecordsMaxMb = ImportOptions().keptRecordsMaxInputBytes >> 20
    @Option(name: .customLong("one-transaction-max-mb"), help: ArgumentHelp(
        "The largest input (MiB, all files) an incremental import without --continue-on-error checks and " +
        "writes in one pass, committed in one transaction at the end (this process's other saves wait for it; " +
        "it holds a copy of every page it changes until then: a larger value is faster and takes more memory). " +
        "0: always check the whole input first, then write it in transactions of a few batches.",
        valueName: "MiB"))
    var oneTransactionMaxMb = ImportOptions().oneTransactionMaxInputBytes >> 20
    @Option(name: .customLong("max-line-mb"), help: ArgumentHelp(
        "The longest line (or JSON array object, or CSV record) read, in MiB: a longer one is reported " +
        "without being held in memory. Raise it for an export whose lines hold large values (a 16 MiB bytes " +
        "value is about 21 MiB of base64).", valueName: "MiB"))
    var maxLineMb = ImportOptions().maxLineBytes >> 20
    @Flag(help: "No progress output.") var quiet = false
    @Flag(help: "Print the summary as JSON.") var json = false

    func validate() throws {
        guard batch >= 1 && batch <= ImportOptions.maxBatchSize else {
            throw ValidationError("--batch must be between 1 and \(ImportOptions.maxBatchSize)")
        }
        if continueOnError && rejects == nil { throw ValidationError("--continue-on-error needs --rejects FILE") }
        if rejects != nil && !continueOnError { throw ValidationError("--rejects goes with --continue-on-error") }
        if files.contains("") { throw ValidationError("an input file name is empty (\"\")") }
        if rejects == "" { throw ValidationError("--rejects is empty (\"\"); give the file to write") }
        // `-` is standard output for `export` and `generate`: here it would make a file named
        // `-`. And with --json the rejected lines would come before the summary on standard
        // output, which then is no JSON a reader can take.
        if rejects == "-" {
            throw ValidationError("--rejects takes a file; write the rejected lines to standard output with " +
                                  "--rejects /dev/stdout (without --json)")
        }
        if json, let rejects, SymbolicLinks.descriptor(rejects) == 1 {
            throw ValidationError("--rejects \(EchoedText.shown(rejects)) writes to standard output, where --json " +
                                  "prints the summary: give the rejects another file")
        }
        if importID == "" {
            throw ValidationError("--import-id is empty (\"\"); give an id, or leave it out for a generated one")
        }
        if let format, ImportFormat(rawValue: format) == nil { throw ValidationError("--format must be ndjson or csv") }
        // The entity of CSV files: given for inputs none of which is CSV, it was ignored in silence.
        let allNDJSON = format.flatMap(ImportFormat.init(rawValue:)) == .ndjson
            || (format == nil && files.allSatisfy { ImportFormat.guess($0) == .ndjson })
        if entity != nil, !files.isEmpty, allNDJSON {
            throw ValidationError("--entity names the entity of CSV files, and none of the inputs is CSV " +
                                  "(an NDJSON record names its own entity)")
        }
        guard ImportMode(rawValue: mode) != nil else {
            throw ValidationError("--mode must be auto, bulk or incremental, not '\(EchoedText.shown(mode))'")
        }
        guard maxErrors >= 1 else { throw ValidationError("--max-errors must be at least 1") }
        guard inMemoryMaxMb >= 0 && inMemoryMaxMb <= 1 << 20 else {
            throw ValidationError("--in-memory-max-mb must be between 0 and \(1 << 20)")
        }
        guard inMemoryMaxRecords >= 0 && inMemoryMaxRecords <= ImportOptions.maxBulkInMemoryRecords else {
            throw ValidationError("--in-memory-max-records must be between 0 and \(ImportOptions.maxBulkInMemoryRecords)")
        }
        guard keepRecordsMaxMb >= 0 && keepRecordsMaxMb <= 1 << 20 else {
            throw ValidationError("--keep-records-max-mb must be between 0 and \(1 << 20)")
        }
        guard oneTransactionMaxMb >= 0 && oneTransactionMaxMb <= 1 << 20 else {
            throw ValidationError("--one-transaction-max-mb must be between 0 and \(1 << 20)")
        }
        guard maxLineMb >= 1 && maxLineMb <= 4_096 else {
            throw ValidationError("--max-line-mb must be between 1 and 4096")
        }
    }

    func run() async throws {
        for f in files where !FileManager.default.isReadableFile(atPath: f) {
            throw failure(CLIError("\(f): no such file or not readable", code: Exit.noInput))
        }
        // The rejects file is created by the import once the input has been validated (never
        // before: it may not be needed, and a path naming an input must not empty it). Here only
        // whether it could be.
        if let rejects {
            // Inside the store directory (or on one of its files, through a link) it would
            // destroy the store: refused before anything is opened or created.
            do {
                try OutputPathGuard.check(rejects, storeDirectory: target.store)
            } catch {
                throw failure(error, context: "--rejects")
            }
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: rejects, isDirectory: &isDirectory), isDirectory.boolValue {
                // As `export --output` and `generate --output` onto a directory: a file that cannot be made.
                throw failure(CLIError("\(rejects): cannot create the rejects file: is a directory",
                                       code: Exit.cannotCreate))
            }
            // A device, a pipe or a descriptor of the process is written in place: no file is made
            // beside it. Otherwise the file is made beside where a symbolic link leads.
            let inPlace = SymbolicLinks.isSpecial(rejects) || SymbolicLinks.descriptor(rejects) != nil
            let directory = (SymbolicLinks.followed(rejects) as NSString).deletingLastPathComponent
            // A file there this process may not write is not replaced, as `>` would not write it.
            if FileManager.default.fileExists(atPath: rejects), !inPlace,
               faccessat(AT_FDCWD, rejects, W_OK, AT_EACCESS) != 0 {
                throw failure(
                    CLIError("\(rejects): cannot create the rejects file: \(String(cString: strerror(errno)))",
                             code: Exit.cannotCreate))
            }
            if !inPlace, access(directory.isEmpty ? "." : directory, W_OK) != 0 {
                throw failure(
                    CLIError("\(rejects): cannot create the rejects file: \(String(cString: strerror(errno)))",
                             code: Exit.cannotCreate))
            }
        }
        MallocTuning.applyForImport(inputBytes: MallocTuning.inputBytes(files))
        var options = ImportOptions()
        options.batchSize = batch
        options.format = format.flatMap(ImportFormat.init(rawValue:))
        options.csvEntity = entity
        options.continueOnError = continueOnError
        options.rejectsPath = rejects
        options.importID = importID
        options.maxReportedIssues = maxErrors
        options.mode = ImportMode(rawValue: mode) ?? .auto
        options.bulkInMemoryMaxInputBytes = inMemoryMaxMb << 20
        options.bulkInMemoryMaxRecords = inMemoryMaxRecords
        options.maxLineBytes = maxLineMb << 20
        options.keptRecordsMaxInputBytes = keepRecordsMaxMb << 20
        options.oneTransactionMaxInputBytes = oneTransactionMaxMb << 20
        let store: Store, replica: ClusterReplica?
        do {
            (store, replica) = try await openForWriting(target, postgres: cluster) { c in
                if keepPagesMapped { c.releaseMappedPagesAfterChanges = 0 }
            }
        } catch {
            throw failure(error)
        }
        defer { store.close() }
        let outcome = await Result(catching: { try await importInto(store, options: options) })
        await replica?.close()
        try outcome.get()
    }

    private func importInto(_ store: Store, options: ImportOptions) async throws {
        let importer = Importer(store: store, options: options)
        let reporter = Task { [quiet] in
            let bar = ProgressBar(quiet: quiet)
            for await p in importer.progress { bar.show(p) }
            bar.finish()
        }
        let summary: ImportSummary
        do {
            summary = try await importer.run(files: files)
            await reporter.value
        } catch let failed as ImportFailed where failed.issues.allSatisfy({ $0.file == "options" }) {
            // The options themselves (a rejects file naming an input, or a directory): a usage error.
            await reporter.value
            for issue in failed.issues { note("storectl: error: --rejects: \(EchoedText.escaped(issue.reason))") }
            throw ExitCode(Exit.usage)
        } catch let failed as ImportFailed {
            await reporter.value
            for issue in failed.issues { note(issue.description) }
            if failed.totalIssues > failed.issues.count {
                note("… and \(failed.totalIssues - failed.issues.count) more issue(s)")
            }
            // An input file that cannot be opened at all is "cannot open input", not bad data; so
            // is one that changed while the import read it.
            let changed = !failed.issues.isEmpty && failed.issues.allSatisfy(\.inputChanged)
            // An input the file system could not read to its end: an I/O error, not bad data.
            let readFailed = failed.issues.contains(where: \.readFailed)
            let unreadable = changed || failed.issues.allSatisfy { $0.line == 0 && $0.reason.hasPrefix("cannot open") }
            // A problem with a whole file (line 0: an unknown format; a bad CSV header, a broken
            // JSON array) is not a bad record: counted apart.
            let files = failed.issues.filter { $0.line == 0 || $0.endsTheFile }.count
            let what = [failed.totalIssues - files > 0 ? "\(failed.totalIssues - files) bad record(s)" : nil,
                        files > 0 ? "\(files) input file(s) that cannot be read as records" : nil]
                .compactMap { $0 }.joined(separator: " and ")
            note(changed ? "storectl: error: an input changed while it was imported; " +
                           (failed.written > 0 ? failed.writtenNote : "nothing was written")
                 : readFailed ? "storectl: error: an input could not be read (an I/O error); " +
                                (failed.written > 0 ? failed.writtenNote : "nothing was written")
                 : unreadable ? "storectl: error: cannot open the input; nothing was written"
                 : failed.written > 0 ? "storectl: error: \(what); \(failed.writtenNote)"
                 : "storectl: error: \(what); nothing was written")
            throw ExitCode(readFailed ? Exit.ioError : unreadable ? Exit.noInput : Exit.dataError)
        } catch let issue as ImportIssue where issue.file == rejects {
            await reporter.value
            throw failure(issue).withCode(Exit.cannotCreate)
        } catch let interrupted as ImportInterrupted {
            await reporter.value
            let rejectsFile = (interrupted.underlying as? ImportIssue).map { $0.file == rejects } ?? false
            throw failure(interrupted).withCode(rejectsFile ? Exit.cannotCreate : Exit.code(for: interrupted))
        } catch {
            await reporter.value
            throw failure(error)
        }
        if json {
            printJSON(.object([
                ("importID", .string(summary.importID)), ("records", .int(Int64(summary.records))),
                ("rejected", .int(Int64(summary.rejected))), ("skippedLinks", .int(Int64(summary.skippedLinks))),
                ("transactions", .int(Int64(summary.transactions))),
                ("firstTransaction", summary.firstTransaction.map { .int(Int64($0.rawValue)) } ?? .null),
                ("lastTransaction", summary.lastTransaction.map { .int(Int64($0.rawValue)) } ?? .null),
                ("seconds", .double(summary.seconds)), ("mode", .string(summary.mode.rawValue)),
                ("inMemory", .bool(summary.inMemory)), ("oneTransaction", .bool(summary.oneTransaction)),
            ]))
        } else {
            let rate = summary.seconds > 0 ? Int(Double(summary.records) / summary.seconds) : 0
            print("imported \(summary.records) records in \(summary.transactions) transaction(s) in " +
                  "\(String(format: "%.2f", summary.seconds)) s (\(rate) records/s, \(summary.mode.rawValue)" +
                  "\(summary.inMemory ? ", in memory" : "")\(summary.oneTransaction ? ", one transaction" : "")), " +
                  "import id \(EchoedText.escaped(summary.importID))")
            if summary.rejected > 0 {
                print("rejected \(summary.rejected) record(s), see \(EchoedText.escaped(rejects ?? "the rejects file"))")
            }
            if summary.skippedLinks > 0 {
                print("skipped \(summary.skippedLinks) relationship(s) the store refused (a record at one end " +
                      "rejected, or a link it refused), see \(EchoedText.escaped(rejects ?? "the rejects file"))")
            }
        }
    }
}

/// A progress bar on a terminal, plain periodic lines otherwise.
final class ProgressBar: Sendable {
    let quiet: Bool
    let terminal = isatty(STDERR_FILENO) == 1
    private let lastLine = Mutex(ContinuousClock.now)

    init(quiet: Bool) { self.quiet = quiet }

    func show(_ p: ImportProgress) {
        guard !quiet else { return }
        let pct = Int(p.fractionDone * 100)
        let eta = p.etaSeconds.map { String(format: " ETA %d:%02d", Int($0) / 60, Int($0) % 60) } ?? ""
        // An import in one transaction: what it applied, committed at its end.
        let count = p.phase == .linking ? "\(p.links) of \(p.totalLinks) links"
            : p.applied > 0 ? "\(p.applied) records applied (committed at the end)" : "\(p.records) records"
        let text = "\(p.phase.rawValue): \(count), \(Int(p.recordsPerSecond))/s, \(pct)%\(eta)"
        if terminal {
            let filled = pct * 30 / 100
            StandardStreams.writeError("\r[" + String(repeating: "#", count: filled)
                                       + String(repeating: ".", count: 30 - filled) + "] " + text + "\u{1B}[K")
        } else {
            let now = ContinuousClock.now
            let due = lastLine.withLock { last -> Bool in
                guard now - last >= .seconds(2) || p.phase == .done else { return false }
                last = now
                return true
            }
            if due { note(text) }
        }
    }

    func finish() {
        if !quiet && terminal { StandardStreams.writeError("\n") }
    }
}

import Synchronization
