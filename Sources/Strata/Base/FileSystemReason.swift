import Foundation
import Glibc

/// Why a file-system operation on `path` failed, in the words of `strerror` rather than
/// Foundation's "The operation could not be completed. (NSCocoaErrorDomain error 256.)": the
/// reason is found again with the system calls themselves (`stat`, `open`, `mkdir`).
enum FileSystemReason {
    /// Why `path` cannot be read as a file.
    static func unreadableFile(_ path: String) -> String {
        var st = stat()
        guard stat(path, &st) == 0 else { return String(cString: strerror(errno)) }
        if (st.st_mode & S_IFMT) == S_IFDIR { return "is a directory" }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return String(cString: strerror(errno)) }
        close(fd)
        return "read failed"
    }

    /// Why `path` cannot be listed as a directory.
    static func unreadableDirectory(_ path: String) -> String {
        var st = stat()
        guard stat(path, &st) == 0 else { return String(cString: strerror(errno)) }
        if (st.st_mode & S_IFMT) != S_IFDIR { return "not a directory" }
        guard let d = opendir(path) else { return String(cString: strerror(errno)) }
        closedir(d)
        return "listing failed"
    }

    /// Why `path` and its missing parents cannot be created: the first component that fails,
    /// with `strerror` (nil when they could be created after all).
    static func uncreatableDirectory(_ path: String) -> String? {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            prefix += "/" + component
            var st = stat()
            if stat(prefix, &st) == 0 {
                if (st.st_mode & S_IFMT) != S_IFDIR { return "\(prefix) is not a directory" }
                continue
            }
            if mkdir(prefix, 0o755) != 0 && errno != EEXIST { return "\(prefix): \(String(cString: strerror(errno)))" }
        }
        return nil
    }

    /// The system's words for a Foundation file error (`strerror` of the POSIX error under it),
    /// not its `Error Domain=NSCocoaErrorDomain Code=… UserInfo=…` description.
    static func describe(_ error: Error) -> String {
        let ns = error as NSError
        if ns.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(ns.code))) }
        if let underlying = ns.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        // A removal refused for permissions comes as a Cocoa code with no POSIX error under it.
        if ns.domain == NSCocoaErrorDomain,
           [CocoaError.fileWriteNoPermission.rawValue, CocoaError.fileReadNoPermission.rawValue].contains(ns.code) {
            return String(cString: strerror(EACCES))
        }
        return ns.localizedDescription
    }
}
