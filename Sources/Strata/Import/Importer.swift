import Foundation
import Synchronization

/// Imports NDJSON or CSV records into a store: validates everything first, then upserts by
/// unique key in batches (one transaction each, tagged with the import id) while readers go on;
/// a small input, in one pass and one write transaction
/// (``ImportOptions/oneTransactionMaxInputBytes``).
///
/// Re-running the same import converges to the same state (upserts and links are idempotent),
/// so an interrupted import is simply run again.
///
/// ```swift
/// let importer = Importer(store: store)
/// Task { for await p in importer.progress { print(p.phase, p.records) } }
/// let summary = try await importer.run(files: ["Tools/sample-library/library.ndjson"])
/// ```
///
/// Memory is bounded by the batch, not the input: one line at a time (a few thousand read
/// ahead), two batches (the one being committed and the one being read; for a bulk import two
/// chunks of 10,000 records), plus 8 bytes per record (digests of unique keys, for
/// duplicate and reference checks) and the forward references that have to wait for their target.
/// An import in one transaction keeps its change sets until the commit (its input is at most
/// ``ImportOptions/oneTransactionMaxInputBytes``).
public final class Importer: Sendable {
    /// The store the records go into.
    public let store: Store
    /// The import's options.
    public let options: ImportOptions
    /// Called with an import's inputs before its write pass reads them again (tests change an
    /// input there; the hook itself picks the import it is for by its files).
    static let beforeReadingAgainForTesting = Mutex<(@Sendable ([String]) -> Void)?>(nil)
    /// Progress updates (phase, records, bytes). Finishes when ``run(files:)`` returns.
    public let progress: AsyncStream<ImportProgress>
    private let progressContinuation: AsyncStream<ImportProgress>.Continuation

    /// An importer into `store`; ``run(files:)`` does the work.
    public init(store: Store, options: ImportOptions = ImportOptions()) {
        self.store = store
        self.options = options
        (progress, progressContinuation) = AsyncStream.makeStream(of: ImportProgress.self,
                                                                  bufferingPolicy: .bufferingNewest(16))
    }

    /// Runs the import.
    /// - Throws: ``ImportFailed`` (nothing written) when any record is bad and
    ///   ``ImportOptions/continueOnError`` is off, or when the options are unusable (issues of the
    ///   file `options`, naming the option: a ``ImportOptions/batchSize`` outside
    ///   1…``ImportOptions/maxBatchSize``, a ``ImportOptions/maxLineBytes`` or
    ///   ``ImportOptions/maxReportedIssues`` below 1, a rejects path without
    ///   ``ImportOptions/continueOnError``); ``ImportIssue`` for an unreadable file;
    ///   ``StrataError`` from the store.
    public func run(files: [String]) async throws -> ImportSummary {
        defer { progressContinuation.finish() }
        let optionProblems = options.problems()
            + Self.inputProblems(files: files, rejectsPath: options.rejectsPath, storeDirectory: store.path)
        if !optionProblems.isEmpty { throw ImportFailed(issues: optionProblems, totalIssues: optionProblems.count) }
        // A record's place names its file by a 32-bit number (``RecordLocation``).
        guard files.count <= RecordLocation.maxFiles else {
            let issue = ImportIssue(file: "options", line: 0, field: "files",
                                    reason: "more than \(RecordLocation.maxFiles) input files")
            throw ImportFailed(issues: [issue], totalIssues: 1)
        }
        let clock = ContinuousClock.now
        // Each input as it is now: every reading of it reads this version, no further than this size.
        let identities = files.compactMap(InputFile.identity(of:))
        let expected = identities.count == files.count ? identities : nil
        // Saturated: sizes a file system reports (a sparse file can claim exabytes) must not trap.
        let totalBytes = expected?.reduce(0) { Self.saturatedSum($0, $1.size) } ?? files.reduce(0) {
            Self.saturatedSum($0, (try? FileManager.default.attributesOfItem(atPath: $1)[.size] as? Int) ?? 0)
        }
        let importID = options.importID ?? UUID().uuidString.lowercased()
        // This import's own commits, told apart from saves that changed nothing (which return
        // the store's last transaction id: another process's, when one is importing too).
        let ledger = CommitLedger(key: "importID", value: importID)
        store.hub.register(ledger)
        let newState = { [options, store, progressContinuation] in
            var s = ImportState(files: files, options: options, schema: store.schema, totalBytes: totalBytes,
                                started: clock, importID: importID, progress: progressContinuation, ledger: ledger)
            s.identities = expected
            return s
        }
        var state = newState()
        // A bulk import that stops at the first bad record checks the records as it writes them
        // (one pass over the input): it writes into a generation nobody sees until the switch,
        // so a bad record just abandons it. Otherwise the whole input is checked first.
        if !options.continueOnError { state.bulk = try await startBulkLoad(&state) }
        let inline = state.bulk != nil
        var rejects: RejectsWriter?
        defer { rejects?.close() }
        var oneTransaction = false
        do {
            if !inline, let held = try await holdWriter(state) {
                state.held = held
                do {
                    // One pass: each record checked as it is read, each batch applied by the
                    // writer while the next is read, all committed together once the input
                    // checked out (or nothing, at the first bad record).
                    try await write(&state, rejects: nil, checking: true)
                    try await linkDeferred(&state, rejects: nil)
                    let committed: [TransactionID]
                    do {
                        committed = try await held.commit()
                    } catch {
                        throw Self.inOnePass(error, state)
                    }
                    state.held = nil
                    for tx in committed { state.committed(tx) }
                    oneTransaction = true
                } catch is NotInOneTransaction {
                    await held.abort()
                    state = newState()
                } catch where !(error is ImportInterrupted) && !(error is CancellationError) {
                    // Two passes check all of the input before writing, and report its bad
                    // records, if any, instead of what the writer did with it.
                    await held.abort()
                    if state.checkedToEnd {
                        // The one pass read and checked all of it: its issues, else the error.
                        if state.issueCount > 0 { throw state.failure() }
                        state = newState()
                        throw error
                    }
                    // The writer refused a batch (or the write failed) before the input was read
                    // to its end: read again and checked (a small input; a failure's path only).
                    // Nothing of it is written.
                    state = newState()
                    try validate(&state)
                    if !state.issues.isEmpty { throw state.failure() }
                    throw error
                }
            }
            var inlineDone = false
            // Whether the load may be in memory from a store with objects (``RefusedInMemory``).
            var inMemoryFromObjects = true
            func fresh() -> ImportState {
                var s = newState()
                s.inMemoryFromObjects = inMemoryFromObjects
                return s
            }
            var inlineAgain = inline
            while inlineAgain {
                inlineAgain = false
                do {
                    try await write(&state, rejects: nil, checking: true)
                    try await linkDeferred(&state, rejects: nil)
                    inlineDone = true
                } catch is NotInOneTransaction {
                    // A reference linked to an object of the store whose key a later record
                    // gives: two passes (which know every key first) decide where it goes.
                    // Nothing of the load is seen before its switch: it is dropped whole.
                    await state.abandonBulk()
                    state = fresh()
                } catch is RefusedInMemory {
                    // Once more, checking as it writes, through the B-trees.
                    await state.abandonBulk()
                    inMemoryFromObjects = false
                    state = fresh()
                    state.bulk = try await startBulkLoad(&state)
                    inlineAgain = state.bulk != nil
                }
            }
            var twoPassesAgain = !inlineDone && !oneTransaction
            while twoPassesAgain {
                twoPassesAgain = false
                try validate(&state)
                // A file that cannot be read to its end (a broken JSON array) stops the import
                // even when bad records are tolerated, as a CSV header that cannot be read does:
                // the records after the break were neither imported nor rejected.
                if !state.issues.isEmpty && (!options.continueOnError || state.unreadableFile) { throw state.failure() }
                state.bulk = try await startBulkLoad(&state, mayBeOneTransaction: false)
                // Created once the import can go ahead: an existing file is emptied only then.
                rejects = try options.rejectsPath.map { try RejectsWriter(path: $0) }
                do {
                    try await write(&state, rejects: rejects, checking: false)
                    try await linkDeferred(&state, rejects: rejects)
                } catch is RefusedInMemory {
                    // Nothing of the load was seen: both passes again, through the B-trees.
                    await state.abandonBulk()
                    rejects?.close()
                    rejects = nil
                    inMemoryFromObjects = false
                    state = fresh()
                    twoPassesAgain = true
                }
            }
            if let bulk = state.bulk {
                if bulk.transactions.isEmpty {
                    // Nothing was saved (every record as the store has it): the new generation
                    // would hold the store's own state, so the store is left as it is, unwritten.
                    await state.abandonBulk()
                } else {
                    let building = bulk.memory.map { _ in Self.buildingReporter(progressContinuation, started: clock) }
                    state.report(building == nil ? .switching : .building, records: 0, bytes: totalBytes, force: true)
                    _ = try await bulk.finish(progress: building)
                    if building != nil { state.report(.switching, records: state.written, bytes: totalBytes, force: true) }
                }
                state.bulkSwitched = true
            }
        } catch {
            // Nothing the held transaction applied is written.
            if let held = state.held { await held.abort() }
            await state.abandonBulk()
            // Batches committed before a failure that is not about the input: said with it.
            if let failed = error as? ImportFailed { throw state.noting(failed) }
            throw state.interrupted(error)
        }
        do {
            try rejects?.finish()
        } catch {
            throw state.interrupted(error)
        }
        state.report(.done, records: state.written, bytes: totalBytes, links: state.deferred.count, force: true)
        return ImportSummary(importID: state.importID, records: state.written, rejected: state.rejected.count,
                             skippedLinks: state.skippedLinks, transactions: state.transactions.count,
                             firstTransaction: state.transactions.first, lastTransaction: state.transactions.last,
                             seconds: (ContinuousClock.now - clock).seconds,
                             mode: state.bulk == nil ? .incremental : .bulk, inMemory: state.bulk?.memory != nil,
                             oneTransaction: oneTransaction)
    }

    /// What a refusal of the held transaction means for an import in one pass: when a reference
    /// was linked at once to an object of the store (two passes might have waited for its
    /// record, and linked it elsewhere or later), or the writer turned out to be a replica's,
    /// the import goes back to two passes (``NotInOneTransaction``), which give the real outcome;
    /// otherwise the refusal stands (two passes would have met it at the same batch).
    private static func inOnePass(_ error: Error, _ s: ImportState) -> Error {
        guard s.held != nil else { return error }
        if error is HeldWrite.ReplicaWriter || !s.linkedFromStore.isEmpty { return NotInOneTransaction() }
        return error
    }

    /// The writer held in one write transaction for an incremental import that may be written
    /// in one pass (``ImportOptions/oneTransactionMaxInputBytes``), or nil.
    private func holdWriter(_ s: ImportState) async throws -> HeldWrite? {
        guard !options.continueOnError, options.mode != .bulk, options.oneTransactionMaxInputBytes > 0,
              s.totalBytes <= options.oneTransactionMaxInputBytes,
              let writer = store.writer, !writer.isReplica.load(ordering: .acquiring) else { return nil }
        return try await HeldWrite(writer)
    }

    /// Records a bulk import gathers before they are saved in one write transaction of the new
    /// generation (each batch still its own save and log entry): large enough that the B-trees'
    /// pages are copied once for many batches, small enough to keep the gathered change sets
    /// (about 1 KB a record, two chunks at a time: one being saved while the next is read) and the
    /// transaction's dirty pages to tens of megabytes. Measured on the 200,000-record library and
    /// the 60,000-record catalog: 10,000, 20,000 and 50,000 took the same time within the noise
    /// (±15 %), and the peak RSS grew with the chunk (305, 305 and 360–390 MB for the library).
    /// On a 1,000,000-record library (`storectl import`, with the bulk load's releases of mapped
    /// pages), 10,000 peaks at 0.39 GB in 22.1 s against 0.49–0.51 GB in 19.6–22.4 s for 25,000:
    /// a chunk's dirty pages grow with the trees, and the peak is what the import promises.
    static let bulkChunkRecords = 10_000
    /// The chunk of a bulk import resolved in memory, whose saves copy no B-tree pages: smaller,
    /// so that the change sets gathered (two chunks at a time) take less beside the state. On the
    /// 1,000,000-record library, 5,000 peaked at 395 MB against 402 MB for 10,000, in the same
    /// 18.1–18.8 s (`storectl import`, GNU time, two runs or more each).
    static let bulkInMemoryChunkRecords = 5_000
    /// Deferred links saved per write transaction of a bulk import (rounded down to whole batches).
    static let bulkChunkLinks = 200_000
    /// Records whose batches an incremental import queues together, so that one group commit of
    /// the writer takes them (each batch still its own transaction and log entry): a B-tree page
    /// the batches share is copied and written once for all of them instead of once per batch.
    /// Measured with 100,000 records into a 1,000,000-record store: batches of 5,000 committed
    /// alone took 6.2 s and wrote 5.8 GB; grouped by 25,000, 4.1–4.6 s and 1.05 GB.
    static let incrementalGroupRecords = 25_000
    /// Records an import in one held transaction queues while the writer applies the batches
    /// before (``queue(_:_:_:_:_:rejects:bytes:last:)``), so that batches of a few records reach
    /// it together. 20,000 records in batches of one into a 200,000-record store took 1.8 s one by
    /// one, against 1.25 s in two passes.
    static let heldGroupRecords = 1_000
    /// Bytes of values (``Batch/bytes``) whose batches one commit takes at most, and that a bulk
    /// import gathers before it saves them: a group of large records is held to it as one of
    /// small records is held to ``incrementalGroupRecords`` (or ``bulkChunkRecords``).
    static let groupBytes = 128 << 20
    /// Input bytes per record a bulk import in memory sizes its tables by (the generated library
    /// and catalog have about 250).
    static let inputBytesPerRecord = 256

    /// The bulk load the import writes into, or nil to write into the live store
    /// (``ImportOptions/mode``; see ``ImportMode/auto`` for its choice).
    /// `mayBeOneTransaction`: whether an incremental import of this input could still be written in
    /// one transaction (false once two passes are decided).
    private func startBulkLoad(_ s: inout ImportState, mayBeOneTransaction: Bool = true) async throws -> BulkLoad? {
        switch options.mode {
        case .incremental:
            return nil
        case .bulk:
            s.report(.copying, records: 0, bytes: 0, force: true)
            return try await beginBulkLoad(s)
        case .auto:
            // A replica's saves go through its cluster, batch by batch.
            // An input an incremental import writes in one transaction needs to be larger next
            // to the store for a new generation to pay off.
            let inOneTransaction = mayBeOneTransaction && !options.continueOnError
                && options.oneTransactionMaxInputBytes > 0 && s.totalBytes <= options.oneTransactionMaxInputBytes
            let ratio = inOneTransaction ? ImportMode.autoBulkRatioInOneTransaction : ImportMode.autoBulkRatio
            guard let writer = store.writer, !writer.isReplica.load(ordering: .acquiring),
                  let lock = store.lock, (try? store.refuseWhileShared(lock)) != nil,
                  s.totalBytes.multipliedReportingOverflow(by: ratio).overflow
                    || s.totalBytes * ratio >= store.env.fileBytes else { return nil }
            s.report(.copying, records: 0, bytes: 0, force: true)
            do {
                return try await beginBulkLoad(s)
            } catch StrataError.storeBusy {
                // Another process opened the store since: batch by batch, beside it.
                return nil
            } catch let e as LMDBError where e.code == ENOSPC && e.operation.hasPrefix("room for a new generation") {
                // No room for a copy of the store beside it: batch by batch, which needs none
                // (the user asked for no particular mode).
                store.logger.notice("import: \(e.operation); importing batch by batch instead of into a new generation")
                return nil
            }
        }
    }

    /// What a bulk load in memory reports while it writes its generation (its work done, counted
    /// in objects out of all: see ``ImportProgress/Phase/building``).
    private static func buildingReporter(_ progress: AsyncStream<ImportProgress>.Continuation,
                                         started: ContinuousClock.Instant) -> @Sendable (Int, Int) -> Void {
        let phaseStarted = ContinuousClock.now
        return { done, total in
            let now = ContinuousClock.now
            progress.yield(ImportProgress(phase: .building, records: done, bytesRead: 0, totalBytes: 0,
                                          elapsedSeconds: (now - started).seconds, links: 0, totalLinks: 0,
                                          phaseSeconds: (now - phaseStarted).seconds, totalRecords: total))
        }
    }

    /// `a + b`, or `Int.max` past it.
    static func saturatedSum(_ a: Int, _ b: Int) -> Int {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? Int.max : sum
    }

    /// Begins the bulk load, in memory when it may be (``ImportOptions/bulkInMemoryMaxInputBytes``;
    /// never with ``ImportOptions/continueOnError``, whose saves must be undone one by one), its
    /// tables sized by ``inputBytesPerRecord``.
    private func beginBulkLoad(_ s: ImportState) async throws -> BulkLoad {
        let records = !options.continueOnError && s.totalBytes <= options.bulkInMemoryMaxInputBytes
            ? Self.recordsAtMost(s.files, identities: s.identities, format: options.format,
                                 limit: options.bulkInMemoryMaxRecords) : nil
        // The store's state is loaded too, within what the input leaves of the limits (the load
        // measures it in its snapshot: its objects, and the bytes of its pages).
        let room = records.flatMap { r -> (bytes: Int, objects: Int)? in
            s.inMemoryFromObjects ? (options.bulkInMemoryMaxInputBytes - s.totalBytes, options.bulkInMemoryMaxRecords - r) : nil
        }
        return try await store.beginBulkLoad(inMemory: records != nil, storeInMemoryAtMost: room,
                                             expectedObjects: records != nil ? s.totalBytes / Self.inputBytesPerRecord : 0)
    }

    /// The most records `files` can hold, if it is at most `limit`: a CSV file's line ends plus
    /// one (a header, blank lines and line breaks inside quoted fields only count more), an NDJSON
    /// or JSON file's `{` bytes (every record is an object; nested objects and braces inside
    /// strings only count more). Nil past `limit`, for a file of no known format, or when a file
    /// cannot be read as the import's version of it (the import's own reading then says why).
    /// Reads each file once, a MiB at a time, and stops as soon as the count passes `limit`.
    static func recordsAtMost(_ files: [String], identities: [InputFile.Identity]?, format: ImportFormat?,
                              limit: Int) -> Int? {
        var count = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        for (i, path) in files.enumerated() {
            guard let f = format ?? ImportFormat.guess(path) else { return nil }
            let needle: UInt8 = f == .csv ? 0x0A : 0x7B
            if f == .csv { count += 1 }
            guard var reader = try? InputFile.Reader(path: path) else { return nil }
            defer { reader.close() }
            reader.expected = identities?[i]
            while true {
                guard let n = try? reader.read(into: &buffer, at: 0, line: 0) else { return nil }
                if n == 0 { break }
                count += buffer.withUnsafeBytes { occurrences(of: needle, in: UnsafeRawBufferPointer(rebasing: $0.prefix(n))) }
                if count > limit { return nil }
            }
        }
        return count
    }

    /// How many bytes of `bytes` are `needle`: eight at a time (a word's zero bytes after an
    /// XOR, counted exactly: a byte's high bit is set in `t` only when all eight of its bits
    /// are zero), the rest one by one.
    static func occurrences(of needle: UInt8, in bytes: UnsafeRawBufferPointer) -> Int {
        let spread = UInt64(needle) &* 0x0101_0101_0101_0101
        let low7: UInt64 = 0x7F7F_7F7F_7F7F_7F7F
        var found = 0, i = 0
        while i + 8 <= bytes.count {
            let x = bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ spread
            let t = ~(((x & low7) &+ low7) | x | low7)
            found += t.nonzeroBitCount
            i += 8
        }
        while i < bytes.count {
            if bytes[i] == needle { found += 1 }
            i += 1
        }
        return found
    }

    /// Starts saving the batches a bulk import has gathered, in one write transaction of its new
    /// generation (on the load's queue), while the import goes on reading: the batches saved
    /// before are landed first (``landBulk(_:rejects:bytes:)``), so one write is in flight at a
    /// time. Each batch is saved as ``finish(_:_:rejects:)`` saves one: with
    /// ``ImportOptions/continueOnError``, a refused batch is saved record by record and the
    /// refused records are rejected; without, the error ends the import (and the load is
    /// abandoned: nothing is written).
    private func flushBulk(_ s: inout ImportState, rejects: RejectsWriter?, bytes: Int) async throws {
        guard let bulk = s.bulk, !s.bulkPending.isEmpty else { return }
        try await landBulk(&s, rejects: rejects, bytes: bytes)
        let pending = s.bulkPending
        s.bulkPending = []
        s.bulkPendingRecords = 0
        s.bulkPendingBytes = 0
        let continueOnError = options.continueOnError, author = options.author, importID = s.importID
        // Numbered in input order, as an incremental import numbers its batches.
        let firstNumber = s.batchesSubmitted + 1
        s.batchesSubmitted += pending.count
        // Built here, beside the reading, not on the load's queue, which is the busier side; and
        // held by the flight until it lands, so that they are freed here too.
        let changes = pending.map(\.changes)
        let task = Task { () throws -> BulkFlight.Outcome in
            try await bulk.write { w in
                var outcomes: [(written: Int, refused: [BulkFlight.Refusal])] = []
                for (n, batch) in pending.enumerated() {
                    let metadata = ["importID": importID, "batch": String(firstNumber + n)]
                    guard continueOnError else {
                        _ = try w.save(changes[n], author: author, metadata: metadata, isolated: false)
                        outcomes.append((batch.count, []))
                        continue
                    }
                    do {
                        _ = try w.save(changes[n], author: author, metadata: metadata, isolated: true)
                        outcomes.append((batch.count, []))
                    } catch StrataError.validation {
                        var written = 0
                        var refused: [BulkFlight.Refusal] = []
                        for (changes, items) in batch.perUnit {
                            do {
                                _ = try w.save(changes, author: author, metadata: metadata, isolated: true)
                                written += items.count
                            } catch StrataError.validation(let failure) {
                                // Read now: the state the unit was refused in (its nested
                                // transaction is gone), for naming what it took.
                                let partner = w.read { Self.partnerSource(failure, in: $0) } ?? .unknown
                                for i in items { refused.append((i, failure, partner)) }
                            }
                        }
                        outcomes.append((written, refused))
                    }
                }
                return outcomes
            }
        }
        s.bulkFlight = BulkFlight(pending: pending, changes: changes, task: task)
    }

    /// Waits for the bulk write in flight, if any, and takes its outcome: the transactions it
    /// committed, the records written, the rejected lines (to the rejects file, in input order,
    /// after the lines validation rejected with the same batches).
    private func landBulk(_ s: inout ImportState, rejects: RejectsWriter?, bytes: Int) async throws {
        guard let flight = s.bulkFlight else { return }
        s.bulkFlight = nil
        let outcomes: [(written: Int, refused: [BulkFlight.Refusal])]
        let committed: [TransactionID]
        do {
            (outcomes, committed) = try await flight.task.value
        } catch StrataError.validation(let failure) {
            // Stopping at the first bad record: the record the store refused, with its line. The
            // write was undone; the generation holds what the flights before it left.
            let source = try await bulkPartnerSource(failure, s)
            if let located = located(failure, inWriteOf: flight.pending, partnerFrom: source, s) { throw located }
            throw StrataError.validation(failure)
        }
        s.transactions += committed
        for (batch, outcome) in zip(flight.pending, outcomes) {
            for (reason, raw) in batch.earlyRejects { try rejects?.write(reason: reason, raw: raw) }
            s.written += outcome.written
            for (i, failure, partner) in outcome.refused {
                let item = batch.items[i]
                let unit = batch.units.first { $0.contains(i) } ?? i..<i + 1
                let issue = refusal(failure, of: batch.records(unit), partnerFrom: partner, item: (item.fileIndex, item.line), s)
                s.reject(item.location, issue)
                try rejects?.write(reason: issue.description, raw: item.raw)
            }
        }
        s.report(.writing, records: s.written, bytes: bytes, force: true)
    }

    /// A save the store refused after the input was checked, in one write of `batches` (applied
    /// in this order, after the records `applied`, to the state `source` describes; only a record
    /// of `batches` is blamed), as the record to blame: `FILE:LINE: field:
    /// reason`, with what this import had committed before it. Nil when no record of them is
    /// found (the store's error is reported as it is).
    ///
    /// An object left without a required to-one by another record's link is that record's doing
    /// (``displacing(_:in:after:partnerFrom:_:)``), also when a batch restates the object itself,
    /// or gave it the partner taken: every batch is searched for it first. Otherwise the record
    /// naming the object the store named (a unique key that an object of the store holds, under a
    /// constraint the record was not upserted by) is the one.
    private func located(_ failure: ValidationFailure, inWriteOf batches: [Batch],
                         after applied: [RecordOperations] = [], partnerFrom source: PartnerSource,
                         _ s: ImportState) -> ImportFailed? {
        if failure.kind == .requiredRelationship {
            var before = applied
            for batch in batches {
                let records = batch.records
                if let taken = displacing(failure, in: records, after: before, partnerFrom: source, s) {
                    return s.noting(ImportFailed(issues: [taken], totalIssues: 1))
                }
                before += records
            }
        }
        for batch in batches {
            if let named = named(failure, in: batch, s) { return named }
        }
        return nil
    }

    /// The record of `batch` naming the object `failure` names (its own, or the one its upsert
    /// found), as ``located(_:inWriteOf:partnerFrom:_:)`` reports it.
    private func named(_ failure: ValidationFailure, in batch: Batch, _ s: ImportState) -> ImportFailed? {
        guard let id = failure.objectID else { return nil }
        for (changes, item) in zip(batch.perRecord, batch.items) {
            var named: Bool
            switch changes.operations.first {
            case .insert(let own, _)?, .put(let own, _)?:
                named = own == id
            case .upsert(let own, let values, let constraint)?:
                named = own == id
                // An upsert that found its object names that object: the owner of its key in
                // the store as the batch found it (the batches before it committed, or none).
                if !named, let ref = Self.keyReference(own.entityTag, constraint, values, store.schema) {
                    named = (try? store.read { try $0.resolve(ref) }) == id
                }
            default:
                named = false
            }
            guard named else { continue }
            let issue = ImportIssue(file: s.files[item.fileIndex], line: item.line, field: failure.field,
                                    reason: failure.reason)
            return s.noting(ImportFailed(issues: [issue], totalIssues: 1))
        }
        return nil
    }

    /// For a required to-one that a batch (or a batch of deferred links) left an object without
    /// (`X.r`): the issue of the record among `records` whose link took `X`'s partner `T` from
    /// it, through a one-to-one pair — a new `r` to `T` from another object (`T` keeps one
    /// inverse), or a new inverse from `T` to another object — or cleared the pair from the other
    /// side. The store refused the batch naming `X` alone, which may not be in the input, or be
    /// the record that gave it `T` (never the one blamed).
    ///
    /// The operations of `before` (the batches applied before the refused one, in the same write)
    /// and then of `records` are walked in order, following `X`'s partner from `source`'s (the
    /// state the first of them was applied to) through every link that gives `X` one: a record is
    /// blamed only for taking the partner `X` has at that point. Objects are named by id or by key,
    /// a new one also by the keys its record gives it.
    private func displacing(_ failure: ValidationFailure, in records: [RecordOperations],
                            after before: [RecordOperations] = [], partnerFrom source: PartnerSource,
                            _ s: ImportState) -> ImportIssue? {
        let schema = store.schema
        guard failure.kind == .requiredRelationship, let x = failure.objectID, let field = failure.field,
              let e = schema.entity(tag: x.entityTag), let r = e.relationship(named: field), !r.isToMany
        else { return nil }
        let inverse = schema.inverse(of: r)
        guard !inverse.isToMany else { return nil }
        // The keys each record gives its object, by the id it gives it: a link names a record of
        // the input by its key, which no object of the store may hold yet.
        var keysOf: [ObjectID: [ObjectReference]] = [:]
        if case .known(_, let keys) = source { keysOf = keys }
        for record in before + records {
            switch record.operations.first {
            case .insert(let own, let values)?, .put(let own, let values)?, .upsert(let own, let values, _)?:
                let uniques = schema.entity(tag: own.entityTag)?.uniques.indices ?? 0..<0
                keysOf[own, default: []] += uniques.compactMap { Self.keyReference(own.entityTag, $0, values, schema) }
            default:
                break
            }
        }
        return try? store.read { view -> ImportIssue? in
            // The object of the store each upsert of the walk found by its key: its record's
            // operations name it by the id it would have given a new object.
            var foundBy: [ObjectID: ObjectID] = [:]
            for record in before + records {
                if case .upsert(let own, let values, let constraint)? = record.operations.first,
                   let ref = Self.keyReference(own.entityTag, constraint, values, schema),
                   let stored = try view.resolve(ref) {
                    foundBy[own] = stored
                }
            }
            /// How the message names an object: by id when the store holds it; one this import
            /// makes (its id is written only if the import is) by the key its record gives it.
            func shown(_ id: ObjectID) throws -> String {
                if try view.record(id) == nil, let key = keysOf[id]?.first { return key.shown }
                return id.description
            }
            /// Whether `ref` names `id`: by id (or by the id an upsert would have given a new
            /// object, when `id` is the object it found), or by a key `id` holds in the store or
            /// its record gives it.
            func names(_ ref: ObjectReference, _ id: ObjectID) throws -> Bool {
                switch ref {
                case .id(let own):
                    return own == id || foundBy[own] == id
                case .unique:
                    if keysOf[id]?.contains(ref) == true { return true }
                    return try view.resolve(ref) == id
                }
            }
            // X's partner at the point of the walk, by reference, and its id where one is known.
            var partner: ObjectReference?
            var partnerID: ObjectID?
            func give(_ ref: ObjectReference) throws {
                partner = ref
                switch ref {
                case .id(let id): partnerID = foundBy[id] ?? id
                case .unique:
                    let own = keysOf.first { $0.value.contains(ref) }?.key
                    partnerID = try own.map { foundBy[$0] ?? $0 } ?? view.resolve(ref)
                }
            }
            switch source {
            case .store: if let t = try view.targets(r.tag, from: x).first { try give(.id(t)) }
            case .known(let t?, _): try give(.id(t))
            case .known(nil, _), .unknown: break
            }
            for (record, blamable) in before.map({ ($0, false) }) + records.map({ ($0, true) }) {
                func isX(_ ref: ObjectReference) throws -> Bool { try names(ref, x) }
                func isPartner(_ ref: ObjectReference) throws -> Bool {
                    if ref == partner { return true }
                    guard let partnerID else { return false }
                    return try names(ref, partnerID)
                }
                for op in record.operations {
                    // A link giving X a partner (which it may take from another object: not X's
                    // loss) sets the partner the later operations are judged by.
                    if case .link(let tag, let from, let to) = op {
                        if tag == r.tag, try isX(from) { try give(to); continue }
                        if tag == inverse.tag, try isX(to) { try give(from); continue }
                    }
                    guard blamable, partner != nil else { continue }
                    if case .unlink(let tag, let from, let to) = op, tag == inverse.tag, try isPartner(from),
                       try to.map({ try isX($0) }) ?? true {
                        // The pair cleared from the other side (`null`), which is not required.
                        return ImportIssue(
                            file: s.files[record.fileIndex], line: record.line, field: inverse.name,
                            reason: "clearing its \(inverse.name) \(try shown(x)) would leave that \(e.name) " +
                                    "without its required \(r.name)")
                    }
                    guard case .link(let tag, let from, let to) = op else { continue }
                    let reason: String, field: String
                    if tag == r.tag, try isPartner(to) {
                        field = r.name
                        let named = try partnerID.map(shown) ?? partner?.shown ?? ""
                        reason = "\(r.destination) \(named) is already the \(r.name) of \(e.name) \(try shown(x)), which would " +
                                 "be left without its required \(r.name) (a \(r.destination) has one \(inverse.name))"
                    } else if tag == inverse.tag, try isPartner(from) {
                        field = inverse.name
                        reason = "replacing its \(inverse.name) \(try shown(x)) would leave that \(e.name) without its required " +
                                 "\(r.name) (a \(r.destination) has one \(inverse.name))"
                    } else {
                        continue
                    }
                    return ImportIssue(file: s.files[record.fileIndex], line: record.line, field: field,
                                       reason: reason)
                }
            }
            return nil
        }
    }

    /// The issue of a record (or a unit of records saved together) that the store refused with
    /// ``ImportOptions/continueOnError``, for its item `item`: where a required to-one of another
    /// object was taken by it (``displacing(_:in:after:partnerFrom:_:)``), what was taken from which object, with
    /// the field of the record that took it; otherwise the store's field and reason.
    private func refusal(_ failure: ValidationFailure, of records: [RecordOperations], partnerFrom source: PartnerSource,
                         item: (fileIndex: Int, line: Int), _ s: ImportState) -> ImportIssue {
        if failure.kind == .requiredRelationship, let taken = displacing(failure, in: records, partnerFrom: source, s),
           taken.file == s.files[item.fileIndex], taken.line == item.line {
            return taken
        }
        return ImportIssue(file: s.files[item.fileIndex], line: item.line, field: failure.field, reason: failure.reason)
    }

    /// For a refusal naming an object left without a required to-one: that object's target in
    /// `view`, the state it was refused in, and the unique keys both hold there (a link names
    /// them by key, and the live store may not have them yet).
    fileprivate static func partnerSource(_ failure: ValidationFailure, in view: ReadView) -> PartnerSource {
        let schema = view.schema
        guard failure.kind == .requiredRelationship, let x = failure.objectID, let field = failure.field,
              let r = schema.entity(tag: x.entityTag)?.relationship(named: field),
              let found = try? view.targets(r.tag, from: x) else { return .unknown }
        var keys: [ObjectID: [ObjectReference]] = [:]
        for id in [x] + found.prefix(1) {
            guard let values = (try? view.record(id))??.values else { continue }
            let uniques = schema.entity(tag: id.entityTag)?.uniques.indices ?? 0..<0
            keys[id] = uniques.compactMap { keyReference(id.entityTag, $0, values, schema) }
        }
        return .known(found.first, keys: keys)
    }

    /// ``partnerSource(_:in:)`` of a bulk import's refused write: its new generation as the writes
    /// before it left it (unknown for a load in memory from an empty store, whose read answers
    /// nil, or when the read fails: `try?` folds both into nil).
    /// - Throws: ``RefusedInMemory`` for a load in memory from a store with objects, whose
    ///   partners before the write no table keeps (the import runs again through the B-trees).
    private func bulkPartnerSource(_ failure: ValidationFailure, _ s: ImportState) async throws -> PartnerSource {
        guard let bulk = s.bulk, failure.kind == .requiredRelationship else { return .unknown }
        if bulk.memory != nil && !bulk.startedEmpty { throw RefusedInMemory() }
        guard let source = try? await bulk.read({ Self.partnerSource(failure, in: $0) }) else { return .unknown }
        return source
    }

    /// A deferred link as ``displacing(_:in:after:partnerFrom:_:)`` searches records: the link, at its record's line.
    private static func linkRecords(_ links: ArraySlice<DeferredLink>) -> [RecordOperations] {
        links.map { link in
            let (fileIndex, line) = RecordIterator.Item.unpacked(link.location)
            return RecordOperations(operations: [.link(relationship: link.relationship, from: link.from, to: link.to)],
                                    fileIndex: fileIndex, line: line)
        }
    }

    /// Why a deferred link was refused, at its record's line (the record itself was written): the
    /// record that took a required partner away, or the store's field and reason.
    private func linkRefusal(_ failure: ValidationFailure, _ link: DeferredLink, partnerFrom source: PartnerSource,
                             _ s: ImportState) -> ImportIssue {
        let records = Self.linkRecords([link][...])
        let reason: String
        if failure.kind == .requiredRelationship, let taken = displacing(failure, in: records, partnerFrom: source, s) {
            reason = taken.reason
        } else {
            reason = failure.description
        }
        let name = store.schema.relationship(tag: link.relationship)?.name
        return ImportIssue(file: s.files[records[0].fileIndex], line: records[0].line, field: name,
                           reason: "not linked (its record was written without this link): \(reason)")
    }

    /// Whether the store has `target`, for a reference the import has not written (by any of
    /// the keys of its written records): the live store, which for a bulk import is the state
    /// its load started from. (What the import itself wrote is known by its keys, so the new
    /// generation need not be asked, unless a record of the import may have taken a unique key
    /// of the target's entity away from an object of the store: then the new generation is asked,
    /// ``BulkLoad/resolves(_:)``.)
    private func storeHas(_ target: ObjectReference) throws -> Bool {
        try store.read { try $0.resolve(target) } != nil
    }

    /// Inputs the import cannot use, found before anything is read or created: an input that is
    /// not a regular file (the import reads each input twice, to validate and then to write, so a
    /// pipe or a terminal would be read empty the second time; a directory cannot be read), and
    /// a rejects file that is one of the inputs (creating it would empty that input), and a
    /// rejects file that would land inside the store directory or on one of its files
    /// (``OutputPathGuard``). An input that cannot be opened is reported as "cannot open", as
    /// when reading it fails.
    static func inputProblems(files: [String], rejectsPath: String?, storeDirectory: String?) -> [ImportIssue] {
        var out: [ImportIssue] = []
        var inputs: [(device: UInt64, inode: UInt64)] = []
        for f in files {
            var st = stat()
            guard stat(f, &st) == 0 else {
                out.append(ImportIssue(file: f, line: 0, field: nil,
                                       reason: "cannot open: \(String(cString: strerror(errno)))"))
                continue
            }
            guard (st.st_mode & S_IFMT) == S_IFREG else {
                let reason = (st.st_mode & S_IFMT) == S_IFDIR ? "cannot open: is a directory"
                    : "cannot open: not a regular file (a pipe, a terminal or a device); an import reads its input " +
                      "twice (to validate, then to write), so save a stream to a file first"
                out.append(ImportIssue(file: f, line: 0, field: nil, reason: reason))
                continue
            }
            inputs.append((UInt64(st.st_dev), UInt64(st.st_ino)))
        }
        if let rejectsPath {
            do { try OutputPathGuard.check(rejectsPath, storeDirectory: storeDirectory) } catch {
                out.append(ImportIssue(file: "options", line: 0, field: "rejectsPath", reason: error.description))
                return out
            }
        }
        var st = stat()
        if let rejectsPath, stat(rejectsPath, &st) == 0 {
            if inputs.contains(where: { $0.device == UInt64(st.st_dev) && $0.inode == UInt64(st.st_ino) }) {
                out.append(
                    ImportIssue(file: "options", line: 0, field: "rejectsPath",
                                reason: "\(rejectsPath) is one of the inputs (writing rejects there would empty it)"))
            } else if (st.st_mode & S_IFMT) == S_IFDIR {
                out.append(ImportIssue(file: "options", line: 0, field: "rejectsPath",
                                       reason: "\(rejectsPath) is a directory"))
            }
        }
        return out
    }

    /// Pass 1: every record parsed and checked; duplicate keys and dangling references found.
    /// A small input's records are kept for pass 2 (``ImportState/kept``).
    private func validate(_ s: inout ImportState) throws {
        let it = PipelinedRecords(RecordIterator(files: s.files, schema: store.schema, options: options,
                                                 maxValueBytes: store.configuration.maxValueBytes,
                                                 expected: s.identities))
        defer { it.close() }
        // A small input's records, kept for the write pass (``ImportOptions/keptRecordsMaxInputBytes``).
        var kept: [RecordIterator.Item]? = s.totalBytes <= options.keptRecordsMaxInputBytes ? [] : nil
        var n = 0
        while let item = try nextItem(it) {
            n += 1
            s.report(.validating, records: n, bytes: it.bytesRead)
            _ = try check(item, &s)
            // Bounded by what was read too: a file that grew after its size was taken is kept
            // only while it stays under the limit.
            if it.bytesRead <= options.keptRecordsMaxInputBytes { kept?.append(item) } else { kept = nil }
        }
        let keysRejectedAtEnd = try checkForwardReferences(&s)
        if options.continueOnError, !keysRejectedAtEnd.isEmpty {
            try rejectReferencesToRejected(keysRejectedAtEnd, &s, kept: kept)
        }
        s.kept = kept.map { KeptRecords($0, bytes: it.bytesRead) }
    }

    /// With ``ImportOptions/continueOnError``, after the end of the input rejected records (a
    /// reference of theirs dangling) whose keys are `rejectedKeys` (by where each record is): the
    /// records naming one of those keys, which the store does not hold, are rejected too, as a
    /// reference to any rejected record is, and so on, for references in either direction. The
    /// keys were the input's when those records were read, so nothing noted them: the input (or
    /// its kept records) is read once more, noting every reference a rejection could leave
    /// dangling (to a key a record of the input gives and the store does not hold) by the key it
    /// names, and the rejections then spread through those, breadth first. (Read again until a
    /// reading rejected nothing more, a chain of records each naming a later one took a reading
    /// per record: hours for a long chain ending in a dangling reference.)
    private func rejectReferencesToRejected(_ rejectedAtEnd: [UInt64: RecordLocation], _ s: inout ImportState,
                                            kept: [RecordIterator.Item]?) throws {
        /// Every item of the input, in order, from the kept records or read again.
        func eachItem(_ body: (RecordIterator.Item) throws -> Void) throws {
            if let kept {
                for item in kept { try body(item) }
                return
            }
            if let first = s.files.first { Self.rereadsForTesting.withLock { $0[first, default: 0] += 1 } }
            let it = PipelinedRecords(RecordIterator(files: s.files, schema: store.schema, options: options,
                                                     maxValueBytes: store.configuration.maxValueBytes,
                                                     expected: s.identities))
            defer { it.close() }
            while let item = try nextItem(it) { try body(item) }
        }
        /// A reference that a rejection of its target's record would leave dangling.
        struct Referrer {
            let location: RecordLocation
            let fileIndex: Int
            let line: Int
            let relationship: RelationshipDescription
            let target: ObjectReference
        }
        var referrers: [UInt64: [Referrer]] = [:]
        var aliasesOf: [RecordLocation: [UInt64]] = [:]
        var storeHolds: [UInt64: Bool] = [:]
        let inputKeys = s.inputKeys, rejected = s.rejected
        try eachItem { item in
            guard rejected[item.location] == nil, case .success(let record) = item.result else { return }
            var noted = false
            for (r, targets) in record.links {
                for t in targets ?? [] {
                    let d = ImportRecord.digest(t)
                    guard inputKeys[d] != nil || rejectedAtEnd[d] != nil else { continue }
                    let holds: Bool
                    if let known = storeHolds[d] {
                        holds = known
                    } else {
                        holds = try store.read { try $0.resolve(t) } != nil
                        storeHolds[d] = holds
                    }
                    guard !holds else { continue }
                    referrers[d, default: []].append(Referrer(location: item.location, fileIndex: item.fileIndex,
                                                              line: item.line, relationship: r, target: t))
                    noted = true
                }
            }
            if noted { aliasesOf[item.location] = record.aliases.map(ImportRecord.digest) }
        }
        // Breadth first from the keys rejected at the end: a record naming a rejected key is
        // rejected (once, for the first such reference found), and its own keys spread further.
        var rejectedKeys = rejectedAtEnd
        var queue = rejectedAtEnd.sorted { $0.value < $1.value }.map { (key: $0.key, at: $0.value) }
        var next = 0
        while next < queue.count {
            let (key, at) = queue[next]
            next += 1
            for ref in referrers[key] ?? [] where s.rejected[ref.location] == nil {
                s.reject(ref.location, ImportIssue(
                    file: s.files[ref.fileIndex], line: ref.line, field: ref.relationship.name,
                    reason: Self.dangling(ref.relationship, ref.target, rejectedAt: at, s.files)))
                for alias in aliasesOf[ref.location] ?? [] where rejectedKeys[alias] == nil {
                    rejectedKeys[alias] = ref.location
                    queue.append((alias, ref.location))
                }
            }
        }
    }

    /// Readings of the input for records depending on rejected ones, by the input's first file
    /// (tests: one reading, however long a chain).
    static let rereadsForTesting = Locked<[String: Int]>([:])

    /// Checks one item as validation does (its parse, a key given twice, a required to-one left
    /// without a target), notes its keys (``ImportState/inputKeys``) and the references to keys
    /// not seen yet (``ImportState/forward``). Returns the record, or nil when it is rejected.
    private func check(_ item: RecordIterator.Item, _ s: inout ImportState) throws
        -> (record: ImportRecord, digests: ImportRecord.Digests)? {
        let record: ImportRecord
        switch item.result {
        case .failure(let issue):
            s.reject(item.location, issue)
            noteRejectedKeys(item.keysOfRejected, item, &s)
            return nil
        case .success(let r): record = r
        }
        let aliases = record.aliases
        let digests = ImportRecord.Digests(record, aliases: aliases)
        // A plain loop: a closure would hold a second reference to the dictionary, and the
        // insertions below would then copy it whole.
        var duplicate: (alias: ObjectReference, first: RecordLocation)?
        for (a, digest) in zip(aliases, digests.aliases) {
            if let first = s.inputKeys[digest] {
                duplicate = (a, first)
                break
            }
        }
        if let (alias, first) = duplicate {
            let (f, l) = RecordIterator.Item.unpacked(first)
            // The field is the constraint's (`email`, `first+last`), or `id` for an explicit id.
            var field = "id"
            if case .unique(_, let c, _) = alias, record.entity.uniques.indices.contains(c) {
                field = Layout.uniqueFieldName(record.entity.uniques[c], record.entity)
            }
            s.reject(item.location, ImportIssue(file: s.files[item.fileIndex], line: item.line, field: field,
                                                reason: "duplicate key \(alias.shown) of " +
                                                        "\(record.entity.name) (first at \(EchoedText.escaped(s.files[f])):\(l))"))
            noteRejectedKeys(aliases, item, &s)
            return nil
        }
        if let issue = try missingRequiredReference(record, item, s.files) {
            s.reject(item.location, issue)
            noteRejectedKeys(aliases, item, &s)
            return nil
        }
        for digest in digests.aliases { s.inputKeys[digest] = item.location }
        var next = 0
        for (r, targets) in record.links {
            for t in targets ?? [] {
                let digest = digests.targets[next]
                next += 1
                guard s.inputKeys[digest] == nil else { continue }
                s.forward.append(ForwardReference(digest: digest, target: t, location: item.location,
                                                  fileIndex: item.fileIndex, line: item.line, relationship: r,
                                                  keys: digests.aliases))
            }
        }
        if s.forward.count >= s.forwardCheckAt { try dropFoundForwardReferences(&s) }
        return (record, digests)
    }

    /// Notes the keys of a record validation rejected that no record gave before it
    /// (``ImportState/rejectedKeys``); a later record giving one takes it back.
    private func noteRejectedKeys(_ aliases: [ObjectReference], _ item: RecordIterator.Item, _ s: inout ImportState) {
        for digest in aliases.map(ImportRecord.digest) where s.inputKeys[digest] == nil {
            s.rejectedKeys[digest] = item.location
        }
    }

    /// References kept for the end of the input (not given by it yet where they were read) at
    /// which those it has given since, and those the store holds, are dropped: the end would find
    /// them all the same. An import of records that name objects of the store (not the input)
    /// kept every one of those references to the end: 400,000 of them took about 180 MB.
    static let forwardCheckEvery = 65_536

    /// Drops the references ``checkForwardReferences(_:)`` would find in the input or the store,
    /// and checks again when as many more are kept (a large input of true forward references
    /// then costs one look each in all, not one a check).
    private func dropFoundForwardReferences(_ s: inout ImportState) throws {
        let keys = s.inputKeys
        let kept = s.forward
        s.forward = try store.read { view in
            try kept.filter { try keys[$0.digest] == nil && view.resolve($0.target) == nil }
        }
        s.forwardCheckAt = max(Self.forwardCheckEvery, 2 * s.forward.count)
    }

    /// At the end of the input: references to keys that came later after all are fine, and so
    /// are those the store has; the others are dangling (their records are rejected). Returns
    /// the keys of the records it rejected, with where each record is.
    @discardableResult
    private func checkForwardReferences(_ s: inout ImportState) throws -> [UInt64: RecordLocation] {
        let keys = s.inputKeys
        let unresolved = s.forward.filter { keys[$0.digest] == nil }
        s.forward = []
        guard !unresolved.isEmpty else { return [:] }
        let missing = try store.read { view in try unresolved.filter { try view.resolve($0.target) == nil } }
        // The keys of the records rejected here, and where each record is.
        var rejectedNow: [UInt64: RecordLocation] = [:]
        for m in missing where !s.rejected.keys.contains(m.location) {
            for key in m.keys { rejectedNow[key] = m.location }
            s.reject(m.location, ImportIssue(file: s.files[m.fileIndex], line: m.line, field: m.relationship.name,
                                             reason: Self.dangling(m.relationship, m.target,
                                                                   rejectedAt: s.rejectedKeys[m.digest], s.files)))
        }
        return rejectedNow
    }

    /// The reason of a dangling reference to `target` through `r`: naming the rejected record
    /// that gave its key (at `rejectedAt`), when one did.
    private static func dangling(_ r: RelationshipDescription, _ target: ObjectReference, rejectedAt: RecordLocation?,
                                 _ files: [String]) -> String {
        let why = rejectedAt.map { at in
            let (f, l) = RecordIterator.Item.unpacked(at)
            return ": its record at \(EchoedText.escaped(files[f])):\(l) was rejected"
        } ?? " in the input or the store"
        return "dangling reference: no \(r.destination) \(target.shown)\(why)"
    }

    /// A required to-one the record leaves without a target: cleared (`null`), or not given for an
    /// object the store does not have (a stored one keeps its target).
    private func missingRequiredReference(_ record: ImportRecord, _ item: RecordIterator.Item,
                                          _ files: [String]) throws -> ImportIssue? {
        guard record.entity.hasRequiredToOne else { return nil }
        for r in record.entity.relationships where !r.isToMany && !r.isOptional {
            let given = record.links.first { $0.relationship.tag == r.tag }
            let reason: String
            if let given {
                guard given.targets?.isEmpty ?? true else { continue }
                reason = "required: a \(record.entity.name) must have its \(r.destination); null would clear it"
            } else {
                if try store.read({ try $0.resolve(record.reference) }) != nil { continue }
                reason = "required: a new \(record.entity.name) must name its \(r.destination)"
            }
            return ImportIssue(file: files[item.fileIndex], line: item.line, field: r.name, reason: reason)
        }
        return nil
    }

    private func nextItem(_ it: some RecordSource) throws -> RecordIterator.Item? {
        do { return try it.next() } catch let issue as ImportIssue {
            throw ImportFailed(issues: [issue], totalIssues: 1)
        }
    }

    /// Pass 2: upserts and links, in batches. Each batch is parsed and built while the one before
    /// it is being committed; its save is submitted only once that one has finished (committed, or
    /// saved record by record), so the batches commit in input order, one after another, as if
    /// each were awaited before the next line was read — the importer's parsing just overlaps the
    /// writer's work. Where the outcome could depend on the batch still in flight, it is awaited
    /// first: before a link target is looked up in the store (that batch may change the store's
    /// unique keys), and before an error ends the import (that batch's error comes first, as it
    /// would have). Lines rejected by validation are written to the rejects file with their
    /// batch, after the batch before it has finished, so the file keeps the sequential order.
    ///
    /// With `checking` (a bulk import without ``ImportOptions/continueOnError``: nothing it
    /// writes is seen before the switch), there was no validation pass: each record is checked
    /// here as validation would (``check(_:_:)``); after the first bad one nothing more is
    /// written and the rest is only checked, and at the end the issues are thrown.
    private func write(_ s: inout ImportState, rejects: RejectsWriter?, checking: Bool) async throws {
        // The phase starts now, not at the first commit: its rate and estimate count from here,
        // and the validation pass ends here (its length is what a progress consumer sees of it).
        s.report(.writing, records: 0, bytes: 0, force: true)
        // The validation pass's records when it kept them, or the files read again: each the
        // version validated, checked before anything is written (and again as each is read).
        let kept = s.kept.take()
        if kept == nil, let hook = Self.beforeReadingAgainForTesting.withLock({ $0 }) { hook(s.files) }
        if kept == nil, let identities = s.identities {
            for (path, then) in zip(s.files, identities) {
                let now = InputFile.identity(of: path)
                if now != then {
                    throw ImportFailed(issues: [InputFile.changed(path, from: then, to: now, "after the import started")],
                                       totalIssues: 1)
                }
            }
        }
        let it: any RecordSource = kept
            ?? PipelinedRecords(RecordIterator(files: s.files, schema: store.schema, options: options,
                                               maxValueBytes: store.configuration.maxValueBytes,
                                               expected: s.identities))
        defer { it.close() }
        var batch = Batch()
        // Full batches an incremental import has not submitted yet (``incrementalGroupRecords``).
        var ready: [Batch] = []
        var inFlight: InFlight?
        var held = HeldRecords()
        // Records whose batch has finished: what progress reports while writing, so a reported
        // count is never ahead of the store.
        var finished = 0
        do {
            while let item = try nextItem(it) {
                let record: ImportRecord, digests: ImportRecord.Digests
                if checking {
                    s.report(.writing, records: s.written, bytes: it.bytesRead)
                    let hadIssues = s.issueCount > 0
                    guard let checked = try check(item, &s), s.issueCount == 0 else {
                        // At the first issue nothing more is saved: a failure of the chunk being
                        // saved comes out now, not after the rest of the input is checked.
                        if !hadIssues { try await landBulk(&s, rejects: rejects, bytes: it.bytesRead) }
                        continue
                    }
                    (record, digests) = checked
                    // A key an earlier record was linked to in the store, given by this record:
                    // two passes would have linked that record after this one.
                    if !s.linkedFromStore.isEmpty, digests.aliases.contains(where: s.linkedFromStore.contains) {
                        throw NotInOneTransaction()
                    }
                    // A file that grew past the limit since its size was taken.
                    if s.held != nil, it.bytesRead > options.oneTransactionMaxInputBytes { throw NotInOneTransaction() }
                } else {
                    if let reason = s.rejected[item.location] {
                        batch.earlyRejects.append((reason, item.raw))
                        continue
                    }
                    guard case .success(let r) = item.result else { continue }
                    record = r
                    digests = ImportRecord.Digests(r, aliases: r.aliases)
                }
                var changes = ChangeSet(operations: [], valuesComplete: true)
                let id = record.explicitID ?? ObjectID.make(entityTag: record.entity.tag)
                changes.append(record.explicitID != nil ? .put(id: id, values: record.values)
                               : .upsert(id: id, values: record.values, constraint: 0))
                // Required targets not written yet: the record waits for them (``HeldRecords``).
                var missing: Set<UInt64> = []
                var linkedKeys: [UInt64] = []
                var nextTarget = 0
                for (r, targets) in record.links {
                    guard let targets else {
                        changes.append(.unlink(relationship: r.tag, from: .id(id), to: nil))
                        continue
                    }
                    for t in targets {
                        let digest = digests.targets[nextTarget]
                        nextTarget += 1
                        // Written by this import (in a finished, the in-flight or this batch), or
                        // in the store from before it.
                        var present = s.writtenKeys.contains(digest)
                        if !present, (s.inputKeys[digest] ?? .start) <= item.location {
                            // Not a record later in this input: in the store, or nowhere, as the
                            // batches before this record leave it. Those that may take a key of
                            // the target's entity away from an object of the store are committed
                            // first; the others cannot change the answer, and go on committing
                            // while the input is read. (One later in the input is linked once it
                            // is written; looking for it here would wait, and the link would be
                            // the same.)
                            // The records before this one in the batch being built count too:
                            // where the batches end must not change what a reference finds. A
                            // bulk import reads the store as its load found it, so once a record
                            // of the import may have moved a key of the entity, it asks the new
                            // generation instead, with every record before this one saved there.
                            var askGeneration = false
                            if case .unique(let tag, _, _) = t {
                                let key = digest
                                let unsaved = batch.takesKeys.contains(key)
                                    || ready.contains(where: { $0.takesKeys.contains(key) })
                                    || inFlight?.takes(key) == true
                                    || s.bulkPending.contains(where: { $0.takesKeys.contains(key) })
                                if unsaved {
                                    if batch.count > 0 {
                                        try await queue(batch, &ready, &inFlight, &finished, &s, rejects: rejects,
                                                        bytes: it.bytesRead)
                                        batch = Batch()
                                    }
                                    try await queue(nil, &ready, &inFlight, &finished, &s, rejects: rejects,
                                                    bytes: it.bytesRead, last: true)
                                    try await settle(&inFlight, &finished, &s, rejects: rejects, bytes: it.bytesRead)
                                    try await flushBulk(&s, rejects: rejects, bytes: it.bytesRead)
                                }
                                askGeneration = s.bulk != nil && s.keysMoved.contains(tag)
                            }
                            if askGeneration, let bulk = s.bulk {
                                try await landBulk(&s, rejects: rejects, bytes: it.bytesRead)
                                present = try await bulk.resolves(t)
                            } else if s.bulk?.startedEmpty == true {
                                // The load started from a store whose state is empty, and no save
                                // reaches that store until the load ends.
                                present = false
                            } else {
                                present = try storeHas(t)
                            }
                            // In one pass (in one transaction, or a bulk import checking as it
                            // writes), a key not read yet may still come later in the input,
                            // where two passes would have waited for that record: noted, and met
                            // again above, it sends the import back to two passes.
                            if present, s.held != nil || (checking && s.bulk != nil) {
                                s.linkedFromStore.insert(digest)
                            }
                        }
                        // A required to-one not written yet is saved with the record, which is
                        // written once its target is; other links to it are made at the end.
                        guard present || (!r.isToMany && !r.isOptional) else {
                            s.deferred.append((r.tag, record.reference, t, item.location))
                            continue
                        }
                        changes.append(.link(relationship: r.tag, from: .id(id), to: t))
                        if case .unique = t { linkedKeys.append(digest) }
                        if !present { missing.insert(digest) }
                    }
                }
                let entry = HeldRecords.Entry(changes: changes, item: item,
                                              aliases: digests.aliases, linkedKeys: linkedKeys)
                if !missing.isEmpty, held.count >= options.maxHeldRecords {
                    let issue = ImportIssue(
                        file: s.files[item.fileIndex], line: item.line, field: nil,
                        reason: "more than \(options.maxHeldRecords) records wait for a required reference to a " +
                                "record later in the input (each is held in memory): give the referenced records " +
                                "first (their files first, or earlier in the file), or raise maxHeldRecords")
                    throw ImportFailed(issues: [issue], totalIssues: 1)
                }
                for record in held.add(entry, missing: missing) {
                    for alias in record.aliases { s.writtenKeys.insert(alias) }
                    // A batch saves its records' own operations before their links: a record
                    // that may take away a key this batch links to goes into the next batch, so
                    // that the reference, read before the record, finds what it named (as with
                    // batches of one).
                    let taken = try keysTaken(record.changes)
                    if batch.count > 0, let taken, taken.contains(where: batch.referencedKeys.contains) {
                        try await queue(batch, &ready, &inFlight, &finished, &s, rejects: rejects, bytes: it.bytesRead)
                        batch = Batch()
                    }
                    batch.add(record.changes, item: record.item, linkedKeys: record.linkedKeys, schema: store.schema)
                    if let taken { batch.noteTakes(taken) }
                    // The store's answers for later references would not see the keys this
                    // record may take from an object: read again, in two passes.
                    if s.held != nil, !batch.movesKeysOf.isEmpty { throw NotInOneTransaction() }
                    if batch.count >= options.batchSize || batch.bytes >= options.maxBatchBytes {
                        try await queue(batch, &ready, &inFlight, &finished, &s, rejects: rejects, bytes: it.bytesRead)
                        batch = Batch()
                    }
                }
            }
            if checking {
                try checkForwardReferences(&s)
                s.checkedToEnd = true
                if s.issueCount > 0 { throw s.failure() }
            }
            // Records whose required references form a cycle: saved together, in one batch.
            // Each group of records that wait for each other is one unit of a batch; a batch
            // ends after the group that fills it (a group is never split).
            for group in held.drain() {
                for record in group {
                    for alias in record.aliases { s.writtenKeys.insert(alias) }
                }
                batch.add(unit: group, schema: store.schema)
                for record in group { if let taken = try keysTaken(record.changes) { batch.noteTakes(taken) } }
                if batch.count >= options.batchSize || batch.bytes >= options.maxBatchBytes {
                    try await queue(batch, &ready, &inFlight, &finished, &s, rejects: rejects, bytes: it.bytesRead)
                    batch = Batch()
                }
            }
            // The last batch (when it has records), and the batches still queued, are submitted.
            try await queue(batch.count > 0 ? batch : nil, &ready, &inFlight, &finished, &s, rejects: rejects,
                            bytes: it.bytesRead, last: true)
            try await settle(&inFlight, &finished, &s, rejects: rejects, bytes: it.bytesRead)
            try await flushBulk(&s, rejects: rejects, bytes: it.bytesRead)
            try await landBulk(&s, rejects: rejects, bytes: it.bytesRead)
            // Lines validation rejected after the last record: after everything before them.
            if batch.count == 0 {
                for (reason, raw) in batch.earlyRejects { try rejects?.write(reason: reason, raw: raw) }
            }
        } catch {
            // Never return while a save of this import is running; its own error, if any, is the
            // one reported (it came first).
            try await settle(&inFlight, &finished, &s, rejects: rejects, bytes: it.bytesRead)
            // The full batches read before a failure that is not a save's (reading, a record held
            // too long) are committed, as they would have been one by one; after a save's failure
            // none is (what commits is a prefix of the batches). In one held transaction nothing
            // of it is written after a failure: the queued batches are not handed on (a refusal
            // of one would replace the failure, such as the one that sends the import back to
            // two passes).
            if !s.saveFailed, s.held == nil {
                try await queue(nil, &ready, &inFlight, &finished, &s, rejects: rejects, bytes: it.bytesRead,
                                last: true)
                try await settle(&inFlight, &finished, &s, rejects: rejects, bytes: it.bytesRead)
            }
            try await landBulk(&s, rejects: rejects, bytes: it.bytesRead)
            // An import of the input's records that stops after some of its batches committed
            // (a record held too long, one the store refused) says so.
            if let failed = error as? ImportFailed { throw s.noting(failed) }
            throw error
        }
    }

    /// Waits for the batches in flight, if any, and reports progress.
    private func settle(_ inFlight: inout InFlight?, _ finished: inout Int, _ s: inout ImportState,
                        rejects: RejectsWriter?, bytes: Int) async throws {
        guard let previous = inFlight else { return }
        inFlight = nil
        // Records the store refused one by one (with --continue-on-error) are rejected, not written.
        let rejectedBefore = s.rejected.count
        try await finish(previous, &s, rejects: rejects)
        finished += previous.batches.reduce(0) { $0 + $1.count } - (s.rejected.count - rejectedBefore)
        s.report(.writing, records: finished, bytes: min(bytes, previous.batches.last?.bytesReadAtEnd ?? bytes),
                 force: true)
    }

    /// Batches whose saves have been submitted together, and their metadata.
    private struct InFlight {
        let batches: [Batch]
        let metadata: [[String: String]]
        let task: Task<[Result<TransactionID, Error>], Never>
        /// Set when ``task`` has its outcomes.
        let landing: Landing
        /// ``Batch/movesKeysOf`` of all of them.
        var movesKeysOf: Set<UInt16> { batches.reduce(into: []) { $0.formUnion($1.movesKeysOf) } }
        /// Whether one of them may take the key `digest` (``Batch/takesKeys``).
        func takes(_ digest: UInt64) -> Bool { batches.contains { $0.takesKeys.contains(digest) } }
    }

    /// Whether a task in flight has its outcomes, read without waiting for them.
    private final class Landing: Sendable {
        private let flag = Atomic<Bool>(false)
        func land() { flag.store(true, ordering: .releasing) }
        var landed: Bool { flag.load(ordering: .acquiring) }
    }

    /// Takes a full batch (or, with `last`, the input's last one, if any). An incremental import
    /// queues it with the batches before it until they hold ``incrementalGroupRecords`` records,
    /// as many batches as one commit takes (``StoreConfiguration/maxSavesPerGroup``, at most half
    /// of ``StoreConfiguration/maxPendingSaves``) or the input ends, then waits for the batches in
    /// flight and submits these together, going on reading while the writer commits them. A bulk
    /// import gathers it instead (``flushBulk(_:rejects:bytes:)`` saves it).
    private func queue(_ batch: Batch?, _ ready: inout [Batch], _ inFlight: inout InFlight?, _ finished: inout Int,
                       _ s: inout ImportState, rejects: RejectsWriter?, bytes: Int, last: Bool = false) async throws {
        var batch = batch
        // What the input's reading had reached when the batch was complete: the progress its
        // commit reports (the reading runs ahead, by the chunks read ahead and the batches
        // gathered for a group commit: 86 % shown with 43 % of the records committed).
        batch?.bytesReadAtEnd = bytes
        if let batch { s.keysMoved.formUnion(batch.movesKeysOf) }
        if s.bulk != nil {
            guard let batch else { return }
            s.bulkPending.append(batch)
            s.bulkPendingRecords += batch.count
            s.bulkPendingBytes += batch.bytes
            let chunk = s.bulk?.memory != nil ? Self.bulkInMemoryChunkRecords : Self.bulkChunkRecords
            if s.bulkPendingRecords >= chunk || s.bulkPendingBytes >= Self.groupBytes {
                try await flushBulk(&s, rejects: rejects, bytes: bytes)
            }
            return
        }
        if let batch { ready.append(batch) }
        // A replica submits each batch alone: its writer validates a group at the local head and
        // appends it only if no machine appended meanwhile, and a group of many batches lost that
        // race to other machines' small saves on every try.
        // In one held transaction, a full batch goes to the writer when the writer is idle, and
        // the batches read while it applied the ones before go together (each still its own
        // save): batches of a few records went one by one, each waiting for the writer's
        // answer to the one before.
        let isReplica = store.writer?.isReplica.load(ordering: .acquiring) == true
        let writerIdle = inFlight.map(\.landing.landed) ?? true
        let groupRecords = isReplica ? 0
            : s.held != nil ? (writerIdle ? 0 : Self.heldGroupRecords) : Self.incrementalGroupRecords
        // As many batches as one commit takes, and no more than half the writer's queue (the
        // whole group is queued at once, or refused as `writerOverloaded`).
        let config = store.configuration
        let groupBatches = max(1, min(config.maxSavesPerGroup, config.maxPendingSaves / 2))
        guard !ready.isEmpty,
              last || ready.count >= groupBatches || ready.reduce(0, { $0 + $1.count }) >= groupRecords
                || ready.reduce(0, { $0 + $1.bytes }) >= Self.groupBytes else { return }
        try await settle(&inFlight, &finished, &s, rejects: rejects, bytes: bytes)
        var sets: [(changes: ChangeSet, metadata: [String: String])] = []
        for b in ready {
            s.batchesSubmitted += 1
            sets.append((b.changes, ["importID": s.importID, "batch": String(s.batchesSubmitted)]))
        }
        let store = self.store, author = options.author
        // Taken as constants: the tasks below must not share a variable with this function.
        let submitted = sets, metadata = sets.map(\.metadata)
        let task: Task<[Result<TransactionID, Error>], Never>
        let landing = Landing()
        if let held = s.held {
            // Applied, not committed: the ids come with the commit (``HeldWrite/commit()``).
            task = Task {
                defer { landing.land() }
                do {
                    try await held.apply(submitted, author: author)
                    return submitted.map { _ in .success(.zero) }
                } catch {
                    return submitted.map { _ in .failure(error) }
                }
            }
        } else {
            task = Task {
                defer { landing.land() }
                return await store.saveInOrder(submitted, author: author, stopAtFailure: true)
            }
        }
        inFlight = InFlight(batches: ready, metadata: metadata, task: task, landing: landing)
        ready = []
    }

    /// Waits for submitted batches and takes their outcomes in order: first the lines validation
    /// rejected while a batch was read (for the rejects file), then the batch's commit. The
    /// batches after one that failed were refused with its error (what committed is a prefix of
    /// the input's batches). When errors are tolerated, a batch that failed validation is saved
    /// record by record (the failing records are rejected) and the batches after it are submitted
    /// again; otherwise the failure ends the import.
    private func finish(_ f: InFlight, _ s: inout ImportState, rejects: RejectsWriter?) async throws {
        var batches = f.batches, metadata = f.metadata
        var results = await f.task.value
        while true {
            var resubmitFrom: Int?
            // Every batch saved is counted before anything else can fail (writing the rejects
            // found before one, on a full disk): the error then says they were written. (Saved
            // in order, stopping at the first failure: the saved ones come first.)
            for (batch, result) in zip(batches, results) {
                guard case .success(let tx) = result else { continue }
                if s.held == nil { s.committed(tx) } else { s.heldBatches.append(batch) }
                s.written += batch.count
            }
            for (i, batch) in batches.enumerated() {
                for (reason, raw) in batch.earlyRejects { try rejects?.write(reason: reason, raw: raw) }
                switch results[i] {
                case .success:
                    continue
                case .failure(StrataError.validation) where options.continueOnError:
                    for (changes, items) in batch.perUnit {
                        do {
                            s.committed(try await store.save(changes, author: options.author, metadata: metadata[i]))
                            s.written += items.count
                        } catch StrataError.validation(let failure) {
                            for item in batch.items[items] {
                                let issue = refusal(failure, of: batch.records(items), partnerFrom: .store,
                                                    item: (item.fileIndex, item.line), s)
                                s.reject(item.location, issue)
                                try rejects?.write(reason: issue.description, raw: item.raw)
                            }
                        }
                    }
                    resubmitFrom = i + 1
                case .failure(let error):
                    s.saveFailed = true
                    let failure = Self.inOnePass(error, s)
                    // Written batch by batch, the batches before it committed: the store is the
                    // state it was refused in. In one transaction, the group was one step of it,
                    // every batch refused with the error, after the batches applied before it.
                    let located: ImportFailed?
                    if case StrataError.validation(let v) = failure {
                        located = s.held == nil ? self.located(v, inWriteOf: [batch], partnerFrom: .store, s)
                            : self.located(v, inWriteOf: batches, after: s.heldBatches.flatMap(\.records),
                                           partnerFrom: .store, s)
                    } else {
                        located = nil
                    }
                    if let issue = located {
                        throw issue
                    }
                    throw failure
                }
                break
            }
            guard let from = resubmitFrom, from < batches.count else { return }
            batches = Array(batches[from...])
            metadata = Array(metadata[from...])
            let sets = zip(batches, metadata).map { (changes: $0.changes, metadata: $1) }
            results = await store.saveInOrder(sets, author: options.author, stopAtFailure: true)
        }
    }

    /// Links whose target came later in the input than their source.
    private func linkDeferred(_ s: inout ImportState, rejects: RejectsWriter?) async throws {
        var start = 0
        let metadata = ["importID": s.importID, "phase": "links"]
        if !s.deferred.isEmpty { s.report(.linking, records: s.written, bytes: s.totalBytes, links: 0, force: true) }
        // A rejected record is not written, nor are its links: one whose key an object of the
        // store holds would otherwise link that object. Its line is in the rejects file already.
        if !s.rejected.isEmpty {
            let rejected = s.rejected
            let kept = s.deferred.filter { rejected[$0.location] == nil }
            s.skippedLinks += s.deferred.count - kept.count
            s.deferred = kept
        }
        if let bulk = s.bulk {
            try await linkDeferred(&s, into: bulk, metadata: metadata, rejects: rejects)
            return
        }
        while start < s.deferred.count {
            let slice = s.deferred[start..<min(s.deferred.count, start + options.batchSize)]
            var changes = ChangeSet(operations: [], valuesComplete: true)
            for d in slice { changes.append(.link(relationship: d.relationship, from: d.from, to: d.to)) }
            if let held = s.held {
                do {
                    try await held.apply([(changes, metadata)], author: options.author)
                } catch {
                    let failure = Self.inOnePass(error, s)
                    // The held transaction holds the records and the links before these: walked
                    // from the store before it.
                    if case StrataError.validation(let v) = failure,
                       let located = displacingLink(v, slice, after: s.heldBatches.flatMap(\.records)
                                                        + Self.linkRecords(s.deferred[..<start]), partnerFrom: .store, s) {
                        throw located
                    }
                    throw failure
                }
                start += slice.count
                s.report(.linking, records: s.written, bytes: s.totalBytes, links: start, force: true)
                continue
            }
            do {
                s.committed(try await store.save(changes, author: options.author, metadata: metadata))
            } catch StrataError.validation(let failure) where !options.continueOnError {
                let located: ImportFailed? = await locatedLink(failure, slice, s) { try storeHas($0) }
                if let found = located ?? displacingLink(failure, slice, partnerFrom: .store, s) { throw found }
                throw StrataError.validation(failure)
            } catch StrataError.validation where options.continueOnError {
                // A target (or source) was rejected, or a link is refused: link what can be
                // linked; each refused one is skipped, counted, and listed in the rejects file.
                for d in slice {
                    var one = ChangeSet(operations: [], valuesComplete: true)
                    one.append(.link(relationship: d.relationship, from: d.from, to: d.to))
                    do {
                        s.committed(try await store.save(one, author: options.author, metadata: metadata))
                    } catch StrataError.validation(let failure) {
                        try skip(d, failure, partnerFrom: .store, &s, rejects: rejects)
                    }
                }
            }
            start += slice.count
            s.report(.linking, records: s.written, bytes: s.totalBytes, links: start, force: true)
        }
    }

    /// A deferred link refused with ``ImportOptions/continueOnError``: counted in
    /// ``ImportSummary/skippedLinks`` and listed in the rejects file as a comment at its
    /// record's line (the record was written, so it is not repeated there).
    private func skip(_ link: DeferredLink, _ failure: ValidationFailure, partnerFrom source: PartnerSource,
                      _ s: inout ImportState, rejects: RejectsWriter?) throws {
        s.skippedLinks += 1
        try rejects?.write(reason: linkRefusal(failure, link, partnerFrom: source, s).description, raw: [])
    }

    /// A batch of deferred links refused because one of them took a required partner away from
    /// an object (``displacing(_:in:after:partnerFrom:_:)``), as that link's record: `FILE:LINE: field: reason`.
    private func displacingLink(_ failure: ValidationFailure, _ links: ArraySlice<DeferredLink>,
                                after applied: [RecordOperations] = [], partnerFrom source: PartnerSource,
                                _ s: ImportState) -> ImportFailed? {
        guard failure.kind == .requiredRelationship,
              let taken = displacing(failure, in: Self.linkRecords(links), after: applied, partnerFrom: source, s)
        else { return nil }
        // Written batch by batch, the record committed before its link was refused; in a bulk
        // import or one in one transaction, nothing was.
        let written = s.held == nil && s.bulk == nil ? " (its record was written, this link was not)" : ""
        let issue = ImportIssue(file: taken.file, line: taken.line, field: taken.field, reason: taken.reason + written)
        return s.noting(ImportFailed(issues: [issue], totalIssues: 1))
    }
}

extension Importer {
    /// The reference by unique constraint `constraint` of an object of entity `tag` with `values`
    /// (all its attributes), or nil when the entity or the constraint does not exist.
    static func keyReference(_ tag: UInt16, _ constraint: Int, _ values: [Value], _ schema: Schema) -> ObjectReference? {
        guard let e = schema.entity(tag: tag), e.uniques.indices.contains(constraint) else { return nil }
        return .unique(entityTag: tag, constraint: constraint, values: e.uniques[constraint].attributes.map { values[$0] })
    }

    /// The unique keys (digests, ``ImportRecord/digest(_:)``) a record's change set may take from
    /// the object holding them, or nil when it takes none (``Batch/movesKeysOf``): for a record
    /// with an explicit id, the keys it gives its object and those the object holds in the store;
    /// for an upsert of an entity with several uniques, the keys it gives and those of the stored
    /// object it finds by its first. (A record with an explicit id whose object an earlier batch of
    /// this import wrote, not in the store, is judged by the keys it gives.)
    private func keysTaken(_ changes: ChangeSet) throws -> [UInt64]? {
        let schema = store.schema
        guard Batch.movedKeys(changes, schema: schema) != nil else { return nil }
        func keys(_ tag: UInt16, _ values: [Value]) -> [UInt64] {
            (schema.entity(tag: tag)?.uniques.indices ?? 0..<0).compactMap { c in
                Self.keyReference(tag, c, values, schema).map(ImportRecord.digest)
            }
        }
        switch changes.operations.first {
        case .put(let id, let values)?:
            let stored = try store.read { try $0.record(id) }
            return keys(id.entityTag, values) + (stored.map { keys(id.entityTag, $0.values) } ?? [])
        case .upsert(let id, let values, let constraint)?:
            guard let first = Self.keyReference(id.entityTag, constraint, values, schema) else { return [] }
            let stored = try store.read { view in try view.resolve(first).flatMap { try view.record($0) } }
            return keys(id.entityTag, values) + (stored.map { keys(id.entityTag, $0.values) } ?? [])
        default:
            return nil
        }
    }

    /// The record whose link the store refused as naming a key no object holds (one saved after
    /// the records, which the store found taken away since the input was checked): the first of
    /// `links` (in the order they were saved) of the failure's relationship whose target — or
    /// source, when the refusal names the source — `resolves` does not find. Nil for another
    /// failure, or when none is found.
    private func locatedLink(_ failure: ValidationFailure,
                             _ links: ArraySlice<DeferredLink>,
                             _ s: ImportState,
                             resolves: (ObjectReference) async throws -> Bool) async -> ImportFailed? {
        guard failure.kind == .objectNotFound, let field = failure.field else { return nil }
        // A link names its source by the record's key too: "(source)" when that is the key gone.
        let source = failure.reason.hasSuffix("(source)")
        for link in links {
            guard let r = store.schema.relationship(tag: link.relationship), r.name == field,
                  r.entityName == failure.entity else { continue }
            guard let found = try? await resolves(source ? link.from : link.to) else { return nil }
            if found { continue }
            let (fileIndex, line) = RecordIterator.Item.unpacked(link.location)
            let issue = ImportIssue(file: s.files[fileIndex], line: line, field: field,
                                    reason: failure.reason)
            return s.noting(ImportFailed(issues: [issue], totalIssues: 1))
        }
        return nil
    }

    /// The deferred links of a bulk import, in the same batches as ``linkDeferred(_:rejects:)``
    /// saves them, many batches per write transaction of the new generation.
    private func linkDeferred(_ s: inout ImportState, into bulk: BulkLoad, metadata: [String: String],
                              rejects: RejectsWriter?) async throws {
        let batchSize = options.batchSize, author = options.author, continueOnError = options.continueOnError
        let chunk = max(1, Self.bulkChunkLinks / batchSize) * batchSize
        var start = 0
        while start < s.deferred.count {
            let end = min(s.deferred.count, start + chunk)
            let outcome: (result: [(index: Int, failure: ValidationFailure, partner: PartnerSource)],
                          committed: [TransactionID])
            do {
                outcome = try await bulk.write { [deferred = s.deferred, start] w in
                    var skipped: [(index: Int, failure: ValidationFailure, partner: PartnerSource)] = []
                    var i = start
                    while i < end {
                        let slice = deferred[i..<min(end, i + batchSize)]
                        var changes = ChangeSet(operations: [], valuesComplete: true)
                        for d in slice { changes.append(.link(relationship: d.relationship, from: d.from, to: d.to)) }
                        i += slice.count
                        guard continueOnError else {
                            _ = try w.save(changes, author: author, metadata: metadata, isolated: false)
                            continue
                        }
                        do {
                            _ = try w.save(changes, author: author, metadata: metadata, isolated: true)
                        } catch StrataError.validation {
                            for (j, d) in zip(slice.indices, slice) {
                                var one = ChangeSet(operations: [], valuesComplete: true)
                                one.append(.link(relationship: d.relationship, from: d.from, to: d.to))
                                do {
                                    _ = try w.save(one, author: author, metadata: metadata, isolated: true)
                                } catch StrataError.validation(let failure) {
                                    let partner = w.read { Self.partnerSource(failure, in: $0) } ?? .unknown
                                    skipped.append((j, failure, partner))
                                }
                            }
                        }
                    }
                    return skipped
                }
            } catch StrataError.validation(let failure) where !continueOnError {
                // Asked of the load before the import drops it: the batches before the refused
                // one are in it, and it is the first whose target is not.
                let links = s.deferred[start..<end]
                let located: ImportFailed? = await locatedLink(failure, links, s) { try await bulk.resolves($0) }
                let source = try await bulkPartnerSource(failure, s)
                if let found = located ?? displacingLink(failure, links, partnerFrom: source, s) { throw found }
                throw StrataError.validation(failure)
            }
            let (skipped, committed) = outcome
            s.transactions += committed
            for (j, failure, partner) in skipped { try skip(s.deferred[j], failure, partnerFrom: partner, &s, rejects: rejects) }
            start = end
            s.report(.linking, records: s.written, bytes: s.totalBytes, links: start, force: true)
        }
    }
}

/// A link whose target came later in the input than its source, saved after the records: the
/// relationship, its source and target, and where the source's record is.
private typealias DeferredLink = (relationship: UInt16, from: ObjectReference, to: ObjectReference, location: RecordLocation)

/// Where ``Importer``'s `displacing` finds the partner an object had in the state a refused
/// write was applied to.
private enum PartnerSource: Sendable {
    /// The live store holds that state, or the state before the records searched first (an
    /// import written batch by batch; one in one transaction, from its first batch on).
    case store
    /// Read from that state elsewhere (a bulk load's new generation): the object's target there,
    /// if any, and the unique keys the object and its target hold there.
    case known(ObjectID?, keys: [ObjectID: [ObjectReference]])
    /// Not known: only the links of the records searched give the object a partner.
    case unknown
}

/// One record's operations and where it is: what ``Importer``'s `displacing` searches.
private struct RecordOperations {
    let operations: [ChangeSet.Operation]
    let fileIndex: Int
    let line: Int
}

/// A bulk import's batches being saved on its load's queue (``Importer``'s `flushBulk`).
private struct BulkFlight {
    /// A record refused with ``ImportOptions/continueOnError``: its item, why, and its object's
    /// partner in the state it was refused in.
    typealias Refusal = (index: Int, failure: ValidationFailure, partner: PartnerSource)
    typealias Outcome = (result: [(written: Int, refused: [Refusal])], committed: [TransactionID])
    let pending: [Batch]
    /// Each batch's change set, as saved.
    let changes: [ChangeSet]
    let task: Task<Outcome, Error>
}

/// Records of one transaction, kept per record too so a failing batch can be retried one by one.
private struct Batch: Sendable {
    /// Each record's own operation (its insert, upsert or put), in input order.
    private var recordOps: [ChangeSet.Operation] = []
    /// Each record's relationship operations, in input order.
    private var linkOps: [ChangeSet.Operation] = []
    /// Where each record's operations are in ``recordOps`` and ``linkOps``.
    private var spans: [(records: Range<Int>, links: Range<Int>)] = []
    var items: [(raw: [UInt8], fileIndex: Int, line: Int, location: RecordLocation)] = []
    /// Bytes of the records' string and bytes values, and 16 for each other value: what the
    /// batch's memory and its log entry grow with (``ImportOptions/maxBatchBytes``).
    private(set) var bytes = 0
    /// Lines read with this batch that validation had rejected (reason, raw line), for the
    /// rejects file.
    var earlyRejects: [(reason: String, raw: [UInt8])] = []
    /// The input's bytes read when the batch was queued (its last record read by then).
    var bytesReadAtEnd = 0
    var count: Int { items.count }

    /// Each record's change set as it was added (its own operation, then its relationship
    /// operations), for a batch saved record by record.
    var perRecord: [ChangeSet] {
        spans.map { ChangeSet(operations: Array(recordOps[$0.records]) + Array(linkOps[$0.links]), valuesComplete: true) }
    }

    /// Each record's operations (as ``perRecord`` gives them) with where the record is.
    var records: [RecordOperations] { records(items.indices) }

    /// The records of the items `range` (a unit, ``perUnit``), as ``records`` gives them.
    func records(_ range: Range<Int>) -> [RecordOperations] {
        range.map { i in
            RecordOperations(operations: Array(recordOps[spans[i].records]) + Array(linkOps[spans[i].links]),
                             fileIndex: items[i].fileIndex, line: items[i].line)
        }
    }

    /// The records that must be saved together, as ranges of ``items``: one record each, but
    /// records whose required references form a cycle (``HeldRecords/drain()``) are one unit.
    private(set) var units: [Range<Int>] = []

    /// Each unit's change set (its records' own operations, then their relationship operations,
    /// as ``changes`` orders a batch), with the unit's range of ``items``: what a batch refused
    /// with ``ImportOptions/continueOnError`` is saved again by.
    var perUnit: [(changes: ChangeSet, items: Range<Int>)] {
        units.map { unit in
            var ops: [ChangeSet.Operation] = []
            for i in unit { ops.append(contentsOf: recordOps[spans[i].records]) }
            for i in unit { ops.append(contentsOf: linkOps[spans[i].links]) }
            return (ChangeSet(operations: ops, valuesComplete: true), unit)
        }
    }

    /// Adds records that are saved together (``units``), each as ``add(_:item:linkedKeys:schema:)`` adds one.
    mutating func add(unit: [HeldRecords.Entry], schema: Schema) {
        guard !unit.isEmpty else { return }
        let start = items.count
        for r in unit { append(r.changes, item: r.item, linkedKeys: r.linkedKeys, schema: schema) }
        units.append(start..<items.count)
    }

    /// Adds one record, a unit of its own. `linkedKeys`: the digests of the unique keys its link
    /// operations name (``ImportRecord/digest(_:)``), worked out once for the record.
    mutating func add(_ c: ChangeSet, item: RecordIterator.Item, linkedKeys: [UInt64], schema: Schema) {
        units.append(items.count..<items.count + 1)
        append(c, item: item, linkedKeys: linkedKeys, schema: schema)
    }

    /// Every record's operations in one change set: the records first, then the links in input
    /// order, so that records written together because their required references form a cycle
    /// find each other. Each call builds it again: call it once a save.
    var changes: ChangeSet {
        var ops: [ChangeSet.Operation] = []
        ops.reserveCapacity(recordOps.count + linkOps.count)
        ops.append(contentsOf: recordOps)
        ops.append(contentsOf: linkOps)
        return ChangeSet(operations: ops, valuesComplete: true)
    }

    /// Entities whose objects in the store may lose a unique key to a record of this batch: a
    /// record with an explicit id (it may change any of its object's keys), or an upsert of an
    /// entity with more than one unique (the object it finds by its first may change another).
    /// Every other way a batch changes which keys the store has is a key the batch's own records
    /// hold, which the import knows as written (``ImportState/writtenKeys``).
    var movesKeysOf: Set<UInt16> = []

    /// The unique keys the batch's links name (digests, ``ImportRecord/digest(_:)``): their
    /// objects are looked up when the batch is saved, after all of its records' own operations.
    private(set) var referencedKeys: Set<UInt64> = []

    /// The unique keys (digests) the batch's records of ``movesKeysOf`` may take from the object
    /// holding them (``Importer``'s `keysTaken`): a reference to one of them waits for the batch.
    private(set) var takesKeys: Set<UInt64> = []

    mutating func noteTakes(_ keys: [UInt64]) { takesKeys.formUnion(keys) }

    /// The entity whose keys a record's change set may take from an object of the store (see
    /// ``movesKeysOf``), if any.
    static func movedKeys(_ c: ChangeSet, schema: Schema) -> UInt16? {
        switch c.operations.first {
        case .put(let id, _)?: id.entityTag
        case .upsert(let id, _, _)? where (schema.entity(tag: id.entityTag)?.uniques.count ?? 0) > 1: id.entityTag
        default: nil
        }
    }

    private mutating func append(_ c: ChangeSet, item: RecordIterator.Item, linkedKeys: [UInt64], schema: Schema) {
        if let tag = Self.movedKeys(c, schema: schema) { movesKeysOf.insert(tag) }
        referencedKeys.formUnion(linkedKeys)
        let records = recordOps.count, links = linkOps.count
        for op in c.operations {
            switch op {
            case .link, .unlink:
                linkOps.append(op)
                bytes += 48
            case .insert(_, let values), .upsert(_, let values, _), .put(_, let values):
                recordOps.append(op)
                bytes += 16
                for v in values {
                    switch v {
                    case .string(let text): bytes += text.utf8.count
                    case .bytes(let b): bytes += b.count
                    default: bytes += 16
                    }
                }
            default:
                recordOps.append(op)
            }
        }
        spans.append((records..<recordOps.count, links..<linkOps.count))
        // The raw line is kept only where a rejects file may need it.
        items.append((item.raw, item.fileIndex, item.line, item.location))
    }
}

/// Thrown out of an import in one pass where two passes could answer differently (a record that
/// may take a unique key away from an object of the store, ``Batch/movesKeysOf``; a key an
/// earlier reference was linked to in the store; a refusal after such a link; a replica's
/// writer; an input grown past the limit): the import starts again in two passes. A bulk import
/// checking its records as it writes them starts again for a key an earlier reference was
/// linked to in the store.
private struct NotInOneTransaction: Error {}

/// A bulk load in memory from a store with objects was refused a save that took a required
/// partner away: which record took it is found from the partner the object had before the
/// refused write, which the tables in memory do not keep (a refused save leaves part of itself
/// there). The import is dropped and runs again with its load through the B-trees, whose
/// generation answers that; a failure's path only.
private struct RefusedInMemory: Error {}

/// A reference to a key the input had not given yet where it was read: checked at the end of
/// the input (``Importer``'s validation), and reported there as dangling when neither the input
/// nor the store has it.
private struct ForwardReference {
    let digest: UInt64
    let target: ObjectReference
    let location: RecordLocation
    let fileIndex: Int
    let line: Int
    let relationship: RelationshipDescription
    /// The digests of the keys of the record holding the reference (one array for all of its
    /// references): when the reference dangles, references to them name a rejected record.
    let keys: [UInt64]
}

/// Mutable bookkeeping of one run.
private struct ImportState {
    let files: [String]
    let options: ImportOptions
    let schema: Schema
    let totalBytes: Int
    let started: ContinuousClock.Instant
    let importID: String
    let progress: AsyncStream<ImportProgress>.Continuation
    /// Commits of this process tagged with this import's id (``CommitLedger``).
    let ledger: CommitLedger
    /// Each input as the import found it when it started (``InputFile/Identity``): every
    /// reading reads that version or stops.
    var identities: [InputFile.Identity]?
    var issues: [ImportIssue] = []
    var issueCount = 0
    /// Whether an issue ended a file before its end (``ImportIssue/endsTheFile``).
    var unreadableFile = false
    /// Rejected records (by location) and why.
    var rejected: [RecordLocation: String] = [:]
    var writtenKeys: Set<UInt64> = []
    /// The records the validation pass read, kept for the write pass when the input is small
    /// (``ImportOptions/keptRecordsMaxInputBytes``); taken by it.
    var kept: KeptRecords?
    /// Every key of the input (digest) and where its record is (``RecordLocation``, in input
    /// order), from validation (while a bulk import checks as it writes: the keys read so far).
    var inputKeys: [UInt64: RecordLocation] = [:]
    /// The keys of records validation rejected (a key given twice, a required to-one without a
    /// target) that no other record gives, and where the rejected record is: a reference to one
    /// is dangling because of that record, and says so.
    var rejectedKeys: [UInt64: RecordLocation] = [:]
    /// References to keys the input had not given yet where they were read.
    var forward: [ForwardReference] = []
    /// The size of ``forward`` at which those the input or the store holds by then are dropped.
    var forwardCheckAt = Importer.forwardCheckEvery
    var deferred: [DeferredLink] = []
    var skippedLinks = 0
    /// Batches submitted (each numbered in its `batch` metadata, in input order).
    var batchesSubmitted = 0
    /// Whether one of them failed (nothing queued after it is submitted then).
    var saveFailed = false
    var transactions: [TransactionID] = []
    var written = 0
    /// The bulk load a bulk import writes into (nil: into the live store).
    var bulk: BulkLoad?
    /// Whether a bulk load may resolve its saves in memory from a store with objects: not after
    /// one was refused a save that took a required partner away (``RefusedInMemory``).
    var inMemoryFromObjects = true
    /// The bulk load's records are in the store: its generation switched in, or, when it saved
    /// nothing (every record as the store had it), dropped.
    var bulkSwitched = false
    /// The writer's transaction an import in one pass applies its batches in
    /// (``ImportOptions/oneTransactionMaxInputBytes``), until it commits.
    var held: HeldWrite?
    /// Whether a pass that checks as it writes read and checked the whole input (its issues
    /// are then all there is to report).
    var checkedToEnd = false
    /// The batches applied in ``held`` so far, kept for naming the record that took a required
    /// partner when a later one is refused (the store does not hold what they did).
    var heldBatches: [Batch] = []
    /// In one pass: the keys (digests) of references linked to objects of the store before the
    /// input had given them. A record giving one of them later sends the import back to two
    /// passes, which would have linked the reference after that record.
    var linkedFromStore: Set<UInt64> = []
    /// Entities of which a record of this import may have taken a unique key away from an object
    /// of the store (``Batch/movesKeysOf`` of every batch queued so far).
    var keysMoved: Set<UInt16> = []
    /// A bulk import's batches not saved yet, and their records.
    var bulkPending: [Batch] = []
    var bulkPendingRecords = 0
    /// Their values' bytes (``Batch/bytes``).
    var bulkPendingBytes = 0
    /// A bulk import's batches being saved.
    var bulkFlight: BulkFlight?
    var lastReport = ContinuousClock.now
    /// The phase last reported, and when it started.
    var currentPhase = ImportProgress.Phase.validating
    var phaseStarted = ContinuousClock.now

    /// Notes a save's transaction when the save committed one. A save that changed nothing
    /// returns the store's last transaction id, which may be this import's previous one or
    /// another process's: counted only when the ledger saw this import commit it.
    mutating func committed(_ tx: TransactionID) {
        if ledger.take(tx) { transactions.append(tx) }
    }

    /// `failed` with what this import committed before it stopped: its batches written batch by
    /// batch (a bulk import's generation is abandoned, and one in one transaction never commits).
    func noting(_ failed: ImportFailed) -> ImportFailed {
        guard held == nil, bulk == nil, written > 0 else { return failed }
        var noted = failed
        noted.written = written
        noted.transactions = transactions
        noted.importID = importID
        return noted
    }

    /// Drops the bulk load, if any (the store stays as it was), once the write still on its
    /// queue, if any, has ended: its generation must not go before.
    func abandonBulk() async {
        if let flight = bulkFlight { _ = try? await flight.task.value }
        bulk?.abandon()
    }

    /// `error`, which is not about the input, as ``ImportInterrupted`` when this import
    /// committed batches before it (as ``noting(_:)`` says), or is a bulk import whose
    /// generation was switched in.
    func interrupted(_ error: Error) -> Error {
        guard held == nil, bulk == nil || bulkSwitched, written > 0, !(error is ImportInterrupted) else { return error }
        return ImportInterrupted(underlying: error, written: written, transactions: transactions, importID: importID)
    }

    /// The issues found, in input order, as the error that ends the import.
    func failure() -> ImportFailed {
        ImportFailed(issues: issues.sorted { ($0.file, $0.line) < ($1.file, $1.line) }, totalIssues: issueCount)
    }

    mutating func reject(_ location: RecordLocation, _ issue: ImportIssue) {
        issueCount += 1
        // A file that cannot be read to its end is listed past the limit too: it ends the import.
        if issues.count < options.maxReportedIssues || issue.endsTheFile { issues.append(issue) }
        if issue.endsTheFile { unreadableFile = true }
        rejected[location] = issue.description
    }

    mutating func report(_ phase: ImportProgress.Phase, records: Int, bytes: Int, links: Int = 0,
                         force: Bool = false) {
        let now = ContinuousClock.now
        if phase != currentPhase {
            currentPhase = phase
            phaseStarted = now
        }
        guard force || now - lastReport > .milliseconds(200) else { return }
        lastReport = now
        // An import in one transaction writes nothing readers see before its commit: no record
        // counts as written until then (the count is never ahead of the store).
        // What the writer applied in the held transaction is reported apart (`applied`).
        let inHeld = held != nil && (phase == .writing || phase == .linking)
        progress.yield(ImportProgress(phase: phase, records: inHeld ? 0 : records, bytesRead: bytes,
                                      totalBytes: totalBytes, elapsedSeconds: (now - started).seconds, links: links,
                                      totalLinks: deferred.count, phaseSeconds: (now - phaseStarted).seconds,
                                      totalRecords: 0, applied: inHeld ? records : 0))
    }
}

/// Writes rejected lines, each after a `# FILE:LINE: reason` comment. A regular file (or a new
/// one) is written aside, as a hidden file in its directory, and renamed over the path when the
/// import succeeds: a failed import leaves a file that was there as it was. A device or a pipe
/// is written directly, and a descriptor of the process (`/dev/stdout`, whatever it is) through
/// a duplicate of it. A symbolic link is written through.
private final class RejectsWriter: Sendable {
    private let fd: Int32
    private let path: String
    /// The file written and the one it becomes at ``finish()``; nil when written in place.
    private let staging: (written: String, target: String)?
    private let closed = Atomic<Bool>(false)

    init(path: String) throws {
        self.path = path
        func refused(_ code: Int32) -> ImportIssue {
            ImportIssue(file: path, line: 0, field: nil, reason: "cannot create the rejects file: \(String(cString: strerror(code)))")
        }
        // A link another user planted in a sticky, world-writable directory is not followed, as
        // the kernel does not follow it for a shell's redirection (``SymbolicLinks/unfollowableLink(_:)``).
        if let link = SymbolicLinks.unfollowableLink(path) {
            throw ImportIssue(file: path, line: 0, field: nil, reason: """
                cannot create the rejects file: \(link) is a symbolic link in a sticky directory that anyone may \
                write, owned by another user (the kernel refuses a shell's redirection through it too)
                """)
        }
        // A descriptor of this process (`/dev/stdout`, when the shell sent it to a file too) is
        // written through a duplicate of it.
        if let n = SymbolicLinks.descriptor(path) {
            let fd = fcntl(n, F_DUPFD_CLOEXEC, 0)
            guard fd >= 0 else { throw refused(errno) }
            self.fd = fd
            staging = nil
            return
        }
        // A device or pipe (also through its links) is written in place.
        var st = stat()
        if SymbolicLinks.isSpecial(path) {
            // open(2), not FileManager.createFile, which would replace the path instead.
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw refused(errno) }
            self.fd = fd
            staging = nil
            return
        }
        // Where a write would go: through symbolic links (a dangling one: where it points).
        let target = SymbolicLinks.followed(path)
        let exists = stat(target, &st) == 0
        // A file this process may not write is not replaced by one it makes, as `>` would not
        // write it.
        if exists, faccessat(AT_FDCWD, target, W_OK, AT_EACCESS) != 0 { throw refused(errno) }
        let url = URL(fileURLWithPath: target)
        let prefix = ".\(url.lastPathComponent).partial-"
        Self.removeLeftovers(in: url.deletingLastPathComponent().path, prefix: prefix)
        let written = url.deletingLastPathComponent()
            .appendingPathComponent("\(prefix)\(getpid())-\(UUID().uuidString.prefix(8))").path
        let fd = open(written, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, exists ? mode_t(st.st_mode & 0o7777) : 0o644)
        guard fd >= 0 else { throw refused(errno) }
        if exists {
            // The replaced file's owner and group where the process may set them, its group
            // alone where it may not set the owner; a group it cannot keep takes the group's
            // and others' bits off (the file is not opened to a group it was not open to). Then
            // its mode exactly (the umask took bits off at open).
            var mode = mode_t(st.st_mode & 0o7777)
            if fchown(fd, st.st_uid, st.st_gid) != 0 && fchown(fd, uid_t.max, st.st_gid) != 0 { mode &= ~0o077 }
            guard fchmod(fd, mode) == 0 else {
                let code = errno
                Glibc.close(fd)
                unlink(written)
                throw refused(code)
            }
        }
        // Held until the process ends, however it ends: a file nobody holds is a leftover.
        _ = flock(fd, LOCK_EX | LOCK_NB)
        self.fd = fd
        staging = (written, target)
    }

    /// Removes the `.NAME.partial-PID-XXXXXXXX` files that imports killed before they finished
    /// left in `directory` (``LeftoverFiles``: an import holds its own from its start to its end).
    static func removeLeftovers(in directory: String, prefix: String) {
        LeftoverFiles.remove(in: directory) { name in
            guard name.hasPrefix(prefix) else { return false }
            let parts = name.dropFirst(prefix.count).split(separator: "-", omittingEmptySubsequences: false)
            return parts.count == 2 && !parts[0].isEmpty && parts[0].allSatisfy { ("0"..."9").contains($0) }
                && parts[1].count == 8 && parts[1].allSatisfy(\.isHexDigit)
        }
    }

    /// An error with `errno` `code`: a full disk reads as one (exit 74).
    private func failure(_ code: Int32, _ what: String, _ note: String = "") -> StrataError {
        .lmdb(LMDBError(code: code, operation: "\(what) the rejects file \(path)\(note)"))
    }

    /// A rejected line after its reason. A line not kept (one over the line limit) leaves the
    /// reason alone, not an empty line in its place.
    func write(reason: String, raw: [UInt8]) throws {
        // The reason on one comment line whatever it quotes (a line break in it would start a
        // line that a re-import of the rejects file reads as a record).
        let bytes = Array(("# " + EchoedText.escaped(reason) + "\n").utf8) + (raw.isEmpty ? [] : raw + [0x0A])
        try bytes.withUnsafeBytes { try StorePermissions.writeAll(fd, $0, path: "the rejects file \(path)") }
    }

    /// After a failure: closes, ignoring errors (the import's own error is the one reported),
    /// and removes the file written aside. Nothing after ``finish()``.
    func close() {
        guard closed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        _ = Foundation.close(fd)
        if let staging { unlink(staging.written) }
    }

    /// At the end of a successful import: the rejected lines on disk under the path, or an
    /// error saying why not (and where the lines written aside are).
    func finish() throws {
        guard closed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        var st = stat()
        // fsync applies to files; a device or pipe (`/dev/stdout`) has nothing to sync.
        let regular = fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
        // The import is written: a failure from here on keeps the lines written aside, named
        // in the error, rather than losing the rejects of records that are in the store.
        let kept = staging.map { " (the rejected lines are in \($0.written))" } ?? ""
        if regular && fsync(fd) != 0 {
            let code = errno
            _ = Foundation.close(fd)
            throw failure(code, "syncing", kept)
        }
        // Renamed while still open, so still locked: another import's removal of the files killed
        // imports left (an unlocked one not written for a minute) cannot take it before the rename.
        if let staging, rename(staging.written, staging.target) != 0 {
            let code = errno
            _ = Foundation.close(fd)
            throw failure(code, "renaming", kept)
        }
        if Foundation.close(fd) != 0 && errno != EINTR {
            throw failure(errno, "closing", staging.map { " (the rejected lines are in \($0.target))" } ?? "")
        }
        guard let staging else { return }
        // The rename made durable with the directory (best effort: the lines are in place).
        try? StoreDirectory.syncDirectory(URL(fileURLWithPath: staging.target).deletingLastPathComponent().path)
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
