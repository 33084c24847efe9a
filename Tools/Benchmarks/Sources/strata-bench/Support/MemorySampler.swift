import Foundation
import Synchronization

/// Samples this process's anonymous resident memory (`RssAnon`) every few milliseconds on a
/// thread of its own and keeps the highest value: the heap part of the peak, which `VmHWM`
/// (heap plus mapped file pages) does not separate.
final class MemorySampler: Sendable {
    private let peakAnonymous = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    static let intervalMicros: UInt32 = 5_000

    init() {
        let thread = Thread { [self] in
            while !stopped.load(ordering: .acquiring) {
                sample()
                usleep(Self.intervalMicros)
            }
            sample()
            finished.signal()
        }
        thread.name = "memory-sampler"
        thread.start()
    }

    private func sample() {
        if let anon = ProcessMemory.residentAnonymousBytes() {
            _ = peakAnonymous.max(anon, ordering: .relaxed)
        }
    }

    /// Stops sampling; returns the highest anonymous RSS seen, in bytes.
    func stop() -> Int {
        stopped.store(true, ordering: .releasing)
        finished.wait()
        return peakAnonymous.load(ordering: .relaxed)
    }
}
