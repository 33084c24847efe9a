/// Latency percentiles of a sample of nanosecond durations.
struct LatencySummary: Sendable {
    let count: Int
    let p50Micros: Double
    let p99Micros: Double
    let maxMicros: Double

    init(nanoseconds sample: [UInt64]) {
        let sorted = sample.sorted()
        count = sorted.count
        func at(_ q: Double) -> Double {
            guard !sorted.isEmpty else { return .nan }
            let i = min(sorted.count - 1, Int((Double(sorted.count) * q).rounded(.down)))
            return Double(sorted[i]) / 1000
        }
        p50Micros = at(0.50)
        p99Micros = at(0.99)
        maxMicros = sorted.last.map { Double($0) / 1000 } ?? .nan
    }
}
