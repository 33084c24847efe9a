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
            guard let next = target(ofLink: current) else { return path }
            current = next
        }
        return path
    }

    /// The first symbolic link on `path`'s last component (following the chain) that the
    /// kernel's `fs.protected_symlinks` rule would not let this process follow: one in a sticky,
    /// world-writable directory (`/tmp`) owned neither by this process's user nor by the
    /// directory's owner. Nil when every link may be followed. An output written through such a
    /// link (planted in `/tmp` by another user, pointing at a file of this one) is refused, as the
    /// shell's `>` is refused; storectl resolves links itself, so the kernel's rule did not apply.
    package static func unfollowableLink(_ path: String) -> String? {
        var current = path
        for _ in 0..<40 {
            var st = stat()
            guard lstat(current, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK else { return nil }
            let parent = (current as NSString).deletingLastPathComponent
            var dir = stat()
            if stat(parent.isEmpty ? "." : parent, &dir) == 0, dir.st_mode & S_ISVTX != 0, dir.st_mode & S_IWOTH != 0,
               st.st_uid != geteuid(), st.st_uid != dir.st_uid {
                return current
            }
            guard let next = target(ofLink: current) else { return nil }
            current = next
        }
        return nil
    }

    /// Where the symbolic link `link` points, as a path (a relative target taken from the
    /// link's directory); nil when it cannot be read.
    private static func target(ofLink link: String) -> String? {
        guard let next = try? FileManager.default.destinationOfSymbolicLink(atPath: link) else { return nil }
        return next.hasPrefix("/") ? next
            : ((link as NSString).deletingLastPathComponent as NSString).appendingPathComponent(next)
    }

    /// The descriptor of this process that `path` names, itself or through the symbolic links on
    /// its last component: `/dev/stdout` (1), `/dev/stderr` (2), `/dev/stdin` (0), `/dev/fd/N`,
    /// `/proc/self/fd/N`, `/proc/PID/fd/N` of this process. Nil for any other path. Such a path
    /// is written through a duplicate of that descriptor, which shares its offset and flags: a
    /// shell's `>> log` keeps what the file held, where opening the path again (whose link leads
    /// to the file itself) would write from its start, and a file renamed over it would replace
    /// the file the shell opened.
    package static func descriptor(_ path: String) -> Int32? {
        var current = path
        for _ in 0..<40 {
            if let n = namedDescriptor(current) { return n }
            var st = stat()
            guard lstat(current, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK,
                  let next = target(ofLink: current) else { return nil }
            current = next
        }
        return nil
    }

    /// The descriptor `path` names by its text alone (``descriptor(_:)``), or nil.
    private static func namedDescriptor(_ path: String) -> Int32? {
        switch path {
        case "/dev/stdin": return 0
        case "/dev/stdout": return 1
        case "/dev/stderr": return 2
        default: break
        }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true)
        let number: Substring
        if parts.count == 3, parts[0] == "dev", parts[1] == "fd" {
            number = parts[2]
        } else if parts.count == 4, parts[0] == "proc", parts[2] == "fd",
                  parts[1] == "self" || parts[1] == "thread-self" || parts[1] == Substring(String(getpid())) {
            number = parts[3]
        } else {
            return nil
        }
        guard number.allSatisfy({ ("0"..."9").contains($0) }), let n = Int32(number) else { return nil }
        return n
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
