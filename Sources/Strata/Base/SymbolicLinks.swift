import Foundation

/// Where a write to a path goes.
package enum SymbolicLinks {
    /// `path` with every symbolic link on its last component followed, as far as they lead
    /// (at most 40, as the kernel allows): a dangling link gives the path it points at, which a
    /// write through it would create. A path that is no link is returned as it is.
    package static func followed(_ path: String) -> String {
        var current = path
        for _ in 0..<40 {
            var st = stat()
            guard lstat(current, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK,
                  let next = try? FileManager.default.destinationOfSymbolicLink(atPath: current) else { return current }
            current = next.hasPrefix("/") ? next
                : URL(fileURLWithPath: current).deletingLastPathComponent().appendingPathComponent(next).path
        }
        return current
    }
}
