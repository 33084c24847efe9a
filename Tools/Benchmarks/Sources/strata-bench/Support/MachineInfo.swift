import Foundation
import Glibc

/// What the numbers were measured on.
struct MachineInfo: Sendable {
    let cores: Int
    let memoryBytes: UInt64
    let kernel: String
    /// File system type of the data directory's mount (from `/proc/self/mounts`), e.g. "ext4".
    let dataFileSystem: String
    let dataDevice: String
    let dataFreeBytes: UInt64

    var dataFileSystemIsTmpfs: Bool { dataFileSystem == "tmpfs" || dataFileSystem == "ramfs" }

    static func current(dataDirectory: URL) -> MachineInfo {
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: &name.release) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        var vfs = statvfs()
        let free = statvfs(dataDirectory.path, &vfs) == 0 ? UInt64(vfs.f_bavail) * UInt64(vfs.f_frsize) : 0
        let mount = mountOf(dataDirectory.resolvingSymlinksInPath().path)
        return MachineInfo(
            cores: ProcessInfo.processInfo.activeProcessorCount,
            memoryBytes: ProcessInfo.processInfo.physicalMemory,
            kernel: release,
            dataFileSystem: mount?.type ?? "unknown",
            dataDevice: mount?.device ?? "unknown",
            dataFreeBytes: free)
    }

    /// The mount holding `path`: the longest mount point that is a prefix of it.
    private static func mountOf(_ path: String) -> (device: String, type: String)? {
        guard let mounts = try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8) else { return nil }
        var best: (point: String, device: String, type: String)?
        for line in mounts.split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count >= 3 else { continue }
            let point = String(f[1]).replacingOccurrences(of: "\\040", with: " ")
            let inside = point == "/" || path == point || path.hasPrefix(point + "/")
            if inside, point.count >= (best?.point.count ?? -1) { best = (point, String(f[0]), String(f[2])) }
        }
        return best.map { ($0.device, $0.type) }
    }
}
