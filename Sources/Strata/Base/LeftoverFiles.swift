import Foundation

/// Files a process writes aside and renames over their destination when it finishes (an
/// export's output, an import's rejects): one killed before it finished leaves its file behind.
/// The writer holds its file locked (`flock`) from its creation to its end, so a file nobody
/// holds is a leftover, once it is older than the moment between a file's creation and its lock.
package enum LeftoverFiles {
    /// How long a file nobody holds must not have been written to be taken for a leftover.
    package static let age: TimeInterval = 60

    /// Removes the regular files of `directory` whose names `isPartial` accepts, that no process
    /// holds locked and that were not written for ``age``. Best effort: what cannot be opened,
    /// locked or removed stays.
    package static func remove(in directory: String, where isPartial: (String) -> Bool) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where isPartial(name) {
            let candidate = directory + "/" + name
            let fd = open(candidate, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { _ = close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG,
                  Date().timeIntervalSince1970 - TimeInterval(st.st_mtim.tv_sec) > age,
                  flock(fd, LOCK_EX | LOCK_NB) == 0 else { continue }
            unlink(candidate)
        }
    }
}
