import Foundation

/// Where a write to a path goes.
package enum SymbolicLinks {
    /// `path` with every symbolic link on its last component followed, as far as they lead
    /// (at most 40, as the kernel allows): a dangling link gives the path it points at, which a
    /// write through it would create. A path that is no link, a chain that loops, or a link whose
    /// target is not a path (`/proc/self/fd/1` of a pipe reads `pipe:[N]`) gives `path` as it is:
    /// callers open such a path directly (see ``isSpecial(_:)``).
    package static func followed(_ path: String) -> String {
        var current = path
        for _ in 0..<40 {
            var st = stat()
            guard lstat(current, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK else { return current }
            guard let next = try? FileManager.default.destinationOfSymbolicLink(atPath: current) else { return path }
            current = next.hasPrefix("/") ? next
                : ((current as NSString).deletingLastPathComponent as NSString).appendingPathComponent(next)
        }
        return path
    }

    /// Whether `path` (its links followed by the kernel) is something other than a regular file
    /// or a directory: a device, a pipe or a socket (`/dev/stdout`), written in place, never
    /// replaced by a renamed file.
    package static func isSpecial(_ path: String) -> Bool {
        var st = stat()
        guard stat(path, &st) == 0 else { return false }
        let kind = st.st_mode & S_IFMT
        return kind != S_IFREG && kind != S_IFDIR
    }
}
