import Glibc

/// The file operations the import's readers share: an input open for reading (``Reader``),
/// which version of a file an import reads (``Identity``), and the issue of one that changed.
enum InputFile {
    /// An input open read-only: reads are retried when a signal interrupts them, and a failure is
    /// an ``ImportIssue`` naming the file (and the line the reader was at). With ``expected``, it
    /// reads no further than that version's size, ending there as at the end of the file, and
    /// checks after each read that the file is still that version, so that none of the bytes it
    /// hands on were written since (a file rewritten in place keeps its inode).
    struct Reader {
        let path: String
        private let fd: Int32
        /// The version of the file read, or nil for the file as it is.
        var expected: Identity?
        /// Bytes read from the file so far.
        private var fileBytes = 0

        /// Opens `path`.
        init(path: String) throws {
            self.path = path
            fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw ImportIssue(file: path, line: 0, field: nil,
                                  reason: "cannot open: \(String(cString: strerror(errno)))")
            }
        }

        func close() { _ = Glibc.close(fd) }

        /// The identity of the open file.
        func identity() throws -> Identity { try InputFile.identity(of: fd, path: path) }

        /// Reads into `buffer` from `offset` to its end (no further than ``expected``'s size);
        /// the number of bytes read, 0 at the end. `line` is where the reader is, for an issue.
        mutating func read(into buffer: inout [UInt8], at offset: Int, line: Int) throws -> Int {
            let limit = expected.map { $0.size - fileBytes } ?? .max
            let count = min(buffer.count - offset, max(0, limit))
            guard count > 0 else { return 0 }
            var n: Int
            repeat {
                n = buffer.withUnsafeMutableBytes { [fd] b in Glibc.read(fd, b.baseAddress! + offset, count) }
            } while n < 0 && errno == EINTR
            if n < 0 {
                var issue = ImportIssue(file: path, line: line, field: nil,
                                        reason: "read error: \(String(cString: strerror(errno)))")
                issue.readFailed = true
                issue.endsTheFile = true
                throw issue
            }
            fileBytes += n
            if n > 0, let expected {
                let now = try identity()
                if now != expected { throw InputFile.changed(path, from: expected, to: now, "while it was being read") }
            }
            return n
        }
    }

    /// What tells one version of an input file from another: the file (device and inode), its
    /// size, its last modification and its last change (`ctime`, which a write moves too and
    /// which, unlike the modification time, cannot be set back: `cp -p` or `touch -d` after an
    /// in-place rewrite). An import takes it of every input when it starts, and each reading of
    /// an input (the validation pass, the write pass) reads that version or stops: a file
    /// appended to, rewritten or replaced meanwhile would otherwise be written with records the
    /// validation never saw.
    struct Identity: Equatable, Sendable {
        let device: UInt64
        let inode: UInt64
        let size: Int
        let modifiedSeconds: Int
        let modifiedNanoseconds: Int
        let changedSeconds: Int
        let changedNanoseconds: Int

        init(_ st: stat) {
            device = UInt64(st.st_dev)
            inode = UInt64(st.st_ino)
            size = Int(st.st_size)
            modifiedSeconds = Int(st.st_mtim.tv_sec)
            modifiedNanoseconds = Int(st.st_mtim.tv_nsec)
            changedSeconds = Int(st.st_ctim.tv_sec)
            changedNanoseconds = Int(st.st_ctim.tv_nsec)
        }
    }

    /// The identity of the file at `path`, or nil when it cannot be read.
    static func identity(of path: String) -> Identity? {
        var st = stat()
        return stat(path, &st) == 0 ? Identity(st) : nil
    }

    /// The identity of the open file `fd` (an input being read as `path`).
    static func identity(of fd: Int32, path: String) throws -> Identity {
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            throw ImportIssue(file: path, line: 0, field: nil,
                              reason: "cannot read its attributes: \(String(cString: strerror(errno)))")
        }
        return Identity(st)
    }

    /// The issue of an input that is no longer the version the import started with (`then`):
    /// `now` is what it is, `when` says where the import noticed.
    static func changed(_ path: String, from then: Identity, to now: Identity?, _ when: String) -> ImportIssue {
        let what: String
        if let now, now.device != then.device || now.inode != then.inode {
            what = "was replaced by another file"
        } else if let now, now.size != then.size {
            what = "changed size from \(then.size) to \(now.size) bytes"
        } else if now == nil {
            what = "can no longer be read"
        } else {
            what = "was modified (its modification or change time moved)"
        }
        var issue = ImportIssue(file: path, line: 0, field: nil,
                                reason: "\(what) \(when): an input must stay as it was while it is imported " +
                                        "(the import reads it twice: to validate, then to write); run the " +
                                        "import again once the file is complete")
        issue.inputChanged = true
        return issue
    }
}
