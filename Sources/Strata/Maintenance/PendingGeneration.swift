import Foundation
import Glibc

/// A new generation being built beside the live one (compaction, migration). Until
/// ``Store/switchGeneration(_:lock:)`` switches `current` to it, ``abandon()`` (or a crash,
/// cleaned up at the next open) removes it.
final class PendingGeneration: Sendable {
    let name: String
    let env: LMDBEnvironment
    /// The generation's directory, held open (`O_DIRECTORY`) until the generation goes, so that
    /// its inode cannot be reused and ``abandon()`` removes this directory and not another one
    /// given the same name since: after a `close()` from a compaction's progress callback, the
    /// store can be opened again (which removes unfinished generations) and compacted into a
    /// new generation of the same number before the first compaction has abandoned its own.
    /// -1 if it could not be opened (then ``abandon()`` leaves the directory to the next open).
    private let directoryFD: Int32

    init(name: String, env: LMDBEnvironment) {
        self.name = name
        self.env = env
        directoryFD = open(env.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    }

    deinit { if directoryFD >= 0 { Glibc.close(directoryFD) } }

    /// Closes and removes the unfinished generation (unless its directory is gone or is another
    /// one by now; the check and the removal are microseconds apart).
    /// Without the held directory (it could not be opened) the directory is left for the next
    /// open of the store, which removes unfinished generations.
    func abandon() {
        env.close()
        var mine = stat(), there = stat()
        guard directoryFD >= 0, fstat(directoryFD, &mine) == 0, stat(env.path, &there) == 0,
              mine.st_dev == there.st_dev, mine.st_ino == there.st_ino else { return }
        try? FileManager.default.removeItem(atPath: env.path)
    }
}

extension PendingGeneration {
    /// The bulk copy is over: later writes into the generation (a catch-up's) keep their pages
    /// cached (see ``LMDBEnvironment/isBulkBuild``).
    func endBulkBuild() { env.isBulkBuild.store(false, ordering: .releasing) }
}
