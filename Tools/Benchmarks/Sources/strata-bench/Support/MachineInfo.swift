import Foundation
import Glibc

/// What the numbers were measured on.
struct MachineInfo: Sendable {
    let cores: Int
    let memoryBytes: UInt64
    let kernel: String
    /// File system of the data directory (from `statfs`), e.g. "ext2/ext3/ext4".
    let dataFileSystem: String
    let dataFileSystemIsTmpfs: Bool
    let dataFreeBytes: UInt64

    static func current(dataDirectory: URL) -> MachineInfo {
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: &name.release) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        var fs = statfs()
        let ok = statfs(dataDirectory.path, &fs) == 0
        let type = ok ? UInt64(bitPattern: Int64(fs.f_type)) : 0
        return MachineInfo(
            cores: ProcessInfo.processInfo.activeProcessorCount,
            memoryBytes: ProcessInfo.processInfo.physicalMemory,
            kernel: release,
            dataFileSystem: ok ? fileSystemName(type) : "unknown",
            dataFileSystemIsTmpfs: type == 0x0102_1994,
            dataFreeBytes: ok ? UInt64(fs.f_bavail) * UInt64(fs.f_bsize) : 0)
    }

    private static func fileSystemName(_ magic: UInt64) -> String {
        switch magic {
        case 0xEF53: "ext2/ext3/ext4"
        case 0x0102_1994: "tmpfs"
        case 0x5846_5342: "xfs"
        case 0x9123_683E: "btrfs"
        case 0x794C_7630: "overlayfs"
        case 0x6573_5546: "fuse"
        default: String(format: "0x%llx", magic)
        }
    }
}
