import CLMDB

/// An error returned by liblmdb: the C return code, LMDB's own message and the call that failed.
///
/// Every LMDB call in Strata goes through ``lmdbCheck(_:_:)``, so no return code is dropped.
public struct LMDBError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The return code (`MDB_MAP_FULL`, `MDB_READERS_FULL`, an `errno` value, …).
    public let code: Int32
    /// The C function (and context) that returned the code.
    public let operation: String

    /// LMDB's text for ``code`` (`mdb_strerror`).
    public var message: String { String(cString: mdb_strerror(code)) }

    public var description: String { "\(operation) failed: \(message) (code \(code))" }

    /// The map is full; the write transaction is poisoned and must be redone after growing.
    var isMapFull: Bool { code == MDB_MAP_FULL }
    /// Another process grew the map; adopt its size and retry.
    var isMapResized: Bool { code == MDB_MAP_RESIZED }
}

/// Turns a non-zero LMDB return code into a thrown ``LMDBError``.
@inline(__always)
func lmdbCheck(_ rc: Int32, _ operation: @autoclosure () -> String) throws {
    if rc != MDB_SUCCESS { throw LMDBError(code: rc, operation: operation()) }
}
