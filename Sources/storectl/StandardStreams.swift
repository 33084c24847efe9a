import Foundation
import Strata

/// storectl's three standard descriptors, checked before anything else runs, writes to standard
/// error that cannot end the command, and its arguments' encoding.
enum StandardStreams {
    /// Opens `/dev/null` read-only on each of descriptors 0, 1 and 2 that is closed, so that no
    /// file the command opens (a store's, an event loop's descriptor) takes their place and
    /// receives what is printed: with standard output closed, the first descriptor opened became
    /// number 1, and the command failed writing into it. A write to the descriptor reserved
    /// fails (`EBADF`) as it did to the closed one, which the command's end reports (exit 74).
    static func reserve() {
        for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) == -1 && errno == EBADF {
            // The lowest free descriptor: `fd` itself, the ones below it being open by now.
            let opened = open("/dev/null", O_RDONLY)
            if opened >= 0 && opened != fd { close(opened) }
        }
    }

    /// Writes `text` to standard error. A failure is ignored: there is nowhere left to report it,
    /// and the command's exit code already tells what happened (Foundation's
    /// `FileHandle.write` ends the process on a failed write: `2>/dev/full` made every error
    /// exit 132 instead of its code, and a committed import look failed).
    static func writeError(_ text: String) {
        _ = writeAll(2, text)
    }

    /// Writes `text` to standard output at once, not through stdio's buffer, and throws (exit 74,
    /// with the system's reason) when the write fails: for output that must not be lost
    /// unnoticed while the command goes on (`log --follow`). A closed pipe ends the process with
    /// `SIGPIPE` as any write does.
    static func writeOutput(_ text: String) throws {
        if let failure = writeAll(1, text) {
            if failure == EPIPE { endByClosedPipe() }
            throw CLIError("cannot write to standard output: \(String(cString: strerror(failure)))", code: Exit.ioError)
        }
    }

    /// Ends the process with `SIGPIPE`, as a write to a pipe whose reader has gone ends any Unix
    /// tool (exit 141 in the shell): a command that opened a socket has `SIGPIPE` ignored (the
    /// networking library's setting, for the whole process), and its write failed with `EPIPE`
    /// instead, which storectl reported as an I/O error (exit 74).
    static func endByClosedPipe() -> Never {
        signal(SIGPIPE, SIG_DFL)
        raise(SIGPIPE)
        // Not reached: the signal's default action ends the process.
        Foundation.exit(128 + SIGPIPE)
    }

    /// Writes all of `text` to descriptor `fd`, resuming a write a signal interrupted or cut
    /// short; nil when it was written, else the error (`errno`, or `EIO` for a write of nothing).
    private static func writeAll(_ fd: Int32, _ text: String) -> Int32? {
        var bytes = Array(text.utf8)
        return bytes.withUnsafeMutableBytes { buffer -> Int32? in
            var offset = 0
            while offset < buffer.count {
                let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if n > 0 {
                    offset += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return n < 0 ? errno : EIO
                }
            }
            return nil
        }
    }

    /// The position (from 1) and bytes shown escaped of the first argument that is not valid
    /// UTF-8, if any. Swift reads such an argument with U+FFFD in place of the bad bytes: a path
    /// given so named another file (an export replaced it), so storectl refuses it instead.
    static func firstArgumentNotUTF8() -> (position: Int, shown: String, namesAFile: Bool)? {
        // A process may be started with no arguments at all, not even its name: argc 0 on
        // kernels before Linux 5.18 (later ones give it an empty name).
        guard CommandLine.argc > 1 else { return nil }
        for i in 1..<Int(CommandLine.argc) {
            guard let pointer = CommandLine.unsafeArgv[i] else { continue }
            guard String(validatingCString: pointer) == nil else { continue }
            let length = strlen(pointer)
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self),
                                            count: length)
            var shown = ""
            for b in bytes.prefix(EchoedText.maxCharacters) {
                shown += b >= 0x20 && b < 0x7F && b != 0x5C ? String(UnicodeScalar(b))
                    : "\\x" + String(b, radix: 16, uppercase: false).leftPadded(to: 2)
            }
            if bytes.count > EchoedText.maxCharacters { shown += "…(\(bytes.count) bytes)" }
            // A file by that name (or in a directory by such a name) is what it would miss.
            var st = stat()
            return (i, shown, lstat(pointer, &st) == 0)
        }
        return nil
    }
}

private extension String {
    func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
