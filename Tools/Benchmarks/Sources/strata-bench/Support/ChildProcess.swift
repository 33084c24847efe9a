import Foundation

/// Runs another program to its end, as W11 runs `storectl`.
enum ChildProcess {
    /// Runs `executable` with `arguments` and returns what it wrote to standard output; its
    /// standard error goes to the harness's. Fails when it cannot be started or exits other than
    /// 0. For short outputs only (a summary line): the output is read once the program has ended,
    /// so one that filled the pipe (64 KiB) would wait for ever.
    static func output(_ executable: String, _ arguments: [String]) async throws -> Data {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.standardError
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, Error>) in
            process.terminationHandler = { _ in c.resume() }
            do {
                try process.run()
                InterruptCleanup.track(process.processIdentifier)
            } catch { c.resume(throwing: error) }
        }
        // After the wait, not in the handler, which can run before `track` above.
        InterruptCleanup.untrack(process.processIdentifier)
        let data = out.fileHandleForReading.readDataToEndOfFile()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw Failed(command: ([executable] + arguments).joined(separator: " "), status: process.terminationStatus)
        }
        return data
    }

    struct Failed: Error, CustomStringConvertible {
        let command: String
        let status: Int32
        var description: String { "\(command) exited with status \(status)" }
    }
}
