import Foundation
import LibraryModel
import Synchronization
import Testing
@testable import Strata

/// `Store.close()` on one thread while others read through the main context (each read a short
/// LMDB read transaction that no registry knows of) and through snapshots. LMDB requires every
/// transaction to be ended before `mdb_env_close`; a close that did not wait for the short reads
/// under way could unmap the file under them. Every read either returns a result or throws
/// ``StrataError/closed(path:)``; the process does not crash.
@Suite struct CloseWhileReadingTests {
    /// What a reader thread saw: reads that returned, and errors other than `closed`.
    private struct Tally: Sendable {
        var reads = 0
        var unexpected: [String] = []
    }

    @Test func closeWhileOtherThreadsReadEndsEveryReadCleanly() async throws {
        let schema = try librarySchema()
        for round in 0..<20 {
            let store = try Store.temporary(schema: schema)
            _ = try await store.save(genres(50, prefix: "r\(round)"))
            let stop = Atomic<Bool>(false)
            let tallies = Locked<[Tally]>([])
            let finished = DispatchGroup()
            for reader in 0..<3 {
                finished.enter()
                Thread {
                    var t = Tally()
                    while !stop.load(ordering: .relaxed) {
                        do {
                            switch reader {
                            case 0: _ = try store.mainContext.fetch(Genre.self)
                            case 1: _ = try store.lastTransactionID
                            default:
                                let s = try store.snapshot(label: "reader")
                                _ = try s.count(Query(entity: "Genre"))
                                s.close()
                            }
                            t.reads += 1
                        } catch StrataError.closed {
                            break
                        } catch {
                            t.unexpected.append("\(error)")
                            break
                        }
                    }
                    tallies.withLock { $0.append(t) }
                    finished.leave()
                }.start()
            }
            // Let the readers get going, then close under them (a different moment each round).
            usleep(UInt32(500 + round * 100))
            store.close()
            stop.store(true, ordering: .relaxed)
            #expect(finished.wait(timeout: .now() + 60) == .success, "a reader never returned after close()")
            let all = tallies.withLock { $0 }
            #expect(all.allSatisfy { $0.unexpected.isEmpty }, "round \(round): \(all.flatMap(\.unexpected))")
        }
    }
}
