import Foundation
import Logging
import StrataLMDB

/// The scratch environments of migration and `verify --rebuild` (`.scratch-` and a UUID, in a
/// store directory or the temporary directory): which are this process's, and which a killed
/// process left. Made by `StateRebuilder.scratch(sizeHint:storeDirectory:)`.
enum ScratchDirectories {
    /// Notes a scratch environment of this process before its directory is made.
    static func noteOpen(_ path: String) { openHere.withLock { _ = $0.insert(path) } }

    /// Forgets a scratch environment of this process once its directory is removed.
    static func noteRemoved(_ path: String) { openHere.withLock { _ = $0.remove(path) } }

    /// The scratch environments of this process not yet removed (liblmdb's locks on them are
    /// this process's, which `F_GETLK` does not report).
    private static let openHere = Locked<Set<String>>([])

    /// How old an unlocked scratch directory must be to be taken for abandoned: another process
    /// may be between creating its `lock.mdb` and locking it.
    static let abandonedAge: Double = 60

    /// Removes the scratch environments in `parent` (a store directory, or the temporary
    /// directory when not `inStore`) that no process has open: named `.scratch-` and a UUID, as
    /// `StateRebuilder.scratch(sizeHint:storeDirectory:)` names them, owned by this user, not this process's,
    /// with a `lock.mdb` that no process holds a lock on (liblmdb read-locks it in every process
    /// with the environment open, and the kernel drops the lock when the process ends, however
    /// it ends) or none at all, last changed over ``abandonedAge`` seconds ago. What is not certainly
    /// an abandoned scratch stays.
    static func removeAbandoned(in parent: String, inStore: Bool = true) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? []
        let now = Date().timeIntervalSince1970
        for name in names where isName(name) {
            let dir = parent + "/" + name
            if openHere.withLock({ $0.contains(dir) }) { continue }
            var st = stat()
            guard lstat(dir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == geteuid(),
                  now - Double(st.st_mtim.tv_sec) > abandonedAge, isUnused(dir) else { continue }
            if inStore {
                StoreDirectory.removeLeftover(dir, store: parent)
            } else if (try? FileManager.default.removeItem(atPath: dir)) == nil, FileManager.default.fileExists(atPath: dir) {
                Logger(label: "strata.store").warning(
                    "could not remove \(dir), a scratch environment that a killed verify or migration left: remove it by hand to get its space back")
            }
        }
    }

    /// Whether `name` is a scratch environment's: ``StoreDirectory/scratchPrefix`` and a UUID.
    static func isName(_ name: String) -> Bool {
        name.hasPrefix(StoreDirectory.scratchPrefix)
            && UUID(uuidString: String(name.dropFirst(StoreDirectory.scratchPrefix.count))) != nil
    }

    /// Whether the scratch environment at `dir` is certainly not in use (see
    /// ``removeAbandoned(in:inStore:)``), whatever its age: for a store's open, which
    /// sweeps its directory when no other process is seen sharing the store (one whose
    /// `strata.lock` was deleted is not seen).
    static func isAbandoned(_ dir: String) -> Bool {
        !openHere.withLock { $0.contains(dir) } && isUnused(dir)
    }

    /// Whether no other process has the environment at `dir` open: its `lock.mdb` is unlocked
    /// (``FileLockProbe``), or there is none (its process stopped before liblmdb made it). Never
    /// asked of an environment this process has open: the probe closes its descriptor, which
    /// would drop this process's own locks on the file.
    static func isUnused(_ dir: String) -> Bool {
        var st = stat()
        if lstat(dir + "/lock.mdb", &st) != 0 && errno == ENOENT { return true }
        return FileLockProbe.otherProcessHolds(fileAt: dir + "/lock.mdb") == false
    }
}
