import Foundation
import Synchronization

/// The result of running a process to completion.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String

    public init(status: Int32, stdout: String, stderr: String) {
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
    }
}

/// The environment of every process the tests start: this process's, with the caches (storectl's
/// page-check memo) in a temporary directory of this test process rather than the user's
/// `~/.cache`.
public let testProcessEnvironment: [String: String] = {
    var environment = ProcessInfo.processInfo.environment
    environment["XDG_CACHE_HOME"] = FileManager.default.temporaryDirectory
        .appendingPathComponent("strata-test-cache-\(getpid())").path
    return environment
}()

/// The storectl binary built next to the test bundle.
public let storectlPath: String = {
    let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("storectl").path
    if FileManager.default.isExecutableFile(atPath: beside) { return beside }
    return repositoryRoot.appendingPathComponent(".build/debug/storectl").path
}()

/// How a child ended: its exit code, or the signal that ended it.
public struct Termination: Sendable, Equatable {
    /// True for an exit, false for a signal.
    public let exited: Bool
    /// The exit code, or the signal's number.
    public let code: Int32

    public init(exited: Bool, code: Int32) {
        self.exited = exited
        self.code = code
    }
}

/// A child process started with `posix_spawn` and waited for with `waitpid`.
///
/// The tests start every process through it, not through Foundation's `Process`: with many
/// tests starting processes at once on Linux, `Process.run()` crashed (a bad pointer in its
/// `memcpy`), a read of its pipe ended the test process on an interrupted system call (a
/// `try!` inside Foundation), and a SIGKILLed child's exit could be missed.
public final class ChildProcess: Sendable {
    /// Where a standard stream of the child goes.
    public enum Stream: Sendable {
        /// `/dev/null`.
        case null
        /// A file, created or truncated (lines written before a SIGKILL are kept).
        case file(String)
        /// A pipe to this process (``input``, ``output``, ``errors``).
        case pipe
    }

    public let pid: pid_t
    /// The write end of the child's standard input, when it is a pipe (close it to end the input).
    public let input: FileHandle?
    /// The read ends of the child's standard output and error, when they are pipes.
    public let output: FileHandle?, errors: FileHandle?
    private let ended = Mutex<Termination?>(nil)
    /// Held from making a child's pipes to closing its ends of them, after `posix_spawn`.
    /// Every child a test starts, the PostgreSQL servers of the cluster tests included, is started
    /// through ``start(_:_:environment:stdin:stdout:stderr:)``.
    private static let spawning = NSLock()
    /// SIGPIPE ignored in the test process (once, at the first start): a write to a child's
    /// input after the child ended then fails with EPIPE instead of ending the test process.
    /// Children get it back at its default action.
    private static let ignoringBrokenPipes: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    private init(pid: pid_t, input: FileHandle?, output: FileHandle?, errors: FileHandle?) {
        self.pid = pid
        self.input = input
        self.output = output
        self.errors = errors
    }

    /// Starts `executable` (a path) with `arguments`, in the tests' environment
    /// (``testProcessEnvironment``) with `environment` added, its signal mask empty and SIGPIPE
    /// at its default action.
    public static func start(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                             stdin: Stream = .null, stdout: Stream = .null, stderr: Stream = .null) throws -> ChildProcess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        _ = ignoringBrokenPipes
        // Pipe ends are close-on-exec, and children are started one at a time (`spawning`), so
        // no other child keeps one open (its end would never see end-of-file).
        spawning.lock()
        defer { spawning.unlock() }
        var childEnds: [Int32] = [], parentEnds: [Int32?] = [nil, nil, nil]
        defer { for fd in childEnds { close(fd) } }
        func setUp(_ stream: Stream, _ target: Int32) throws {
            switch stream {
            case .null:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            case .pipe:
                var fds: [Int32] = [-1, -1]
                guard pipe(&fds) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
                for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
                let (child, parent) = target == 0 ? (fds[0], fds[1]) : (fds[1], fds[0])
                childEnds.append(child)
                parentEnds[Int(target)] = parent
                posix_spawn_file_actions_adddup2(&actions, child, target)
            }
        }
        do {
            try setUp(stdin, 0)
            try setUp(stdout, 1)
            try setUp(stderr, 2)
        } catch {
            for fd in parentEnds.compactMap({ $0 }) { close(fd) }
            throw error
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t(), pipeSignal = sigset_t()
        sigemptyset(&noSignals)
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &pipeSignal)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let env = testProcessEnvironment.merging(environment ?? [:]) { $1 }.map { "\($0.key)=\($0.value)" }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup($0) } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else {
            for fd in parentEnds.compactMap({ $0 }) { close(fd) }
            throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EINVAL)
        }
        func handle(_ fd: Int32?) -> FileHandle? { fd.map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) } }
        return ChildProcess(pid: pid, input: handle(parentEnds[0]), output: handle(parentEnds[1]), errors: handle(parentEnds[2]))
    }

    /// A child a test left running (it threw, or was cancelled, before ending it) is killed and
    /// reaped with its handle.
    deinit {
        if reap(blocking: false) == nil {
            kill()
            wait()
        }
    }

    /// Sends `signal` (SIGKILL by default) to the child, unless it has been reaped (its pid
    /// may then be another process's).
    public func kill(_ signal: Int32 = SIGKILL) {
        ended.withLock { ended in
            if ended == nil { _ = Glibc.kill(pid, signal) }
        }
    }

    /// False once the child has ended (it is then reaped, and ``wait()`` returns at once).
    public var isRunning: Bool { reap(blocking: false) == nil }

    /// Waits for the child to end, on this thread. For a child that may run for a while, use
    /// ``finished()`` from a test: a test blocked here would hold one of its pool's two threads.
    @discardableResult
    public func wait() -> Termination {
        while true {
            if let ended = reap(blocking: false) { return ended }
            // Until it can be reaped, without reaping it and without the lock (so that
            // `isRunning` and `kill` on other threads go on meanwhile).
            var info = siginfo_t()
            if waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno != EINTR {
                return reap(blocking: false) ?? Termination(exited: false, code: -1)
            }
        }
    }

    /// ``wait()`` on a thread of its own.
    public func finished() async throws -> Termination {
        try await onOwnThread { self.wait() }
    }

    /// The child's termination if it has ended (reaping it the first time), else nil. A child
    /// that cannot be waited for (`ECHILD`: reaped by someone else) counts as ended, code -1.
    private func reap(blocking: Bool) -> Termination? {
        ended.withLock { ended -> Termination? in
            if let ended { return ended }
            var status: Int32 = 0
            var r: pid_t
            repeat { r = waitpid(pid, &status, blocking ? 0 : WNOHANG) } while r < 0 && errno == EINTR
            if r < 0 {
                ended = Termination(exited: false, code: -1)
                return ended
            }
            guard r == pid else { return nil }
            let signal = status & 0x7f
            ended = signal == 0 ? Termination(exited: true, code: (status >> 8) & 0xff) : Termination(exited: false, code: signal)
            return ended
        }
    }
}

/// Runs `executable` with `arguments`, optionally feeding `stdin`, and waits for it.
///
/// The wait happens on a thread of its own, not on the caller's: tests run on Swift's
/// cooperative threads (one per core, two here), and a test blocked on a child process for
/// seconds would hold one of them, so that with two such tests every other test, and every task
/// a test waits for (a change stream's collector, a live query), stops until a child exits.
public func run(_ executable: String, _ arguments: [String], stdin: String? = nil,
                environment: [String: String]? = nil) async throws -> ProcessResult {
    try await onOwnThread { try runBlocking(executable, arguments, stdin: stdin, environment: environment) }
}

/// Runs `body` on a new thread and returns its result, leaving the caller's thread free meanwhile.
public func onOwnThread<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<R, Error>) in
        // The system's default stack, not a smaller one: `body` may be a PostgreSQL session's
        // blocking calls, deep in a debug build.
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// ``run(_:_:stdin:environment:)`` for the few callers that cannot wait asynchronously (a
/// thread of their own, not a test's cooperative one). The status is the exit code, or the
/// number of the signal that ended the process.
public func runBlocking(_ executable: String, _ arguments: [String], stdin: String? = nil,
                        environment: [String: String]? = nil) throws -> ProcessResult {
    let child = try ChildProcess.start(executable, arguments, environment: environment,
                                       stdin: stdin == nil ? .null : .pipe, stdout: .pipe, stderr: .pipe)
    if let stdin, let input = child.input {
        // On a thread of its own: a child may write more than a pipe holds before it reads.
        let data = Data(stdin.utf8)
        Thread {
            data.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let n = write(input.fileDescriptor, raw.baseAddress! + offset, raw.count - offset)
                    if n < 0 { if errno == EINTR { continue } else { break } }
                    offset += n
                }
            }
            try? input.close()
        }.start()
    }
    let (out, err) = readToEnd(child.output!.fileDescriptor, child.errors!.fileDescriptor)
    let ended = child.wait()
    return ProcessResult(status: ended.code, stdout: String(decoding: out, as: UTF8.self),
                         stderr: String(decoding: err, as: UTF8.self))
}

/// Reads two descriptors to their ends at once (so that neither pipe fills and blocks the child).
private func readToEnd(_ first: Int32, _ second: Int32) -> ([UInt8], [UInt8]) {
    var fds = [pollfd(fd: first, events: Int16(POLLIN), revents: 0), pollfd(fd: second, events: Int16(POLLIN), revents: 0)]
    var data: [[UInt8]] = [[], []]
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while fds.contains(where: { $0.fd >= 0 }) {
        if poll(&fds, nfds_t(fds.count), -1) < 0 {
            if errno == EINTR { continue }
            break
        }
        for i in fds.indices where fds[i].fd >= 0 && fds[i].revents != 0 {
            let n = buffer.withUnsafeMutableBytes { read(fds[i].fd, $0.baseAddress, $0.count) }
            if n > 0 {
                data[i].append(contentsOf: buffer[0..<n])
            } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                fds[i].fd = -1   // its end (the handle closes it)
            }
        }
    }
    return (data[0], data[1])
}

/// Runs storectl.
public func storectl(_ arguments: String..., stdin: String? = nil) async throws -> ProcessResult {
    try await run(storectlPath, arguments, stdin: stdin)
}

public func storectl(_ arguments: [String]) async throws -> ProcessResult {
    try await run(storectlPath, arguments)
}

/// Whether process `pid` waits for a POSIX lock (a `->` line of `/proc/locks` names it): a
/// child blocked in `F_SETLKW` on a store's lock, for instance.
public func waitsForALock(_ pid: pid_t) -> Bool {
    guard let text = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return false }
    return text.split(separator: "\n").contains { line in
        let f = line.split(separator: " ", omittingEmptySubsequences: true)
        return f.count >= 6 && f[1] == "->" && f[5] == "\(pid)"
    }
}

/// Waits (up to `seconds`) until `child` has exited or waits for a lock; true when it waits.
public func waitUntilExitedOrBlockedOnALock(_ child: ChildProcess, seconds: Double = 60) -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while child.isRunning && ContinuousClock.now < deadline {
        if waitsForALock(child.pid) { return true }
        usleep(5_000)
    }
    return false
}

/// Whether ``lockedByAnotherProcess(_:firstByteOnly:)`` can run here (it needs python3).
public let anotherProcessCanLockFiles = FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")

/// Another process holding a shared fcntl lock on the file at `path`, as an open store holds
/// `strata.lock` (the whole file) or liblmdb its `lock.mdb` (`firstByteOnly`), returned once it
/// holds it. It lets go when its standard input closes (`input?.close()`, then `wait()`): a
/// signal may be blocked in a child of the test runner. Throws when it did not say it holds it.
public func lockedByAnotherProcess(_ path: String, firstByteOnly: Bool = false) async throws -> ChildProcess {
    let range = firstByteOnly ? ", 1, 0" : ""
    let holder = try ChildProcess.start("/usr/bin/env", ["python3", "-c", """
        import fcntl, sys
        f = open(sys.argv[1]); fcntl.lockf(f, fcntl.LOCK_SH\(range)); print("locked", flush=True); sys.stdin.read()
        """, path], stdin: .pipe, stdout: .pipe)
    // Its first line, read on a thread of its own.
    let output = holder.output!.fileDescriptor
    let line = try await onOwnThread { () -> String in
        var bytes: [UInt8] = [], byte: UInt8 = 0
        while bytes.last != UInt8(ascii: "\n") {
            let n = read(output, &byte, 1)
            if n == 1 { bytes.append(byte) } else if n == 0 || errno != EINTR { break }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
    guard line.contains("locked") else {
        try? holder.input?.close()
        holder.wait()
        throw CocoaError(.fileLocking, userInfo: [NSLocalizedDescriptionKey: "the lock holder said \(line.debugDescription)"])
    }
    return holder
}
