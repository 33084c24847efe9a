import Glibc

/// Monotonic time for measurements (`CLOCK_MONOTONIC`, nanoseconds).
enum MonotonicClock {
    static func nanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    /// Seconds spent in `body`, and what it returned.
    static func measure<R>(_ body: () throws -> R) rethrows -> (seconds: Double, result: R) {
        let start = nanoseconds()
        let result = try body()
        return (Double(nanoseconds() - start) / 1e9, result)
    }

    /// Seconds spent in an async `body`, and what it returned.
    static func measure<R>(_ body: () async throws -> R) async rethrows -> (seconds: Double, result: R) {
        let start = nanoseconds()
        let result = try await body()
        return (Double(nanoseconds() - start) / 1e9, result)
    }
}
