import CLMDB

/// An error returned by liblmdb: the C return code, LMDB's own message and the call that failed.
///
/// Every LMDB call in Strata checks its return code and throws this for a failure, so no return code is dropped.
public struct LMDBError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The return code (`MDB_MAP_FULL`, `MDB_READERS_FULL`, an `errno` value, …).
    public let code: Int32
    /// The C function (and context) that returned the code.
    public let operation: String

    /// LMDB's text for ``code`` (`mdb_strerror`).
    public var message: String { String(cString: mdb_strerror(code)) }

    /// The error as `operation failed: message (code N)`, with what to do for a full reader table
    /// and for an environment liblmdb gave up on.
    public var description: String {
        let text = "\(operation) failed: \(message) (code \(code))"
        if isPanic {
            // liblmdb sets it when writing a commit's meta page failed: that write may still have
            // reached the disk, and nothing more is done through this environment.
            return text + "; a write of the store's meta page failed earlier in this process, so the last commit "
                + "may or may not be on disk: close the store and open it again (then verify it)"
        }
        guard isReadersFull else { return text }
        return text + "; every reader slot of the store is taken (they are shared by every process using it): " +
            "close snapshots or raise StoreConfiguration.maxReaders"
    }

    /// liblmdb gave up on the environment (`MDB_PANIC`): a commit's meta page could not be
    /// written; every later transaction of this process fails until the store is reopened.
    package var isPanic: Bool { code == MDB_PANIC }

    package init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
    }

    /// The map is full; the write transaction is poisoned and must be redone after growing.
    package var isMapFull: Bool { code == MDB_MAP_FULL }
    /// Another process grew the map; adopt its size and retry.
    package var isMapResized: Bool { code == MDB_MAP_RESIZED }
    /// Every reader slot of the lock file is taken.
    package var isReadersFull: Bool { code == MDB_READERS_FULL }
    /// The key is absent (a lookup or a cursor move that found nothing).
    package var isNotFound: Bool { code == MDB_NOTFOUND }
    /// liblmdb found a page it cannot use (`MDB_CORRUPTED`, `MDB_PAGE_NOTFOUND`).
    package var isDamagedPage: Bool { code == MDB_CORRUPTED || code == MDB_PAGE_NOTFOUND }
    /// The file is damaged: a page liblmdb cannot use, a file of another format, or a key of an
    /// impossible size. (`MDB_BAD_VALSIZE` is also a save's value over
    /// ``LMDBLimits/maxDataBytes``: bad data too, refused before anything of it is written.)
    package var isDamage: Bool { isDamagedPage || isForeignFormat || isBadValueSize }
    /// The file is not an LMDB environment this liblmdb can open (another format or version).
    package var isForeignFormat: Bool { code == MDB_INVALID || code == MDB_VERSION_MISMATCH }
    /// `MDB_BAD_VALSIZE`: a key or value of a size LMDB cannot hold.
    package var isBadValueSize: Bool { code == MDB_BAD_VALSIZE }
    /// `MDB_KEYEXIST`: a put that may not overwrite, or an append out of key order.
    package var isKeyExists: Bool { code == MDB_KEYEXIST }
}

/// Turns a non-zero LMDB return code into a thrown ``LMDBError``.
@inline(__always)
package func lmdbCheck(_ rc: Int32, _ operation: @autoclosure () -> String) throws {
    if rc != MDB_SUCCESS { throw LMDBError(code: rc, operation: operation()) }
}
