import Glibc

/// Whether another process holds an fcntl lock on a file, by `F_GETLK` for a write lock of the
/// whole file: it does not report this process's own locks, and does report a process of
/// another PID namespace (with pid 0) and on file systems whose devices `/proc/locks` shows
/// otherwise (btrfs).
package enum FileLockProbe {
    /// For the file open at `fd`; nil when `F_GETLK` fails.
    package static func otherProcessHolds(_ fd: Int32) -> Bool? {
        conflictingLock(fd).map { $0.l_type != Int16(F_UNLCK) }
    }

    /// For the regular file at `path`, opened for the question and closed again; nil when it
    /// cannot be opened, is not a regular file, or the probe fails. Closing a descriptor of a
    /// file drops every fcntl lock this process holds on it: never asked of a file this process
    /// holds locks on (an environment's `lock.mdb` it has open).
    package static func otherProcessHolds(fileAt path: String) -> Bool? {
        withRegularFile(at: path) { otherProcessHolds($0) }
    }

    /// The process holding a lock on the regular file at `path` that conflicts with a write lock
    /// of the whole file (0 when it is of another PID namespace); nil when none does or the
    /// question cannot be asked (as for ``otherProcessHolds(fileAt:)``).
    package static func holder(fileAt path: String) -> Int32? {
        withRegularFile(at: path) { fd in
            conflictingLock(fd).flatMap { $0.l_type != Int16(F_UNLCK) ? max(0, $0.l_pid) : nil }
        }
    }

    /// What `F_GETLK` answers for a write lock of the whole file open at `fd` (`l_type` is
    /// `F_UNLCK` when nothing conflicts); nil when it fails.
    private static func conflictingLock(_ fd: Int32) -> flock? {
        var probe = flock(l_type: Int16(F_WRLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
        return fcntl(fd, F_GETLK, &probe) == 0 ? probe : nil
    }

    /// `body` with a read-only descriptor of the regular file at `path` (never through a link),
    /// closed after; nil when it cannot be opened or is not a regular file.
    private static func withRegularFile<R>(at path: String, _ body: (Int32) -> R?) -> R? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return body(fd)
    }
}
