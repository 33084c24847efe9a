import Foundation
import Glibc
import Logging
import Synchronization

/// Marks in a store's directory that a process may hold commits the disk does not have yet, so
/// that an open after the machine went down can tell.
///
/// A store opened with ``Durability/relaxed`` commits without syncing: until its next flush the
/// last commits are in the OS's page cache only. A process crash loses none of them (the cache
/// outlives the process); an OS crash or a power loss may, and on a file system that does not
/// keep the order of writes it may leave the data file with some pages of a commit and not
/// others. So:
///
/// - A relaxed open writes `unsynced-<boot id>-<pid>-<n>`, named after the machine's boot id
///   (`/proc/sys/kernel/random/boot_id`, new at every boot), the process and the open (`n`
///   counts this process's relaxed opens: an instance migrated away and the one opened after it
///   may both be open), synced with its directory after the store's first commit is synced and
///   before it commits anything else. A close removes it once its final flush succeeded, and
///   otherwise writes `flush failed` into it.
/// - Every open looks at the markers left (``Store/crashedWithUnsyncedCommits``). One of another
///   boot: the machine went down while a process had unsynced commits. One whose flush failed:
///   commits may be lost as well. One of this boot, met by a read-write open that no other
///   process shares: that process ended without its final flush, and its commits are in the page
///   cache but maybe not on disk; the opener syncs the data file, then removes it.
enum UnsyncedCommits {
    static let prefix = "unsynced-"
    /// What a marker holds once its process's final flush failed.
    static let flushFailedText = "flush failed"
    /// This process's relaxed opens so far (each marker's last number).
    private static let opens = Atomic<Int>(0)
    /// Names a relaxed open tries before it gives up (each taken one is another process's).
    static let maxNameAttempts = 64
    /// The markers of this process's instances still open.
    private static let openHere = Locked<Set<String>>([])

    /// Whether `path` is the marker of an instance open in this process.
    static func isOpenHere(_ path: String) -> Bool { openHere.withLock { $0.contains(path) } }

    /// A marker found in a store directory.
    struct Marker: Equatable {
        let path: String
        let bootID: String
        let pid: Int32
        /// Its process's final flush failed.
        var flushFailed = false
    }

    /// This machine's boot id, which changes at every boot, read once; nil where the kernel does
    /// not give one (then no marker is written, and none is judged).
    static let bootID: String? = {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else {
            return nil
        }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return id.isEmpty ? nil : id
    }()

    static func name(bootID: String, pid: Int32, open: Int) -> String { "\(prefix)\(bootID)-\(pid)-\(open)" }

    /// The markers in `directory` (names that do not parse are not markers).
    /// - Throws: ``StrataError/lmdb(_:)`` when the directory cannot be listed (a replica must
    ///   not be taken as sound because its markers could not be seen).
    static func markers(in directory: String) throws -> [Marker] {
        guard let dir = opendir(directory) else { throw StorePermissions.posix(errno, "list \(directory)") }
        defer { closedir(dir) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(dir) else {
                if errno != 0 { throw StorePermissions.posix(errno, "list \(directory)") }
                break
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name.hasPrefix(prefix) { names.append(name) }
        }
        return names.compactMap { name -> Marker? in
            let rest = name.dropFirst(prefix.count)
            guard let last = rest.lastIndex(of: "-"), Int(rest[rest.index(after: last)...]) != nil else { return nil }
            let head = rest[..<last]
            guard let dash = head.lastIndex(of: "-") else { return nil }
            let boot = String(head[..<dash])
            guard !boot.isEmpty, let pid = Int32(head[head.index(after: dash)...]), pid > 0 else { return nil }
            let path = directory + "/" + name
            return Marker(path: path, bootID: boot, pid: pid, flushFailed: contents(path).contains(flushFailedText))
        }.sorted { $0.path < $1.path }
    }

    /// `marker` as its file reads now (its process may have noted a failed flush since it was
    /// listed); nil when the file is gone (its process closed cleanly meanwhile).
    static func reread(_ marker: Marker) -> Marker? {
        guard access(marker.path, F_OK) == 0 else { return nil }
        var m = marker
        m.flushFailed = contents(marker.path).contains(flushFailedText)
        return m
    }

    /// Store directories whose open fails the sync made for the markers of processes that are
    /// gone, with `EIO` (tests only: a disk that fails then).
    static let failSettlingSyncForTesting = Locked<Set<String>>([])

    /// Run (tests only) by a read-write open right after it listed a store directory's markers,
    /// with the directory's path.
    static let afterListingForTesting = Locked<(@Sendable (String) -> Void)?>(nil)

    /// Writes this process's marker in `directory` (file and directory synced) and returns its
    /// path. Nil, having written nothing, where the kernel gives no boot id (a crash could not be
    /// told apart from a process exit). A marker that cannot be written completely is removed.
    static func mark(directory: String, permissions: StorePermissions) throws -> String? {
        guard let boot = bootID else { return nil }
        // A name already taken (a process of another pid namespace with this id, or an earlier
        // process with it in this boot) is never written over: the next number is tried.
        var path = ""
        for attempt in 1... {
            let instance = opens.add(1, ordering: .relaxed).newValue
            path = directory + "/" + name(bootID: boot, pid: getpid(), open: instance)
            if try permissions.createFile(path) { break }
            if attempt == maxNameAttempts {
                throw StorePermissions.posix(EEXIST, "create a marker of unsynced commits in \(directory)")
            }
        }
        do {
            try write(Array((boot + "\n").utf8), to: path)
            try StoreDirectory.syncDirectory(directory)
        } catch {
            unlink(path)
            throw error
        }
        openHere.withLock { _ = $0.insert(path) }
        return path
    }

    /// The first bytes of a marker as text: never through a link, never blocking (a FIFO
    /// planted there), only a regular file's; empty otherwise.
    private static func contents(_ path: String) -> String {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return "" }
        var buffer = [UInt8](repeating: 0, count: 128)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        return n > 0 ? String(decoding: buffer[..<n], as: UTF8.self) : ""
    }

    /// Writes `bytes` into `path`, synced; `EINTR` is retried. By default they replace its
    /// content (a marker just created, still empty); `appending`, they go after it, so that a
    /// crash in the middle leaves the marker as it was, never emptied.
    private static func write(_ bytes: [UInt8], to path: String, appending: Bool = false) throws {
        let fd = open(path, O_WRONLY | (appending ? O_APPEND : O_TRUNC) | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw StorePermissions.posix(errno, "open \(path)") }
        defer { close(fd) }
        try bytes.withUnsafeBytes { try StorePermissions.writeAll(fd, $0, path: path) }
        while fsync(fd) != 0 {
            if errno == EINTR { continue }
            throw StorePermissions.posix(errno, "fsync \(path)")
        }
    }

    /// Removes a marker (its process's commits are on disk); with `syncDirectory`, durably.
    static func clear(_ path: String, logger: Logger, syncDirectory: Bool = false) {
        openHere.withLock { _ = $0.remove(path) }
        if unlink(path) != 0 && errno != ENOENT {
            logger.warning("could not remove \(path): \(String(cString: strerror(errno)))")
            return
        }
        guard syncDirectory else { return }
        let directory = (path as NSString).deletingLastPathComponent
        do { try StoreDirectory.syncDirectory(directory) } catch {
            logger.warning("could not sync \(directory) after removing \(path): \(error)")
        }
    }

    /// Says that a sync of this process failed, for every later open to report: in `marker`, a
    /// relaxed open's, or, for a durable open (which has none while it is open), in one made
    /// now in `directory`.
    static func noteFailedSync(marker: String?, directory: String, permissions: StorePermissions, logger: Logger) {
        do {
            guard let path = try marker ?? mark(directory: directory, permissions: permissions) else { return }
            noteFailedFlush(path, logger: logger)
        } catch {
            logger.error("could not note the failed sync in \(directory): \(error)")
        }
    }

    /// Says in the marker that its process's final flush failed, for the next open to report.
    static func noteFailedFlush(_ path: String, logger: Logger) {
        openHere.withLock { _ = $0.remove(path) }
        do { try write(Array((flushFailedText + "\n").utf8), to: path, appending: true) } catch {
            logger.error("could not note the failed flush in \(path): \(error)")
        }
    }
}
