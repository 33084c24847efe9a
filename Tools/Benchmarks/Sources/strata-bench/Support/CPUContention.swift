import Foundation
import Glibc

/// How much CPU other processes used while the benchmark ran: the machine's busy time (from
/// `/proc/stat`) minus this process's and its children's (`getrusage`). On a 2-core machine a
/// concurrent build can halve a figure; this makes such a run visible instead of silently wrong.
struct CPUContention: Sendable {
    private let machineBusySeconds: Double
    private let ownSeconds: Double
    private let wallNanos: UInt64

    init() {
        machineBusySeconds = Self.machineBusy()
        ownSeconds = Self.own()
        wallNanos = MonotonicClock.nanoseconds()
    }

    /// CPU-seconds used by other processes since `init`, and the wall-clock seconds elapsed.
    func othersSinceStart() -> (otherCPUSeconds: Double, wallSeconds: Double) {
        let other = (Self.machineBusy() - machineBusySeconds) - (Self.own() - ownSeconds)
        return (max(0, other), Double(MonotonicClock.nanoseconds() - wallNanos) / 1e9)
    }

    /// Busy CPU-seconds of the whole machine since boot (user, nice, system, irq, softirq, steal).
    private static func machineBusy() -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return 0 }
        let f = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard f.count >= 8 else { return 0 }
        let ticks = f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    private static func own() -> Double {
        func seconds(_ who: Int32) -> Double {
            var u = rusage()
            getrusage(__rusage_who_t(who), &u)
            return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
        }
        return seconds(RUSAGE_SELF.rawValue) + seconds(RUSAGE_CHILDREN.rawValue)
    }
}
