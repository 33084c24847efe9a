import Foundation
import LibraryModel
import Testing
@testable import Strata

/// What an import reports while it runs: its phases in order, a count that is never ahead of
/// the store, and for the linking phase its own count of links out of the links it has to save.
@Suite struct ImportProgressTests {
    /// Imports `lines` (one NDJSON file in `dir`) and returns the summary with every progress
    /// report, in order.
    private func importCollectingProgress(_ lines: [String], _ options: ImportOptions, _ store: Store,
                                          _ dir: URL) async throws -> (ImportSummary, [ImportProgress]) {
        let url = dir.appendingPathComponent("in.ndjson")
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: url)
        let importer = Importer(store: store, options: options)
        let collected = Task {
            var all: [ImportProgress] = []
            for await p in importer.progress { all.append(p) }
            return all
        }
        let summary = try await importer.run(files: [url.path])
        return (summary, await collected.value)
    }

    /// Six tracks that point forward at a genre, then the genre: six links for the linking phase.
    private let tracksPointingForward = (0..<6).map { i in
        #"{"entity":"Track","mbid":"00000000-0000-4000-8000-00000000000\#(i)","title":"T\#(i)","durationSeconds":1,"addedAt":"2022-08-01T08:45:23Z","genre":{"name":"Folk"}}"#
    } + [#"{"entity":"Genre","name":"Folk"}"#]

    @Test func theLinkingPhaseCountsLinksOutOfItsTotal() async throws {
        let dir = temporaryDirectory("import-progress")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let lines = tracksPointingForward
            var options = ImportOptions()
            options.batchSize = 2
            // Two passes, whose batches commit as they go (one transaction: below).
            options.oneTransactionMaxInputBytes = 0
            let (summary, reports) = try await importCollectingProgress(lines, options, store, dir)
            #expect(summary.records == 7)

            let phases = reports.map(\.phase)
            let order: [ImportProgress.Phase] = [.validating, .writing, .linking, .done]
            #expect(phases.map { order.firstIndex(of: $0) ?? -1 } == phases.map { order.firstIndex(of: $0) ?? -1 }.sorted(),
                    "phases out of order: \(phases)")
            let linking = reports.filter { $0.phase == .linking }
            #expect(!linking.isEmpty)
            #expect(linking.allSatisfy { $0.totalLinks == 6 && $0.links <= 6 && $0.records == 7 }, "\(linking)")
            #expect(linking.map(\.links) == linking.map(\.links).sorted())
            #expect(linking.last?.links == 6 && linking.last?.fractionDone == 1)
            #expect(linking.first.map { $0.phaseSeconds <= $0.elapsedSeconds } == true)
            let writing = reports.filter { $0.phase == .writing }
            #expect(writing.allSatisfy { $0.fractionDone >= 0 && $0.fractionDone <= 1 && $0.records <= 7 })
            let done = try #require(reports.last)
            #expect(done.phase == .done && done.records == 7 && done.links == 6 && done.fractionDone == 1)
            #expect(done.etaSeconds == nil)
        }
    }

    /// The writing phase is reported when the write pass starts, with nothing written yet, not
    /// at its first commit (which, with the batches committed in groups, can be the end of the
    /// pass): its rate counts from its start, and the validating phase ends where it does.
    @Test func theWritingPhaseStartsWithTheWritePass() async throws {
        let dir = temporaryDirectory("import-progress")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let lines = (0..<7).map { #"{"entity":"Genre","name":"G\#($0)"}"# }
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 2
            options.oneTransactionMaxInputBytes = 0
            let (_, reports) = try await importCollectingProgress(lines, options, store, dir)
            let writing = reports.filter { $0.phase == .writing }
            #expect(writing.first?.records == 0, "\(writing)")
            #expect(writing.last?.records == 7, "\(writing)")
        }
    }

    /// An import in one transaction commits nothing before its end: while it writes and links,
    /// no record counts as written, and `applied` counts what the writer applied in the
    /// transaction (all 7 once it links); the linking phase still counts its links out of its
    /// total, and `done` has them all, written.
    @Test func anImportInOneTransactionCountsNothingWrittenBeforeItsCommit() async throws {
        let dir = temporaryDirectory("import-progress")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let lines = tracksPointingForward
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 2
            let (summary, reports) = try await importCollectingProgress(lines, options, store, dir)
            #expect(summary.oneTransaction && summary.records == 7, "\(summary)")
            #expect(!reports.contains { $0.phase == .validating }, "one pass: \(reports.map(\.phase))")
            let before = reports.filter { $0.phase == .writing || $0.phase == .linking }
            #expect(!before.isEmpty && before.allSatisfy { $0.records == 0 && $0.applied <= 7 }, "\(before)")
            let linking = reports.filter { $0.phase == .linking }
            // The stream keeps the newest reports: a slow reader may miss some, never the last.
            #expect(linking.allSatisfy { $0.links <= 6 && $0.totalLinks == 6 && $0.applied == 7 }, "\(linking)")
            let done = try #require(reports.last)
            #expect(done.phase == .done && done.records == 7 && done.links == 6 && done.applied == 0)
        }
    }

    /// While an incremental import writes, the fraction it reports is of the input its committed
    /// records came from, not of the input read so far: the reading runs a group commit ahead
    /// (25,000 records), and 86 % was shown with 43 % of the records committed.
    @Test(arguments: [ImportOptions().keptRecordsMaxInputBytes, 0])
    func theWritingFractionFollowsTheCommittedRecords(keptRecordsMaxInputBytes: Int) async throws {
        let dir = temporaryDirectory("import-progress")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let total = 60_000
            let lines = (0..<total).map { #"{"entity":"Genre","name":"G\#(String(format: "%06d", $0))"}"# }
            var options = ImportOptions()
            options.mode = .incremental
            options.batchSize = 500
            options.oneTransactionMaxInputBytes = 0
            options.keptRecordsMaxInputBytes = keptRecordsMaxInputBytes
            let (summary, reports) = try await importCollectingProgress(lines, options, store, dir)
            #expect(summary.records == total)
            let writing = reports.filter { $0.phase == .writing && $0.records > 0 }
            #expect(!writing.isEmpty)
            for r in writing {
                // Lines of one length: the fraction of bytes is the fraction of records, give or
                // take the chunk of 256 records the importer reads at a time.
                #expect(r.fractionDone <= Double(r.records + 300) / Double(total),
                        "\(r.records) records committed, \(Int(r.fractionDone * 100)) % shown")
            }
        }
    }

    @Test func theFractionAndTheEstimateFollowThePhase() {
        let half = ImportProgress(phase: .writing, records: 50, bytesRead: 500, totalBytes: 1000, elapsedSeconds: 20,
                                  links: 0, totalLinks: 0, phaseSeconds: 10, totalRecords: 0)
        #expect(half.fractionDone == 0.5 && half.etaSeconds == 10 && half.recordsPerSecond == 5)
        let linking = ImportProgress(phase: .linking, records: 100, bytesRead: 1000, totalBytes: 1000,
                                     elapsedSeconds: 40, links: 30, totalLinks: 120, phaseSeconds: 3, totalRecords: 0)
        #expect(linking.fractionDone == 0.25 && linking.recordsPerSecond == 10 && linking.etaSeconds == 9)
        let noLinks = ImportProgress(phase: .linking, records: 1, bytesRead: 1, totalBytes: 1, elapsedSeconds: 1,
                                     links: 0, totalLinks: 0, phaseSeconds: 0, totalRecords: 0)
        #expect(noLinks.fractionDone == 1 && noLinks.etaSeconds == nil && noLinks.recordsPerSecond == 0)
        let done = ImportProgress(phase: .done, records: 100, bytesRead: 1000, totalBytes: 1000, elapsedSeconds: 4,
                                  links: 30, totalLinks: 30, phaseSeconds: 0, totalRecords: 0)
        #expect(done.recordsPerSecond == 25 && done.fractionDone == 1 && done.etaSeconds == nil)
        let building = ImportProgress(phase: .building, records: 250, bytesRead: 0, totalBytes: 0, elapsedSeconds: 9,
                                      links: 0, totalLinks: 0, phaseSeconds: 1, totalRecords: 1000)
        #expect(building.fractionDone == 0.25 && building.recordsPerSecond == 250 && building.etaSeconds == 3)
        let buildingStarts = ImportProgress(phase: .building, records: 0, bytesRead: 0, totalBytes: 0,
                                            elapsedSeconds: 9, links: 0, totalLinks: 0, phaseSeconds: 0, totalRecords: 0)
        #expect(buildingStarts.fractionDone == 0 && buildingStarts.etaSeconds == nil)
    }

    /// A bulk import that resolves its records in memory reports the writing of its generation as
    /// a phase of its own, between writing (and linking) and switching: objects written out of
    /// all of them, ending at all of them.
    @Test func aBulkImportInMemoryReportsBuildingItsGeneration() async throws {
        let dir = temporaryDirectory("import-progress")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await withLibraryStore { store in
            let lines = (0..<7).map { #"{"entity":"Genre","name":"G\#($0)"}"# }
            var options = ImportOptions()
            options.mode = .bulk
            let (summary, reports) = try await importCollectingProgress(lines, options, store, dir)
            #expect(summary.inMemory)
            let phases = reports.map(\.phase)
            let order: [ImportProgress.Phase] = [.copying, .writing, .building, .switching, .done]
            #expect(phases.allSatisfy(order.contains), "\(phases)")
            #expect(phases.map { order.firstIndex(of: $0)! } == phases.map { order.firstIndex(of: $0)! }.sorted(),
                    "phases out of order: \(phases)")
            let building = reports.filter { $0.phase == .building }
            #expect(building.last?.records == 7 && building.last?.totalRecords == 7, "\(building)")
            #expect(building.last?.fractionDone == 1)
            // The phase's first report comes before its total is known: none of it is done yet
            // (it showed a full bar at 100 %, then went back to the real fraction).
            #expect(building.first?.totalRecords == 0 && building.first?.fractionDone == 0, "\(building)")
        }
    }
}
