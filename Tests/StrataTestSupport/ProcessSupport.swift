import Foundation

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

/// Runs `executable` with `arguments`, optionally feeding `stdin`, and waits for it.
public func run(_ executable: String, _ arguments: [String], stdin: String? = nil, environment: [String: String]? = nil) throws -> ProcessResult {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    p.environment = testProcessEnvironment.merging(environment ?? [:]) { $1 }
    let out = Pipe(), err = Pipe(), input = Pipe()
    p.standardOutput = out
    p.standardError = err
    p.standardInput = input
    try p.run()
    if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
    try input.fileHandleForWriting.close()
    // Read both pipes concurrently so a full pipe cannot block the child.
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data(), errData = Data()
    group.enter()
    DispatchQueue.global().async { outData = out.fileHandleForReading.readDataToEndOfFile(); group.leave() }
    errData = err.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    p.waitUntilExit()
    return ProcessResult(status: p.terminationStatus, stdout: String(decoding: outData, as: UTF8.self), stderr: String(decoding: errData, as: UTF8.self))
}

/// Runs storectl.
public func storectl(_ arguments: String..., stdin: String? = nil) throws -> ProcessResult {
    try run(storectlPath, arguments, stdin: stdin)
}

public func storectl(_ arguments: [String]) throws -> ProcessResult {
    try run(storectlPath, arguments)
}
