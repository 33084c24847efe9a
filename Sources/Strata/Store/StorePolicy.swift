import Glibc
import StrataLMDB

/// The store's ``EnvironmentPolicy``: the errors users see (``StrataError``) for what the LMDB
/// layer detects, and ``StorePermissions``' checks of the files it opens.
struct StorePolicy: EnvironmentPolicy {
    func closed(path: String) -> any Error { StrataError.closed(path: path) }
    func notAStore(path: String, reason: String) -> any Error { StrataError.notAStore(path: path, reason: reason) }
    func busy(path: String) -> any Error { StrataError.storeBusy(path: path, processIDs: []) }
    func damaged(path: String, reason: String) -> any Error { StrataError.damagedStore(path: path, reason: reason) }
    func corruptKey(database: String, reason: String) -> any Error {
        StrataError.corruptRecord(id: ObjectID(high: 0, low: 0), reason: "database '\(database)': \(reason)")
    }
    func checkFile(_ file: String, in path: String) throws { try StorePermissions.checkFile(file, store: path) }
    func setMode(_ fd: Int32, _ mode: mode_t, file: String) throws {
        try StorePermissions.setMode(fd, mode, path: file)
    }
}

extension LMDBOptions {
    /// Options for an environment of a Strata store: its databases (``DatabaseName``), its errors
    /// and file checks (``StorePolicy``), files created private (``StorePermissions``).
    init(mapSizeBytes: Int, maxMapSizeBytes: Int, maxReaders: UInt32, readOnly: Bool, noSync: Bool, noLock: Bool) {
        self.init(mapSizeBytes: mapSizeBytes, maxMapSizeBytes: maxMapSizeBytes, maxReaders: maxReaders,
                  readOnly: readOnly, noSync: noSync, noLock: noLock, databases: DatabaseName.set,
                  policy: StorePolicy())
        fileMode = StorePermissions.private.fileMode
    }
}
