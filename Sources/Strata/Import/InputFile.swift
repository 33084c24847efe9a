import Glibc

/// The file operations the import's readers share: open an input read-only and read into a
/// buffer, retrying reads interrupted by a signal; failures become an ``ImportIssue`` naming
/// the file (and the line the reader was at).
enum InputFile {
    /// Opens `path` read-only.
    static func open(_ path: String) throws -> Int32 {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw ImportIssue(file: path, line: 0, field: nil,
                              reason: "cannot open: \(String(cString: strerror(errno)))")
        }
        return fd
    }

    /// Reads into `buffer` from `offset` to its end; the number of bytes read, 0 at the end of
    /// the file.
    static func read(_ fd: Int32, into buffer: inout [UInt8], at offset: Int, path: String, line: Int) throws -> Int {
        var n: Int
        repeat {
            n = buffer.withUnsafeMutableBytes { b in Glibc.read(fd, b.baseAddress! + offset, b.count - offset) }
        } while n < 0 && errno == EINTR
        if n < 0 {
            throw ImportIssue(file: path, line: line, field: nil,
                              reason: "read error: \(String(cString: strerror(errno)))")
        }
        return n
    }
}
