import Dispatch
import Foundation
import Glibc

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
