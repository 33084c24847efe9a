import Foundation

/// This process's memory figures from `/proc/self/status`.
enum ProcessMemory {
    /// Peak resident set size (`VmHWM`), in bytes; nil when the kernel does not report it.
    static func peakResidentBytes() -> Int? { field("VmHWM:") }

    /// Current resident set size (`VmRSS`), in bytes.
    static func residentBytes() -> Int? { field("VmRSS:") }

    /// Current anonymous resident memory (`RssAnon`: heap, including LMDB's dirty-page buffers).
    static func residentAnonymousBytes() -> Int? { field("RssAnon:") }

    /// Current file-backed resident memory (`RssFile`: mostly pages of the memory-mapped store).
    static func residentFileBytes() -> Int? { field("RssFile:") }

    private static func field(_ name: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(name) {
            // "VmHWM:     123456 kB"
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count >= 2, let kb = Int(parts[1]) else { return nil }
            return kb * 1024
        }
        return nil
    }
}
