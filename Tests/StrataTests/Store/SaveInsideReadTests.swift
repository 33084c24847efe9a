import Foundation
import LibraryModel
import Synchronization
import Testing
@testable import Strata

/// `saveAndWait` from inside a read of the same store on the same thread (here a `verify`
/// progress callback, which verify runs as inside its read): refused with `saveInsideRead`.
/// Its commit could have to grow the map, which waits for every read to end, this one
/// included: with a map about to fill, the thread hung for ever.
@Suite struct SaveInsideReadTests {
    @Test(.timeLimit(.minutes(15))) func saveAndWaitInsideAReadIsRefusedNotAHang() async throws {
        var config = StoreConfiguration()
        config.initialMapSizeBytes = 1 << 20
        try await withLibraryStore(config) { store in
            _ = try await store.save { c in for i in 0..<200 { c.insert(makeTrack(title: "t\(i)", duration: i)) } }
            let tried = Mutex(false)
            let refusal = Mutex<String?>(nil)
            let report = try store.verify { _ in
                guard !tried.withLock({ $0 }) else { return }
                tried.withLock { $0 = true }
                // Large enough to need a bigger map than the first one.
                do {
                    _ = try store.saveAndWait { c in
                        for i in 0..<3_000 {
                            c.insert(makeTrack(title: "big \(i) " + String(repeating: "x", count: 900), duration: i))
                        }
                    }
                    refusal.withLock { $0 = "saved" }
                } catch StrataError.saveInsideRead {
                    refusal.withLock { $0 = "saveInsideRead" }
                } catch {
                    refusal.withLock { $0 = "\(error)" }
                }
            }
            #expect(report.ok)
            #expect(refusal.withLock { $0 } == "saveInsideRead")
            // After the read, the same save goes through (growing the map).
            _ = try store.saveAndWait { c in
                for i in 0..<3_000 { c.insert(makeTrack(title: "big \(i) " + String(repeating: "x", count: 900), duration: i)) }
            }
            #expect(try store.mainContext.count(Track.self) == 3_200)
        }
    }
}
