import Glibc

/// ``EnvironmentPolicy`` with ``StorageFault``s: regular files only, modes set with `fchmod`.
package struct PlainEnvironmentPolicy: EnvironmentPolicy {
    package init() {}
    package func closed(path: String) -> any Error { StorageFault.closed(path: path) }
    package func notAStore(path: String, reason: String) -> any Error {
        StorageFault.notAStore(path: path, reason: reason)
    }
    package func busy(path: String) -> any Error { StorageFault.busy(path: path) }
    package func damaged(path: String, reason: String) -> any Error { StorageFault.damaged(path: path, reason: reason) }
    package func corruptKey(database: String, reason: String) -> any Error {
        StorageFault.corruptKey(database: database, reason: reason)
    }

    package func checkFile(_ file: String, in path: String) throws {
        var st = stat()
        guard lstat(file, &st) == 0 else {
            if errno == ENOENT { return }
            throw LMDBError(code: errno, operation: "lstat \(file)")
        }
        guard st.st_mode & S_IFMT == S_IFREG else {
            throw StorageFault.unsafeFile(path: file, reason: "not a regular file")
        }
    }

    package func setMode(_ fd: Int32, _ mode: mode_t, file: String) throws {
        guard fchmod(fd, mode) == 0 else { throw LMDBError(code: errno, operation: "fchmod \(file)") }
    }
}
