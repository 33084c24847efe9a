import Dispatch
import Foundation
import Glibc
import Synchronization

/// What an interrupted run must end besides its directory: the child processes it started (each
/// in a process group of its own, which Ctrl-C at the terminal does not reach) and the private
/// PostgreSQL servers it runs. A Ctrl-C left a `child-import` writing into the removed directory
/// for half a minute, and a W12 server running over its deleted data directory.
enum InterruptCleanup {
    private static let state = Mutex<(children: Set<Int32>, stops: [UUID: @Sendable () -> Void])>(([], [:]))

    /// `pid` is ended (SIGTERM) if the run is interrupted before ``untrack(_:)``.
    static func track(_ pid: Int32) { _ = state.withLock { $0.children.insert(pid) } }
    static func untrack(_ pid: Int32) { _ = state.withLock { $0.children.remove(pid) } }

    /// `stop` runs if the run is interrupted before ``remove(_:)`` with the key returned.
    static func onInterrupt(_ stop: @escaping @Sendable () -> Void) -> UUID {
        let key = UUID()
        state.withLock { $0.stops[key] = stop }
        return key
    }
    static func remove(_ key: UUID) { _ = state.withLock { $0.stops.removeValue(forKey: key) } }

    /// Ends the children (and waits up to 10 s for them) and runs the stops.
    static func endAll() {
        let (children, stops) = state.withLock { s in
            defer { s = ([], [:]) }
            return (s.children, Array(s.stops.values))
        }
        for pid in children { kill(pid, SIGTERM) }
        let deadline = Date().addingTimeInterval(10)
        for pid in children {
            while kill(pid, 0) == 0, Date() < deadline { usleep(20_000) }
            if kill(pid, 0) == 0 { kill(pid, SIGKILL) }
        }
        for stop in stops { stop() }
    }
}

/// Removes this run's store directory when the run ends, also on Ctrl-C or SIGTERM, and the base
/// directory only if that leaves it empty (others may keep their own stores in it).
final class RunDirectoryCleanup {
    let runDirectory: URL
    let base: URL
    private let sources: [any DispatchSourceSignal]

    init(runDirectory: URL, base: URL) {
        self.runDirectory = runDirectory
        self.base = base
        var sources: [any DispatchSourceSignal] = []
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            let run = runDirectory, base = base
            source.setEventHandler {
                InterruptCleanup.endAll()
                Self.remove(run, base)
                FileHandle.standardError.write(Data("strata-bench: interrupted, removed \(run.path)\n".utf8))
                exit(128 + sig)
            }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    func remove() {
        for s in sources { s.cancel() }
        Self.remove(runDirectory, base)
    }

    private static func remove(_ run: URL, _ base: URL) {
        try? FileManager.default.removeItem(at: run)
        rmdir(base.path)  // fails, harmlessly, unless empty
    }
}
