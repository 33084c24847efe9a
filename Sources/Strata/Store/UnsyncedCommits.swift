import Foundation
import Glibc

/// Marks in a store's directory that a process may hold commits the disk does not have yet, so
/// that an open after the machine went down can tell.
///
/// A store opened with ``Durability/relaxed`` commits without syncing: until its next flush the
/// last commits are in the OS's page cache only. A process crash loses none of them (the cache
/// outlives the process); an OS crash or a power loss may, and on a file system that does not
/// keep the order of writes it may leave the data file with some pages of a commit and not
/// others. So:
///
/// - A relaxed open writes `unsynced-<boot id>-<pid>`, named after the machine's boot id
///   (`/proc/sys/kernel/random/boot_id`, new at every boot) and the process, synced with its
///   directory before the store commits anything. A close removes it once its final flush
///   succeeded.
/// - Every read-write open looks at the markers left. One with another boot id: the machine went
///   down while a process had unsynced commits (``Store/unsyncedCommitsAtCrash``). One of this
///   boot whose process is gone: that process ended without its final flush, and its commits are
///   in the page cache but maybe not on disk; the opener syncs the data file, then removes it.
enum UnsyncedCommits {
    static let prefix = "unsynced-"

    /// A marker found in a store directory.
    struct Marker: Equatable {
        let path: String
        let bootID: String
        let pid: Int32
    }

    /// This machine's boot id, which changes at every boot; nil where the kernel does not give one.
    static func currentBootID() -> String? {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else {
            return nil
        }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return id.isEmpty ? nil : id
    }

    static func name(bootID: String, pid: Int32) -> String { "\(prefix)\(bootID)-\(pid)" }

    /// The markers in `directory` (names that do not parse are not markers).
    static func markers(in directory: String) -> [Marker] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.compactMap { name -> Marker? in
            guard name.hasPrefix(prefix) else { return nil }
            let rest = name.dropFirst(prefix.count)
            guard let dash = rest.lastIndex(of: "-") else { return nil }
            let boot = String(rest[..<dash])
            guard !boot.isEmpty, let pid = Int32(rest[rest.index(after: dash)...]), pid > 0 else { return nil }
            return Marker(path: directory + "/" + name, bootID: boot, pid: pid)
        }.sorted { $0.path < $1.path }
    }

    /// Writes this process's marker in `directory` (file and directory synced) and returns its
    /// path. Nil, having written nothing, where the kernel gives no boot id (a crash could not be
    /// told apart from a process exit).
    static func mark(directory: String, permissions: StorePermissions) throws -> String? {
        guard let boot = currentBootID() else { return nil }
        let path = directory + "/" + name(bootID: boot, pid: getpid())
        do {
            _ = try permissions.createFile(path)
            let fd = open(path, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw LMDBError(code: errno, operation: "open \(path)") }
            defer { close(fd) }
            let bytes = Array((boot + "\n").utf8)
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written == bytes.count else {
                throw LMDBError(code: written < 0 ? errno : EIO, operation: "write \(path)")
            }
            guard fsync(fd) == 0 else { throw LMDBError(code: errno, operation: "fsync \(path)") }
        } catch let e as LMDBError {
            throw StrataError.lmdb(e)
        }
        try StoreDirectory.syncDirectory(directory)
        return path
    }

    /// Removes a marker (its process's commits are on disk).
    static func clear(_ path: String) {
        unlink(path)
    }

    /// Whether process `pid` still runs (a process of another user counts as running).
    static func isRunning(_ pid: Int32) -> Bool {
        kill(pid, 0) == 0 || errno == EPERM
    }
}
