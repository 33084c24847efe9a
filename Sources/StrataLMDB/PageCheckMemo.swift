import Glibc

/// Remembers, in a directory of the user's, the data files whose every page was checked
/// (``PageAudit``) and that have not changed since: the same file (device and inode), size,
/// modification and change times, and last LMDB transaction. An open that finds its file remembered
/// skips the page walk; any commit, by any process, changes the transaction id and the times, so
/// the next open checks again. The memo is outside the store, so a store made elsewhere (or a
/// crafted file) is never taken as checked, and it is trusted only when the directory and the memo
/// file belong to this user and nobody else may write them.
package struct PageCheckMemo: Sendable {
    /// The directory of the memo files (created 0700 when missing).
    package let directory: String

    package init(directory: String) { self.directory = directory }

    /// What is remembered of `dataFile` as of LMDB transaction `txnID`: its memo's name and
    /// content; nil when it cannot be read.
    package func identity(_ dataFile: String, txnID: UInt64) -> (name: String, content: String)? {
        var st = stat()
        guard stat(dataFile, &st) == 0 else { return nil }
        let name = "\(st.st_dev)-\(st.st_ino)"
        let content = "\(st.st_size) \(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec) \(st.st_ctim.tv_sec).\(st.st_ctim.tv_nsec) " +
                      "\(txnID)\n"
        return (name, content)
    }

    /// Whether `st` belongs to this user and nobody else may write it.
    private static func ownedAlone(_ st: stat) -> Bool {
        st.st_uid == geteuid() && st.st_mode & 0o022 == 0
    }

    /// Whether the directory may be trusted: this user's, written by nobody else.
    private var directoryIsOwn: Bool {
        var st = stat()
        return stat(directory, &st) == 0 && Self.ownedAlone(st)
    }

    /// Whether `dataFile` was checked as it is now.
    package func isChecked(_ dataFile: String, txnID: UInt64) -> Bool {
        guard let id = identity(dataFile, txnID: txnID), directoryIsOwn else { return false }
        let fd = open(directory + "/" + id.name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, Self.ownedAlone(st), st.st_mode & S_IFMT == S_IFREG else { return false }
        var buffer = [UInt8](repeating: 0, count: 128)
        let n = read(fd, &buffer, buffer.count)
        guard n > 0 else { return false }
        return String(decoding: buffer[0..<n], as: UTF8.self) == id.content
    }

    /// Memos kept at most: past it, the least recently written are removed down to three quarters
    /// (a memo of a store deleted long ago is never needed again).
    package static let maxMemos = 256

    /// Removes the oldest memos when there are more than ``maxMemos``.
    private func prune() {
        guard let dir = opendir(directory) else { return }
        var memos: [(name: String, written: Int)] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard !name.hasPrefix(".") else { continue }
            var st = stat()
            guard lstat(directory + "/" + name, &st) == 0 else { continue }
            memos.append((name, st.st_mtim.tv_sec))
        }
        closedir(dir)
        guard memos.count > Self.maxMemos else { return }
        for memo in memos.sorted(by: { $0.written < $1.written }).prefix(memos.count - Self.maxMemos * 3 / 4) {
            unlink(directory + "/" + memo.name)
        }
    }

    /// Notes that the file of `identity` (taken before its check began, and found the same after
    /// it) was checked. Best effort: a memo that cannot be written only means the next open
    /// checks again.
    package func record(_ identity: (name: String, content: String)) {
        // The directory and any missing parent, each 0700.
        var made = ""
        for part in directory.split(separator: "/") {
            made += "/" + part
            if mkdir(made, 0o700) != 0 && errno != EEXIST { return }
        }
        guard directoryIsOwn else { return }
        prune()
        let temporary = directory + "/.\(identity.name).\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let bytes = Array(identity.content.utf8)
        let written = write(fd, bytes, bytes.count)
        close(fd)
        if written == bytes.count {
            rename(temporary, directory + "/" + identity.name)
        } else {
            unlink(temporary)
        }
    }
}
