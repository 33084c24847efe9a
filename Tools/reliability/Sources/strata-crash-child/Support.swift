import Foundation
import Glibc
import Strata

/// `--name value` options and bare flags of one mode, parsed by hand (no dependency beyond Strata).
struct Options {
    private var values: [String: String] = [:]
    private(set) var positional: [String] = []

    /// Options that take no value: `--keep-failures --seed 3` must not read `--seed` as the
    /// flag's value (and then drop the 3).
    static let flags: Set<String> = ["keep", "keep-failures", "cli", "quick"]

    init(_ arguments: ArraySlice<String>) {
        let args = Array(arguments)
        var i = 0
        while i < args.count {
            let a = args[i]
            i += 1
            if a.hasPrefix("--") {
                let name = String(a.dropFirst(2))
                if let eq = name.firstIndex(of: "=") {
                    values[String(name[..<eq])] = String(name[name.index(after: eq)...])
                } else if Self.flags.contains(name) || i >= args.count || args[i].hasPrefix("--") {
                    // A flag, or an option whose value is missing: present, with no value.
                    values[name] = ""
                } else {
                    values[name] = args[i]
                    i += 1
                }
            } else {
                positional.append(a)
            }
        }
    }

    func string(_ name: String) -> String? { values[name] }

    func require(_ name: String) -> String {
        guard let v = values[name] else { fail("missing --\(name)", code: 64) }
        return v
    }

    func int(_ name: String, default d: Int) -> Int {
        guard let s = values[name] else { return d }
        guard let v = Int(s) else { fail("--\(name) must be an integer, got '\(s)'", code: 64) }
        return v
    }

    func uint64(_ name: String, default d: UInt64) -> UInt64 {
        guard let s = values[name] else { return d }
        guard let v = UInt64(s) else { fail("--\(name) must be an unsigned integer, got '\(s)'", code: 64) }
        return v
    }
}

/// Writes one whole line to stdout with a single `write(2)`: a line is either entirely in the
/// file or absent, even if the process is killed right after (the page cache keeps it).
func emit(_ line: String) {
    var bytes = Array((line + "\n").utf8)
    var off = 0
    while off < bytes.count {
        let n = bytes.withUnsafeMutableBytes { write(1, $0.baseAddress! + off, $0.count - off) }
        if n <= 0 { if errno == EINTR { continue }; return }
        off += n
    }
}

/// Writes a line to stderr.
func note(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

func fail(_ message: String, code: Int32 = 1) -> Never {
    note("strata-crash-child: \(message)")
    exit(code)
}

/// SplitMix64: seeded, so every campaign repeats exactly.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The repository root: four levels above this source file, or `STRATA_ROOT`.
let repositoryRoot: URL = {
    if let root = ProcessInfo.processInfo.environment["STRATA_ROOT"] { return URL(fileURLWithPath: root) }
    return URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}()

func librarySchema() -> Schema {
    do { return try Schema.load(directory: repositoryRoot.appendingPathComponent("Schemas/library")) } catch {
        fail("cannot load Schemas/library: \(error)")
    }
}

/// This executable, for drivers that start it again in another mode.
let selfPath: String = {
    var buf = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buf, buf.count - 1)
    return n > 0 ? String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
}()

/// Milliseconds since an arbitrary start, monotonic.
func nowMs() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) * 1000 + Double(ts.tv_nsec) / 1e6
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    let rank = Int((p / 100 * Double(sorted.count - 1)).rounded())
    return sorted[min(sorted.count - 1, max(0, rank))]
}

/// A started child process whose stdout goes to a file (acknowledgements survive SIGKILL).
struct Child {
    let pid: pid_t

    /// Starts `executable` (this program by default) with `arguments`, stdout to `stdoutPath`,
    /// stderr to `stderrPath`, and this process's environment with `environment` added (e.g. its
    /// own `TMPDIR`).
    static func start(_ arguments: [String], stdoutPath: String, stderrPath: String, environment: [String: String] = [:],
                      executable: String = selfPath) -> Child {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var env: [UnsafeMutablePointer<CChar>?] = []
        var p = environ
        while let entry = p.pointee {
            let name = String(cString: entry).prefix { $0 != "=" }
            if environment[String(name)] == nil { env.append(strdup(entry)) }
            p += 1
        }
        env += environment.map { strdup("\($0.key)=\($0.value)") }
        env.append(nil)
        defer { for e in env { free(e) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, nil, argv, env)
        guard rc == 0 else { fail("posix_spawn failed: \(String(cString: strerror(rc)))") }
        return Child(pid: pid)
    }

    /// Waits for the child; returns (exited normally, exit code or signal).
    func wait() -> (exited: Bool, code: Int32) {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let termsig = status & 0x7f
        if termsig == 0 { return (true, (status >> 8) & 0xff) }
        return (false, termsig)
    }

    /// Non-blocking: nil while running.
    func poll() -> (exited: Bool, code: Int32)? {
        var status: Int32 = 0
        let r = waitpid(pid, &status, WNOHANG)
        guard r == pid else { return nil }
        let termsig = status & 0x7f
        if termsig == 0 { return (true, (status >> 8) & 0xff) }
        return (false, termsig)
    }

    func kill9() { _ = Glibc.kill(pid, SIGKILL) }
}

func readLines(_ path: String) -> [String] {
    guard let data = FileManager.default.contents(atPath: path) else { return [] }
    // Only complete lines: a line without its newline was never fully acknowledged.
    var text = String(decoding: data, as: UTF8.self)
    if let last = text.lastIndex(of: "\n") { text = String(text[...last]) } else { return [] }
    return text.split(separator: "\n").map(String.init)
}

func sleepMs(_ ms: Double) {
    if ms > 0 { usleep(useconds_t(ms * 1000)) }
}

/// Runs an async body from synchronous top-level mode code.
func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    nonisolated(unsafe) var result: Result<T, Error>?
    let done = DispatchSemaphore(value: 0)
    Task {
        do { result = .success(try await body()) } catch { result = .failure(error) }
        done.signal()
    }
    done.wait()
    return try result!.get()
}
