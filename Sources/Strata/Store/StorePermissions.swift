import Foundation
import Glibc

/// The modes of what Strata creates in a store, and the checks it makes before it trusts what
/// is there.
///
/// Private (the default): directories 0700, files 0600. Shared with the group
/// (``StoreConfiguration/sharedWithGroup``): directories 0770, files 0660, so that members of
/// the directory's group can open the store as its owner does (LMDB's readers write their slot
/// in `lock.mdb`, so reading needs write access to it). The modes are set explicitly with
/// `fchmod` after creating and checked with `fstat`, whatever the process's umask. A
/// set-group-ID bit a new directory inherits from its parent is kept (it makes everything
/// created inside take the directory's group).
///
/// Files Strata opens itself are opened with `O_NOFOLLOW | O_CLOEXEC`; the files LMDB opens
/// (`data.mdb`, `lock.mdb`) are checked with `lstat` to be regular files, not symbolic links,
/// right before LMDB opens them, and are created by Strata first (`O_EXCL | O_NOFOLLOW`) when
/// missing. A store whose directories others may write (or the group, unless shared with it) is
/// refused: whoever may write a directory may replace the files in it.
struct StorePermissions: Sendable, Equatable {
    let sharedWithGroup: Bool

    static let `private` = StorePermissions(sharedWithGroup: false)

    init(sharedWithGroup: Bool) { self.sharedWithGroup = sharedWithGroup }
    init(_ configuration: StoreConfiguration) { sharedWithGroup = configuration.sharedWithGroup }

    var directoryMode: mode_t { sharedWithGroup ? 0o770 : 0o700 }
    var fileMode: mode_t { sharedWithGroup ? 0o660 : 0o600 }

    /// Creates the directory `path` (its parent must exist) with ``directoryMode`` exactly.
    /// - Throws: ``StrataError/lmdb(_:)`` with the `errno` of the failing call (`EEXIST` when
    ///   something is there already); a directory made but whose mode cannot be set is removed.
    func makeDirectory(_ path: String) throws {
        guard mkdir(path, directoryMode) == 0 else { throw Self.posix(errno, "mkdir \(path)") }
        do {
            try setMode(ofDirectory: path)
        } catch {
            // The directory just made, empty: the error thrown says what went wrong.
            _ = rmdir(path)
            throw error
        }
    }

    /// Sets the mode of the directory `path` (not followed if it is a link) to
    /// ``directoryMode``, keeping a set-group-ID bit, and checks it took.
    func setMode(ofDirectory path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw Self.posix(errno, "open \(path)") }
        // A directory's descriptor: nothing written through it.
        defer { _ = close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw Self.posix(errno, "fstat \(path)") }
        try Self.setMode(fd, directoryMode | (st.st_mode & S_ISGID), path: path)
    }

    /// Creates the regular file `path` with ``fileMode`` exactly; false (nothing done) when
    /// something named `path` exists already (a symbolic link included: never followed).
    @discardableResult
    func createFile(_ path: String) throws -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, fileMode)
        guard fd >= 0 else {
            let code = errno
            if code == EEXIST { return false }
            throw Self.posix(code, "create \(path)")
        }
        // Nothing written through it: the file stays empty.
        defer { _ = close(fd) }
        do {
            try Self.setMode(fd, fileMode, path: path)
        } catch {
            // The file just made, empty: the error thrown says what went wrong.
            _ = unlink(path)
            throw error
        }
        return true
    }

    /// `fchmod(fd, mode)`, then `fstat` to check the permission bits are `mode`'s.
    static func setMode(_ fd: Int32, _ mode: mode_t, path: String) throws {
        guard fchmod(fd, mode) == 0 else { throw Self.posix(errno, "chmod \(path)") }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw Self.posix(errno, "fstat \(path)") }
        guard st.st_mode & 0o7777 == mode else {
            throw StrataError.insecure(
                path: path, reason: "its mode is \(Self.octal(st.st_mode & 0o7777)) after setting \(Self.octal(mode))")
        }
    }

    /// Throws ``StrataError/insecure(path:reason:)`` when `path` is not a directory (a symbolic
    /// link included), or others may write it, or its group may write it and the store is not
    /// shared with the group. `store` is the store directory (for the message).
    func checkDirectory(_ path: String, store: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else { throw Self.posix(errno, "lstat \(path)") }
        let kind = st.st_mode & S_IFMT
        if kind == S_IFLNK {
            throw StrataError.insecure(
                path: store, reason: "\(path) is a symbolic link; a store's directories must be real directories")
        }
        guard kind == S_IFDIR else { throw StrataError.notAStore(path: store, reason: "\(path) is not a directory") }
        try checkWriters(st.st_mode & 0o7777, of: path, named: "the directory \(path)",
                         risk: "who could replace the store's files", store: store)
    }

    /// Throws ``StrataError/insecure(path:reason:)`` when `mode` (of `path`, called `name` in
    /// the message) lets others write, or the group when the store is not shared with it.
    private func checkWriters(_ mode: mode_t, of path: String, named name: String, risk: String,
                              store: String) throws {
        if mode & 0o002 != 0 {
            throw StrataError.insecure(path: store, reason: "\(name) is writable by others "
                + "(mode \(Self.octal(mode))), \(risk); "
                + "make it private with `chmod o-w \(Self.quoted(path))`")
        }
        if mode & 0o020 != 0 && !sharedWithGroup {
            throw StrataError.insecure(path: store, reason: "\(name) is writable by its group "
                + "(mode \(Self.octal(mode))) but the store is not opened as shared with the group; "
                + "make it private with `chmod g-w \(Self.quoted(path))`, or open it shared with the group "
                + "(StoreConfiguration.sharedWithGroup, storectl --shared-with-group)")
        }
    }

    /// Throws ``StrataError/insecure(path:reason:)`` when the regular file at `path` may be
    /// written by others, or by its group and the store is not shared with the group: whoever may
    /// write `data.mdb`, `lock.mdb` or `strata.lock` may change the store or its readers' view of
    /// it. A missing file, or one that is not regular (``checkFile(_:store:)`` refuses those),
    /// passes. `store` is the store directory (for the message).
    func checkFileMode(_ path: String, store: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return }
        try checkWriters(st.st_mode & 0o7777, of: path, named: path, risk: "who could change the store", store: store)
    }

    /// Throws ``StrataError/insecure(path:reason:)`` when `path` exists and is not a regular
    /// file (a symbolic link, a FIFO, a device): LMDB would open what it points at. A missing
    /// file passes (it is created by ``createFile(_:)``).
    static func checkFile(_ path: String, store: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            let code = errno
            if code == ENOENT { return }
            throw Self.posix(code, "lstat \(path)")
        }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return
        case S_IFLNK:
            throw StrataError.insecure(path: store, reason: "\(path) is a symbolic link; Strata never opens a store's "
                + "files through a link "
                + "(a link planted there would make the opener write where it points). Remove the link"
                + ((path as NSString).lastPathComponent == "lock.mdb"
                    ? " (lock.mdb is made again at the next open)" : " and put the file itself there"))
        default:
            throw StrataError.insecure(path: store, reason: "\(path) is not a regular file")
        }
    }

    static func posix(_ code: Int32, _ what: String) -> StrataError {
        .lmdb(LMDBError(code: code, operation: what))
    }

    /// Writes all of `bytes` to `fd` (`path` names it in errors), going on after short writes and
    /// retrying when interrupted.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw posix(errno, "write \(path)")
            }
            done += n
        }
    }

    static func octal(_ mode: mode_t) -> String {
        let digits = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// `path` as a shell word (single-quoted when it holds anything but safe characters).
    static func quoted(_ path: String) -> String {
        let safe = path.unicodeScalars.allSatisfy {
            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "/._-+,:@%".unicodeScalars.contains($0))
        }
        return safe ? path : "'" + path.replacingOccurrences(of: "'", with: "'\\''", options: .literal) + "'"
    }
}
