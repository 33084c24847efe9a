import Glibc

/// What an environment asks of its owner: the errors for conditions it detects itself (a
/// liblmdb return code is always an ``LMDBError``), and the checks of the files it opens.
///
/// The layer knows nothing of the product above it; a store passes a policy whose errors are
/// the ones its users see.
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
