import CLMDB
import Testing
@testable import StrataLMDB

/// What an LMDB error tells the user beyond liblmdb's words.
@Suite struct LMDBErrorTests {
    /// `MDB_PANIC` (liblmdb gave up on the environment after a commit's meta page could not be
    /// written) says the last commit's outcome is unknown and what to do: it was liblmdb's bare
    /// "MDB_PANIC: Update of meta page failed or environment had fatal error".
    @Test func aPanicSaysTheLastCommitIsUnknownAndToReopen() {
        let e = LMDBError(code: MDB_PANIC, operation: "mdb_txn_begin")
        #expect(e.isPanic)
        #expect(e.description.contains("may or may not be on disk"), "\(e)")
        #expect(e.description.contains("close the store and open it again"), "\(e)")
        #expect(!LMDBError(code: MDB_MAP_FULL, operation: "mdb_put").description.contains("meta page"))
    }
}
