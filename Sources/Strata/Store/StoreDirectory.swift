import Foundation
import Glibc
import Logging

/// The layout of a store directory and the lock every process holds on it.
///
/// ```
/// STORE/
///   strata.lock           every process with the store open holds a shared fcntl lock on it
///   current -> gen-…0001  symbolic link to the live generation (switched atomically)
///   gen-…0001/            one LMDB environment: data.mdb, lock.mdb
/// ```
///
/// Compaction and migration build a new generation beside the live one and switch `current`
/// with one `rename(2)`: a crash leaves the old generation or the new one, never a mix. They
/// refuse to switch while another process has the store open (it would go on using the old
/// generation); the shared lock is how they know, and taking it exclusively for the switch keeps
/// new openers out until `current` points at the new generation.
package struct StoreDirectory {
    let path: String
    /// The modes of the directories made here and the checks of those found
    /// (``StorePermissions``).
    var permissions = StorePermissions.private

    static let currentLink = "current"
    static let lockFile = "strata.lock"
    static let generationPrefix = "gen-"
    /// Present while a new store is being created: from before `current` first names its
    /// generation until the store's first commit (its metadata) is durable.
    static let creationMarker = "strata.creating"

    var currentPath: String { path + "/" + Self.currentLink }
    var lockPath: String { path + "/" + Self.lockFile }
    var creationMarkerPath: String { path + "/" + Self.creationMarker }

    /// Whether the store's creation started and its first commit is not known to be durable:
    /// its generation holds no data of a store yet, and an open that may create the store
    /// creates it there (an empty `data.mdb` is otherwise a store whose data was lost).
    var creationUnfinished: Bool {
        var st = stat()
        return lstat(creationMarkerPath, &st) == 0
    }

    /// Removes the creation marker once the store's first commit is durable, and syncs the
    /// directory. A failure leaves the marker: the next open that may create the store finds
    /// the metadata and removes it then.
    func finishCreation() throws {
        guard unlink(creationMarkerPath) == 0 || errno == ENOENT else {
            throw posixError(code: errno, "unlink \(creationMarkerPath)")
        }
        try syncDirectory()
    }

    static func generationName(_ n: UInt64) -> String {
        let hex = String(n, radix: 16)
        return generationPrefix + String(repeating: "0", count: max(0, 16 - hex.count)) + hex
    }

    /// The live generation's directory name, or nil when `current` does not exist.
    /// - Throws: ``StrataError/notAStore(path:reason:)`` when `current` exists but is not a
    ///   symbolic link or cannot be read: never taken for a missing one (a new store would then
    ///   be created over this one).
    func currentGeneration() throws -> String? {
        var st = stat()
        if lstat(currentPath, &st) != 0 {
            let code = errno
            if code == ENOENT { return nil }
            // A directory this process may not read is not "not a store": say what was refused.
            if code == EACCES || code == EPERM {
                throw StrataError.lmdb(LMDBError(code: code, operation: "reading \(currentPath) (the store directory " +
                                                                       "cannot be read by this process)"))
            }
            throw StrataError.notAStore(path: path, reason: "cannot read `current`: \(String(cString: strerror(code)))")
        }
        guard (st.st_mode & S_IFMT) == S_IFLNK else {
            throw StrataError.notAStore(path: path,
                                        reason: "`current` is not a symbolic link to a generation; nothing was changed")
        }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(currentPath, &buffer, buffer.count - 1)
        guard n >= 0 else {
            let code = errno
            throw StrataError.notAStore(path: path, reason: "cannot read `current`: \(String(cString: strerror(code)))")
        }
        let target = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // Strata writes the bare name of a generation of this directory. A link with a directory
        // part (`../other/gen-…`) names another directory's generation, which the store's own
        // of that name would silently stand in for: refused as it is.
        guard !target.contains("/") else {
            throw StrataError.notAStore(path: path, reason: "`current` points at \(EchoedText.shown(target)), not at a " +
                                                            "generation directory of this store (a bare gen-… name); " +
                                                            "nothing was changed")
        }
        return target
    }

    /// The size of generation `name`'s `data.mdb`, nil when it has none.
    func dataFileSize(_ name: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path + "/" + name + "/data.mdb")[.size] as? Int) ?? nil
    }

    /// Throws ``StrataError/notAStore(path:reason:)`` unless `live` (the target of `current`) is
    /// a generation directory of this store: a dangling or foreign link is reported, never
    /// repaired, and nothing is removed.
    func checkLiveGeneration(_ live: String) throws {
        var isDirectory: ObjCBool = false
        let present = generationNames()
        guard Self.generationNumber(live) != nil,
              FileManager.default.fileExists(atPath: path + "/" + live, isDirectory: &isDirectory),
              isDirectory.boolValue else {
            let found = present.isEmpty
                ? "no generation directory is here" : "generation directories here: \(present.joined(separator: ", "))"
            throw StrataError.notAStore(path: path, reason: "`current` points at \(live), which is not a generation " +
                                                            "directory of this store (\(found)); nothing was changed")
        }
    }

    /// The generation directories present, in name order.
    func generationNames() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter { Self.generationNumber($0) != nil }
            .sorted()
    }

    /// The generation directories whose `data.mdb` is not empty, in name order.
    func generationsHoldingData() -> [String] {
        generationNames().filter { (dataFileSize($0) ?? 0) > 0 }
    }

    /// The largest generation number made (numbers count up from the live one).
    static let largestGeneration = UInt64.max - 1

    /// The number of a generation directory name.
    static func generationNumber(_ name: String) -> UInt64? {
        guard name.hasPrefix(generationPrefix) else { return nil }
        return UInt64(name.dropFirst(generationPrefix.count), radix: 16)
    }

    /// Creates the first generation and points `current` at it. A first generation left empty by
    /// an interrupted first open (or being made by another process opening the new store at the
    /// same moment) is used as it is, once checked (``StorePermissions/checkDirectory(_:store:)``).
    func createFirstGeneration() throws -> String {
        let name = Self.generationName(1)
        do {
            try permissions.makeDirectory(path + "/" + name)
        } catch StrataError.lmdb(let e) where e.code == EEXIST {
            try permissions.checkDirectory(path + "/" + name, store: path)
            // A replica's making killed while it copied its snapshot in left this behind (never a
            // store's data: the copy is renamed to `data.mdb` once whole): as large as the
            // snapshot, and nothing else would ever remove it.
            unlink(path + "/" + name + "/" + Self.partialSnapshotName)
        }
        // Made durable by the switch's directory sync: a creation stopped from here on (a full
        // disk, a kill) is finished by the next open that may create the store.
        try permissions.createFile(creationMarkerPath)
        // A new store holds no data yet: a failed sync is an error here.
        if let notSynced = try switchCurrent(to: name) { throw notSynced }
        return name
    }

    /// The name a replica's snapshot is copied into its first generation under, until whole.
    static let partialSnapshotName = "data.mdb.partial"

    /// A new, empty generation directory numbered after the live one.
    func newGeneration() throws -> String {
        let live = try currentGeneration().flatMap(Self.generationNumber) ?? 0
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        let highest = max(live, names.compactMap(Self.generationNumber).max() ?? 0)
        guard highest < Self.largestGeneration else {
            throw StrataError.notAStore(path: path, reason: "generation number \(highest) leaves no room for a new generation")
        }
        let name = Self.generationName(highest + 1)
        try permissions.makeDirectory(path + "/" + name)
        return name
    }

    /// Points `current` at `name` atomically (a new link renamed over the old one), then syncs
    /// the directory so the switch is durable.
    ///
    /// Throws only when the switch did not happen (`current` unchanged). Once the rename is
    /// done, `current` names `name` whatever follows: a failed sync of the directory is returned,
    /// not thrown, so that no caller takes the switch for undone and removes the generation
    /// `current` now points at.
    @discardableResult
    func switchCurrent(to name: String) throws -> StrataError? {
        // The generation's own entry in this directory (made before its build) is durable before
        // the link names it: a crash after the rename must not keep the link without the entry.
        try syncDirectory()
        let temporary = path + "/.current-\(getpid())"
        unlink(temporary)
        guard symlink(name, temporary) == 0 else { throw posixError(code: errno, "symlink \(temporary)") }
        guard rename(temporary, currentPath) == 0 else {
            let e = posixError(code: errno, "rename \(temporary) → \(currentPath)")
            unlink(temporary)
            throw e
        }
        do {
            if Self.failSwitchSyncForTesting.withLock({ $0.contains(path) }) {
                throw StrataError.lmdb(LMDBError(code: EIO, operation: "fsync \(path)"))
            }
            try syncDirectory()
            return nil
        } catch let e as StrataError {
            return e
        }
    }

    /// Directories whose sync after a switch's rename fails with `EIO` (tests only), while their
    /// other syncs succeed.
    static let failSwitchSyncForTesting = Locked<Set<String>>([])

    /// Directories whose syncs fail with `EIO` (tests only: a disk that fails under a switch;
    /// a set, so that tests running in parallel do not undo each other's).
    static let failDirectorySyncForTesting = Locked<Set<String>>([])

    /// fsyncs this directory (its entries: a renamed link, a created file).
    func syncDirectory() throws { try Self.syncDirectory(path) }

    /// fsyncs the directory at `path`, retrying when interrupted.
    package static func syncDirectory(_ path: String) throws {
        if failDirectorySyncForTesting.withLock({ $0.contains(path) }) {
            throw StrataError.lmdb(LMDBError(code: EIO, operation: "fsync \(path)"))
        }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw StrataError.lmdb(LMDBError(code: errno, operation: "open \(path)")) }
        defer { close(fd) }
        while fsync(fd) != 0 {
            let code = errno
            if code == EINTR { continue }
            throw StrataError.lmdb(LMDBError(code: code, operation: "fsync \(path)"))
        }
    }

    /// Removes generation directories other than the live one (left by an interrupted
    /// compaction or migration, or by a finished one whose old generation was still in use).
    func removeStaleGenerations(except keep: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        for n in names where (Self.generationNumber(n) != nil && n != keep) || n.hasPrefix(".current-")
            || n.hasPrefix(Self.retiredPrefix)
            || n.hasPrefix(Self.scratchPrefix) {
            // An environment some process still has open stays: a generation a compaction or
            // migration is building, a scratch of a verify or migration, in a process whose
            // `strata.lock` was deleted, which the open does not see (liblmdb's lock on the
            // environment's `lock.mdb` shows it). This process has none of them open.
            let leftover = path + "/" + n
            let inUse = n.hasPrefix(Self.scratchPrefix) ? !ScratchDirectories.isAbandoned(leftover)
                : !n.hasPrefix(".current-") && !ScratchDirectories.isUnused(leftover)
            if inUse { continue }
            Self.removeLeftover(leftover, store: path)
        }
    }

    /// Removes `leftover` (a generation or scratch directory no longer part of the store), with a
    /// warning when it cannot be removed (its files not the process's to delete): it stayed,
    /// however many compactions followed, and nothing said so. Returns false when it warned.
    ///
    /// Another remover may be at work on the same directory (a retired generation's background
    /// deletion and the next open's sweep, in one process or two): each then fails on the files
    /// the other took first while the directory is still there. So a failure is tried again for
    /// as long as the directory keeps losing entries between tries (someone is removing it);
    /// only one that makes no progress is reported (a `cluster reset` warned of a directory that
    /// was gone a moment later).
    @discardableResult
    static func removeLeftover(_ leftover: String, store: String) -> Bool {
        var entriesBefore = Int.max
        var stalled = 0
        while true {
            do {
                try FileManager.default.removeItem(atPath: leftover)
                return true
            } catch {
                // Removed by another remover meanwhile: nothing to say.
                guard FileManager.default.fileExists(atPath: leftover) else { return true }
                let entries = entryCount(leftover)
                // Three tries in a row without progress (the other remover may be descheduled for
                // a while on a loaded machine): what stays is not being removed by anyone.
                stalled = entries < entriesBefore ? 0 : stalled + 1
                guard stalled < 3 else {
                    warnLeftover(leftover, store: store, error)
                    return false
                }
                entriesBefore = min(entriesBefore, entries)
                usleep(useconds_t(10_000 << stalled))
            }
        }
    }

    /// The files and directories under `directory` (those that can be listed).
    private static func entryCount(_ directory: String) -> Int {
        guard let walk = FileManager.default.enumerator(atPath: directory) else { return 0 }
        var n = 0
        while walk.nextObject() != nil { n += 1 }
        return n
    }

    private static func warnLeftover(_ leftover: String, store: String, _ error: Error) {
        var logger = Logger(label: "strata.store")
        logger[metadataKey: "store"] = "\(store)"
        logger.warning("""
            could not remove \(leftover), no longer part of the store (\(FileSystemReason.describe(error))): \
            the next read-write open tries again; remove it by hand to get its space back
            """)
    }

    /// Names of scratch environments (verify, migration) inside the store directory.
    static let scratchPrefix = ".scratch-"

    /// Names of generation directories being deleted in the background.
    static let retiredPrefix = ".retired-"

    /// Deletes a closed generation directory without making the caller wait for the file
    /// system to free its blocks (unlinking a large data file takes tens of milliseconds per
    /// 100 MB on ext4): it is renamed out of the generation namespace at once, then removed on a
    /// background queue, in `group` (a store's close waits for its own, see
    /// ``ReplacedEnvironments``); a process that ends first leaves it for the next open to remove.
    static func retire(generation dir: String, group: DispatchGroup? = nil) {
        let url = URL(fileURLWithPath: dir)
        let retired = url.deletingLastPathComponent()
            .appendingPathComponent(retiredPrefix + url.lastPathComponent + "-" + UUID().uuidString).path
        guard rename(dir, retired) == 0 else {
            try? FileManager.default.removeItem(atPath: dir)
            return
        }
        let store = url.deletingLastPathComponent().path
        DispatchQueue.global(qos: .utility).async(group: group ?? DispatchGroup()) {
            removeLeftover(retired, store: store)
        }
    }

    /// `code` first, so that call sites read `errno` before building the message (which
    /// allocates, and may change `errno`).
    func posixError(code: Int32, _ what: String) -> StrataError {
        .lmdb(LMDBError(code: code, operation: what))
    }
}
