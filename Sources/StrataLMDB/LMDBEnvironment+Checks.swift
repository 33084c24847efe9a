import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

/// Checks of the data file: its size against its pages, every page (``PageAudit``), readers.
extension LMDBEnvironment {
    /// Refuses a data file shorter than the pages its meta page says are in use (a truncated
    /// copy): LMDB maps the file and would fault (SIGBUS) on the first read past its end. Runs
    /// right after `mdb_env_open`, before any page but the meta pages is touched.
    package static func checkFileSize(_ env: OpaquePointer, path: String, policy: any EnvironmentPolicy) throws {
        var info = MDB_envinfo()
        var stat = MDB_stat()
        try lmdbCheck(mdb_env_info(env, &info), "mdb_env_info")
        try lmdbCheck(mdb_env_stat(env, &stat), "mdb_env_stat")
        guard let size = (try? FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size]) as? Int else {
            return
        }
        // A damaged meta page's last page number (a flipped high bit) times the page size
        // overflows: liblmdb's own product wraps (the open succeeds), Swift's would trap.
        guard let needed = bytesInUse(info, stat) else {
            throw policy.notAStore(path: path, reason: """
                data.mdb: its meta page names page \(info.me_last_pgno) as the last in use, past any file
                """)
        }
        if size < needed {
            throw policy.notAStore(path: path, reason: "data.mdb is truncated: \(size) bytes, its pages need \(needed)")
        }
    }

    /// Checks every page of the data file (``PageAudit``) as of a read transaction held open
    /// meanwhile, so no writer reuses a page of that state during the check. Beginning the
    /// transaction reads only the meta page.
    package static func checkPages(_ env: OpaquePointer, path: String, policy: any EnvironmentPolicy,
                                   memo: PageCheckMemo? = nil) throws {
        var attempt = 0
        let dataFile = path + "/data.mdb"
        while true {
            var txn: OpaquePointer?
            try lmdbCheck(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin(page check)")
            guard let txn else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin(page check)") }
            defer { mdb_txn_abort(txn) }
            let txnID = lmdbTransactionID(txn)
            if let memo, memo.isChecked(dataFile, txnID: txnID) { return }
            // Taken before the walk and compared after it: a file written meanwhile other than
            // by a commit (which would change the transaction) is not remembered as checked.
            let before = memo?.identity(dataFile, txnID: txnID)
            do {
                try PageAudit.check(dataFile: dataFile, store: path, txnID: txnID, policy: policy)
                if let memo, let before, let after = memo.identity(dataFile, txnID: txnID), after == before {
                    memo.record(before)
                }
                return
            } catch is PageAudit.Outdated where attempt < 100 {
                attempt += 1   // commits overtook the check's meta page: check the newer state
            } catch is PageAudit.Outdated {
                throw policy.busy(path: path)
            }
        }
    }

    /// ``checkPages(_:path:)`` of this open environment.
    package func checkPages() throws {
        try mapLock.withShared { try Self.checkPages(handle, path: path, policy: options.policy) }
    }

    /// Bytes of the data file on disk.
    package var fileBytes: Int {
        var st = stat()
        guard stat(path + "/data.mdb", &st) == 0 else { return 0 }
        return Int(st.st_size)
    }

    /// Reader slots holding a snapshot now, in every process (`mdb_reader_list`). Reset slots kept
    /// for reuse and slots of ended processes are not counted.
    package func readerCount() -> Int {
        final class Counter { var active = 0 }
        let counter = Counter()
        let rc = withExtendedLifetime(counter) {
            mdb_reader_list(handle, { message, ctx in
                // Lines are "pid thread txnid"; a reset slot shows "-" as its txnid, and the
                // header and "(no active readers)" start with a letter or parenthesis.
                guard let message else { return 0 }
                let fields = String(cString: message).split(separator: " ", omittingEmptySubsequences: true)
                if fields.count == 3, Int(fields[0]) != nil,
                   fields[2].trimmingCharacters(in: .whitespacesAndNewlines) != "-" {
                    Unmanaged<Counter>.fromOpaque(ctx!).takeUnretainedValue().active += 1
                }
                return 0
            }, Unmanaged.passUnretained(counter).toOpaque())
        }
        return rc >= 0 ? counter.active : 0
    }
}
