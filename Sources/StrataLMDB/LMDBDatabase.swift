import CLMDB

/// A named LMDB database handle. Opened once at start-up and never closed.
public struct LMDBDatabase: Sendable, Equatable {
    package let dbi: MDB_dbi
    package let name: String

    package init(dbi: MDB_dbi, name: String) {
        self.dbi = dbi
        self.name = name
    }
}
