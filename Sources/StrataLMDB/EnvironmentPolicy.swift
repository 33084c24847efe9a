import Glibc

/// What an environment asks of its owner: the errors for conditions it detects itself (a
/// liblmdb return code is always an ``LMDBError``), and the checks of the files it opens.
///
/// The layer knows nothing of the product above it; a store passes a policy whose errors are
/// the ones its users see. Without one, ``PlainEnvironmentPolicy`` reports ``StorageFault``s.
package protocol EnvironmentPolicy: Sendable {
    /// A transaction asked for after ``LMDBEnvironment/close()``.
    func closed(path: String) -> any Error
    /// The directory's data file cannot be what LMDB needs (for example truncated).
    func notAStore(path: String, reason: String) -> any Error
    /// A check could not get a stable view of the file: other processes keep writing.
    func busy(path: String) -> any Error
    /// A page of the data file is damaged (``PageAudit``).
    func damaged(path: String, reason: String) -> any Error
    /// A key made from stored data that no database can hold (a damaged entry).
    func corruptKey(database: String, reason: String) -> any Error
    /// Refuses `file` (in the environment's directory `path`) when LMDB must not open it: for
    /// example a symbolic link, which LMDB would follow. A missing file is fine.
    func checkFile(_ file: String, in path: String) throws
    /// Gives the open file `fd` (just created as `file`) exactly `mode`, whatever the umask.
    func setMode(_ fd: Int32, _ mode: mode_t, file: String) throws
}

/// The layer's own errors for the conditions of ``EnvironmentPolicy``.
package enum StorageFault: Error, Sendable, Equatable, CustomStringConvertible {
    case closed(path: String)
    case notAStore(path: String, reason: String)
    case busy(path: String)
    case damaged(path: String, reason: String)
    case unsafeFile(path: String, reason: String)
    case corruptKey(database: String, reason: String)

    package var description: String {
        switch self {
        case .closed(let p): "\(p): the environment is closed"
        case .notAStore(let p, let r): "\(p): not an LMDB environment: \(r)"
        case .busy(let p): "\(p): busy: other processes keep writing"
        case .damaged(let p, let r): "\(p): damaged: \(r)"
        case .unsafeFile(let p, let r): "\(p): \(r)"
        case .corruptKey(let d, let r): "database '\(d)': \(r)"
        }
    }
}

/// ``EnvironmentPolicy`` with ``StorageFault``s: regular files only, modes set with `fchmod`.
package struct PlainEnvironmentPolicy: EnvironmentPolicy {
    package init() {}
    package func closed(path: String) -> any Error { StorageFault.closed(path: path) }
    package func notAStore(path: String, reason: String) -> any Error { StorageFault.notAStore(path: path, reason: reason) }
    package func busy(path: String) -> any Error { StorageFault.busy(path: path) }
    package func damaged(path: String, reason: String) -> any Error { StorageFault.damaged(path: path, reason: reason) }
    package func corruptKey(database: String, reason: String) -> any Error { StorageFault.corruptKey(database: database, reason: reason) }

    package func checkFile(_ file: String, in path: String) throws {
        var st = stat()
        guard lstat(file, &st) == 0 else {
            if errno == ENOENT { return }
            throw LMDBError(code: errno, operation: "lstat \(file)")
        }
        guard st.st_mode & S_IFMT == S_IFREG else { throw StorageFault.unsafeFile(path: file, reason: "not a regular file") }
    }

    package func setMode(_ fd: Int32, _ mode: mode_t, file: String) throws {
        guard fchmod(fd, mode) == 0 else { throw LMDBError(code: errno, operation: "fchmod \(file)") }
    }
}
