import Glibc

/// Options passed explicitly to `mdb_env_open` (no reliance on LMDB's defaults).
package struct LMDBOptions: Sendable {
    package var mapSizeBytes: Int
    package var maxMapSizeBytes: Int
    package var maxReaders: UInt32
    package var readOnly: Bool
    /// `MDB_NOSYNC`: commits do not fsync; ``LMDBEnvironment/sync()`` does.
    package var noSync: Bool
    /// `MDB_NOLOCK`: only for read-only opens of a directory nobody writes to.
    package var noLock: Bool
    /// `MDB_WRITEMAP | MDB_MAPASYNC`: write transactions change the map in place (no page copies
    /// on the heap, no `pwrite`). Only for throwaway scratch environments: a stray write through
    /// the map would corrupt the file, and nested transactions are refused in this mode. (Tried
    /// for new generations too: compaction's appends in key order were slower with it, faulting
    /// the new file's pages in one by one, and migration no faster.)
    package var writeMap = false
    /// Check every page of the data file (``PageAudit``) after `mdb_env_open`, before any page
    /// but the meta pages is read.
    package var checkPages = false
    /// Where checked files are remembered (the check is skipped for a file unchanged since); nil:
    /// every open with ``checkPages`` checks.
    package var pageCheckMemo: PageCheckMemo?
    /// The mode of `data.mdb` and `lock.mdb` when they are created: they are created here, with
    /// exactly this mode whatever the umask, before LMDB opens them.
    package var fileMode: mode_t = 0o600
    /// The databases opened at start-up.
    package var databases: DatabaseSet
    /// The errors and file checks of the environment's owner.
    package var policy: any EnvironmentPolicy

    package init(mapSizeBytes: Int, maxMapSizeBytes: Int, maxReaders: UInt32, readOnly: Bool, noSync: Bool,
                 noLock: Bool, databases: DatabaseSet, policy: any EnvironmentPolicy) {
        self.mapSizeBytes = mapSizeBytes
        self.maxMapSizeBytes = maxMapSizeBytes
        self.maxReaders = maxReaders
        self.readOnly = readOnly
        self.noSync = noSync
        self.noLock = noLock
        self.databases = databases
        self.policy = policy
    }
}
